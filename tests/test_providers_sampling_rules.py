"""Sampling parameters each provider's current models accept (geoagent.providers.sampling has the sources).

Before: ``[[models]] temperature`` defaults to 0.0 and every client sent it, so an OpenAI reasoning model
(o1, o3, o4-mini, gpt-5*) answered each request HTTP 400 ``unsupported_value`` (a fail-fast 4xx: the whole
model dead-lettered at its first delivery); Claude Opus 4.7 refuses any temperature, and Claude Opus 4.1 /
4.5+ refuse temperature with top_p. The local fakes now enforce those rules, and the request bodies they saw
are asserted from their call logs.
"""

from __future__ import annotations

import asyncio
import warnings

import aiohttp
import pytest

from geoagent.config import ConfigError, config_from_dict, provider_settings
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.sampling import (claude_one_sampler, sent_sampling, claude_rejects_sampling, is_openai_reasoning_id,
                                         openai_reasoning)
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox import llm_anthropic, llm_openai
from geoagent.sandbox.server import serve
from geoagent.scoring.truncation import is_truncated
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 21, seed="test-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)
PROMPT = "Where was this street-level photo taken? Reply in JSON with city and area."


def _request(kind: str, model: str, **params) -> ModelRequest:
    p = {"max_output_tokens": 2000, "temperature": 0.0}
    p.update(params)
    return ModelRequest(provider=kind, model=model, prompt=PROMPT, params=p)


async def _call(module, settings: dict, request: ModelRequest):
    app = module.make_app(seed=1, api_keys=(KEY,))
    async with serve(app) as url, HttpClient(default_policy=FAST) as http:
        base = url + "/v1" if module is llm_openai else url
        prov = make_provider(ProviderSettings(base_url=base, api_key=KEY, **settings), http)
        try:
            out = await prov.generate(request)
        except Exception as exc:  # returned for assertions
            out = exc
    return out, app["calls"]


# -- the fakes answer as the APIs do --------------------------------------------------------------

def test_openai_fake_refuses_temperature_0_for_reasoning_ids_with_documented_error():
    """What main's client did to gpt-5-mini (temperature 0.0 in every body): the documented 400, param named."""
    async def raw(model: str, body_extra: dict):
        app = llm_openai.make_app(api_keys=(KEY,))
        async with serve(app) as url, aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                                    json={"model": model, "messages": [{"role": "user", "content": "hi"}],
                                          **body_extra}) as resp:
                return resp.status, await resp.json()
    status, body = asyncio.run(raw("gpt-5-mini", {"temperature": 0.0, "max_completion_tokens": 2000}))
    assert status == 400
    assert body["error"] == {"message": "Unsupported value: 'temperature' does not support 0.0 with this model. Only "
                                        "the default (1) value is supported.", "type": "invalid_request_error",
                             "param": "temperature", "code": "unsupported_value"}
    for model, extra, param in [("o3", {"top_p": 0.9}, "top_p"), ("o4-mini", {"max_tokens": 100}, "max_tokens"),
                                ("gpt-5", {"presence_penalty": 0.5}, "presence_penalty")]:
        status, body = asyncio.run(raw(model, extra))
        assert status == 400 and body["error"]["code"] == "unsupported_parameter" and body["error"]["param"] == param
    # the default temperature, and any temperature for a model that is not a reasoning model, pass
    assert asyncio.run(raw("o3", {"temperature": 1}))[0] == 200
    assert asyncio.run(raw("gpt-5-chat-latest", {"temperature": 0.0}))[0] == 200
    assert asyncio.run(raw("gpt-4o-mini", {"temperature": 0.0, "top_p": 0.5}))[0] == 200


# -- OpenAI: what our client sends ----------------------------------------------------------------

@pytest.mark.parametrize("model", ["o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5-mini", "gpt-5-nano", "gpt-5.1",
                                   "codex-mini-latest", "ft:o4-mini-2025-04-16:org::abc"])
