"""Geocoder break of session 35 (geocode35 #1, #2), against the local Wikidata and Nominatim fakes.

#2: among several exact matches of one name within the anchor radius the geocoder took the first in the search's
order, so "Oakland, Chinatown" resolved to San Francisco's Chinatown (12 km, a miss) when that one came first. The
paper disambiguates by the anchor, the model's own city (seed 000 Sec. 4.2): the default rule is now the match
nearest the anchor. #1: a building name with matches far apart within the radius (a chain's branches) resolved to
whichever came first, deciding a hit by search order; it is now ambiguous (App. B: "not uniquely locatable") and
the area decides. Distances are recomputed here from the hand-placed coordinates.
"""

from __future__ import annotations

import asyncio
import json

from _geocode_env import geocode_env, km

from geoagent.geohint.geocode import AMBIGUOUS_BUILDING_KM, ParsedAnswer
from geoagent.sandbox.gazetteer import Gazetteer

OAKLAND = (37.8044, -122.2712)
OAK_CHINATOWN = (37.7990, -122.2690)   # ~0.6 km from Oakland's centre
SF_CHINATOWN = (37.7941, -122.4078)    # ~12 km away
BRANCH_A = (37.8060, -122.2700)        # ~0.2 km
BRANCH_B = (37.8300, -122.2600)        # ~3 km
AREA = (37.8050, -122.2720)            # "Old Oakland"


def _gazetteer(tmp_path, leave_out: str = "") -> Gazetteer:
    entries = [
        {"qid": "Q17042", "labels": {"en": "Oakland"}, "lat": OAKLAND[0], "lon": OAKLAND[1], "kind": "city",
         "city": "Oakland", "sitelinks": 150, "classes": ["Q515"]},
        # San Francisco's Chinatown is the more linked: the fake's search lists it first
        {"qid": "Q99350001", "labels": {"en": "Chinatown"}, "lat": SF_CHINATOWN[0], "lon": SF_CHINATOWN[1],
         "kind": "area", "city": "San Francisco", "sitelinks": 60},
        {"qid": "Q99350002", "labels": {"en": "Chinatown"}, "lat": OAK_CHINATOWN[0], "lon": OAK_CHINATOWN[1],
         "kind": "area", "city": "Oakland", "sitelinks": 5},
        {"qid": "Q99350003", "labels": {"en": "Kiri Coffee"}, "lat": BRANCH_A[0], "lon": BRANCH_A[1],
         "kind": "building", "city": "Oakland", "sitelinks": 2},
        {"qid": "Q99350004", "labels": {"en": "Kiri Coffee"}, "lat": BRANCH_B[0], "lon": BRANCH_B[1],
         "kind": "building", "city": "Oakland", "sitelinks": 3},
        {"qid": "Q99350005", "labels": {"en": "Old Oakland"}, "lat": AREA[0], "lon": AREA[1], "kind": "area",
         "city": "Oakland", "sitelinks": 4},
    ]
    path = tmp_path / f"gaz{leave_out}.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in entries if e["qid"] != leave_out) + "\n", encoding="utf-8")
    return Gazetteer.from_jsonl(path)


def _locate(gaz, answer: ParsedAnswer, truth, **kw):
    async def go():
        async with geocode_env(gaz, **kw) as env:
            return await env.geocoder.locate(answer, true_lat=truth[0], true_lon=truth[1])

    return asyncio.run(go())


def test_the_distances_are_as_described():
    assert km(*OAKLAND, *OAK_CHINATOWN) < 1 and 11 < km(*OAKLAND, *SF_CHINATOWN) < 13
    assert km(*BRANCH_A, *BRANCH_B) > AMBIGUOUS_BUILDING_KM == 1.0


def test_a_name_in_two_places_resolves_to_the_one_nearest_the_answered_city(tmp_path):
    gaz = _gazetteer(tmp_path)
    loc = _locate(gaz, ParsedAnswer(city="Oakland", area="Chinatown"), OAK_CHINATOWN)
    assert (loc.resolved_level, loc.qid, loc.hit) == ("area", "Q99350002", True), loc.trace
    # the old rule, kept as an option: search order (San Francisco's first), a miss 12 km off
    old = _locate(gaz, ParsedAnswer(city="Oakland", area="Chinatown"), OAK_CHINATOWN, candidate_rule="first")
    assert (old.resolved_level, old.qid, old.hit) == ("area", "Q99350001", False)
    assert old.error_km > 11


