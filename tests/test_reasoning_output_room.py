"""Output caps that hidden reasoning can use up (OpenAI reasoning models, Gemini thinking models).

Before: a gpt-5-mini or gemini-2.5-flash entry with max_output_tokens = 512 loaded without a word, and its
answers came back empty (finish reason length / MAX_TOKENS, billed) and were scored as the parse failure
"empty answer". Now the loader (so the dry run) warns, naming the key and the documented reason, Gemini's
thinking budget can be set (params.thinking_budget), and a cut-off empty answer says so in parse_reason.
"""

from __future__ import annotations

import asyncio
import warnings

import pytest

from geoagent.config import ConfigError, ConfigWarning, config_from_dict
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.score import scored_row
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_gemini
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 21, seed="test-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)


def _load(model: dict) -> tuple[object, list[str]]:
    doc = {"campaign": {"name": "room"}, "budget": {"cap_usd": 1.0},
           "models": [{"name": "m", "price_input_usd_per_mtok": 0.3, "price_output_usd_per_mtok": 2.5, **model}]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = config_from_dict(doc)
    return cfg, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning) and "max_output_tokens" in str(w.message)]


def test_openai_reasoning_small_cap_warns_with_the_documented_reason():
    _, lines = _load({"provider": "openai", "model": "gpt-5-mini", "api_key_env": "OPENAI_API_KEY", "max_output_tokens": 512})
    assert len(lines) == 1
    assert "models[0].max_output_tokens = 512: gpt-5-mini is an OpenAI reasoning model" in lines[0]
    assert "also counts its hidden reasoning tokens" in lines[0] and "at least 25,000 tokens" in lines[0]
    assert _load({"provider": "openai", "model": "gpt-5-mini", "api_key_env": "OPENAI_API_KEY",
                  "max_output_tokens": 25_000})[1] == []
    assert _load({"provider": "openai", "model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY",
                  "max_output_tokens": 512})[1] == []


def test_gemini_thinking_small_cap_warns_unless_thinking_is_bounded():
    g = {"provider": "gemini", "model": "gemini-2.5-flash", "api_key_env": "GEMINI_API_KEY", "max_output_tokens": 512}
    _, lines = _load(g)
    assert len(lines) == 1 and "models[0].max_output_tokens = 512: gemini-2.5-flash is a Gemini thinking model" in lines[0]
    assert "up to 24,576 tokens" in lines[0]
    assert _load({**g, "params": {"thinking_budget": 0}})[1] == []       # thinking off (Flash)
    assert _load({**g, "params": {"thinking_budget": 256}})[1] == []     # cap above the budget
    assert len(_load({**g, "params": {"thinking_budget": 1024}})[1]) == 1
    assert _load({**g, "model": "gemini-2.5-flash-lite"})[1] == []       # does not think unless asked
    assert _load({**g, "model": "gemini-2.0-flash"})[1] == []
    with pytest.raises(ConfigError) as err:
        _load({**g, "model": "gemini-2.5-pro", "params": {"thinking_budget": 0}})
    assert "models[0].params.thinking_budget: gemini-2.5-pro cannot turn thinking off" in str(err.value)


async def _gemini(model: str, params: dict):
    app = llm_gemini.make_app(seed=1, api_keys=(KEY,))
    async with serve(app) as url, HttpClient(default_policy=FAST) as http:
        prov = make_provider(ProviderSettings(kind="gemini", model=model, base_url=url, api_key=KEY), http)
        out = await prov.generate(ModelRequest(provider="gemini", model=model, prompt="Where is this? JSON please.",
                                               params={"temperature": 0.0, **params}))
    return out, app["calls"]


def test_gemini_thinking_cap_spent_on_thoughts_and_thinking_budget_sent():
    out, calls = asyncio.run(_gemini("gemini-2.5-flash", {"max_output_tokens": 256}))
    assert out.text == "" and out.finish_reason == "MAX_TOKENS" and out.usage.output_tokens == 256
    assert calls[0]["sampling"] == {"maxOutputTokens": 256, "temperature": 0.0}
    out, calls = asyncio.run(_gemini("gemini-2.5-flash", {"max_output_tokens": 256, "thinking_budget": 0}))
    assert out.text and out.finish_reason == "STOP"
    assert calls[0]["sampling"] == {"maxOutputTokens": 256, "temperature": 0.0, "thinkingConfig": {"thinkingBudget": 0}}


def test_cut_off_empty_answer_is_reported_as_cut_off_not_a_bare_parse_failure():
    trial = {"trial_id": "t1", "site": "s", "arm": "true", "band": "near", "truth": "same"}
    row = scored_row(trial, "gpt-5-mini", parse_verdict(""), finish_reason="length")
    assert row["truncated"] is True and row["parse_ok"] is False
    assert row["parse_reason"].startswith("empty answer cut off at the output-token limit (finish reason length)")
    assert "hidden reasoning tokens" in row["parse_reason"]
    assert scored_row(trial, "m", parse_verdict(""), finish_reason="stop")["parse_reason"] == "empty answer"


def test_gemini_warning_with_a_thinking_budget_set_advises_raising_the_cap_not_setting_the_budget():
    """Walkthrough 9b: gemini-2.5-pro with ``params.thinking_budget = 1024`` and ``max_output_tokens = 600`` was
    told to "bound thinking with params.thinking_budget", which it had done. With the budget set the advice is
    to raise the cap above it (or lower the budget); unset, the old advice (set one) stays."""
    g = {"provider": "gemini", "model": "gemini-2.5-pro", "api_key_env": "GEMINI_API_KEY", "max_output_tokens": 600,
         "params": {"thinking_budget": 1024}}
    (line,) = _load(g)[1]
    assert "params.thinking_budget = 1024 can use the whole cap" in line
    assert "bound thinking with params.thinking_budget" not in line
    assert "raise max_output_tokens above params.thinking_budget (1024) plus room for the answer" in line
    assert "or lower params.thinking_budget" in line
    (unset,) = _load({**g, "params": {}})[1]
    assert "bound thinking with params.thinking_budget" in unset
