"""GeoHint answers the pattern fallback read as the first of two places, and percents read twice (break26 #4, #7).

#4: when no JSON object held a schema field, the pattern reader kept the first value of each key, so
``{"answer": {"city": "Paris"}, "alternative": {"city": "Lyon"}}`` was scored as Paris, where the JSON path fails the
same ambiguity as conflicting answers. #7: ``"confidence_area": "150%"`` was divided by 100 for the sign and again
for the (1, 100] rule (0.015).
"""

from __future__ import annotations

import pytest

from geoagent.geohint.parse import parse_answer


@pytest.mark.parametrize("text", [
    '{"answer": {"city": "Paris"}, "alternative": {"city": "Lyon"}}',
    '{"guesses": [{"city": "Paris", "area": "Marais"}, {"city": "Lyon", "area": "Croix-Rousse"}]}',
    '{"city": "Paris" or "Lyon", "area": "Marais"}',
    '"city": "Paris" ... no wait, "city": "Lyon"',
    '"city": "Paris"/"Lyon"',
])
def test_two_places_for_one_field_are_a_conflict(text):
    got = parse_answer(text)
    assert not got.ok and got.city is None and got.error.startswith("conflicting answers in one response"), got


@pytest.mark.parametrize("text,city,area", [
    ('{"answer": {"city": "Paris", "area": "Marais"}}', "Paris", "Marais"),
    ('"city": "Paris", "area": "Marais" ... "city": "paris"', "Paris", "Marais"),  # the same place, any case
    ('"city": "Paris", "area": "Marais", "confidence_area": 0.8', "Paris", "Marais"),
])
def test_one_place_per_field_still_reads(text, city, area):
    got = parse_answer(text)
    assert (got.ok, got.method, got.city, got.area) == (True, "regex", city, area), got


def test_a_percent_is_read_once():
    got = parse_answer('{"city": "Paris", "confidence_area": "150%", "confidence_building": "100.5%"}')
    assert (got.confidence_area, got.confidence_building) == (None, None)
    got = parse_answer('{"city": "Paris", "confidence_area": "80%", "confidence_building": 40}')
    assert (got.confidence_area, got.confidence_building) == (0.8, 0.4)


@pytest.mark.parametrize("text,city,area,building", [
    ('"city": "Paris", "area": "Montmartre" / "building": "Sacre-Coeur"', "Paris", "Montmartre", "Sacre-Coeur"),
    ('"city": "Paris" / "country": "France"', "Paris", None, None),
    ('"city": "Paris", "place": "Tower", "building": "Eiffel Tower"', "Paris", None, "Eiffel Tower"),
])
def test_a_slash_before_the_next_field_or_place_beside_building_is_no_conflict(text, city, area, building):
    """rev26 #7: the first version of these rules failed these as conflicting answers (a "/" before the next key
    read as "one value or another"; "place" and "building" compared as one field, where the JSON path takes
    building)."""
    got = parse_answer(text)
    assert (got.ok, got.city, got.area, got.building) == (True, city, area, building), got


def test_a_label_before_the_key_hides_neither_the_field_nor_a_correction():
    """rev26 #7: the pattern reader took 'Final: "city"' as the pair Final: city, consuming the real key, so a
    correction after a label ("maybe Lyon ... Final: Paris") kept the first guess."""
    got = parse_answer('maybe "city": "Lyon"? ... Final: "city": "Paris", "area": "7e"')
    assert not got.ok and got.error == "conflicting answers in one response (city: 'lyon' vs 'paris')", got
    got = parse_answer('Answer: "city": "Paris", "area": "Marais"')
    assert (got.ok, got.city, got.area) == (True, "Paris", "Marais"), got
