"""Session 19 adversarial review (break19): GeoHint geocoder defects against seed 000 Sec. 4.3 faults 2 and 4.

Reproductions only (no fixes): each test states the expected behaviour and FAILS on main at 4cd9433.
Runs through the real clients against the local Wikidata and Nominatim fakes (``tests/_geocode_env.py``).
"""

from __future__ import annotations

import asyncio
import json

from _geocode_env import GAZETTEER, geocode_env, km

from geoagent.geohint.geocode import LocatedAnswer, ParsedAnswer
from geoagent.sandbox.gazetteer import Gazetteer

TRUTH_SHIBUYA = (35.6628, 139.6990)  # a point in Jinnan, Shibuya (the fixture truth of test_geocode_faults.py)
MEIJI_DORI = (35.6655, 139.7075)  # the fixture's one point of Meiji-dori (Q99000003, kind linear, class street)
PARIS_MARAIS = (48.859, 2.362)  # release sites.csv, paris_marais: the site 0.761 km from Paris's centroid (Sec. 4.3)
PARIS_Q90 = (48.856667, 2.352222)


def _locate(answer: ParsedAnswer, truth: tuple[float, float], gazetteer: Gazetteer | None = None) -> LocatedAnswer:
    async def go():
        async with geocode_env(gazetteer) as env:
            return await env.geocoder.locate(answer, true_lat=truth[0], true_lon=truth[1])

    return asyncio.run(go())


def test_street_named_in_the_area_field_is_not_scored_as_a_point():
    """Fault 2 ("Linear features cannot be scored as points"): the same street that is deferred (city level,
    censored) when named as the building is scored as a point, and a HIT, when named as the area.

    Observed on main: resolved_level 'area', label 'Meiji-dōri', error 0.824 km, hit True.
    Expected: a linear area is not scored as a point (city level, or at least never a hit)."""
    assert km(*MEIJI_DORI, *TRUTH_SHIBUYA) < 1.0
    as_building = _locate(ParsedAnswer(city="Tokyo", area="unknown", building="Meiji-dori"), TRUTH_SHIBUYA)
    assert as_building.resolved_level == "city" and not as_building.hit  # the documented fault-2 behaviour
    as_area = _locate(ParsedAnswer(city="Tokyo", area="Meiji-dori", building="unknown"), TRUTH_SHIBUYA)
    assert as_area.qid != "Q99000003", (as_area.resolved_level, as_area.label, as_area.error_km)
    assert not as_area.hit


def _with_region() -> Gazetteer:
    """The fixture gazetteer plus a region (Île-de-France, not a city class) whose point lies ~20 km from Paris."""
    lines = GAZETTEER.read_text(encoding="utf-8").splitlines()
    region = {"qid": "Q99000901", "labels": {"en": "Île-de-France"}, "lat": 48.709, "lon": 2.503, "kind": "area",
              "city": "Paris", "description": "region of France", "sitelinks": 150, "classes": ["Q36784"]}
    return _gazetteer_from_lines(lines + [json.dumps(region)])


def _gazetteer_from_lines(lines: list[str]) -> Gazetteer:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="break19-gaz-") as d:
        p = Path(d) / "gaz.jsonl"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return Gazetteer.from_jsonl(p)


def test_city_named_as_area_under_a_coarser_city_stays_censored():
    """Fault 4 ("every answer resolving no finer than 'Paris' counted as a sub-kilometre hit"): with city='Paris'
    and area='Paris' the answer is censored (same QID as the anchor), but with a coarser city field
    ('Île-de-France') the area 'Paris' resolves to the city item Q90 at AREA level and the constant 0.761 km
    centroid distance is a hit at paris_marais again.

    Observed on main: resolved_level 'area', qid Q90, error 0.761 km, hit True.
    Expected: an area/building candidate that is itself a city (CITY_CLASSES) is no finer than a city: censored."""
    assert 0.7 < km(*PARIS_Q90, *PARIS_MARAIS) < 0.8
    same = _locate(ParsedAnswer(city="Paris", area="Paris", building="unknown"), PARIS_MARAIS, _with_region())
    assert same.resolved_level == "city" and not same.hit  # the documented fault-4 behaviour
    coarse = _locate(ParsedAnswer(city="Île-de-France", area="Paris", building="unknown"), PARIS_MARAIS, _with_region())
    assert not coarse.hit, (coarse.resolved_level, coarse.qid, coarse.error_km)
    assert coarse.resolved_level not in ("building", "area") or coarse.qid != "Q90"


def test_compound_city_field_anchors_on_its_city_not_its_first_segment():
    """Sec. 4.2: the anchor is "derived from the model's own answered city". A city field written "Shibuya, Tokyo"
    (the release's answers hold such fields, e.g. "Ichigaya, Tokyo") is tried variant by variant and the FIRST
    segment with an exact Wikidata match wins, so the anchor is the area Shibuya, not the city Tokyo (the city-class
    preference applies only among the hits of one variant). The area answer "Shibuya" is then "the anchor city
    itself" and censored: the same area answer is a hit under city="Tokyo" and not under city="Shibuya, Tokyo".

    Observed on main: city='Tokyo' -> area Shibuya 0.391 km hit True; city='Shibuya, Tokyo' -> city level, anchor
    'Shibuya', hit False.
    Expected: a compound city field anchors on its segment that is a city (Tokyo), so both score alike."""
    plain = _locate(ParsedAnswer(city="Tokyo", area="Shibuya", building="unknown"), TRUTH_SHIBUYA)
    assert plain.resolved_level == "area" and plain.hit
    compound = _locate(ParsedAnswer(city="Shibuya, Tokyo", area="Shibuya", building="unknown"), TRUTH_SHIBUYA)
    assert compound.anchor_qid == "Q1490", (compound.anchor_label, compound.resolved_level)
    assert compound.hit == plain.hit
