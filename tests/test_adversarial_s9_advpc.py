"""Adversarial review of session 9's sampling, continent and reasoning changes (helper advpc).

Each test failed on main at 9f82647 and names what a researcher saw there.
"""

from __future__ import annotations

import warnings

from geoagent.config import ConfigWarning, config_from_dict
from geoagent.geoverify.trials import one_continent_note
from _made_up_keys import made_up_key


def test_one_continent_note_says_an_is_north_america():
    # before: "every city is on one continent (AN)": a researcher who wrote NA (or AN) for New York reads
    # Antarctica; the release's code AN is North America, and the line shown must say so
    note = one_continent_note(["NA", "an", "AN"])
    assert note and "every city is on one continent (AN)" in note
    assert "North America" in note and "Antarctica" not in note
    eu = one_continent_note(["EU"])
    assert eu and "every city is on one continent (EU)," in eu and "North America" not in eu


def _room_lines(model: dict) -> list[str]:
    doc = {"campaign": {"name": "room"}, "budget": {"cap_usd": 1.0},
           "models": [{"name": "m", "price_input_usd_per_mtok": 0.3, "price_output_usd_per_mtok": 2.5, **model}]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config_from_dict(doc)
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning) and "max_output_tokens" in str(w.message)]


def test_flash_lite_asked_to_think_past_its_cap_warns():
    # before: Flash-Lite does not think unless asked, so no line, even when params.thinking_budget asks it to
    # think 1,024 tokens under a 512-token cap (its answers then come back empty, MAX_TOKENS, billed)
    lite = {"provider": "gemini", "model": "gemini-2.5-flash-lite", "api_key_env": "GEMINI_API_KEY", "max_output_tokens": 512}
    lines = _room_lines({**lite, "params": {"thinking_budget": 1024}})
    assert len(lines) == 1 and "models[0].max_output_tokens = 512: gemini-2.5-flash-lite" in lines[0], lines
    assert "params.thinking_budget = 1024" in lines[0]
    assert _room_lines(lite) == []                                          # not asked to think
    assert _room_lines({**lite, "params": {"thinking_budget": 256}}) == []  # cap above the budget
    assert _room_lines({**lite, "params": {"thinking_budget": 0}}) == []


GENERIC = """
[campaign]
name = "reasoning-dry"
kind = "generic"
[budget]
cap_usd = 50.0
[generic]
n_requests = 10
[[models]]
name = "g5"
provider = "openai"
model = "gpt-5-mini"
api_key_env = "OPENAI_API_KEY"
price_input_usd_per_mtok = 0.25
price_output_usd_per_mtok = 2.0
max_output_tokens = 30000
expected_output_tokens = 60
[[models]]
name = "g4"
provider = "openai"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.6
max_output_tokens = 400
expected_output_tokens = 60
"""


def test_dry_run_expected_cost_of_a_reasoning_model_says_reasoning_tokens_count(isolated_roots, monkeypatch, capsys):
    # before: "assuming 60 output tokens per call ([[models]] expected_output_tokens)" for gpt-5-mini, whose
    # hidden reasoning tokens are billed as output too: a visible answer's length understated the expected USD
    from geoagent.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", made_up_key("sk-", 21, seed="test-n16"))
    cfg = isolated_roots / "reasoning.toml"
    cfg.write_text(GENERIC, encoding="utf-8")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    g5 = next(line for line in out.splitlines() if line.strip().startswith("g5:"))
    g4 = next(line for line in out.splitlines() if line.strip().startswith("g4:"))
    assert "reasoning tokens" in g5 and "expected_output_tokens" in g5, g5
    assert "reasoning" not in g4, g4


