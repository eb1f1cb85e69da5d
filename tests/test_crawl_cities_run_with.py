""":func:`geoagent.crawl.stages.cities_run_with`: the ``[[crawl.cities]]`` a ``--watch`` crawl's manifest records.

The drift check compares ``crawl.cities`` by position, so the recorded list must follow the file's order (a city
added in the middle of the file), keep the values each city was planned with, and keep a city that ran although
it was since removed from the file.
"""

from __future__ import annotations

from geoagent.crawl.settings import CitySpec
from geoagent.crawl.stages import cities_run_with


def _c(name: str, lat: float = 45.0) -> CitySpec:
    return CitySpec(city=name, country="SB", continent="EU", lat=lat, lon=7.0)


def test_file_order_planned_values_and_removed_cities():
    a, b, c = _c("Alpha"), _c("Beta"), _c("Gamma")
    # nothing added: the start's list as it is
    assert cities_run_with([a, c], [], [a, b, c]) == [a, c]
    # Beta added between the two: the file's order
    assert [x.city for x in cities_run_with([a, c], [b], [a, b, c])] == ["Alpha", "Beta", "Gamma"]
    # Alpha's coordinates edited while watching were not planned (its key was queued): the planned values stay
    moved = _c("Alpha", lat=10.0)
    out = cities_run_with([a, c], [b], [moved, b, c])
    assert out[0].lat == 45.0 and [x.city for x in out] == ["Alpha", "Beta", "Gamma"]
    # Gamma removed from the file after it was planned: it ran, so it is kept, after the file's cities
    assert [x.city for x in cities_run_with([a, c], [b], [a, b])] == ["Alpha", "Beta", "Gamma"]
    # a city in the file that was never planned (not seen yet) is not recorded
    assert [x.city for x in cities_run_with([a], [b], [a, b, _c("Delta")])] == ["Alpha", "Beta"]
    # no read recorded: the added cities after the start's
    assert [x.city for x in cities_run_with([a, c], [b], None)] == ["Alpha", "Gamma", "Beta"]
