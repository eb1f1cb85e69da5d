"""Gemini 3 and ``params.thinking_budget = 0`` (prov46 #4).

The loader refused budget 0 only for gemini-2.5-pro and counted 0 as "thinking off" for every thinking Gemini
model, while Google's thinking guide says thinking cannot be turned off for Gemini 3 Pro (it takes ``thinkingLevel``
low or high) and Gemini 3 Flash does not turn it off fully, and the Gemini fake refused 0 for every gemini-3 id.
Now Gemini 3 Pro with a budget of 0 to 127 is refused at load (as 2.5 Pro), Gemini 3 Flash draws a warning, and
neither counts as thinking off (its default timeout, the output-cap warning). The fake takes a small budget on
Gemini 3 Flash and still thinks."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from geoagent.config import REASONING_TIMEOUT_S, ConfigError, ConfigWarning, config_from_dict, may_reason_long
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_gemini
from geoagent.sandbox.server import serve

KEY = "gemini-local-key"


def _load(model: str, budget, **kw):
    doc = {"campaign": {"name": "g3"}, "budget": {"cap_usd": 1.0},
           "models": [{"name": "g", "provider": "gemini", "model": model, "api_key_env": "GEMINI_API_KEY",
                       "price_input_usd_per_mtok": 0.3, "price_output_usd_per_mtok": 2.5,
                       "params": {"thinking_budget": budget}, **kw}]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = config_from_dict(doc, source="g3.toml")
    return cfg, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


@pytest.mark.parametrize("model", ["gemini-3-pro-preview", "gemini-3.1-pro-preview", "models/gemini-3-pro-preview"])
@pytest.mark.parametrize("budget", [0, 1, 127])
def test_gemini_3_pro_with_thinking_off_or_a_tiny_budget_is_refused_at_load(model, budget):
    with pytest.raises(ConfigError) as err:
        _load(model, budget)
    assert f"models[0].params.thinking_budget: {model} cannot turn thinking off" in str(err.value)
    assert _load(model, 128)[0].models[0].params["thinking_budget"] == 128


def test_gemini_3_flash_with_budget_0_is_warned_of_and_counted_as_thinking():
    cfg, lines = _load("gemini-3-flash-preview", 0, max_output_tokens=40_000)
    assert any("models[0].params.thinking_budget: gemini-3-flash-preview is a Gemini 3 model, whose thinking a "
               "budget of 0 does not turn off" in ln for ln in lines), lines
    m = cfg.models[0]
    assert may_reason_long(m) and m.timeout_s == REASONING_TIMEOUT_S
    # a small cap gets the output-room warning, naming why budget 0 does not help
    _, lines = _load("gemini-3-flash-preview", 0, max_output_tokens=512)
    assert any("max_output_tokens = 512: gemini-3-flash-preview is a Gemini thinking model" in ln
               and "does not turn a Gemini 3 model's thinking off" in ln for ln in lines), lines
    # Gemini 2.5 Flash: 0 is thinking off, as before
    cfg, lines = _load("gemini-2.5-flash", 0, max_output_tokens=512)
    assert not may_reason_long(cfg.models[0]) and not [ln for ln in lines if "thinking" in ln]


def test_the_gemini_fake_takes_a_small_budget_on_gemini_3_flash_and_still_thinks():
    async def go(model, budget):
        app = llm_gemini.make_app(seed=1, api_keys=(KEY,))
        async with serve(app) as url, HttpClient(default_policy=HostPolicy(max_attempts=1)) as http:
            prov = make_provider(ProviderSettings(kind="gemini", model=model, base_url=url, api_key=KEY), http)
            try:
                return await prov.generate(ModelRequest(provider="gemini", model=model, prompt="Where? JSON please.",
                                                        params={"max_output_tokens": 2000, "thinking_budget": budget}))
            except Exception as exc:  # noqa: BLE001 - returned for the assertions
                return exc

    out = asyncio.run(go("gemini-3-flash-preview", 0))
    assert not isinstance(out, Exception), out
    assert out.usage.output_tokens > llm_gemini.GEMINI_3_FLASH_MIN_THINKING  # thinking billed as output, plus text
    assert isinstance(asyncio.run(go("gemini-3-pro-preview", 0)), Exception)  # Pro refuses it, as the loader does
    out = asyncio.run(go("gemini-2.5-flash", 0))
    assert not isinstance(out, Exception)
