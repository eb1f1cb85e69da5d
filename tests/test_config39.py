"""Config checks at load (session 39, config38's leftovers).

Before:

* #4 ``[crawl.policies.overpas]`` (a typo of an API name) was never read, and ``[crawl.policies.overpass] rate = -1``
  passed the load and the dry run; only a crawl stage process building its clients refused a bad key;
* #5 ``[crawl.endpoints] mapillary_token_env = "MLY|..."`` (the token pasted where its variable's NAME goes) was
  accepted, written to ``manifest.json`` and repeated by the missing-token message.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import geoagent.crawl.settings  # noqa: F401  (registers the [crawl] section, as the CLI does)
from geoagent.config import ConfigError, load_config
from geoagent.runtime.http import HostPolicy

SANDBOX = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"
PASTED = "MLY|4412345678901234|" + "ab" * 16


def _crawl_config(tmp_path: Path, extra: str, replace: tuple[str, str] | None = None) -> Path:
    text = SANDBOX.read_text(encoding="utf-8")
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    p = tmp_path / "crawl.toml"
    p.write_text(text + "\n" + extra + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize("value", [PASTED, "MY TOKEN", "1TOKEN", ""])
def test_a_token_pasted_where_its_variable_name_goes_is_refused_without_repeating_it(tmp_path, value):
    path = _crawl_config(tmp_path, "", ('mapillary_token_env = "MAPILLARY_TOKEN"', f'mapillary_token_env = "{value}"'))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    text = str(e.value)
    assert "crawl.endpoints.mapillary_token_env" in text and "NAME of an environment variable" in text, text
    assert PASTED not in text and "4412345678901234" not in text


def test_a_variable_name_for_the_token_loads(tmp_path):
    path = _crawl_config(tmp_path, "", ('mapillary_token_env = "MAPILLARY_TOKEN"', 'mapillary_token_env = "MLY_TOKEN_2"'))
    from geoagent.crawl.settings import load_crawl_settings

    assert load_config(path).section("crawl").endpoints.mapillary_token_env == "MLY_TOKEN_2"
    with pytest.raises(ValueError) as e:  # the section's own loader (crawl stages) says it the same way
        load_crawl_settings({"contact": "a@b.org", "endpoints": {"mapillary_token_env": PASTED}})
    assert "NAME of an environment variable" in str(e.value) and "4412345678901234" not in str(e.value)


@pytest.mark.parametrize("table, needle", [
    ("[crawl.policies.overpas]\nrate = 1.0", "unknown API (did you mean 'overpass'?)"),
    ("[crawl.policies.overpass]\nrat = 1.0", "rat: unknown key (did you mean 'rate'?)"),
    ("[crawl.policies.overpass]\nrate = -1.0", "rate must be a finite number > 0, got -1.0"),
    ("[crawl.policies.wdqs]\nconcurrency = 0", "concurrency must be a whole number >= 1, got 0"),
    ("[crawl.policies.pageviews]\nperiod_s = nan", "period_s must be a finite number > 0"),
    ("[crawl.policies.mapillary]\nmax_attempts = 2.5", "max_attempts must be a whole number >= 1"),
    ("[crawl.policies.thumbnails]\nbackoff_base_s = -2.0", "backoff_base_s must be a finite number >= 0"),
    ("[crawl.policies.overpass]\nretry_unknown_outcome = 1", "retry_unknown_outcome must be true or false"),
])
def test_crawl_policies_are_checked_at_load(tmp_path, table, needle):
    with pytest.raises(ConfigError) as e:
        load_config(_crawl_config(tmp_path, table))
    assert "crawl.policies" in str(e.value) and needle in str(e.value), str(e.value)


def test_valid_crawl_policies_load_and_build(tmp_path):
    from geoagent.crawl.settings import build_host_policy

    load_config(_crawl_config(tmp_path, "[crawl.policies.overpass]\nrate = 2.0\ntimeout_s = 90.0"))
    pol = build_host_policy("overpass", {"rate": 2.0, "timeout_s": 90.0})
    assert (pol.rate, pol.period_s, pol.timeout_s, pol.concurrency) == (2.0, 10.0, 90.0, 2)


@pytest.mark.parametrize("field, value", [
    ("rate", 0), ("rate", math.inf), ("period_s", -1.0), ("timeout_s", 0.0), ("concurrency", 0),
    ("concurrency", 1.5), ("max_attempts", True), ("max_body_bytes", 0), ("backoff_max_s", math.nan),
    ("retry_unknown_outcome", "yes"),
])
def test_host_policy_refuses_each_bad_field_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        HostPolicy(**{field: value})
    HostPolicy(rate=0.5, period_s=10.0, concurrency=1, max_attempts=1, backoff_base_s=0.0, backoff_max_s=0.0)


@pytest.mark.parametrize("model, provider, extra, want", [
    ("o3", "openai", {"max_output_tokens": 25000}, 600.0),
    ("gemini-2.5-pro", "gemini", {"max_output_tokens": 40000}, 600.0),
    ("gemini-2.5-flash", "gemini", {"params": {"thinking_budget": 0}}, 120.0),  # thinking off
    ("gpt-4o-mini", "openai", {}, 120.0),
    ("o3", "openai", {"max_output_tokens": 25000, "timeout_s": 90.0}, 90.0),  # as written
])
def test_reasoning_models_get_a_longer_timeout_unless_one_is_written(model, provider, extra, want):
    """providers39 #1: cut at the 120 s default, a reasoning model's call was billed, counted unknown-outcome and
    sent again (up to max_attempts times)."""
    import warnings

    from geoagent.config import config_from_dict

    m = {"name": "m", "provider": provider, "model": model, "api_key_env": "K", "price_input_usd_per_mtok": 1.0,
         "price_output_usd_per_mtok": 4.0, **extra}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = config_from_dict({"campaign": {"name": "t39"}, "budget": {"cap_usd": 1.0}, "generic": {"n_requests": 1},
                                "models": [m]})
    assert cfg.models[0].timeout_s == want


@pytest.mark.parametrize("hosts_entry, want_timeout, want_attempts", [
    ({"rate": 5.0, "concurrency": 2}, 600.0, 5),           # the entry writes neither: the model's own
    ({"rate": 5.0, "timeout_s": 90.0}, 90.0, 5),           # written: the entry's
    ({"rate": 5.0, "max_attempts": 2}, 600.0, 2),
])
def test_a_hosts_entry_keeps_the_models_timeout_unless_it_writes_one(hosts_entry, want_timeout, want_attempts):
    """review39a #3: a [hosts] entry used as a rate ceiling gave every call of its host the entry's default 60 s
    timeout, cutting a reasoning model's 600 s calls (billed, booked unknown-outcome, sent again)."""
    import warnings

    from geoagent.config import config_from_dict, model_call_policy

    m = {"name": "m", "provider": "openai", "model": "o3", "api_key_env": "K", "price_input_usd_per_mtok": 1.0,
         "price_output_usd_per_mtok": 4.0, "max_output_tokens": 25000}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = config_from_dict({"campaign": {"name": "t39"}, "budget": {"cap_usd": 1.0}, "generic": {"n_requests": 1},
                                "models": [m], "hosts": {"api.openai.com": hosts_entry}})
    pol = model_call_policy(cfg, cfg.models[0])
    assert (pol.timeout_s, pol.max_attempts) == (want_timeout, want_attempts)


