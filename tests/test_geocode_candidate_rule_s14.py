"""Geocoder ``candidate_rule`` (session 14): among several exact Wikidata matches of one name within the anchor
radius, ``"nearest"`` (default since session 35) takes the one nearest the anchor, ``"first"`` the first in the
search's order and ``"most_sitelinks"`` the most-linked, the release's rule (``geocontext/geocode.py``: ``max(close,
key=sitelinks)`` within ``near_km=60.0``). The paper disambiguates by the anchor (Sec. 4.2), with no rule among
several matches. Run against the local Wikidata and Nominatim fakes.

Gazetteer (hand-placed, distances from Tokyo's fixture coordinate recomputed here): three items named "Kiri
Plaza": A its label, 6 sitelinks, ~5 km; B an alias, 40 sitelinks, ~8 km; C its label, 90 sitelinks, ~40 km. The
fake's search lists exact label matches before alias matches, the more-linked first: C, A, B.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from _geocode_env import geocode_env, km

from geoagent.geohint.geocode import CANDIDATE_RULES, DEFAULT_CANDIDATE_RULE, Geocoder, ParsedAnswer
from geoagent.geohint.geocode_stage import GeocoderSettings
from geoagent.sandbox.gazetteer import Gazetteer

TOKYO = (35.689722, 139.692222)
A = (35.689722, 139.7475)   # ~5 km east
B = (35.6178, 139.692222)   # ~8 km south
C = (35.689722, 140.1350)   # ~40 km east
TRUTH = (35.6900, 139.7470)


def _gazetteer(tmp_path) -> Gazetteer:
    entries = [
        {"qid": "Q1490", "labels": {"en": "Tokyo"}, "lat": TOKYO[0], "lon": TOKYO[1], "kind": "city", "city": "Tokyo",
         "sitelinks": 250, "classes": ["Q515"]},
        {"qid": "Q99100001", "labels": {"en": "Kiri Plaza"}, "lat": A[0], "lon": A[1], "kind": "area",
         "city": "Tokyo", "sitelinks": 6},
        {"qid": "Q99100002", "labels": {"en": "Kiri Plaza Tower"}, "aliases": {"en": ["Kiri Plaza"]}, "lat": B[0],
         "lon": B[1], "kind": "area", "city": "Tokyo", "sitelinks": 40},
        {"qid": "Q99100003", "labels": {"en": "Kiri Plaza"}, "lat": C[0], "lon": C[1], "kind": "area",
         "city": "Chiba", "sitelinks": 90},
    ]
    path = tmp_path / "gaz.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n", encoding="utf-8")
    return Gazetteer.from_jsonl(path)


def _locate(gaz, **kw):
    async def go():
        async with geocode_env(gaz, **kw) as env:
            loc = await env.geocoder.locate(ParsedAnswer(city="Tokyo", area="Kiri Plaza"), true_lat=TRUTH[0],
                                            true_lon=TRUTH[1])
            ents = await env.wikidata.get_entities(["Q99100001", "Q99100002", "Q99100003"],
                                                   props=("labels", "claims", "sitelinks"))
            return loc, {q: e.sitelinks for q, e in ents.items()}

    return asyncio.run(go())


def test_distances_as_described():
    assert 4.5 < km(*TOKYO, *A) < 5.5 and 7.5 < km(*TOKYO, *B) < 8.5 and 39 < km(*TOKYO, *C) < 41


@pytest.mark.parametrize("rule, radius, want", [
    ("nearest", 25.0, "Q99100001"),         # default (session 35): A, 5 km from the anchor, before B at 8 km
    ("nearest", 60.0, "Q99100001"),         # C (40 km) is within 60 km but farther than A
    ("first", 25.0, "Q99100001"),           # C is out of the radius, A is next in the search's order
    ("most_sitelinks", 25.0, "Q99100002"),  # B has more sitelinks than A; C out of the radius
    ("most_sitelinks", 60.0, "Q99100003"),  # the release's setting: C, the most-linked, is within 60 km
    ("first", 60.0, "Q99100003"),           # C first in the search's order
])
def test_rule_and_radius_pick(tmp_path, rule, radius, want):
    loc, links = _locate(_gazetteer(tmp_path), candidate_rule=rule, anchor_radius_km=radius)
    assert links == {"Q99100001": 6, "Q99100002": 40, "Q99100003": 90}  # the client counts the fake's sitelinks
    assert (loc.resolved_level, loc.qid) == ("area", want)
    where = {"Q99100001": A, "Q99100002": B, "Q99100003": C}[want]
    assert loc.error_km == pytest.approx(km(*where, *TRUTH), abs=1e-9)
    resolved = [t for t in loc.trace if t.level == "area" and t.outcome == "resolved"]
    assert len(resolved) == 1 and resolved[0].qid == want
    assert resolved[0].anchor_distance_km == pytest.approx(round(km(*TOKYO, *where), 3), abs=2e-3)


def test_default_is_nearest_and_rules_are_checked(tmp_path):
    assert DEFAULT_CANDIDATE_RULE == "nearest" and CANDIDATE_RULES == ("nearest", "first", "most_sitelinks")
    loc, _ = _locate(_gazetteer(tmp_path))
    assert loc.qid == "Q99100001"
    with pytest.raises(ValueError, match="candidate_rule must be one of 'nearest', 'first', 'most_sitelinks', got 'max'"):
        Geocoder(None, candidate_rule="max")  # type: ignore[arg-type]
    assert GeocoderSettings.from_mapping({"candidate_rule": "most_sitelinks"}).candidate_rule == "most_sitelinks"
    assert GeocoderSettings().candidate_rule == "nearest"
    with pytest.raises(ValueError, match=r"\[geohint.geocoder\].candidate_rule: expected one of 'nearest', "):
        GeocoderSettings.from_mapping({"candidate_rule": "most-linked"})
