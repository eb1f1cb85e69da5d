"""A compound city field anchors on its city, not on its first segment (seed 000 Sec. 4.2; session 19, adversarial
review break19, finding 3).

Sec. 4.2: the anchor is "derived from the model's own answered city". A city field "Shibuya, Tokyo" (the release's
answers hold such fields: "Ichigaya, Tokyo") was tried variant by variant and the first segment with an exact
Wikidata match anchored, so the ward Shibuya did, and the area answer "Shibuya" was then the anchor itself: city
level, censored. Now the first variant whose hits include a city-class item anchors, across variants; a field none
of whose variants names a city keeps the old rule (the first located hit of the first variant that has one).
"""

from __future__ import annotations

import asyncio

from _geocode_env import geocode_env, km

from geoagent.geohint.geocode import LocatedAnswer, ParsedAnswer

TRUTH_SHIBUYA = (35.6628, 139.6990)  # a point in Jinnan, Shibuya (the fixture truth of test_geocode_faults.py)
SHIBUYA = (35.6595, 139.7005)


def _locate(answer: ParsedAnswer) -> LocatedAnswer:
    async def go():
        async with geocode_env() as env:
            return await env.geocoder.locate(answer, true_lat=TRUTH_SHIBUYA[0], true_lon=TRUTH_SHIBUYA[1])

    return asyncio.run(go())


def test_compound_city_field_anchors_on_the_city_and_the_area_is_scored_as_under_the_city_alone():
    plain = _locate(ParsedAnswer(city="Tokyo", area="Shibuya", building="unknown"))
    assert plain.resolved_level == "area" and plain.hit
    assert abs(plain.error_km - km(*SHIBUYA, *TRUTH_SHIBUYA)) < 1e-9
    assert [(t.query, t.outcome) for t in plain.trace if t.level == "city"] == [("Tokyo", "resolved")]  # unchanged
    for city in ("Shibuya, Tokyo", "Shibuya (Tokyo)"):
        loc = _locate(ParsedAnswer(city=city, area="Shibuya", building="unknown"))
        assert loc.anchor_qid == "Q1490", (city, loc.anchor_label)
        assert (loc.resolved_level, loc.qid, loc.error_km, loc.hit) == (plain.resolved_level, plain.qid,
                                                                         plain.error_km, plain.hit)
        steps = [(t.query, t.outcome) for t in loc.trace if t.level == "city"]
        assert ("Shibuya", "not-a-city") in steps and steps[-1] == ("Tokyo", "resolved")


def test_a_city_field_naming_no_city_keeps_its_first_located_segment():
    loc = _locate(ParsedAnswer(city="Shibuya, Harajuku", area="unknown", building="unknown"))
    assert loc.anchor_qid == "Q99000001" and loc.resolved_level == "city" and not loc.hit
    steps = [(t.query, t.outcome) for t in loc.trace if t.level == "city"]
    assert ("Shibuya", "resolved") in steps and not any(o == "not-a-city" for _, o in steps)
