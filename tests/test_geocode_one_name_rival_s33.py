"""Geocoder rules version 8 (break33 #1): a one-name city field that names a borough or district.

A one-name city field anchors on its search's first city item (version 6, "a single-name field keeps its first city
item"). A model that writes the borough as the city ("Manhattan", with the area "SoHo") had it anchored on Manhattan,
Kansas, 1,926 km away: SoHo lay out of the anchor's radius, and the answer was scored at city level, a fabricated
error (seed 000 Sec. 4.3, fault 3). Now, when neither finer field resolves near that city item, the places of no
city class the search ranked before it are tried, in rank order: the first under which a finer field resolves
anchors, and the city item is traced ``namesake-city``. A field whose finer fields resolve near the city item, or
that names no finer field, is geocoded as before.

Everything runs through the real geocoder and Wikidata client against the local fakes (``tests/_geocode_env.py``).
"""

from __future__ import annotations

import asyncio

from _geocode_env import geocode_env
from _geocode_gaz import gazetteer_with

from geoagent.geohint.geocode import GEOCODER_RULES_VERSION, ParsedAnswer

# the borough (no city class) ranks before the Kansas city of the same name (more sitelinks)
BOROUGH = {"qid": "Q11299", "labels": {"en": "Manhattan"}, "lat": 40.7834, "lon": -73.9663, "kind": "area",
           "city": "New York", "sitelinks": 200, "classes": ["Q408804"], "description": "borough of New York City"}
KANSAS = {"qid": "Q290258", "labels": {"en": "Manhattan"}, "lat": 39.1836, "lon": -96.5717, "kind": "city",
          "city": "Manhattan", "sitelinks": 60, "classes": ["Q1093829"], "description": "city in Kansas"}
SOHO = (40.7233, -74.003)


def _locate(*answers: ParsedAnswer, truth=SOHO):
    async def go():
        async with geocode_env(gazetteer_with(BOROUGH, KANSAS)) as env:
            return [await env.geocoder.locate(a, true_lat=truth[0], true_lon=truth[1]) for a in answers]

    return asyncio.run(go())


def test_a_borough_named_as_the_city_anchors_when_the_area_lies_in_it():
    assert GEOCODER_RULES_VERSION == 8
    (loc,) = _locate(ParsedAnswer("Manhattan", "SoHo", None))
    assert loc.resolved_level == "area" and loc.label == "SoHo" and loc.error_km < 0.01 and loc.hit
    steps = [(t.level, t.outcome, t.qid) for t in loc.trace]
    assert ("city", "namesake-city", "Q290258") in steps and ("city", "resolved", "Q11299") in steps, steps
    assert steps.index(("city", "namesake-city", "Q290258")) < steps.index(("area", "resolved", "Q99000021")), steps


def test_the_first_city_item_still_anchors_without_a_finer_field_that_chooses():
    alone, far = _locate(ParsedAnswer("Manhattan", None, None), ParsedAnswer("Manhattan", "Shibuya", None))
    # a bare one-name field keeps its first city item (version 6); so does one whose area lies near neither reading
    assert alone.resolved_level == "city" and alone.qid == "Q290258"
    assert far.resolved_level == "city" and far.qid == "Q290258"
    assert not any(t.outcome == "namesake-city" for t in alone.trace + far.trace)


def test_the_compound_form_is_unchanged():
    (loc,) = _locate(ParsedAnswer("Manhattan, New York", "SoHo", None))
    assert loc.resolved_level == "area" and loc.label == "SoHo" and loc.hit


# review33 #1: the state New York (no city class) ranks before New York City, and an area of the answered name lies
# near the state's point, none near the city: the state contains the city (P131), one reading at two scales
STATE = {"qid": "Q1384", "labels": {"en": "New York"}, "lat": 43.0, "lon": -75.0, "kind": "area", "city": "New York",
         "sitelinks": 400, "classes": ["Q35657"], "description": "state of the United States of America",
         "country": ["Q30"]}
UPSTATE = {"qid": "Q99100001", "labels": {"en": "Chinatown"}, "lat": 43.08, "lon": -75.15, "kind": "area",
           "city": "Utica", "sitelinks": 5, "description": "neighbourhood"}


def test_a_region_that_contains_the_city_item_is_never_its_rival():
    async def go():
        async with geocode_env(gazetteer_with(STATE, UPSTATE)) as env:
            return await env.geocoder.locate(ParsedAnswer("New York", "Chinatown", None), true_lat=40.7158,
                                             true_lon=-73.9970)

    loc = asyncio.run(go())
    assert loc.resolved_level == "city" and loc.qid == "Q60" and loc.error_km < 2.0, loc
    assert not any(t.outcome == "namesake-city" for t in loc.trace)


def test_the_rival_is_tried_in_wikidata_only():
    """review33 #2: a Nominatim search is bounded by its anchor's box, a new request per anchor tried; the retry under
    a rival looks in Wikidata alone (its searches of the finer names are cached from the first try)."""
    (loc,) = _locate(ParsedAnswer("Manhattan", "SoHo", None))
    steps = list(loc.trace)
    after = steps[[t.outcome for t in steps].index("namesake-city"):]
    assert after and not any(t.source == "nominatim" for t in after), after
