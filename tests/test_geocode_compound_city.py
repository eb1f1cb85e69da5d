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

import pytest

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


# ---- a later segment's city must lie near the earlier segment's place (session 20; review rev19, finding 1) ----
# "Arlington, Virginia": the segment "Arlington" names a county (located, no city class) and "Virginia" both the
# state and a city in Minnesota. The first city-class hit across variants anchored, so the answer anchored 1,570 km
# away in Minnesota and every finer name was looked for there. A later segment's city now anchors only within the
# anchor radius of the earlier segment's place (it is then that place's city, as Tokyo is Shibuya's).
ARLINGTON_COUNTY = {"qid": "Q99000911", "labels": {"en": "Arlington"}, "lat": 38.8786, "lon": -77.1011, "kind": "area",
                    "city": "Arlington", "description": "county in Virginia", "sitelinks": 90, "classes": ["Q47168"]}
VIRGINIA_STATE = {"qid": "Q99000912", "labels": {"en": "Virginia"}, "lat": 37.5, "lon": -78.5, "kind": "area",
                  "city": "Richmond", "description": "state of the United States", "sitelinks": 300,
                  "classes": ["Q35657"]}
VIRGINIA_MN = {"qid": "Q99000913", "labels": {"en": "Virginia"}, "lat": 47.5233, "lon": -92.5366, "kind": "city",
               "city": "Virginia", "description": "city in Minnesota", "sitelinks": 40}
CLARENDON = {"qid": "Q99000914", "labels": {"en": "Clarendon"}, "lat": 38.8868, "lon": -77.0953, "kind": "area",
             "city": "Arlington", "description": "neighbourhood of Arlington", "sitelinks": 10}
TRUTH_CLARENDON = (38.8870, -77.0950)


def _locate_in(answer: ParsedAnswer, *entries: dict, truth: tuple[float, float]) -> LocatedAnswer:
    from _geocode_gaz import gazetteer_with

    async def go():
        async with geocode_env(gazetteer_with(*entries)) as env:
            return await env.geocoder.locate(answer, true_lat=truth[0], true_lon=truth[1])

    return asyncio.run(go())


def test_a_later_segment_city_far_from_the_first_segment_place_does_not_anchor():
    entries = (ARLINGTON_COUNTY, VIRGINIA_STATE, VIRGINIA_MN, CLARENDON)
    loc = _locate_in(ParsedAnswer(city="Arlington, Virginia", area="Clarendon", building="unknown"), *entries,
                     truth=TRUTH_CLARENDON)
    assert loc.anchor_qid == ARLINGTON_COUNTY["qid"], loc.anchor_label
    assert (loc.resolved_level, loc.qid, loc.hit) == ("area", CLARENDON["qid"], True)
    assert abs(loc.error_km - km(CLARENDON["lat"], CLARENDON["lon"], *TRUTH_CLARENDON)) < 1e-9
    steps = [(t.query, t.outcome, t.qid) for t in loc.trace if t.level == "city"]
    far = [s for s in steps if s[1] == "out-of-anchor"]
    assert far == [("Virginia", "out-of-anchor", VIRGINIA_MN["qid"])], steps
    rejected = next(t for t in loc.trace if t.outcome == "out-of-anchor")
    assert rejected.anchor_distance_km > 1000  # measured from Arlington, the place the field's first segment named
    assert ("Arlington", "resolved", ARLINGTON_COUNTY["qid"]) in steps


def test_a_later_segment_city_near_the_first_segment_place_still_anchors():
    # Shibuya -> Tokyo (3.4 km) is unchanged by the radius check (the test above in this module); so is a city
    # within the radius of a county the first segment names
    near_city = {**VIRGINIA_MN, "qid": "Q99000915", "lat": 38.90, "lon": -77.05}  # a "Virginia" 5 km from Arlington
    loc = _locate_in(ParsedAnswer(city="Arlington, Virginia", area="unknown", building="unknown"),
                     ARLINGTON_COUNTY, VIRGINIA_STATE, near_city, truth=TRUTH_CLARENDON)
    assert loc.anchor_qid == "Q99000915"
    steps = [(t.query, t.outcome) for t in loc.trace if t.level == "city"]
    assert ("Arlington", "not-a-city") in steps and steps[-1] == ("Virginia", "resolved")


def test_an_ambiguous_first_segment_anchors_on_the_city_near_any_of_its_places():
    # review rev20: "SoHo" names London's Soho first (the fixture gazetteer holds both), and New York City is
    # 5,500 km from it; the radius check against the first hit only made NYC a namesake and anchored in London.
    # NYC lies 1.2 km from the segment's other place, Manhattan's SoHo: it is the answer's city.
    truth = (40.7235, -74.0020)
    loc = _locate_in(ParsedAnswer(city="SoHo, New York", area="SoHo", building="unknown"), truth=truth)
    steps = [(t.query, t.outcome, t.qid) for t in loc.trace if t.level == "city"]
    assert loc.anchor_qid == "Q60", steps
    assert loc.resolved_level == "area" and loc.hit, (loc.resolved_level, loc.error_km, steps)
    passed = [t for t in loc.trace if t.level == "city" and t.outcome == "not-a-city"]
    assert len(passed) == 1 and passed[0].query == "SoHo" and passed[0].qid != "Q99000011"  # the SoHo near NYC


