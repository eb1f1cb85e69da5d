"""Crawl settings that could only give an empty or lopsided benchmark are refused at load (crawl40 #5, #7).

#7: ``[crawl.screener] place_values = []`` or ``[crawl.sampler] site_types = {}`` loaded; the crawl sent its
Overpass and WDQS requests and ended "complete" with 0 sites. #5: ``[crawl.referenceability] radius_km`` below
6 km loaded silently: at 2 km every ladder lost its 3-6 km band and GeoVerify's 3-6 km decoy band had 0 trials;
above 6 km the crawl rates (pays for) candidates no ladder or trial draws. Now the first two and a radius under the
farthest band are refused naming the key, and a larger radius gets a load warning.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from geoagent import constants as C
from geoagent.cli import main
from geoagent.crawl.settings import FARTHEST_BAND_KM, CrawlConfigError, load_crawl_settings

CRAWL_CONFIG = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"
CITY = {"city": "Lisbon", "country": "PT", "continent": "EU", "lat": 38.71, "lon": -9.14}


def _load(**sections):
    return load_crawl_settings({"contact": "mailto:me@example.org", "cities": [CITY], **sections})


def test_the_farthest_band_is_the_ladders_and_the_decoys():
    assert FARTHEST_BAND_KM == C.LADDER_BANDS_KM[-1][1] == C.GEOVERIFY_DECOY_BANDS_KM[-1][1] == 6.0


@pytest.mark.parametrize("radius", [2.0, 5.99])
def test_a_referenceability_radius_short_of_the_farthest_band_is_refused(radius):
    with pytest.raises(CrawlConfigError) as e:
        _load(referenceability={"radius_km": radius})
    text = str(e.value)
    assert "crawl.referenceability.radius_km" in text and "at least 6 km" in text and "3-6 km" in text, text


def test_the_papers_radius_loads_quietly_and_a_larger_one_with_a_warning():
    assert _load(referenceability={"radius_km": 6.0}).load_warnings() == []
    (note,) = _load(referenceability={"radius_km": 10.0}).load_warnings()
    assert note.startswith("[crawl.referenceability] radius_km = 10 ") and "between 6 and 10 km" in note
    assert "no ladder or trial draws them" in note


@pytest.mark.parametrize(("section", "key", "empty", "words"), [
    ("screener", "place_values", [], "at least one OSM place value"),
    ("sampler", "site_types", {}, "at least one site type"),
])
def test_an_empty_list_of_place_values_or_site_types_is_refused_naming_the_key(section, key, empty, words):
    with pytest.raises(CrawlConfigError) as e:
        _load(**{section: {key: empty}})
    assert f"crawl.{section}.{key}" in str(e.value) and words in str(e.value), str(e.value)


@pytest.mark.parametrize(("table", "line"), [
    ("[crawl.referenceability]\n", "radius_km = 2.0\n"),
    ("[crawl.fetcher]\n", None),  # a [crawl.screener] table with place_values = []
])
def test_the_crawl_is_refused_before_any_request(isolated_roots, monkeypatch, capsys, table, line):
    from geoagent.sandbox.launch import request_counts

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    text = CRAWL_CONFIG.read_text(encoding="utf-8")
    assert table in text
    text = text.replace(table, table + line, 1) if line else text.replace(
        table, "[crawl.screener]\nplace_values = []\n\n" + table, 1)
    cfg = isolated_roots / "crawl.toml"
    cfg.write_text(text, encoding="utf-8")
    before = dict(request_counts())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["crawl", str(cfg), "--no-live"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("crawl.referenceability.radius_km" if line else "crawl.screener.place_values") in err, err
    assert dict(request_counts()) == before  # no fake was asked anything
    assert not (isolated_roots / "state" / "crawl-sandbox").exists()
