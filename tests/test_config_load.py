"""Campaign config: validation errors name the key path and the expected type; roots; estimate; sampling."""

from __future__ import annotations

from _made_up_keys import made_up_key

import math
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict
from scipy import stats

from geoagent import config as config_mod
from geoagent.config import (
    ConfigError,
    config_from_dict,
    config_sha256,
    estimate,
    host_policies,
    is_sampled,
    load_config,
    register_section,
    resolved_dict,
)

GOOD = textwrap.dedent(
    """
    [campaign]
    name = "t1"
    kind = "geoverify"
    seed = 3

    [budget]
    cap_usd = 2.5

    [[models]]
    name = "a"
    provider = "simulated"
    model = "sim-a"
    price_input_usd_per_mtok = 1.0
    price_output_usd_per_mtok = 4.0
    max_output_tokens = 100
    concurrency = 4
    rate = { requests = 10, period_s = 1.0 }
    expected_output_tokens = 50
    expected_latency_s = 0.5

    [[models]]
    name = "b"
    provider = "openai"
    model = "gpt-x"
    base_url = "http://127.0.0.1:9/v1"
    api_key_env = "T1_KEY"
    price_input_usd_per_mtok = 2.0
    price_output_usd_per_mtok = 8.0
    max_output_tokens = 200
    concurrency = 2
    rate = { requests = 1, period_s = 2.0 }

    [hosts."nominatim.openstreetmap.org"]
    rate = 1
    concurrency = 1
    """
)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str, name: str = "campaign.toml") -> Path:
    """Write the file in the working directory (a temp dir) and return its relative path."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    return Path(name)


def test_good_config_loads_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.name == "t1" and cfg.campaign.kind == "geoverify" and cfg.campaign.seed == 3
    assert [m.name for m in cfg.models] == ["a", "b"]
    b = cfg.model("b")
    assert b.host == "127.0.0.1:9" and b.paid and not cfg.model("a").paid
    assert cfg.queue.max_attempts == 5 and cfg.budget.reserve == "worst_case"
    # worst case by hand: 1000 in x $2/M + 200 out x $8/M = 0.002 + 0.0016
    assert math.isclose(b.worst_case_usd(1000), 0.0036)
    assert b.default_params() == {"max_output_tokens": 200, "temperature": 0.0}


def test_error_names_key_path_and_expected_type(tmp_path):
    bad = GOOD.replace("price_input_usd_per_mtok = 2.0", 'price_input_usd_per_mtok = "cheap"')
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, bad))
    assert str(ei.value) == "campaign.toml: models[1].price_input_usd_per_mtok: expected a number, got 'cheap'"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("max_output_tokens = 200", "max_output_tokens = 2.5", "models[1].max_output_tokens: expected an integer, got 2.5"),
        ("max_output_tokens = 200", "max_output_tokens = 0", "models[1].max_output_tokens: expected a number > 0, got 0"),
        ('provider = "openai"', 'provider = "opneai"', "models[1].provider: expected one of 'openai', 'anthropic', 'gemini', 'replay' or 'simulated', got 'opneai'"),
        ("cap_usd = 2.5", 'cap_usd = "2.5"', "budget.cap_usd: expected a number, got '2.5'"),
        ("rate = { requests = 1, period_s = 2.0 }", "rate = { requests = 1, period_s = true }", "models[1].rate.period_s: expected a number, got True"),
        ('[hosts."nominatim.openstreetmap.org"]\nrate = 1', '[hosts."nominatim.openstreetmap.org"]\nrate = "1"', 'hosts."nominatim.openstreetmap.org".rate: expected a number, got \'1\''),
        ('name = "t1"', 'name = "../evil"', "campaign.name: expected a safe file name"),
        ("seed = 3", "seed = 3\ncolour = 1", "campaign.colour: unknown key"),
        ('kind = "geoverify"', 'kind = "eval"', "campaign.kind: expected one of"),
        ("concurrency = 2", "concurrency = [2]", "models[1].concurrency: expected an integer, got an array"),
        ("concurrency = 2", 'concurrency = 2\nheaders = { Authorization = "Bearer x" }', "models[1].headers: expected no credential header"),
    ],
)
def test_each_error_kind_is_named(tmp_path, old, new, expected):
    assert old in GOOD
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, GOOD.replace(old, new, 1)))
    assert any(p.startswith(expected) for p in ei.value.problems), ei.value.problems
    assert str(ei.value).startswith("campaign.toml: ")


def test_missing_sections_and_unknown_top_level(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, '[campaign]\nname = "x"\n[modles]\na = 1\n'))
    assert set(ei.value.problems) == {"budget: required key is missing", "modles: unknown key (did you mean 'models'?)"}


def test_toml_syntax_error_gives_line(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, '[campaign]\nname = "x"\ncap = \n'))
    assert "invalid TOML" in str(ei.value) and "line 3" in str(ei.value)


def test_missing_file_and_packaged_configs():
    with pytest.raises(ConfigError, match="file not found"):
        load_config("/nonexistent/campaign.toml")
    for name in ("generic_demo", "example", "geocontext_replay"):
        cfg = load_config(name)
        assert cfg.source == f"{name}.toml"
        for m in cfg.models:
            assert m.api_key_env is None or m.api_key_env.isupper()


def test_key_pasted_into_api_key_env_is_not_echoed(tmp_path):
    key = made_up_key("sk-" "proj-", 24, seed="config-load")  # drawn at run time: no key-shaped literal
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, GOOD.replace('api_key_env = "T1_KEY"', f'api_key_env = "{key}"')))
    assert key not in str(ei.value)
    assert "models[1].api_key_env: expected the NAME of an environment variable" in str(ei.value)


def test_duplicate_model_names_and_replay_without_path(tmp_path):
    dup = GOOD.replace('name = "b"', 'name = "a"')
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, dup))
    assert ei.value.problems == ["models: model name 'a' appears twice; each [[models]] entry needs its own name"]
    rep = GOOD.replace('provider = "openai"', 'provider = "replay"')
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, rep))
    assert ei.value.problems == ["models[1]: replay.path: expected the recorded JSONL file for a replay model"]


def test_env_overrides_roots(tmp_path, monkeypatch):
    text = GOOD.replace("[budget]", '[paths]\nqueues = "cfgq"\nstate = "cfgs"\n\n[budget]')
    monkeypatch.delenv("GEOAGENT_QUEUES", raising=False)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    cfg = load_config(write(tmp_path, text))
    assert cfg.queues_root() == Path("cfgq") and cfg.state_dir() == Path("cfgs") / "t1"
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "q"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "s"))
    assert cfg.queues_root() == tmp_path / "q" and cfg.state_dir() == tmp_path / "s" / "t1"
    assert resolved_dict(cfg)["paths"]["state"] == str(tmp_path / "s")
    # the config hash ignores where the data lives
    h = config_sha256(cfg)
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "elsewhere"))
    assert config_sha256(cfg) == h


def test_registered_section_validated_at_load_and_lazily(tmp_path, monkeypatch):
    class GV(BaseModel):
        model_config = ConfigDict(strict=True, extra="forbid")
        tau_km: float = 0.15
        arms: list[str] = ["main"]

    monkeypatch.setattr(config_mod, "_SECTIONS", {})  # independent of what other tests imported
    text = GOOD + "\n[geoverify]\ntau_km = 0.2\n"
    cfg_before = load_config(write(tmp_path, text))
    assert cfg_before.section("geoverify") == {"tau_km": 0.2}  # nothing registered yet: raw dict
    register_section("geoverify", GV)
    assert cfg_before.section("geoverify") == GV(tau_km=0.2)  # lazy validation
    assert resolved_dict(cfg_before)["geoverify"] == {"tau_km": 0.2, "arms": ["main"]}
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, GOOD + '\n[geoverify]\ntau_km = "far"\n'))
    assert ei.value.problems == ["geoverify.tau_km: expected a number, got 'far'"]
    # a newly registered name becomes a legal table
    register_section("report", GV)
    cfg = load_config(write(tmp_path, GOOD + "\n[report]\ntau_km = 1\n"))
    assert cfg.section("report").tau_km == 1.0
    with pytest.raises(ValueError):
        register_section("models", GV)


def test_resolved_dict_has_no_secret_values(tmp_path, monkeypatch):
    monkeypatch.setenv("T1_KEY", "sk-" "test-never-in-manifest")
    cfg = load_config(write(tmp_path, GOOD))
    text = repr(resolved_dict(cfg)) + repr(cfg)
    assert "sk-" "test-never-in-manifest" not in text
    assert resolved_dict(cfg)["models"][1]["api_key_env"] == "T1_KEY"


def test_host_policies(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    pols = host_policies(cfg)
    assert pols["127.0.0.1:9"].rate == 1 and pols["127.0.0.1:9"].period_s == 2.0
    assert pols["127.0.0.1:9"].concurrency == 2 and pols["127.0.0.1:9"].retry_unknown_outcome is False
    assert pols["nominatim.openstreetmap.org"].rate == 1 and pols["nominatim.openstreetmap.org"].concurrency == 1


def test_estimate_matches_hand_computation(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    prompt = "x" * 300  # reserved: 300 // 3 + 16 = 116 tokens; + 1600 with an image
    # distinct requests of the same length (a repeated request key is one call, counted in ``repeated``)
    planned = ([{"model": "a", "prompt": prompt[:-3] + f"{i:03d}", "image_id": "1"} for i in range(30)]
               + [{"model": "b", "prompt": prompt[:-3] + f"{i:03d}"} for i in range(10)])
    est = estimate(cfg, planned)
    assert est.calls == 40
    # expected: 300 / 4 = 75 tokens; a is simulated, which bills 765 per image
    assert est.input_tokens == 30 * (75 + 765) + 10 * 75
    assert est.by_model["a"].worst_input_tokens == 30 * 1716 and est.by_model["b"].worst_input_tokens == 10 * 116
    # a: expected output 50 tokens; b: no expected -> max_output_tokens 200
    assert est.output_tokens == 30 * 50 + 10 * 200
    cost_a = 30 * (840 * 1.0 + 50 * 4.0) / 1e6
    cost_b = 10 * (75 * 2.0 + 200 * 8.0) / 1e6
    assert math.isclose(est.cost_usd, cost_a + cost_b)
    worst_a = 30 * (math.ceil(1716 * 1.25) * 1.0 + 100 * 4.0) / 1e6
    worst_b = 10 * (math.ceil(116 * 1.25) * 2.0 + 200 * 8.0) / 1e6
    assert math.isclose(est.worst_case_usd, worst_a + worst_b)
    # a is simulated offline: no model is called, so no model time (its expected_latency_s does not apply);
    # b: min(0.5/s, 2 / 2 s = 1/s) -> 10 / 0.5 = 20 s (the slowest)
    assert est.by_model["a"].duration_s == 0.0 and est.by_model["a"].time_basis == "none"
    assert math.isclose(est.by_model["b"].duration_s, 20.0) and est.by_model["b"].time_basis == "latency"
    assert math.isclose(est.duration_s, 20.0)
    # the same model "a" behind an OpenAI-compatible server: min(10/s, 4 / 0.5 s = 8/s) -> 30 / 8 s
    served = load_config(write(tmp_path, GOOD.replace('provider = "simulated"\nmodel = "sim-a"',
                                                      'provider = "openai"\nmodel = "sim-a"\nbase_url = "http://127.0.0.1:10/v1"'),
                               name="served.toml"))
    assert math.isclose(estimate(served, planned).by_model["a"].duration_s, 30 / 8)
    assert est.within_cap


def test_is_sampled_is_deterministic_and_has_the_rate():
    keys = [f"trial-{i}" for i in range(6000)]
    draws = [is_sampled(k, 1 / 3, seed=11) for k in keys]
    assert draws == [is_sampled(k, 1 / 3, seed=11) for k in keys]
    # two-sided binomial test against p = 1/3 (scipy)
    assert stats.binomtest(sum(draws), len(draws), 1 / 3).pvalue > 0.001
    assert all(is_sampled(k, 1.0) for k in keys[:10]) and not any(is_sampled(k, 0.0) for k in keys[:10])
    other = [is_sampled(k, 1 / 3, seed=12) for k in keys]
    assert other != draws


def test_config_from_dict_rejects_non_table():
    with pytest.raises(ConfigError):
        config_from_dict([1, 2])  # type: ignore[arg-type]


def test_two_servers_of_one_model_id_with_equal_params_are_refused(tmp_path):
    """The request key does not hash the server, so such entries would share stored answers silently."""
    twin = GOOD + textwrap.dedent(
        """
        [[models]]
        name = "b2"
        provider = "openai"
        model = "gpt-x"
        base_url = "http://127.0.0.2:9/v1"
        api_key_env = "T1_KEY"
        max_output_tokens = 200
        """
    )
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, twin))
    # one sentence, not wrapped in "expected ..., got an array" (walkthrough: it read "models: expected models
    # 'keyed' and 'open' have the same provider ... or drop one, got an array")
    assert e.value.problems == [
        "models: models 'b' and 'b2' have the same provider, model id and parameters but different base_url, so "
        "their requests would have the same request key and share stored answers; make them differ in `model`, "
        "or in `params` (e.g. a `seed`), or drop one"]
    # a different parameter (here the sampling temperature) makes the keys differ: accepted
    load_config(write(tmp_path, twin.replace('name = "b2"', 'name = "b2"\ntemperature = 0.7'), name="ok.toml"))
    # the same server twice (e.g. two names with different sampling rates) shares answers on purpose
    load_config(write(tmp_path, twin.replace("127.0.0.2", "127.0.0.1"), name="same.toml"))


def test_task_section_checks_read_as_sentences():
    """A check that states a whole problem is shown as `<key path>: <problem>`, never wrapped in the
    "expected <X>, got <Y>" template it does not fit (which read "expected unknown GeoHint condition ...")."""
    from geoagent.campaigns import register_all_sections

    register_all_sections()
    base = {"campaign": {"name": "x", "kind": "geohint", "contact": "ops@example.org"}, "budget": {"cap_usd": 1.0},
            "models": [{"name": "a", "provider": "simulated", "model": "m"}]}

    def problems(geohint):
        with pytest.raises(ConfigError) as ei:
            config_from_dict({**base, "geohint": geohint})
        return [p.removeprefix("<dict>: ") for p in ei.value.problems]

    (unknown,) = problems({"conditions": ["nope"]})
    # the closest known name is suggested as for an unknown key (did_you_mean: 'none', an alias of baseline)
    assert unknown.startswith("geohint.conditions: unknown GeoHint condition 'nope' (did you mean 'none'?); "
                              "known: ['baseline', ")
    assert not unknown.endswith("got an array")
    assert problems({"conditions": ["forced", "forced"]}) == ["geohint.conditions: condition 'forced' listed twice"]
    assert problems({"sample_rates": {"a": 2}}) == ["geohint.sample_rates: sample_rates['a'] must be in (0, 1], got 2.0"]
    (geo,) = problems({"geocoder": {"langauge": "de"}})
    assert geo.startswith("geohint.geocoder: unknown key(s) 'langauge' (did you mean 'language'?); expected some of [")


def test_crawl_section_checks_read_as_sentences():
    """Same for `[crawl]`: "crawl.screener: expected l_min_km (9.0) must not exceed ..." read as nonsense."""
    import copy
    import tomllib

    from geoagent.campaigns import register_all_sections

    register_all_sections()
    raw = tomllib.loads((Path(__file__).resolve().parents[1] / "geoagent/configs/crawl_sandbox.toml").read_text())
    raw["crawl"].setdefault("screener", {}).update(l_min_km=9, l_max_km=1)
    with pytest.raises(ConfigError) as ei:
        config_from_dict(copy.deepcopy(raw))
    assert ei.value.problems == ["crawl.screener: l_min_km (9.0) must not exceed l_max_km (1.0)"]
