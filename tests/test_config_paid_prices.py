"""A billing model on a paid host must state its prices (walkthrough finding 1).

An unset ``price_*_usd_per_mtok`` is $0: a ``[[models]]`` entry for ``claude-sonnet-4-5`` on
``https://api.anthropic.com`` without prices dry-ran as "$0.0000 expected ... within cap" and a real run would
never have counted its spend, so the hard cap did not protect the paid API. Such an entry is now a config error
naming the key and the host; ``0`` written out is accepted, and local servers (loopback, LAN, reserved names,
the sandbox fakes) keep the default 0.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.config import ConfigError, config_from_dict, is_local_host, load_config

REPO = Path(__file__).resolve().parents[1]


def _doc(*models: dict) -> dict:
    return {"campaign": {"name": "prices", "kind": "generic"}, "budget": {"cap_usd": 5.0},
            "generic": {"n_requests": 2}, "models": list(models)}


SIM = {"name": "sim", "provider": "simulated", "model": "s"}
REPLAY = {"name": "rep", "provider": "replay", "model": "r", "replay": {"path": "x.jsonl"}}
CLAUDE = {"name": "sonnet", "provider": "anthropic", "model": "claude-sonnet-4-5", "base_url": "https://api.anthropic.com",
          "api_key_env": "ANTHROPIC_API_KEY"}


def _problems(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config_from_dict(doc, source="c.toml")
    return info.value.problems


def test_paid_host_without_prices_names_both_keys_and_the_host():
    problems = _problems(_doc(SIM, REPLAY, CLAUDE))
    assert problems == [
        "models[2].price_input_usd_per_mtok: required for a model on a paid host (api.anthropic.com); write 0 for a "
        "free one (the cost cap counts each call at these prices, USD per 1M tokens)",
        "models[2].price_output_usd_per_mtok: required for a model on a paid host (api.anthropic.com); write 0 for a "
        "free one (the cost cap counts each call at these prices, USD per 1M tokens)",
    ]


def test_one_missing_price_is_named_alone():
    problems = _problems(_doc({**CLAUDE, "price_input_usd_per_mtok": 3.0}))
    assert len(problems) == 1 and problems[0].startswith("models[0].price_output_usd_per_mtok: required")


@pytest.mark.parametrize("provider, host", [("openai", "api.openai.com"), ("anthropic", "api.anthropic.com"),
                                            ("gemini", "generativelanguage.googleapis.com")])
def test_no_base_url_is_the_providers_own_paid_api(provider, host):
    problems = _problems(_doc({"name": "m", "provider": provider, "model": "x"}))
    assert [p.split(":")[0] for p in problems] == ["models[0].price_input_usd_per_mtok",
                                                   "models[0].price_output_usd_per_mtok"]
    assert f"paid host ({host})" in problems[0]


def test_other_remote_hosts_are_paid_too():
    problems = _problems(_doc({"name": "or", "provider": "openai", "model": "x", "base_url": "https://openrouter.ai/api/v1"}))
    assert "paid host (openrouter.ai)" in problems[0]


def test_explicit_zero_is_accepted_and_costs_nothing():
    cfg = config_from_dict(_doc({**CLAUDE, "price_input_usd_per_mtok": 0, "price_output_usd_per_mtok": 0.0}))
    m = cfg.models[0]
    assert m.on_paid_host and m.cost_usd(1_000_000, 1_000_000) == 0.0


def test_priced_paid_model_loads_with_its_prices():
    cfg = config_from_dict(_doc({**CLAUDE, "price_input_usd_per_mtok": 3.0, "price_output_usd_per_mtok": 15.0}))
    # 1M in at $3 + 0.5M out at $15 = 3 + 7.5 (hand-computed)
    assert cfg.models[0].cost_usd(1_000_000, 500_000) == pytest.approx(10.5)


@pytest.mark.parametrize("url", ["http://localhost:11434/v1", "http://127.0.0.1:8000/v1", "http://127.9.9.9/v1",
                                 "http://[::1]:8000/v1", "http://192.168.1.20:8000/v1", "http://10.0.0.5/v1",
                                 "http://openai.sandbox.invalid/v1", "http://llm.test/v1", "http://gpu-box.local/v1",
                                 "http://vllm.localhost/v1", "http://llm.example:81/v1",
                                 "http://my-gpu-box:8000/v1"])
def test_local_servers_keep_the_default_zero_price(url):
    cfg = config_from_dict(_doc({"name": "loc", "provider": "openai", "model": "qwen", "base_url": url}))
    m = cfg.models[0]
    assert not m.on_paid_host
    assert (m.price_input_usd_per_mtok, m.price_output_usd_per_mtok) == (0.0, 0.0)


def test_replay_and_simulated_need_no_prices():
    cfg = config_from_dict(_doc(SIM, REPLAY))
    assert [m.on_paid_host for m in cfg.models] == [False, False]


@pytest.mark.parametrize("host, local", [
    ("localhost", True), ("LOCALHOST", True), ("127.0.0.1", True), ("::1", True), ("[::1]", True),
    ("172.16.0.9", True), ("169.254.1.1", True), ("0.0.0.0", True), ("fd00::1", True),
    ("wikidata.sandbox.invalid", True), ("x.test", True), ("printer.local", True),
    # a single-label name (no dot) resolves only on the LAN (hosts file, search domain, mDNS): a vLLM box
    ("my-gpu-box", True), ("my-gpu-box.", True), ("gpu", True), ("nas.lan", True), ("gpu.home.arpa", True),
    ("vllm.internal", True),
    ("api.openai.com", False), ("api.anthropic.com", False), ("openrouter.ai", False), ("8.8.8.8", False),
    ("localhost.evil.com", False), ("lan.example.com", False), ("internal.openai.com", False), (".", False), ("test.com", False), ("invalid.org", False), ("", False), (None, False),
])
def test_is_local_host(host, local):
    assert is_local_host(host) is local


def test_shipped_configs_still_load():
    from geoagent.campaigns import register_all_sections

    register_all_sections()
    loaded = []
    for path in sorted((REPO / "geoagent" / "configs").glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        if path.name.startswith("demo_"):  # the demo templates hold placeholders `run.py demo` fills
            continue
        cfg = load_config(path)
        loaded.append(path.name)
        for m in cfg.models:
            if m.on_paid_host:
                raw = next(d for d in tomllib.loads(text)["models"] if d["name"] == m.name)
                assert "price_input_usd_per_mtok" in raw and "price_output_usd_per_mtok" in raw
    assert "example.toml" in loaded and "generic_demo.toml" in loaded


def test_cli_refuses_the_unpriced_paid_model_before_anything(isolated_roots, capsys):
    cfg = isolated_roots / "c.toml"
    cfg.write_text('[campaign]\nname = "unpriced"\nkind = "generic"\n[budget]\ncap_usd = 1.0\n[generic]\nn_requests = 3\n'
                   '[[models]]\nname = "sonnet"\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n'
                   'base_url = "https://api.anthropic.com"\napi_key_env = "ANTHROPIC_API_KEY"\n', encoding="utf-8")
    code = main(["run", str(cfg), "--simulate", "--no-live"])
    err = capsys.readouterr().err
    assert code == 2
    assert "models[0].price_input_usd_per_mtok: required for a model on a paid host (api.anthropic.com)" in err
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()
