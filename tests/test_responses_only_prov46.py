"""OpenAI models served only on the Responses API (``o3-pro``, ``gpt-5-pro``, ``codex-mini-latest``, ``gpt-5-codex``,
``o3-deep-research``, ``computer-use-preview``, ...) were accepted for ``provider = "openai"``, and every request then
failed: geoagent posts to ``/chat/completions``, which api.openai.com answers HTTP 404 "This model is only supported
in v1/responses and not in v1/chat/completions." (prov46 #1). The loader now refuses them when the calls go to
api.openai.com or a ``model_family`` names one, and the local OpenAI fake answers them as the real API does."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.config import ConfigError, config_from_dict
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

RESPONSES_ONLY = ["o1-pro", "o3-pro", "o3-pro-2025-06-10", "o3-deep-research", "o4-mini-deep-research", "gpt-5-pro",
                  "gpt-5.2-pro", "codex-mini-latest", "gpt-5-codex", "gpt-5.1-codex-max", "gpt-5.1-codex-mini",
                  "computer-use-preview"]
CHAT = ["o3", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1", "gpt-5-chat-latest", "gpt-4.1", "gpt-4o"]


def _load(**model):
    doc = {"campaign": {"name": "resp"}, "budget": {"cap_usd": 1.0},
           "models": [{"name": "m", "provider": "openai", "api_key_env": "OPENAI_API_KEY", "max_output_tokens": 30000,
                       "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 4.0, **model}]}
    return config_from_dict(doc, source="resp.toml")


@pytest.mark.parametrize("model", RESPONSES_ONLY)
@pytest.mark.parametrize("base_url", [None, "https://api.openai.com/v1"])
def test_a_responses_only_model_on_api_openai_com_is_refused_at_load(model, base_url):
    with pytest.raises(ConfigError) as err:
        _load(model=model, **({"base_url": base_url} if base_url else {}))
    text = str(err.value)
    assert f"models[0].model: {model!r} is served only on OpenAI's Responses API" in text, text
    assert "geoagent speaks Chat Completions" in text and "use a chat model" in text


@pytest.mark.parametrize("model", CHAT)
def test_chat_models_still_load(model):
    assert _load(model=model).models[0].model == model


def test_a_declared_family_decides_on_any_host_and_a_bridging_gateway_is_not_refused():
    with pytest.raises(ConfigError) as err:
        _load(model="geo-coder", model_family="gpt-5-codex", base_url="https://res.openai.azure.com/openai/v1")
    assert "models[0].model_family: 'gpt-5-codex' is served only on OpenAI's Responses API" in str(err.value)
    # OpenRouter (and a LiteLLM proxy) bridge Chat Completions to such models: not refused
    assert _load(model="openai/o3-pro", base_url="https://openrouter.ai/api/v1").models[0].model == "openai/o3-pro"


async def _post(app, path, body):
    import aiohttp

    async with serve(app) as url, aiohttp.ClientSession() as s:
        async with s.post(url + path, json=body) as r:
            return r.status, await r.json()


@pytest.mark.parametrize("model", ["o3-pro", "gpt-5-codex", "codex-mini-latest", "gpt-5.2-pro"])
def test_the_fake_answers_a_responses_only_model_as_api_openai_com_does(model):
    app = llm_openai.make_app(require_auth=False)
    body = {"model": model, "max_completion_tokens": 30000, "messages": [{"role": "user", "content": "hi"}]}
    status, out = asyncio.run(_post(app, "/v1/chat/completions", body))
    assert status == 404 and out == {"error": {
        "message": "This model is only supported in v1/responses and not in v1/chat/completions.",
        "type": "invalid_request_error", "param": "model", "code": None}}
    assert [(c["status"], c.get("error")) for c in app["calls"]] == [(404, "responses_only")]
    status, _ = asyncio.run(_post(llm_openai.make_app(require_auth=False), "/v1/chat/completions",
                                  {**body, "model": "o3"}))
    assert status == 200


def test_the_fake_answers_an_azure_deployment_of_one_with_operation_not_supported():
    app = llm_openai.make_app(require_auth=False, deployments={"coder": "gpt-5.1-codex"})
    status, out = asyncio.run(_post(app, "/openai/deployments/coder/chat/completions?api-version=2024-10-21",
                                    {"max_completion_tokens": 30000, "messages": [{"role": "user", "content": "hi"}]}))
    assert status == 400 and out["error"]["code"] == "OperationNotSupported"
    assert "gpt-5.1-codex" in out["error"]["message"]
