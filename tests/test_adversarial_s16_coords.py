"""Adversarial review of session 16's decimal coordinates (``placenames.plain_coordinates``, geocoder point 7).

Road numbers and postcode districts are a hemisphere letter glued to an integer: Belgian, French, Irish or South
African national roads ("N1", "N7"), European routes ("E19", "E40"), London postcode districts ("N1", "W1", "E14",
"W3"), Sheffield's ("S2"). Two of them in one field ("E19, N1": a motorway junction; "N1, W1": two districts)
were read as the point (1.0, 19.0) or (1.0, -1.0) in the Gulf of Guinea, scored at the field's level thousands of
km from the site, instead of being looked up as names (falling back to the city when they do not resolve). An
integer is now degrees only with a degree sign or a lat/lon label ("48° N, 2° E", "lat 48 lon 2"); a hemisphere
letter alone is no sign of degrees, as two bare integers ("48, 2") were already none.
"""

from __future__ import annotations

import pytest
from test_geocode_answer_coordinates_s16 import _trial

from geoagent.geohint.geocode import ANSWER_COORDINATES
from geoagent.geohint.placenames import plain_coordinates


@pytest.mark.parametrize("text", ["E19, N1", "N1, W1", "W1 N1", "N7 E15", "S2 W3", "E 40, N 9", "12 N, 4 E",
                                  "1 S 2 W", "N5 E5"])
def test_road_numbers_and_postcode_districts_are_no_coordinates(text):
    assert plain_coordinates(text) is None


@pytest.mark.parametrize("text, point", [("48° N, 2° E", (48.0, 2.0)), ("lat 48 lon 2", (48.0, 2.0)),
                                         ("N 48.5, E 2", None), ("48.5 N, 2.25 E", (48.5, 2.25)),
                                         ("N48.5, E2.25", (48.5, 2.25)), ("48°, 2°", (48.0, 2.0))])
def test_degrees_still_read(text, point):
    assert plain_coordinates(text) == point


@pytest.mark.parametrize("field", ["building", "area"])
def test_road_junction_is_looked_up_as_a_name_not_scored_as_a_point(field):
    fields = {"city": "Paris", "area": "unknown", "building": "unknown", field: "E19, N1"}
    located, trial, queries = _trial(fields)
    assert "E19, N1" in queries  # looked up as a name, as before session 16
    assert located["geocode_source"] != ANSWER_COORDINATES
    assert located["resolved_level"] == "city" and trial.hit is False  # before: building/area at (1.0, 19.0)


@pytest.mark.parametrize("text", ["0.0, 0.0", "0.000000, 0.000000", "lat 0.0 lon 0.0", "0.0° N, 0.0° E", "-0.0, 0.0"])
def test_null_island_is_no_point(text):
    """(0, 0) is the placeholder software writes for "no location" (review question 1): before, "0.0, 0.0" in a
    building field was scored ~5,000 km from a Paris site at building level; now it is looked up as a name."""
    assert plain_coordinates(text) is None
    assert plain_coordinates("0.0, 0.5") == (0.0, 0.5)  # only the exact origin: the equator is real
