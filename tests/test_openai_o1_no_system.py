"""``o1-mini`` and ``o1-preview`` take no system (or developer) message: api.openai.com answers HTTP 400
``unsupported_value`` "Unsupported value: 'messages[0].role' does not support 'system' with this model." (reports
and the o1 beta limitations: "user and assistant messages only"; ``o1`` from 2024-12-17 and ``o3-mini`` take one,
as a developer message). ``params.system`` was sent as a system message, so every request of such a model was
dead-lettered at its first delivery. The provider now puts the system text at the top of the user message for
those ids (the request key, which hashes the params, is unchanged), and the loader says so. Against the local
OpenAI-compatible fake, which refuses a system message for those ids as the real API does."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from geoagent.config import ConfigWarning, config_from_dict
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.base import request_key
from geoagent.providers.sampling import openai_rejects_system
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)
SYSTEM = "You are a careful geolocation assistant."
PROMPT = "Where was this street-level photo taken? Reply with the city."


async def _raw(app, body):
    import aiohttp

    async with serve(app) as url, aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/chat/completions", json=body) as r:
            return r.status, await r.json()


@pytest.mark.parametrize("model", ["o1-mini", "o1-preview", "o1-mini-2024-09-12"])
def test_the_fake_refuses_a_system_message_for_the_early_o1_models(model):
    body = {"model": model, "max_completion_tokens": 4000,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]}
    status, err = asyncio.run(_raw(llm_openai.make_app(require_auth=False), body))
    assert status == 400 and err["error"] == {
        "message": "Unsupported value: 'messages[0].role' does not support 'system' with this model.",
        "type": "invalid_request_error", "param": "messages[0].role", "code": "unsupported_value"}
    dev = {**body, "messages": [{"role": "developer", "content": SYSTEM}, {"role": "user", "content": PROMPT}]}
    status, err = asyncio.run(_raw(llm_openai.make_app(require_auth=False), dev))
    assert status == 400 and err["error"]["param"] == "messages[0].role" and "'developer'" in err["error"]["message"]
    # o1 (2024-12-17 and later) and o3-mini take it
    for ok in ("o1", "o3-mini"):
        status, _ = asyncio.run(_raw(llm_openai.make_app(require_auth=False), {**body, "model": ok}))
        assert status == 200, ok


def _ask(model: str, params: dict):
    app = llm_openai.make_app(require_auth=False)

    async def go():
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind="openai", model=model, base_url=url + "/v1",
                                                  reasoning_model=True), http)
            req = ModelRequest(provider="openai", model=model, prompt=PROMPT, params=params)
            _, body, _ = prov.build(req)
            try:
                return await prov.generate(req), body, req.key()
            except Exception as exc:  # noqa: BLE001 - returned for the assertions
                return exc, body, req.key()

    out, body, key = asyncio.run(go())
    return out, body, key, app


def test_the_system_text_goes_into_the_user_message_for_o1_mini_and_the_key_is_unchanged():
    params = {"max_output_tokens": 4000, "temperature": 0.0, "system": SYSTEM}
    out, body, key, app = _ask("o1-mini", params)
    assert not isinstance(out, Exception), out
    assert body["messages"] == [{"role": "user", "content": f"{SYSTEM}\n\n{PROMPT}"}]
    assert [c["status"] for c in app["calls"]] == [200]
    assert key == request_key("openai", "o1-mini", PROMPT, None, params)  # the params as configured, system included
    # o1 and o3-mini keep the system message (they take it)
    out, body, _, _ = _ask("o3-mini", params)
    assert not isinstance(out, Exception) and body["messages"][0] == {"role": "system", "content": SYSTEM}


def test_ids_and_the_load_warning():
    assert all(openai_rejects_system(m) for m in ("o1-mini", "o1-preview", "o1-mini-2024-09-12", "O1-Preview-2024-09-12"))
    assert not any(openai_rejects_system(m) for m in ("o1", "o1-2024-12-17", "o3-mini", "gpt-4o-mini", "o1-pro"))
    d = {"campaign": {"name": "o1", "kind": "generic"}, "budget": {"cap_usd": 1.0},
         "models": [{"name": "a", "provider": "openai", "model": "o1-mini", "price_input_usd_per_mtok": 1.1,
                     "price_output_usd_per_mtok": 4.4, "max_output_tokens": 30000, "params": {"system": SYSTEM}},
                    {"name": "b", "provider": "openai", "model": "o1", "price_input_usd_per_mtok": 15.0,
                     "price_output_usd_per_mtok": 60.0, "max_output_tokens": 30000, "params": {"system": SYSTEM}}]}
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        config_from_dict(d)
    lines = [str(w.message) for w in got if issubclass(w.category, ConfigWarning) and "system" in str(w.message)]
    assert len(lines) == 1 and "models[0].params.system: o1-mini takes no system or developer message" in lines[0], lines
