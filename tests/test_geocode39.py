"""GeoHint geocoder (session 39, geohint39 #1): answer coordinates beside a resolved city must lie near it.

Before: coordinates in a building or area field were scored wherever they lay (module doc point 7, "never rejected
as out-of-anchor"), so ``{"city": "Paris", "area": "Marais", "building": "40.7233, -74.0030"}`` scored a 5,836 km
building-level miss, and a latitude/longitude swap ("2.3522, 48.8606") or a lost sign a 6,794 / 10,866 km area-level
one: extreme rows in Table 5's means and Tables 6-7's slopes. Now such a point fails its level (``out-of-anchor``,
as a name's candidates there do: fault 3) and the next level decides. Real geocoder against the local Wikidata and
Nominatim fakes.
"""

from __future__ import annotations

import asyncio

import pytest
from _geocode_env import geocode_env

from geoagent.geo import haversine_km
from geoagent.geohint.geocode import ANSWER_COORDINATES, GEOCODER_RULES_VERSION
from geoagent.geohint.parse import parse_answer

TRUE = (48.8606, 2.3522)  # a Paris site near the Centre Pompidou


def _locate(text: str):
    async def go():
        async with geocode_env() as env:
            return await env.geocoder.locate(parse_answer(text), true_lat=TRUE[0], true_lon=TRUE[1])

    return asyncio.run(go())


@pytest.mark.parametrize("answer, level, far", [
    ('{"city": "Paris", "area": "Marais", "building": "40.7233, -74.0030"}', "area", (40.7233, -74.0030)),
    ('{"city": "Paris", "area": "2.3522, 48.8606", "building": "unknown"}', "city", (2.3522, 48.8606)),
    ('{"city": "Paris", "area": "-48.8606, 2.3522"}', "city", (-48.8606, 2.3522)),
])
def test_coordinates_far_from_the_answers_own_city_fail_their_level(answer, level, far):
    loc = _locate(answer)
    assert loc.resolved_level == level, loc
    assert not (loc.resolved_level in ("building", "area") and loc.error_km > 1000), loc
    (step,) = [t for t in loc.trace if t.source == ANSWER_COORDINATES]
    assert step.outcome == "out-of-anchor"
    assert any(t.level == "city" and t.outcome == "resolved" for t in loc.trace)
    # the distance recorded is the point's from the anchor (Paris), by haversine
    assert step.anchor_distance_km > 1000
    assert abs(step.anchor_distance_km - haversine_km(48.8566, 2.3522, *far)) < 50


def test_coordinates_near_the_answers_own_city_are_still_the_point():
    loc = _locate('{"city": "Paris", "area": "48.8606, 2.3522", "building": "unknown"}')
    assert (loc.resolved_level, loc.hit) == ("area", True) and loc.error_km < 0.01
    (step,) = [t for t in loc.trace if t.source == ANSWER_COORDINATES]
    assert step.outcome == "resolved"


def test_coordinates_without_a_resolved_city_still_need_no_anchor():
    loc = _locate('{"city": "unknown", "area": "40.7233, -74.0030"}')
    assert loc.resolved_level == "area" and loc.error_km > 5000  # the model's own point, scored as given


def test_the_rules_version_names_the_change():
    assert GEOCODER_RULES_VERSION >= 13
