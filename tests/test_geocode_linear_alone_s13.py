"""Fault 2 (seed 000 Sec. 4.3): a linear feature is never scored as a point, also when the area fails.

"Linear features cannot be scored as points": a street's single coordinate says nothing about where along it the
photo was taken (Meiji-dōri runs through Harajuku and Shibuya), so the information must be read from the area.
Sec. 7 adds that linear features cost precision "without affecting whether an answer counts as correct". The
release's geocoder (``geocontext/geocode.py``, ``error_km``) skips a linear ``place`` and falls through to the
area and then the city: with no usable area the answer is city level, censored, never a hit.

Before session 13 the geocoder scored the street's own point at area level when the area failed, so
``building="Meiji-dori"`` with no area became a hit here (the fixture's Meiji-dōri point lies 0.82 km from the
truth). Runs through the real clients against the local Wikidata and Nominatim fakes (``tests/_geocode_env.py``).
"""

from __future__ import annotations

import asyncio

from _geocode_env import geocode_env, km

from geoagent.geohint.geocode import LocatedAnswer, ParsedAnswer

TRUTH_SHIBUYA = (35.6628, 139.6990)  # a point in Jinnan, Shibuya (test truth), as in test_geocode_faults.py
TOKYO = (35.689722, 139.692222)
MEIJI_DORI = (35.6655, 139.7075)


def _locate(answer: ParsedAnswer) -> LocatedAnswer:
    async def go():
        async with geocode_env() as env:
            return await env.geocoder.locate(answer, true_lat=TRUTH_SHIBUYA[0], true_lon=TRUTH_SHIBUYA[1])

    return asyncio.run(go())


def _assert_city_censored(loc: LocatedAnswer) -> None:
    assert loc.resolved_level == "city" and loc.qid == "Q1490"
    assert abs(loc.error_km - km(*TOKYO, *TRUTH_SHIBUYA)) < 1e-9
    assert not loc.hit and not loc.linear


def test_linear_building_by_name_with_no_area_is_city_level_not_a_hit():
    """The street's point would have been a hit: 0.82 km from the truth. It must not be scored."""
    assert km(*MEIJI_DORI, *TRUTH_SHIBUYA) < 1.0
    loc = _locate(ParsedAnswer(city="Tokyo", area="unknown", building="Meiji-dori"))
    _assert_city_censored(loc)
    assert loc.qid != "Q99000003"
    steps = [(t.level, t.outcome) for t in loc.trace]
    assert ("building", "linear-deferred") in steps
    assert not any(t.qid == "Q99000003" and t.outcome == "resolved" for t in loc.trace)


def test_linear_building_by_wikidata_class_with_no_area_is_city_level():
    """'Omotesando' is linear by its Wikidata class (avenue); with no area it is not scored either."""
    loc = _locate(ParsedAnswer(city="Tokyo", area=None, building="Omotesando"))
    _assert_city_censored(loc)
    assert any(t.query == "Omotesando" and t.outcome == "linear-deferred" and t.qid == "Q99000004" for t in loc.trace)


def test_linear_building_with_an_unresolvable_area_is_city_level():
    """An area that names nothing known fails like a missing one: the answer is no finer than the city."""
    loc = _locate(ParsedAnswer(city="Tokyo", area="Zzyzx Quarter", building="Meiji-dōri"))
    _assert_city_censored(loc)
    assert any(t.level == "area" and t.outcome in ("no-match", "out-of-anchor") for t in loc.trace)
