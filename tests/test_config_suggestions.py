"""An unknown key in a campaign file names the closest valid key of its own table (difflib), wherever it sits.

A first-time user wrote ``max_ouput_tokens`` and got ``models[0].max_ouput_tokens: unknown key``; the message
now adds ``(did you mean 'max_output_tokens'?)``. The expected suggestions below are the keys a reader picks by
eye; :func:`difflib.get_close_matches` over the table's own keys is the independent check of the helper.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path

import pytest

from geoagent.campaigns import register_all_sections
from geoagent.config import CampaignConfig, ConfigError, ModelConfig, config_from_dict, did_you_mean, table_keys

EXAMPLE = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "example.toml"


def _doc(**extra) -> dict:
    doc = {"campaign": {"name": "s", "kind": "generic"}, "budget": {"cap_usd": 1.0},
           "models": [{"name": "m", "provider": "simulated", "model": "sim-1"}]}
    for path, value in extra.items():
        *parents, last = path.split("__")
        node = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        node[last] = value
    return doc


def _problems(doc: dict) -> list[str]:
    register_all_sections()
    with pytest.raises(ConfigError) as ei:
        config_from_dict(doc, source="c.toml")
    return ei.value.problems


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"models__0__max_ouput_tokens": 5}, "models[0].max_ouput_tokens: unknown key (did you mean 'max_output_tokens'?)"),
        ({"models__0__expected_latency": 1.0}, "models[0].expected_latency: unknown key (did you mean 'expected_latency_s'?)"),
        ({"models__0__rate": {"requets": 2}}, "models[0].rate.requets: unknown key (did you mean 'requests'?)"),
        ({"models__0__replay": {"pth": "x.jsonl"}}, "models[0].replay.pth: unknown key (did you mean 'path'?)"),
        ({"campaign__sed": 1}, "campaign.sed: unknown key (did you mean 'seed'?)"),
        ({"budget__cap_uds": 2.0}, "budget.cap_uds: unknown key (did you mean 'cap_usd'?)"),
        ({"budjet": {"cap_usd": 1.0}}, "budjet: unknown key (did you mean 'budget'?)"),
        ({"geohint_": {}}, "geohint_: unknown key (did you mean 'geohint'?)"),  # a task section is a top-level key
        ({"hosts": {"api.example.org": {"rate": 1, "concurency": 2}}},
         'hosts."api.example.org".concurency: unknown key (did you mean \'concurrency\'?)'),
        ({"geohint": {"echo_rul": "name"}}, "geohint.echo_rul: unknown key (did you mean 'echo_rule'?)"),
        ({"geoverify": {"n_bot": 10}}, "geoverify.n_bot: unknown key (did you mean 'n_boot'?)"),
        ({"generic": {"n_request": 10}}, "generic.n_request: unknown key (did you mean 'n_requests'?)"),
        ({"crawl": {"contact": "me@x.org", "sampler": {"radius_kn": 2.0}}},
         "crawl.sampler.radius_kn: unknown key (did you mean 'radius_km'?)"),
        ({"crawl": {"contact": "me@x.org", "cities": [{"city": "A", "lat": 1.0, "lon": 2.0, "contry": "PT"}]}},
         "crawl.cities[0].contry: unknown key (did you mean 'country'?)"),
    ],
)
def test_unknown_key_names_the_closest_valid_key(extra, expected):
    assert expected in _problems(_doc(**extra))


def test_no_suggestion_when_nothing_is_close():
    problems = _problems(_doc(models__0__zzzzzz=1, colour_scheme={"a": 1}))
    assert "models[0].zzzzzz: unknown key" in problems  # a [[models]] entry has too many keys to list
    # a table of few keys lists them instead (walk30 #8: `budget.max_spend: unknown key` gave no way on)
    top = next(p for p in problems if p.startswith("colour_scheme: unknown key"))
    assert top.startswith("colour_scheme: unknown key (the top level takes: backend, budget, campaign, ") \
        and "models" in top and top.endswith(")"), top


def test_suggestion_matches_difflib_over_the_tables_own_keys():
    register_all_sections()
    keys = table_keys(CampaignConfig, ("models", 0))
    assert set(keys) == set(ModelConfig.model_fields)
    for typo in ("max_ouput_tokens", "price_input_usd_per_mtk", "concurency", "imagee_input_tokens", "tmperature"):
        (best,) = difflib.get_close_matches(typo, sorted(keys), n=1, cutoff=0.6)
        assert did_you_mean(typo, keys) == f" (did you mean {best!r}?)"
    # the top level offers the sections, never the internal fields
    top = table_keys(CampaignConfig, ())
    assert {"campaign", "budget", "models", "geohint", "crawl"} <= set(top) and not {"tasks", "source"} & set(top)
    assert table_keys(CampaignConfig, ("models", 0, "params")) is None  # a free table has no fixed keys


def test_geocoder_and_crawl_loader_messages_suggest_too():
    from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings
    from geoagent.geohint.geocode_stage import GeocoderSettings

    with pytest.raises(ValueError, match=re.escape("'wikidata_ur' (did you mean 'wikidata_url'?)")):
        GeocoderSettings.from_mapping({"wikidata_ur": "http://x"})
    with pytest.raises(CrawlConfigError, match=re.escape("key 'crawl.screener.l_mn_km': unknown key (did you mean 'l_min_km'?)")):
        load_crawl_settings({"contact": "me@x.org", "screener": {"l_mn_km": 0.3}})
    # at load (config38 #4), no longer only when a stage builds the policy
    with pytest.raises(CrawlConfigError, match=re.escape("[crawl.policies.overpass] rte: unknown key (did you mean 'rate'?)")):
        load_crawl_settings({"contact": "me@x.org", "policies": {"overpass": {"rte": 1}}})


def test_example_toml_shows_every_models_key():
    """example.toml is where the README sends readers for every key: each [[models]] key appears (set in one
    of its model tables or as a commented-out line), expected_latency_s with its true default."""
    text = EXAMPLE.read_text(encoding="utf-8")
    doc = tomllib.loads(text)
    shown = set().union(*(set(m) for m in doc["models"])) | set(re.findall(r"^#\s*([a-z_0-9]+)\s*=", text, re.M))
    assert set(ModelConfig.model_fields) <= shown, set(ModelConfig.model_fields) - shown
    latency = {m["expected_latency_s"] for m in doc["models"] if "expected_latency_s" in m}
    assert latency == {ModelConfig.model_fields["expected_latency_s"].default}


@pytest.mark.parametrize("key,value", [("top_p", 0.9), ("thinking_budget", 1024), ("json_mode", True),
                                       ("detail", "low"), ("system", "be brief")])
def test_a_params_key_at_the_top_of_a_model_points_to_params(key, value):
    """Walkthrough 9b: ``top_p = 0.9`` written at the top of ``[[models]]`` read ``models[0].top_p: unknown key``
    with no hint; the keys the providers read from ``params`` (:data:`KNOWN_PARAMS`) that are not top-level
    keys of a model now say where they belong, and the config loads once the key moves under ``params``."""
    from geoagent.config import KNOWN_PARAMS

    assert key in KNOWN_PARAMS and key not in ModelConfig.model_fields
    problems = _problems(_doc(**{f"models__0__{key}": value}))
    assert f"models[0].{key}: unknown key (a params key: write params.{key} = ... in this [[models]] entry)" in problems
    register_all_sections()
    cfg = config_from_dict(_doc(models__0__params={key: value}), source="c.toml")
    assert cfg.models[0].params[key] == value


def test_a_misspelt_params_key_at_the_top_of_a_model_points_to_params():
    problems = _problems(_doc(models__0__thinking_budjet=1024))
    assert "models[0].thinking_budjet: unknown key (did you mean 'params.thinking_budget'?)" in problems
    # a model's own top-level keys still win (temperature is one: params.temperature only overrides it)
    assert "models[0].tmperature: unknown key (did you mean 'temperature'?)" in _problems(_doc(models__0__tmperature=0.5))