def test_a_building_named_in_places_far_apart_is_ambiguous_and_the_area_decides(tmp_path):
    gaz = _gazetteer(tmp_path)
    loc = _locate(gaz, ParsedAnswer(city="Oakland", area="Old Oakland", building="Kiri Coffee"), BRANCH_B)
    assert (loc.resolved_level, loc.qid) == ("area", "Q99350005"), loc.trace
    assert [t.outcome for t in loc.trace if t.level == "building"] == ["ambiguous"], loc.trace
    # no Nominatim lookup of the building after Wikidata found it ambiguous
    assert not [t for t in loc.trace if t.level == "building" and t.source == "nominatim"]
    # one branch alone is no ambiguity: the building resolves
    alone = _gazetteer(tmp_path, leave_out="Q99350004")
    one = _locate(alone, ParsedAnswer(city="Oakland", area="Old Oakland", building="Kiri Coffee"), BRANCH_A)
    assert (one.resolved_level, one.qid, one.hit) == ("building", "Q99350003", True), one.trace


# --- name rules (geocode35 #5-#8): pure functions, hand-written expectations -----------------------------------
import pytest  # noqa: E402

from geoagent.geohint.placenames import fold, is_linear_name, name_variants, primary_name  # noqa: E402


@pytest.mark.parametrize("name", ["Koshu-kaido", "Ome-kaido", "National Route 20", "Route 66", "Andrássy út",
                                  "Nagykörút", "Kurfürstendamm", "M25 motorway", "Calçada do Combro",
                                  "Nevsky Prospect", "Prinsengracht", "Broadway", "Route de Lausanne"])
def test_more_streets_are_linear(name):
    assert is_linear_name(name)


@pytest.mark.parametrize("name", ["Intersection", "the street", "Crossing", "Amsterdam", "Damm Brewery",
                                  # review35b #6d: districts and businesses the new words must not take
                                  "Square Mile", "Magnificent Mile", "Route One Cafe", "Route 9 Diner",
                                  "Hotel Prinsengracht", "Mile", "Kaido", "Prospect"])
def test_a_designator_alone_or_a_name_containing_one_is_no_street(name):
    assert not is_linear_name(name)


def test_letters_without_decomposition_fold_to_their_ascii_spelling():
    assert fold("Ba Đình") == fold("Ba Dinh") == "ba dinh"
    assert fold("Nørrebro") == fold("Norrebro") and fold("Łódź") == "lodz" and fold("Ærø") == "aero"


@pytest.mark.parametrize("text, want", [
    ("likely the Marais", "the Marais"),
    ("probably Le Marais", "Le Marais"),
    ("possibly near Shibuya", "Shibuya"),
    ("near the Palais des Thés shop", "the Palais des Thés"),
    ("likely near the Marais", "the Marais"),  # review35b #6a: the hedge before a place word
])
def test_hedged_names_are_tried_without_the_hedge(text, want):
    assert want in name_variants(text)


@pytest.mark.parametrize("text, want", [
    ("TGI Fridays across the street", "TGI Fridays"),
    ("Shibuya Station on Meiji-dori", "Shibuya Station"),
    ("Cafe Kitsune opposite the park", "Cafe Kitsune"),
])
def test_a_place_placed_by_another_is_read_by_its_own_name(text, want):
    assert primary_name(text) == want and not is_linear_name(primary_name(text))


def test_a_capitalised_relational_word_is_part_of_a_name():
    assert name_variants("The Opposite House") == ["The Opposite House"]
    assert primary_name("likely near the Marais") == "the Marais"


