"""Every path key of a campaign file reads a leading ``~`` as the home folder, as ``[paths]`` does
(:func:`geoagent.config.expand_home`, applied when the config is read).

Before: only ``[paths]`` (and, for the release folder, the sandbox launch) expanded it; ``[geohint] release_dir``
and ``[geoverify] release_dir`` were taken literally by the campaign's own import (``./~/rel``), and so were the
prompt template/folder, the image roots, a replay file and the crawl's human-verdicts file.
"""
from __future__ import annotations

import os

import pytest

from geoagent.config import config_from_dict, expand_home
from geoagent.crawl.settings import load_crawl_settings
from geoagent.geohint.settings import GeoHintSettings
from geoagent.geoverify.settings import GeoVerifySettings


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return str(tmp_path / "home")


def _campaign(kind: str, task: dict) -> dict:
    model = {"name": "r", "provider": "replay", "model": "m", "price_input_usd_per_mtok": 0.0,
             "price_output_usd_per_mtok": 0.0, "max_output_tokens": 100, "replay": {"path": "~/raw.jsonl"}}
    return {"campaign": {"name": "t", "kind": kind, "contact": "mailto:you@example.org"}, "budget": {"cap_usd": 1.0},
            "paths": {"state": "~/st"}, "models": [model], kind: task}


def test_the_helper(home):
    assert expand_home("~/x") == os.path.join(home, "x")
    assert expand_home("rel/x") == "rel/x" and expand_home(None) is None and expand_home("") == ""


@pytest.mark.parametrize("key", ["release_dir", "prompts_dir", "image_root"])
def test_geohint_path_keys(home, key):
    cfg = config_from_dict(_campaign("geohint", {key: "~/a"}))
    sec = cfg.section("geohint")
    assert isinstance(sec, GeoHintSettings) and getattr(sec, key) == os.path.join(home, "a")
    assert str(cfg.state_root()) == os.path.join(home, "st")  # the [paths] rule, for comparison


@pytest.mark.parametrize("key", ["release_dir", "prompt_template", "image_root"])
def test_geoverify_path_keys(home, key):
    cfg = config_from_dict(_campaign("geoverify", {key: "~/a"}))
    sec = cfg.section("geoverify")
    assert isinstance(sec, GeoVerifySettings) and getattr(sec, key) == os.path.join(home, "a")


def test_replay_path(home):
    cfg = config_from_dict(_campaign("geoverify", {}))
    assert cfg.models[0].replay.path == os.path.join(home, "raw.jsonl")


def test_crawl_human_verdicts(home):
    s = load_crawl_settings({
        "contact": "mailto:t@example.org", "evaluated_models": ["x"],
        "cities": [{"city": "A", "country": "AA", "continent": "EU", "lat": 1.0, "lon": 2.0}],
        "image_audit": {"provider": "simulated", "model": "a", "human_verdicts": "~/hv.csv"},
        "referenceability": {"provider": "simulated", "model": "b", "pageviews": False},
    })
    assert s.image_audit.human_verdicts == os.path.join(home, "hv.csv")


@pytest.mark.parametrize("value", ["$HOME/geo-state", "${HOME}/geo-state", "runs/$USER/state", "~/$X"])
def test_an_environment_variable_in_a_path_is_refused_not_taken_literally(home, value):
    """Bad-input review (s16): ``state = "$HOME/geo-state"`` made a folder literally named ``$HOME`` under the working
    directory, exit 0. Variables are not expanded in config paths (only a leading ``~``): refused at load, naming
    the key and what to write instead."""
    from geoagent.config import ConfigError

    cfg = _campaign("geoverify", {})
    cfg["paths"]["state"] = value
    with pytest.raises(ConfigError) as err:
        config_from_dict(cfg)
    text = str(err.value)
    assert "paths.state" in text and "environment variable" in text and "$" in text, text
    with pytest.raises(ConfigError):  # the task's own path keys too
        config_from_dict(_campaign("geohint", {"release_dir": value}))


def test_a_dollar_that_names_no_variable_stays_a_character(home):
    cfg = _campaign("geoverify", {})
    cfg["paths"]["state"] = "runs/cost$5/state"  # "$5" names no variable: the folder is written as it is
    assert str(config_from_dict(cfg).state_root()) == "runs/cost$5/state"


def test_the_geocoder_cache_path_is_checked_at_load_too(home):
    from geoagent.config import ConfigError

    with pytest.raises(ConfigError) as err:
        config_from_dict(_campaign("geohint", {"geocoder": {"cache_path": "$HOME/geocache.sqlite"}}))
    assert "cache_path" in str(err.value) and "$HOME" in str(err.value), err.value