def test_reasoning_cut_off_with_null_content_is_a_cut_off_answer_not_a_malformed_body():
    # vLLM's reasoning parser answers a generation that hit max_tokens inside its reasoning with
    # finish_reason "length", message.content null and the text in message.reasoning (vllm-project/vllm#52640).
    # Before: "choices[0].message.content is not text" (MalformedResponse): the paid answer was nacked and asked
    # again on every attempt, then dead-lettered, instead of an empty answer cut off at the cap (billed once).
    import asyncio

    from geoagent.providers import ProviderSettings, make_provider
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.providers.base import ModelRequest
    from geoagent.sandbox.llm_common import CALLS_KEY
    from geoagent.sandbox.llm_openai import make_app
    from geoagent.sandbox.server import serve

    async def main():
        app = make_app(require_auth=False, reasoning_style="vllm")
        async with serve(app) as base:
            policy = HostPolicy(rate=1000, period_s=1.0, concurrency=2, max_attempts=1, timeout_s=5.0)
            async with HttpClient(default_policy=policy) as http:
                prov = make_provider(ProviderSettings(kind="openai", model="gpt-5-mini", base_url=base + "/v1",
                                                      reasoning_model=True, max_tokens_field="max_completion_tokens"),
                                     http)
                resp = await prov.generate(ModelRequest(provider="openai", model="gpt-5-mini", prompt="Where is this?",
                                                        params={"max_output_tokens": 64}))
            return resp, list(app[CALLS_KEY])

    resp, calls = asyncio.run(main())
    assert len(calls) == 1 and calls[0]["status"] == 200 and calls[0]["finish_reason"] == "length"
    assert resp.text == "" and resp.finish_reason == "length"
    assert resp.usage.output_tokens == 64 == calls[0]["output_tokens"]  # billed: the whole cap went on reasoning


def test_crawl_auditor_cap_that_reasoning_can_use_up_warns_naming_the_crawl_key(tmp_path):
    # the crawl's audits are sent with [crawl.image_audit] / [crawl.referenceability] max_output_tokens (400 and
    # 4,000 by default), not the [[models]] entry's. Before: a gpt-5-mini image auditor whose [[models]] entry
    # has 30,000 loaded without a word (and the [[models]] line, the only one, pointed at a key the audits do not
    # use), while every audit went out capped at 400 and came back empty, cut off by hidden reasoning
    from pathlib import Path

    from geoagent.config import load_config

    src = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml").read_text(encoding="utf-8")
    old = 'model = "sandbox-vision-auditor-1"\nbase_url = "http://openai.sandbox.invalid/v1"\n'
    assert src.count(old) == 1 and src.count("max_output_tokens = 400\n") == 1
    text = src.replace(old, 'model = "gpt-5-mini"\nreasoning_model = true\nbase_url = "http://openai.sandbox.invalid/v1"\n')
    text = text.replace("max_output_tokens = 400\n", "max_output_tokens = 30000\n")
    cfg = tmp_path / "crawl.toml"
    cfg.write_text(text, encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(cfg)
    lines = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning) and "max_output_tokens" in str(w.message)]
    assert len(lines) == 1, lines
    assert "crawl.image_audit.max_output_tokens = 400: gpt-5-mini is an OpenAI reasoning model" in lines[0], lines
    # the text auditor (not a reasoning model) and the [[models]] cap give no line
    assert "crawl.referenceability" not in lines[0] and "models[0]" not in lines[0]


def test_task_output_cap_override_is_the_cap_checked_for_reasoning_models(tmp_path):
    # [geoverify] / [geohint] max_output_tokens overrides every model's cap in the requests. Before: gpt-5-mini
    # with [[models]] max_output_tokens = 30000 under [geoverify] max_output_tokens = 512 loaded without a word,
    # and every request went out capped at 512 (answers empty, cut off by hidden reasoning)
    cfg = tmp_path / "gv.toml"
    for kind in ("geoverify", "geohint"):
        cfg.write_text(f"""
[campaign]
name = "cap-{kind}"
kind = "{kind}"
contact = "you@example.org"
[budget]
cap_usd = 5.0
[{kind}]
max_output_tokens = 512
[[models]]
name = "g5"
provider = "openai"
model = "gpt-5-mini"
api_key_env = "OPENAI_API_KEY"
price_input_usd_per_mtok = 0.25
price_output_usd_per_mtok = 2.0
max_output_tokens = 30000
""", encoding="utf-8")
        from geoagent.config import load_config

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load_config(cfg)
        lines = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning) and "max_output_tokens" in str(w.message)]
        assert len(lines) == 1, (kind, lines)
        assert f"{kind}.max_output_tokens = 512: gpt-5-mini is an OpenAI reasoning model" in lines[0], lines