def test_openai_reasoning_body_on_api_openai_com_has_no_temperature_or_top_p(model):
    prov = make_provider(ProviderSettings(kind="openai", model=model, base_url="https://api.openai.com/v1"))
    _, body, _ = prov.build(_request("openai", model, top_p=0.5))
    assert "temperature" not in body and "top_p" not in body
    assert body["max_completion_tokens"] == 2000 and "max_tokens" not in body
    _, body, _ = prov.build(_request("openai", model, temperature=1))
    # not even the one value it accepts: 1 is its default (same answers), and Azure OpenAI deployments of o1 /
    # o3-mini refuse the parameter at any value (geoagent.providers.sampling.openai_sampling)
    assert "temperature" not in body


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4.1", "gpt-5-chat-latest", "omni-moderation-latest"])
def test_openai_other_models_keep_their_sampling(model):
    prov = make_provider(ProviderSettings(kind="openai", model=model, base_url="https://api.openai.com/v1"))
    _, body, _ = prov.build(_request("openai", model, top_p=0.5, seed=3))
    assert (body["temperature"], body["top_p"], body["seed"]) == (0.0, 0.5, 3)
    # the rule is OpenAI's own: a reasoning id on another server (OpenRouter, vLLM) is sent as configured
    prov = make_provider(ProviderSettings(kind="openai", model="o3", base_url="https://openrouter.ai/api/v1"))
    assert prov.build(_request("openai", "o3"))[1]["temperature"] == 0.0


def _toml_model(**extra) -> dict:
    return {"campaign": {"name": "reasoning"}, "budget": {"cap_usd": 1.0},
            "models": [{"name": "mini", "provider": "openai", "model": "gpt-5-mini", "api_key_env": "OPENAI_API_KEY",
                        "price_input_usd_per_mtok": 0.25, "price_output_usd_per_mtok": 2.0,
                        "max_output_tokens": 30000, **extra}]}


def test_openai_reasoning_campaign_reaches_the_fake_without_temperature():
    """A campaign's default settings for gpt-5-mini (temperature 0.0 unset): the fake sees no temperature, answers 200."""
    cfg = config_from_dict(_toml_model(reasoning_model=True, max_tokens_field="max_completion_tokens"))
    m = cfg.models[0]
    settings = provider_settings(cfg, m.name, require_key=False).public_dict()
    assert settings["reasoning_model"] is True
    req = ModelRequest(provider="openai", model=m.model, prompt=PROMPT, params=m.default_params())
    out, calls = asyncio.run(_call(llm_openai, {"kind": "openai", "model": m.model, "reasoning_model": True,
                                                "max_tokens_field": "max_completion_tokens"}, req))
    assert not isinstance(out, Exception), out
    assert [c["status"] for c in calls] == [200]
    assert calls[0]["sampling"] == {"max_completion_tokens": 30000}