def test_the_out_of_anchor_city_step_names_its_label():
    loc = _locate_in(ParsedAnswer(city="Arlington, Virginia", area="unknown", building="unknown"),
                     ARLINGTON_COUNTY, VIRGINIA_STATE, VIRGINIA_MN, truth=TRUTH_CLARENDON)
    far = next(t for t in loc.trace if t.outcome == "out-of-anchor")
    assert far.label == "Virginia" and far.qid == VIRGINIA_MN["qid"]


# ---- the segments are judged together (session 20; review rev20b) ----
# A first segment naming a neighbourhood that shares its name with a city elsewhere anchored on that city whatever
# the later segment said, and a city refused as a namesake was a reference place for a third segment.
MANHATTAN = {"qid": "Q99000921", "labels": {"en": "Manhattan"}, "lat": 40.7831, "lon": -73.9712, "kind": "area",
             "city": "New York", "description": "borough of New York City", "sitelinks": 250, "classes": ["Q408804"]}
MANHATTAN_KS = {"qid": "Q99000922", "labels": {"en": "Manhattan"}, "lat": 39.1836, "lon": -96.5717, "kind": "city",
                "city": "Manhattan", "description": "city in Kansas", "sitelinks": 60}
HOLLYWOOD = {"qid": "Q99000923", "labels": {"en": "Hollywood"}, "lat": 34.0928, "lon": -118.3287, "kind": "area",
             "city": "Los Angeles", "description": "neighborhood of Los Angeles", "sitelinks": 200}
HOLLYWOOD_FL = {"qid": "Q99000924", "labels": {"en": "Hollywood"}, "lat": 26.0112, "lon": -80.1495, "kind": "city",
                "city": "Hollywood", "description": "city in Florida", "sitelinks": 70}
LOS_ANGELES = {"qid": "Q65", "labels": {"en": "Los Angeles"}, "lat": 34.0522, "lon": -118.2437, "kind": "city",
               "city": "Los Angeles", "description": "city in California", "sitelinks": 300}
HOLLYWOOD_BLVD_AREA = {"qid": "Q99000925", "labels": {"en": "Hollywood Hills"}, "lat": 34.1200, "lon": -118.3300,
                       "kind": "area", "city": "Los Angeles", "description": "area of LA", "sitelinks": 50}


@pytest.mark.parametrize("city, area, entries, truth, want_anchor", [
    ("Manhattan, New York", "SoHo", (MANHATTAN, MANHATTAN_KS), (40.7235, -74.0020), "Q60"),
    ("Hollywood, Los Angeles", "Hollywood Hills", (HOLLYWOOD, HOLLYWOOD_FL, LOS_ANGELES, HOLLYWOOD_BLVD_AREA),
     (34.1190, -118.3310), "Q65"),
])
def test_a_first_segment_namesake_city_does_not_anchor_against_the_later_segment(city, area, entries, truth,
                                                                                 want_anchor):
    loc = _locate_in(ParsedAnswer(city=city, area=area, building="unknown"), *entries, truth=truth)
    steps = [(t.query, t.outcome, t.qid, t.label) for t in loc.trace if t.level in ("city", "area")]
    # before (review rev20b): anchored on Manhattan, Kansas / Hollywood, Florida, 1,700-3,800 km away; the area
    # was then out-of-anchor and a correct area answer a censored city-level miss
    assert loc.anchor_qid == want_anchor, (loc.anchor_label, loc.error_km, steps)
    assert loc.resolved_level == "area" and loc.hit, (loc.resolved_level, loc.error_km, steps)


EVELETH = {"qid": "Q99000931", "labels": {"en": "Eveleth"}, "lat": 47.4627, "lon": -92.5399, "kind": "city",
           "city": "Eveleth", "description": "city in Minnesota, 7 km from Virginia MN", "sitelinks": 30}


def test_a_refused_namesake_is_not_a_place_for_the_next_segment():
    loc = _locate_in(ParsedAnswer(city="Arlington, Virginia, Eveleth", area="unknown", building="unknown"),
                     ARLINGTON_COUNTY, VIRGINIA_STATE, VIRGINIA_MN, EVELETH, truth=TRUTH_CLARENDON)
    steps = [(t.query, t.outcome, t.qid) for t in loc.trace if t.level == "city"]
    refused = {t.qid for t in loc.trace if t.outcome == "out-of-anchor"}
    called_not_city = {t.qid for t in loc.trace if t.outcome == "not-a-city"}
    assert not (refused & called_not_city), steps  # before: both, for Virginia MN
    assert loc.anchor_qid == ARLINGTON_COUNTY["qid"], (loc.anchor_label, steps)  # before: Eveleth did


JAPAN = {"qid": "Q99000941", "labels": {"en": "Japan"}, "lat": 36.2, "lon": 138.25, "kind": "area", "city": "Tokyo",
         "description": "country in East Asia", "sitelinks": 400, "classes": ["Q6256"]}


def test_a_city_beside_its_country_anchors_and_is_not_traced_as_a_namesake():
    # Tokyo lies 170 km from Japan's point, beyond the radius: no city item fits, and the first segment's first
    # place anchors, which is Tokyo; the trace says so once, with no out-of-anchor step for the same item
    loc = _locate_in(ParsedAnswer(city="Tokyo, Japan", area="Shibuya", building="unknown"), JAPAN,
                     truth=TRUTH_SHIBUYA)
    steps = [(t.query, t.outcome, t.qid) for t in loc.trace if t.level == "city"]
    assert loc.anchor_qid == "Q1490" and ("Tokyo", "resolved", "Q1490") in steps, steps
    assert not any(o in ("out-of-anchor", "not-a-city") for _, o, _ in steps), steps
    assert loc.resolved_level == "area" and loc.hit