def test_the_stop_grace_covers_the_longest_paid_call_unless_set(monkeypatch):
    """money39 #1: Ctrl-C cut every reasoning call (600 s) at 30 s; each was billed and sent again on resume."""
    import warnings

    from geoagent.config import config_from_dict
    from geoagent.engine import campaign_stop_grace_s

    def cfg(*models):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return config_from_dict({"campaign": {"name": "g39"}, "budget": {"cap_usd": 1.0},
                                     "generic": {"n_requests": 1}, "models": list(models)})

    paid = {"name": "o", "provider": "openai", "model": "o3", "api_key_env": "K", "max_output_tokens": 25000,
            "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 4.0}
    sim = {"name": "s", "provider": "simulated", "model": "s", "timeout_s": 900.0}
    monkeypatch.delenv("GEOAGENT_STOP_GRACE_S", raising=False)
    assert campaign_stop_grace_s(cfg(paid, sim)) == 600.0  # the reasoning model's; the simulated one costs nothing
    assert campaign_stop_grace_s(cfg(sim)) == 30.0
    assert campaign_stop_grace_s(cfg({**paid, "timeout_s": 7200.0})) == 3600.0
    monkeypatch.setenv("GEOAGENT_STOP_GRACE_S", "5")
    assert campaign_stop_grace_s(cfg(paid)) == 5.0


@pytest.mark.parametrize("provider, model, base, want", [
    ("openai", "gemini-2.5-pro", "https://generativelanguage.googleapis.com/v1beta/openai", 600.0),
    ("gemini", "gemini-pro-latest", None, 600.0),
    ("gemini", "gemini-flash-latest", None, 600.0),
    ("openai", "openai/o4-mini", "https://openrouter.ai/api/v1", 600.0),
    ("openai", "openai/gpt-4o-mini", "https://openrouter.ai/api/v1", 120.0),
    ("gemini", "gemini-2.0-flash", None, 120.0),
    ("openai", "deepseek/deepseek-r1", "https://openrouter.ai/api/v1", 600.0),
    ("openai", "deepseek-reasoner", "https://api.deepseek.com/v1", 600.0),
    ("openai", "qwen/qwen3-235b-a22b-thinking-2507", "https://openrouter.ai/api/v1", 600.0),
    ("openai", "Qwen/QwQ-32B", "http://127.0.0.1:8000/v1", 600.0),
    ("openai", "qwen/qwen2.5-vl-72b-instruct", "https://openrouter.ai/api/v1", 120.0),
])
def test_thinking_models_behind_other_routes_get_the_long_timeout(provider, model, base, want):
    """money39 #2: these thinking models kept 120 s, so a long think was cut, booked unknown and sent again."""
    import warnings

    from geoagent.config import config_from_dict

    m = {"name": "m", "provider": provider, "model": model, "api_key_env": "K", "price_input_usd_per_mtok": 1.0,
         "price_output_usd_per_mtok": 4.0, "max_output_tokens": 30000, **({"base_url": base} if base else {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = config_from_dict({"campaign": {"name": "t39"}, "budget": {"cap_usd": 1.0}, "generic": {"n_requests": 1},
                                "models": [m]})
    assert cfg.models[0].timeout_s == want


def test_the_stop_grace_reads_a_hosts_entrys_timeout(monkeypatch):
    """review39c #4: a [hosts] timeout_s of 1200 s gave the calls 1200 s and the stop 600 s."""
    import warnings

    from geoagent.config import config_from_dict
    from geoagent.engine import campaign_stop_grace_s

    monkeypatch.delenv("GEOAGENT_STOP_GRACE_S", raising=False)
    m = {"name": "o", "provider": "openai", "model": "o3", "api_key_env": "K", "max_output_tokens": 25000,
         "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 4.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = config_from_dict({"campaign": {"name": "g39"}, "budget": {"cap_usd": 1.0}, "generic": {"n_requests": 1},
                                "models": [m], "hosts": {"api.openai.com": {"rate": 5.0, "timeout_s": 1200.0}}})
    assert campaign_stop_grace_s(cfg) == 1200.0
