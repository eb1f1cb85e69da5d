"""Task sections ([crawl], [geohint], [geoverify], [generic]) are validated as strictly as the rest of the config
(geoagent.config's docstring: a quoted "0.15" is not a number): a quoted number or boolean in a section was
coerced silently before, so a typo'd table read differently than it was written to any other reader of the TOML."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import geoagent
import geoagent.campaigns.generic  # noqa: F401 - each task module registers its section's model on import
import geoagent.crawl.settings  # noqa: F401
import geoagent.geohint.settings  # noqa: F401
import geoagent.geoverify.settings  # noqa: F401
from geoagent.config import ConfigError, config_from_dict

CONFIGS = Path(geoagent.__file__).parent / "configs"


def _toml(name: str) -> dict:
    """A shipped config parsed; the demo templates' placeholders (``{crawl_dir}``, ``{overpass_url}``: what
    ``run.py demo`` fills in) filled with stand-ins."""
    text = (CONFIGS / name).read_text(encoding="utf-8")
    text = re.sub(r"\{(\w+)_url\}", "http://127.0.0.1:9", text)
    return tomllib.loads(re.sub(r"\{(\w+)_dir\}", "/tmp/x", text))


def _load(name: str, edit) -> dict:
    data = _toml(name)
    edit(data)
    return data


@pytest.mark.parametrize("section, key, value, expected", [
    ("fetcher", "max_images_per_site", "6", "expected an integer, got '6'"),
    ("fetcher", "max_images_per_site", 6.0, "expected an integer, got 6.0"),
    ("referenceability", "pageviews", "false", "expected true or false, got 'false'"),
    ("fetcher", "min_brightness", "90", "expected a number, got '90'"),
])
def test_quoted_values_in_crawl_are_refused_naming_the_key(section, key, value, expected):
    data = _load("crawl_sandbox.toml", lambda d: d["crawl"].setdefault(section, {}).__setitem__(key, value))
    with pytest.raises(ConfigError) as err:
        config_from_dict(data, source="crawl.toml")
    assert f"crawl.{section}.{key}: {expected}" in str(err.value)


def test_quoted_city_coordinate_is_refused():
    data = _load("crawl_sandbox.toml", lambda d: d["crawl"]["cities"][0].__setitem__("lat", "45.0702"))
    with pytest.raises(ConfigError) as err:
        config_from_dict(data, source="crawl.toml")
    assert "crawl.cities[0].lat: expected a number, got '45.0702'" in str(err.value)


def test_arrays_and_integers_for_floats_still_load():
    # TOML arrays arrive as lists (the crawl's tuple fields take them), an integer is a number
    data = _load("crawl_sandbox.toml", lambda d: d["crawl"].update(
        evaluated_models=["sandbox-gpt", "other"], fetcher={"min_brightness": 90, "max_images_per_site": 6}))
    crawl = config_from_dict(data).section("crawl")
    assert crawl.evaluated_models == ("sandbox-gpt", "other") and crawl.fetcher.min_brightness == 90.0
    assert isinstance(crawl.cities, tuple) and crawl.cities[0].city == "Sandbox City"


@pytest.mark.parametrize("name, section, key, value", [
    ("demo_geohint.toml", "geohint", "baseline_repeats", "2"),
    ("demo_geoverify.toml", "geoverify", "tau_m", "150"),
    ("generic_demo.toml", "generic", "image", "true"),
])
def test_quoted_values_in_evaluation_sections_are_refused(name, section, key, value):
    data = _load(name, lambda d: d.setdefault(section, {}).__setitem__(key, value))
    with pytest.raises(ConfigError) as err:
        config_from_dict(data, source=name)
    assert f"{section}.{key}: expected" in str(err.value) and repr(value) in str(err.value)


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.toml")))
def test_every_shipped_config_loads(name):
    cfg = config_from_dict(_toml(name), source=name)
    assert cfg.name