def test_openai_reasoning_explicit_temperature_refused_at_load_naming_the_key():
    with pytest.raises(ConfigError) as err:
        config_from_dict(_toml_model(temperature=0.2))
    assert "models[0].temperature: gpt-5-mini is an OpenAI reasoning model, which accepts only the default temperature 1" \
        in str(err.value)
    with pytest.raises(ConfigError) as err:
        config_from_dict(_toml_model(params={"top_p": 0.9}))
    assert "models[0].params.top_p" in str(err.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert config_from_dict(_toml_model(temperature=1)).models[0].temperature == 1
        # the override: a model that does take a temperature (gpt-5.1 with reasoning effort none)
        assert config_from_dict(_toml_model(temperature=0.2, reasoning_model=False)).models[0].temperature == 0.2


def test_openai_reasoning_small_cap_is_an_empty_truncated_answer():
    """max_completion_tokens counts reasoning tokens: a small cap comes back empty, finish_reason length, billed."""
    req = _request("openai", "o4-mini", max_output_tokens=256)
    out, calls = asyncio.run(_call(llm_openai, {"kind": "openai", "model": "o4-mini", "reasoning_model": True,
                                                "max_tokens_field": "max_completion_tokens"}, req))
    assert not isinstance(out, Exception), out
    assert out.text == "" and out.finish_reason == "length" and is_truncated(out.finish_reason)
    assert out.usage.output_tokens == 256  # the reasoning tokens are billed as output
    assert calls[0]["sampling"] == {"max_completion_tokens": 256}


def test_id_families():
    assert all(is_openai_reasoning_id(m) for m in ("o1", "o1-mini", "o3", "o3-pro", "o4-mini", "gpt-5", "gpt-5.2-pro"))
    assert not any(is_openai_reasoning_id(m) for m in ("gpt-4o", "gpt-5-chat-latest", "omni-moderation", "gpt-4.1-mini"))
    assert openai_reasoning("o3", None) and not openai_reasoning("o3", "http://localhost:11434/v1")
    assert openai_reasoning("my-proxy-model", "http://localhost:8000/v1", True)
    assert claude_rejects_sampling("claude-opus-4-7") and claude_rejects_sampling("claude-sonnet-5")
    assert not claude_rejects_sampling("claude-opus-4-1-20250805") and not claude_rejects_sampling("claude-3-5-sonnet-20241022")
    assert claude_one_sampler("claude-sonnet-4-5-20250929") and claude_one_sampler("claude-opus-4-1")
    assert not claude_one_sampler("claude-sonnet-4-20250514") and not claude_one_sampler("claude-3-7-sonnet-20250219")


# -- Anthropic --------------------------------------------------------------------------------------

def test_anthropic_opus_4_7_gets_no_temperature():
    """Main sent the default temperature 0.0 to claude-opus-4-7: HTTP 400 '`temperature` is deprecated'."""
    out, calls = asyncio.run(_call(llm_anthropic, {"kind": "anthropic", "model": "claude-opus-4-7"},
                                   _request("anthropic", "claude-opus-4-7")))
    assert not isinstance(out, PermanentHTTPError), out.body_excerpt if isinstance(out, PermanentHTTPError) else out
    assert [c["status"] for c in calls] == [200] and calls[0]["sampling"] == {}


def test_anthropic_one_sampler_gets_top_p_alone():
    """params.top_p with the default temperature: main sent both to claude-sonnet-4-5 (400 'cannot both be specified')."""
    out, calls = asyncio.run(_call(llm_anthropic, {"kind": "anthropic", "model": "claude-sonnet-4-5"},
                                   _request("anthropic", "claude-sonnet-4-5", top_p=0.9)))
    assert not isinstance(out, Exception), out
    assert [c["status"] for c in calls] == [200] and calls[0]["sampling"] == {"top_p": 0.9}
    # an older model that takes both still gets both
    out, calls = asyncio.run(_call(llm_anthropic, {"kind": "anthropic", "model": "claude-3-5-haiku-20241022"},
                                   _request("anthropic", "claude-3-5-haiku-20241022", top_p=0.9)))
    assert calls[0]["sampling"] == {"temperature": 0.0, "top_p": 0.9}


def test_anthropic_explicit_rejected_sampling_refused_at_load():
    base = {"name": "c", "provider": "anthropic", "api_key_env": "ANTHROPIC_API_KEY", "price_input_usd_per_mtok": 1.0,
            "price_output_usd_per_mtok": 5.0}
    doc = {"campaign": {"name": "claude"}, "budget": {"cap_usd": 1.0}}
    with pytest.raises(ConfigError) as err:
        config_from_dict({**doc, "models": [{**base, "model": "claude-opus-4-7", "temperature": 0.0}]})
    assert "models[0].temperature: claude-opus-4-7 refuses temperature and top_p at any value" in str(err.value)
    with pytest.raises(ConfigError) as err:
        config_from_dict({**doc, "models": [{**base, "model": "claude-sonnet-4-5", "temperature": 0.2,
                                             "params": {"top_p": 0.9}}]})
    assert "models[0].temperature and models[0].params.top_p: claude-sonnet-4-5 refuses temperature and top_p" \
        in str(err.value)
    config_from_dict({**doc, "models": [{**base, "model": "claude-sonnet-4-5", "params": {"top_p": 0.9}}]})


def test_explicit_reasoning_model_on_another_host_sends_max_completion_tokens():
    """Walkthrough 9b: gpt-5-mini with ``reasoning_model = true`` on a local OpenAI-compatible fake still sent
    ``max_tokens``; the fake (like api.openai.com) answered 400 "Unsupported parameter: 'max_tokens' ... Use
    'max_completion_tokens'", and all 345 requests were dead-lettered. An explicit ``reasoning_model = true``
    now means OpenAI's reasoning rules, field name included; ``max_tokens_field`` still overrides it."""
    req = _request("openai", "gpt-5-mini", max_output_tokens=30000)
    out, calls = asyncio.run(_call(llm_openai, {"kind": "openai", "model": "gpt-5-mini", "reasoning_model": True}, req))
    assert not isinstance(out, Exception), out
    assert [c["status"] for c in calls] == [200]
    assert calls[0]["sampling"] == {"max_completion_tokens": 30000}
    # max_tokens_field set wins; reasoning_model unset or false on another host keeps max_tokens
    local = "http://127.0.0.1:9/v1"
    for settings, field in (({"reasoning_model": True, "max_tokens_field": "max_tokens"}, "max_tokens"),
                            ({"reasoning_model": False}, "max_tokens"), ({}, "max_tokens")):
        prov = make_provider(ProviderSettings(kind="openai", model="gpt-5-mini", base_url=local, **settings))
        body = prov.build(req)[1]
        assert field in body and {"max_tokens", "max_completion_tokens"} - {field} - set(body)


def _load_warnings(doc: dict) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config_from_dict(doc)
    return [str(w.message) for w in caught]


def test_reasoning_looking_id_on_another_host_without_either_key_warns_at_load():
    """The load (so the dry run) says when a reasoning-looking id goes to a host other than api.openai.com with
    neither ``reasoning_model`` nor ``max_tokens_field`` set: its requests carry ``max_tokens`` and a
    temperature, which a server following OpenAI's rules refuses (HTTP 400 for every request)."""
    local = {"base_url": "http://127.0.0.1:8131/v1"}
    lines = [w for w in _load_warnings(_toml_model(**local)) if "reasoning_model" in w]
    assert len(lines) == 1
    assert "models[0]: gpt-5-mini looks like an OpenAI reasoning model" in lines[0]
    assert "127.0.0.1" in lines[0] and "max_tokens" in lines[0] and "reasoning_model = true" in lines[0]
    for quiet in ({**local, "reasoning_model": True}, {**local, "reasoning_model": False},
                  {**local, "max_tokens_field": "max_completion_tokens"}, {}):  # {}: api.openai.com applies the rules
        assert not [w for w in _load_warnings(_toml_model(**quiet)) if "looks like an OpenAI reasoning model" in w]
    assert not [w for w in _load_warnings(_toml_model(model="gpt-4o-mini", **local)) if "looks like" in w]


@pytest.mark.parametrize("base_url, family, sent", [
    ("http://127.0.0.1:8000/v1", None, {"temperature": 1}),           # vLLM/R1: its own default is not 1
    ("https://api.openai.com/v1", None, {}),                          # 1 is OpenAI's default and only value
    ("https://res.openai.azure.com/openai/v1", None, {}),             # Azure refuses the parameter at any value
    ("http://127.0.0.1:8000/v1", "o3-mini", {}),                      # a declared Azure-style deployment
])
def test_reasoning_model_override_on_a_server_of_its_own_keeps_an_explicit_temperature_1(base_url, family, sent):
    """Adversarial review s11: ``reasoning_model = true`` on a self-hosted server sent no temperature at all, so a
    configured 1 became the server's default (DeepSeek-R1: 0.6) under an unchanged request key. The explicit 1 is
    kept there; on OpenAI, on Azure and for a declared family nothing is sent; top_p never; the manifest record
    (sent_sampling) says what the body carries."""
    prov = make_provider(ProviderSettings(kind="openai", model="r1", base_url=base_url, reasoning_model=True,
                                          model_family=family))
    body = prov.build(_request("openai", "r1", temperature=1, top_p=0.5))[1]
    assert {k: body[k] for k in ("temperature", "top_p") if k in body} == sent
    assert sent_sampling("openai", "r1", {"temperature": 1, "top_p": 0.5}, base_url=base_url, reasoning_model=True,
                         family=family) == sent
    # a configured 0.0 (the default: no temperature asked for) is never sent to a reasoning model
    assert "temperature" not in prov.build(_request("openai", "r1", temperature=0.0))[1]