def test_an_ambiguous_building_fails_the_level_whatever_its_other_segments_name(tmp_path):
    """review35b #2: after "Kiri Coffee" was ambiguous, the next variant ("Old Oakland", from the parentheses)
    resolved the BUILDING level to an area item; the building level now fails and the area field decides."""
    gaz = _gazetteer(tmp_path)
    loc = _locate(gaz, ParsedAnswer(city="Oakland", area="Chinatown", building="Kiri Coffee (Old Oakland)"),
                  OAK_CHINATOWN)
    assert (loc.resolved_level, loc.qid) == ("area", "Q99350002"), loc.trace
    assert [t.outcome for t in loc.trace if t.level == "building"][-1] == "ambiguous", loc.trace


def test_a_hit_just_under_the_threshold_stays_a_hit_in_the_release_row():
    """geocode35 #10: 0.9996 km was written 1.0 with hit True; read back by the release's rule (error_km < 1 on the
    written value) it became a miss."""
    from geoagent.geohint.geocode import LocatedAnswer
    from geoagent.scoring.geohint import is_hit

    for err, hit in ((0.9996, True), (0.9994, True), (1.0004, False), (0.5004, True)):
        row = LocatedAnswer("area", error_km=err).as_release_row()
        assert row["hit"] is hit and is_hit(row["error_km"], "area") is hit, (err, row)
        assert abs(row["error_km"] - err) <= 0.001


def test_a_commune_or_region_named_as_the_area_is_no_finer_than_a_city(tmp_path):
    """geocode35 #4: fault 4 through Wikidata checked six city classes only, so a commune (Vincennes, for a Paris
    site) or a region named as the area was an area hit, while Nominatim's addresstype censored the same place."""
    paris, vincennes = (48.8566, 2.3522), (48.8476, 2.4392)
    site = (48.8500, 2.4330)  # ~0.5 km from Vincennes' point
    entries = [
        {"qid": "Q90", "labels": {"en": "Paris"}, "lat": paris[0], "lon": paris[1], "kind": "city", "city": "Paris",
         "sitelinks": 300, "classes": ["Q515"]},
        {"qid": "Q99350101", "labels": {"en": "Vincennes"}, "lat": vincennes[0], "lon": vincennes[1], "kind": "area",
         "city": "Paris", "sitelinks": 80, "classes": ["Q484170"]},  # commune of France
    ]
    path = tmp_path / "gaz_coarse.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n", encoding="utf-8")
    loc = _locate(Gazetteer.from_jsonl(path), ParsedAnswer(city="Paris", area="Vincennes"), site)
    assert loc.resolved_level == "city" and loc.hit is False, loc.trace
    assert any(t.outcome == "same-as-city" and t.qid == "Q99350101" for t in loc.trace), loc.trace
    assert km(*site, *vincennes) < 1  # it would have been an area hit


def test_a_designator_alone_is_deferred_as_a_building_and_looked_up_as_a_place():
    """review35b #6, review35c #2: a bare "Street" or "Intersection" in the building field is a street not named (the
    area decides, as before this session), but it no longer hides the building named after it, and a place that is
    named so (the town of Street, a suburb named Prospect, "The Crossing") is still looked up as a city or area."""
    from geoagent.geohint.placenames import is_bare_designator

    assert is_bare_designator(primary_name("Street")) and is_bare_designator("the intersection")
    assert primary_name("Intersection near 211 East 43rd Street (News Corp Building)") == "211 East 43rd Street"
    got = name_variants("Intersection near 211 East 43rd Street (News Corp Building)")
    assert "News Corp Building" in got and "Intersection" not in got  # a bare segment is no lookup
    for place in ("Street", "Prospect", "The Crossing", "Via"):
        assert name_variants(place) == [place]  # the whole text is looked up whatever it is


@pytest.mark.parametrize("text, want", [
    ("probably in front of Shibuya Station", "Shibuya Station"),
    ("maybe behind Shibuya Station", "Shibuya Station"),
    ("possibly across from Tokyo Tower", "Tokyo Tower"),
    ("likely beside the Louvre", "the Louvre"),
])
def test_a_hedge_before_a_relational_phrase_leaves_the_place(text, want):
    """review35c #1: once the hedge was stripped the relational phrase led the text and was not split off."""
    assert primary_name(text) == want and want in name_variants(text)
