"""Crawl radii must be finite and city-sized (break34 crawl #1).

TOML's ``inf`` passed ``Field(gt=0)``: ``[crawl.fetcher] radius_m = inf`` (or the screener's or sampler's coverage
radius) made the Mapillary client split a globe-sized box without end, about 2,000 requests a second (259,000 in two
minutes), and ``[crawl.screener] radius_km = inf`` dead-lettered every city with a bare OverflowError. Every crawl
section now refuses inf as it refused nan, and a radius is at most 50 km (``MAX_RADIUS_KM``).
"""

from __future__ import annotations

import math

import pytest

from geoagent.clients.mapillary import normalise_bbox
from geoagent.crawl.settings import MAX_RADIUS_KM, CrawlConfigError, load_crawl_settings

CITY = {"city": "Lisbon", "country": "PT", "continent": "EU", "lat": 38.71, "lon": -9.14}


def _load(section: str, key: str, value: float):
    return load_crawl_settings({"contact": "mailto:me@example.org", "cities": [CITY], section: {key: value}})


@pytest.mark.parametrize(("section", "key"), [
    ("screener", "radius_km"), ("screener", "coverage_radius_km"), ("screener", "l_max_km"),
    ("sampler", "radius_km"), ("sampler", "coverage_radius_m"), ("sampler", "min_spacing_m"),
    ("fetcher", "radius_m"), ("fetcher", "min_separation_m"), ("fetcher", "min_brightness"),
    ("referenceability", "radius_km"),
])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_crawl_numbers_are_refused_naming_the_key(section, key, value):
    with pytest.raises(CrawlConfigError) as e:
        _load(section, key, value)
    assert f"{section}.{key}" in str(e.value) or key in str(e.value)


@pytest.mark.parametrize(("section", "key", "too_far"), [
    ("screener", "radius_km", MAX_RADIUS_KM + 1), ("sampler", "radius_km", MAX_RADIUS_KM + 1),
    ("referenceability", "radius_km", 1e6), ("fetcher", "radius_m", MAX_RADIUS_KM * 1000 + 1),
    ("sampler", "coverage_radius_m", 1e9),
])
def test_radii_past_a_city_are_refused(section, key, too_far):
    with pytest.raises(CrawlConfigError, match=key):
        _load(section, key, too_far)


def test_the_papers_radii_and_the_limit_itself_load():
    s = _load("screener", "radius_km", MAX_RADIUS_KM)
    assert s.screener.radius_km == MAX_RADIUS_KM and s.sampler.radius_km == 3.0 and s.fetcher.radius_m == 150.0


@pytest.mark.parametrize("box", [(-math.inf, 0.0, 1.0, 1.0), (0.0, 0.0, 1.0, math.inf), (0.0, math.nan, 1.0, 1.0)])
def test_a_box_that_is_not_finite_is_refused(box):
    with pytest.raises(ValueError, match="not a usable bounding box"):
        normalise_bbox(box)
