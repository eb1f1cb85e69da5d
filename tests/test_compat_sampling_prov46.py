"""Sampling on an OpenAI-compatible route (prov46 #2, #5).

A Claude id behind ``provider = "openai"`` (``anthropic/claude-opus-4.7`` on OpenRouter, ``claude-opus-4-7`` on
Anthropic's own OpenAI-compatible endpoint, ``claude-sonnet-4-5`` with top_p) was sent the temperature (and top_p)
that Claude refuses with HTTP 400 on every route, and the manifest said they were sent. The Messages API's rules now
apply there too, and the loader refuses an explicit value such a model refuses. An OpenAI reasoning id behind a
vendor prefix (``openai/o3``) was recorded as sent a temperature it never used: it is now sent none, the record says
why, and a written one draws a warning. A seed sent on Chat Completions is recorded as best effort. Against the
local OpenAI fake (which refuses Claude's sampling as Anthropic does) and the config loader."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from geoagent.config import ConfigError, ConfigWarning, config_from_dict
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.runtime.manifest import Manifest, read_manifest
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)


def _ask(model: str, params: dict, **settings):
    app = llm_openai.make_app(require_auth=False)

    async def go():
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind="openai", model=model, base_url=url + "/v1", **settings), http)
            try:
                return await prov.generate(ModelRequest(provider="openai", model=model, prompt="Where? JSON.",
                                                        params={"max_output_tokens": 200, **params}))
            except Exception as exc:  # noqa: BLE001 - returned for the assertions
                return exc

    return asyncio.run(go()), list(app["calls"])


@pytest.mark.parametrize("model", ["anthropic/claude-opus-4.7", "claude-opus-4-7", "claude-sonnet-5"])
def test_a_claude_47_model_on_a_compatible_route_is_sent_no_temperature_or_top_p(model):
    out, calls = _ask(model, {"temperature": 0.0, "top_p": 0.9})
    assert not isinstance(out, Exception), out
    assert [c["status"] for c in calls] == [200] and calls[0]["sampling"] == {"max_tokens": 200}


def test_a_claude_45_model_on_a_compatible_route_is_sent_top_p_only():
    out, calls = _ask("claude-sonnet-4-5", {"temperature": 0.0, "top_p": 0.9, "seed": 3})
    assert not isinstance(out, Exception), out
    assert calls[0]["sampling"] == {"max_tokens": 200, "top_p": 0.9, "seed": 3}
    # older Claude ids take both, and the fake answers them
    out, calls = _ask("anthropic/claude-3.5-sonnet", {"temperature": 0.0, "top_p": 0.9})
    assert not isinstance(out, Exception) and calls[0]["sampling"] == {"max_tokens": 200, "temperature": 0.0,
                                                                          "top_p": 0.9}


def test_the_fake_refuses_what_claude_refuses():
    async def post(body):
        import aiohttp

        app = llm_openai.make_app(require_auth=False)
        async with serve(app) as url, aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                return r.status, await r.json()

    msgs = [{"role": "user", "content": "hi"}]
    status, err = asyncio.run(post({"model": "anthropic/claude-opus-4.7", "messages": msgs, "temperature": 0}))
    assert status == 400 and err["error"]["message"] == "`temperature` is deprecated for this model."
    status, err = asyncio.run(post({"model": "claude-sonnet-4-5", "messages": msgs, "temperature": 0, "top_p": 0.9}))
    assert status == 400 and "cannot both be specified" in err["error"]["message"]


def test_an_openai_reasoning_id_behind_a_prefix_is_sent_no_temperature():
    out, calls = _ask("openai/o3", {"temperature": 0.0, "top_p": 0.5, "seed": 1})
    assert not isinstance(out, Exception), out
    assert calls[0]["sampling"] == {"max_tokens": 200, "seed": 1}
    # reasoning_model = false says the server takes them: sent as configured
    out, calls = _ask("openai/o3", {"temperature": 0.0}, reasoning_model=False)
    assert calls[0]["sampling"] == {"max_tokens": 200, "temperature": 0.0}


def _doc(tmp_path, *models):
    return {"campaign": {"name": "compat", "kind": "generic"}, "budget": {"cap_usd": 1.0},
            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
            "models": [{"provider": "openai", "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 1.0,
                        "api_key_env": "K", **m} for m in models]}


def test_the_loader_refuses_a_written_value_claude_refuses_on_a_compatible_route(tmp_path):
    with pytest.raises(ConfigError) as err:
        config_from_dict(_doc(tmp_path, {"name": "o", "model": "anthropic/claude-opus-4.7",
                                         "base_url": "https://openrouter.ai/api/v1", "temperature": 0.2}))
    assert "models[0].temperature: anthropic/claude-opus-4.7 refuses temperature and top_p at any value" \
        in str(err.value)
    with pytest.raises(ConfigError) as err:
        config_from_dict(_doc(tmp_path, {"name": "s", "model": "claude-sonnet-4-5", "temperature": 0.2,
                                         "base_url": "https://api.anthropic.com/v1", "params": {"top_p": 0.9}}))
    assert "models[0].temperature and models[0].params.top_p: claude-sonnet-4-5 refuses temperature and top_p in " \
           "one request" in str(err.value)


def test_the_manifest_records_what_the_compatible_route_sends_and_why(tmp_path):
    doc = _doc(tmp_path, {"name": "opus", "model": "anthropic/claude-opus-4.7", "base_url": "https://openrouter.ai/api/v1"},
               {"name": "o3", "model": "openai/o3", "base_url": "https://openrouter.ai/api/v1", "temperature": 0.3},
               {"name": "g4o", "model": "gpt-4o", "seed": 7})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = config_from_dict(doc)
    lines = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert any("models[1].temperature: openai/o3 is an OpenAI reasoning model behind a vendor prefix" in ln
               and "does not use the 0.3 written" in ln for ln in lines), lines
    Manifest(cfg).start_run()
    sent = read_manifest(cfg.state_dir())["sampling_sent"]
    assert sent["opus"]["sent"] == {} and sent["opus"]["not_sent"] == {"temperature": 0.0}
    assert "Claude 4.7 and later" in sent["opus"]["why"]
    assert sent["o3"]["sent"] == {} and sent["o3"]["not_sent"] == {"temperature": 0.3}
    assert "o3 is an OpenAI reasoning model (behind the prefix of openai/o3)" in sent["o3"]["why"]
    # prov46 #5: a seed sent on Chat Completions is best effort, and the record says so
    assert sent["g4o"]["sent"] == {"temperature": 0.0, "seed": 7} and sent["g4o"]["not_sent"] == {}
    assert "best effort" in sent["g4o"]["why"]


def test_only_openais_own_prefix_reads_as_an_openai_reasoning_model():
    # a Hugging Face id on a server of its own is not OpenAI's o1, whatever its name: its temperature is sent
    out, calls = _ask("someorg/o1-distill-7b", {"temperature": 0.6})
    assert not isinstance(out, Exception) and calls[0]["sampling"] == {"max_tokens": 200, "temperature": 0.6}
