"""OpenAI-compatible, Anthropic and Gemini providers against the local fake servers speaking each API.

No function-level mocks: every call goes through the real HttpClient to an aiohttp server on 127.0.0.1.
Expected usage is recomputed by hand from the documented simulation model (ceil(chars / 4) + 765 per
image); the bytes the server decoded from the documented image field are compared by SHA-256.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import math

import orjson
import pytest
from aiohttp import web

from geoagent.providers import ContentBlocked, ModelRequest, ProviderSettings, make_provider
from geoagent.providers.errors import MalformedResponse
from geoagent.providers.simulated import SimulatedProvider
from geoagent.runtime.http import HostPolicy, HttpClient, OutcomeUnknown, PermanentHTTPError, RetriesExhausted
from geoagent.sandbox import llm_anthropic, llm_gemini, llm_openai
from geoagent.sandbox.faults import FAULTS_KEY, FaultConfig
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 21, seed="test-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=16, max_attempts=6, backoff_base_s=0.005, backoff_max_s=0.02, timeout_s=5.0)
MODULES = {"openai": llm_openai, "anthropic": llm_anthropic, "gemini": llm_gemini}
FINISH_STOP = {"openai": "stop", "anthropic": "end_turn", "gemini": "STOP"}
FINISH_CUT = {"openai": "length", "anthropic": "max_tokens", "gemini": "MAX_TOKENS"}
PROMPT = "Where was this street-level photo taken? Reply in JSON with city and area."
SYSTEM = "You are a careful geolocation assistant."


@pytest.fixture(scope="module")
def jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (120, 30, 200)).save(buf, format="JPEG")
    return buf.getvalue()


def _base(kind: str, url: str) -> str:
    return url + "/v1" if kind == "openai" else url


def _request(kind: str, image: bytes | None, **params) -> ModelRequest:
    p = {"max_output_tokens": 200, "temperature": 0.2, "system": SYSTEM}
    p.update(params)
    return ModelRequest(
        provider=kind, model="test-model", prompt=PROMPT, image_id="1036250735319845" if image else None, image=image, params=p
    )


async def _call(kind: str, request: ModelRequest, *, api_key: str | None = KEY, faults=None, policy=FAST, seed=5, app_keys=(KEY,), **skw):
    """Serve the fake for ``kind``, call it once through a provider; return (outcome, app)."""
    app = MODULES[kind].make_app(faults=faults, seed=seed, api_keys=app_keys)
    async with serve(app) as url, HttpClient(default_policy=policy) as http:
        prov = make_provider(ProviderSettings(kind=kind, model="test-model", base_url=_base(kind, url), api_key=api_key, **skw), http)
        try:
            out = await prov.generate(request)
        except Exception as exc:  # returned for assertions
            out = exc
    return out, app


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("with_image", [True, False])
def test_generate_text_usage_finish_image(kind, with_image, jpeg):
    image = jpeg if with_image else None
    req = _request(kind, image)
    out, app = asyncio.run(_call(kind, req))
    assert not isinstance(out, Exception), out
    # usage by hand: ceil((len(system) + len(prompt)) / 4) + 765 per image; output ceil(len(text) / 4)
    exp_in = math.ceil((len(SYSTEM) + len(PROMPT)) / 4) + (765 if with_image else 0)
    assert out.usage.input_tokens == exp_in
    assert out.usage.output_tokens == max(1, math.ceil(len(out.text) / 4))
    assert out.finish_reason == FINISH_STOP[kind]
    assert out.provider_model == "test-model"
    assert out.latency_s > 0
    # same answer as the offline simulated provider for the same request key and seed
    sim = asyncio.run(SimulatedProvider(ProviderSettings(kind="simulated", model="test-model", seed=5)).generate(req))
    assert out.text == sim.text and out.usage == sim.usage
    # the server saw exactly one call, keyed by the request key, and billed what it returned
    calls = app["calls"]
    assert len(calls) == 1
    c = calls[0]
    assert c["status"] == 200 and c["key"] == req.key()
    assert (c["input_tokens"], c["output_tokens"]) == (out.usage.input_tokens, out.usage.output_tokens)
    # the image travelled in the documented field: the server decoded exactly our bytes
    assert c["image_sha256"] == (hashlib.sha256(jpeg).hexdigest() if with_image else None)
    assert c["image_id"] == ("1036250735319845" if with_image else None)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_output_cap_truncates(kind):
    req = _request(kind, None, max_output_tokens=3)
    out, _ = asyncio.run(_call(kind, req))
    assert out.usage.output_tokens == 3
    assert len(out.text) == 12  # 3 tokens x 4 characters
    assert out.finish_reason == FINISH_CUT[kind]


def test_openai_max_completion_tokens_field_accepted():
    req = _request("openai", None, max_output_tokens=2)
    out, _ = asyncio.run(_call("openai", req, max_tokens_field="max_completion_tokens"))
    assert out.usage.output_tokens == 2 and out.finish_reason == "length"


def test_openai_default_cap_field_by_host():
    prov = make_provider(ProviderSettings(kind="openai", model="m", base_url="https://api.openai.com/v1"))
    assert prov.max_tokens_field == "max_completion_tokens"
    for url in ("http://localhost:11434/v1", "http://127.0.0.1:8000/v1", "https://openrouter.ai/api/v1"):
        assert make_provider(ProviderSettings(kind="openai", model="m", base_url=url)).max_tokens_field == "max_tokens"


# -- authentication ------------------------------------------------------------------------------
MISSING_KEY_STATUS = {"openai": 401, "anthropic": 401, "gemini": 403}  # Gemini: PERMISSION_DENIED
BAD_KEY_STATUS = {"openai": 401, "anthropic": 401, "gemini": 400}  # Gemini: INVALID_ARGUMENT / API_KEY_INVALID
AUTH_MARKER = {"openai": "Authorization", "anthropic": "x-api-key", "gemini": "unregistered callers"}


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_missing_key_is_permanent(kind):
    out, app = asyncio.run(_call(kind, _request(kind, None), api_key=None))
    assert isinstance(out, PermanentHTTPError)
    assert out.status == MISSING_KEY_STATUS[kind]
    assert AUTH_MARKER[kind] in out.body_excerpt
    assert len(app["calls"]) == 1  # not retried
    assert app["calls"][0]["output_tokens"] == 0


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_wrong_key_is_permanent_and_never_shown(kind):
    wrong = made_up_key("sk-", 26, seed="wrong-key-ABCDEFGH12345678")
    out, app = asyncio.run(_call(kind, _request(kind, None), api_key=wrong))
    assert isinstance(out, PermanentHTTPError)
    assert out.status == BAD_KEY_STATUS[kind]
    text = str(out) + repr(out) + out.body_excerpt
    assert wrong not in text
    if kind == "anthropic":
        assert '"authentication_error"' in out.body_excerpt
    if kind == "gemini":
        assert "API_KEY_INVALID" in out.body_excerpt
    if kind == "openai":
        assert "invalid_api_key" in out.body_excerpt
    assert len(app["calls"]) == 1


# -- request validation (400) -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "params", "marker"),
    [
        # json_object mode needs the word JSON in the messages (prompt below has none)
        ("openai", {"json_mode": True}, "json"),
        ("anthropic", {"temperature": 1.5}, "invalid_request_error"),  # Messages API: temperature <= 1
        ("gemini", {"temperature": 5.0}, "INVALID_ARGUMENT"),
    ],
)
def test_bad_request_is_permanent_400(kind, params, marker):
    req = ModelRequest(provider=kind, model="test-model", prompt="Describe the scene.", params={"max_output_tokens": 50, **params})
    out, app = asyncio.run(_call(kind, req))
    assert isinstance(out, PermanentHTTPError) and out.status == 400
    assert marker in out.body_excerpt
    assert [c["status"] for c in app["calls"]] == [400]


async def _raw_post(app: web.Application, path: str, body: dict, headers: dict) -> tuple[int, dict]:
    import aiohttp

    async with serve(app) as url, aiohttp.ClientSession() as s:
        async with s.post(url + path, json=body, headers=headers) as r:
            return r.status, await r.json()


def test_anthropic_server_requires_max_tokens_and_version():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, err = asyncio.run(
        _raw_post(llm_anthropic.make_app(), "/v1/messages", body, {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    )
    assert status == 400
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in err["error"]["message"] and err["request_id"].startswith("req_")
    status, err = asyncio.run(_raw_post(llm_anthropic.make_app(), "/v1/messages", {**body, "max_tokens": 5}, {"x-api-key": KEY}))
    assert status == 400 and "anthropic-version" in err["error"]["message"]
    sys_role = {"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]}
    status, err = asyncio.run(
        _raw_post(llm_anthropic.make_app(), "/v1/messages", sys_role, {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    )
    assert status == 400 and "system" in err["error"]["message"]


def test_anthropic_server_rejects_data_url_prefix_in_base64():
    bad = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "data:image/jpeg;base64,AAAA"}},
                    {"type": "text", "text": "hi"},
                ],
            }
        ],
    }
    status, err = asyncio.run(
        _raw_post(llm_anthropic.make_app(), "/v1/messages", bad, {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    )
    assert status == 400 and "data:" in err["error"]["message"]


def test_gemini_server_accepts_snake_case_and_rejects_unknown_names():
    snake = {
        "contents": [{"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}}, {"text": "hi"}]}],
        "generation_config": {"max_output_tokens": 7},
    }
    hdr = {"x-goog-api-key": KEY}
    status, ok = asyncio.run(_raw_post(llm_gemini.make_app(), "/v1beta/models/g-1:generateContent", snake, hdr))
    assert status == 200 and ok["candidates"][0]["content"]["role"] == "model"
    assert ok["usageMetadata"]["promptTokenCount"] == math.ceil(2 / 4) + 765
    typo = {"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxTokens": 7}}
    status, err = asyncio.run(_raw_post(llm_gemini.make_app(), "/v1beta/models/g-1:generateContent", typo, hdr))
    assert status == 400 and err["error"]["status"] == "INVALID_ARGUMENT" and "maxTokens" in err["error"]["message"]
    status, err = asyncio.run(_raw_post(llm_gemini.make_app(), "/v1beta/models/g-1:generateContent", {"contents": []}, hdr))
    assert status == 400 and "contents" in err["error"]["message"]


def test_openai_server_rejects_bad_data_url():
    bad = {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:text/plain;base64,AAAA"}}]}]}
    status, err = asyncio.run(_raw_post(llm_openai.make_app(), "/v1/chat/completions", bad, {"Authorization": f"Bearer {KEY}"}))
    assert status == 400
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"].endswith("image_url.url")


# -- transport faults through the HTTP layer --------------------------------------------------------
@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_429_and_500_are_retried_to_success(kind):
    async def run() -> tuple[list, web.Application]:
        cfg = FaultConfig(rate=0.5, kinds=("429", "500", "503"), seed=11, retry_after_s=0)
        app = MODULES[kind].make_app(faults=cfg, seed=1, api_keys=(KEY,))
        outs = []
        async with serve(app) as url, HttpClient(default_policy=HostPolicy(**{**_fast_kw(), "max_attempts": 12})) as http:
            prov = make_provider(ProviderSettings(kind=kind, model="test-model", base_url=_base(kind, url), api_key=KEY), http)
            for i in range(12):
                req = ModelRequest(provider=kind, model="test-model", prompt=f"question {i}", params={"max_output_tokens": 40})
                outs.append((req, await prov.generate(req)))
        return outs, app

    outs, app = asyncio.run(run())
    injected = app[FAULTS_KEY].injected
    assert sum(injected.values()) > 0  # faults really happened
    # 429/5xx never reach the handler: exactly one billed call per request, with the usage returned; the
    # faulted tries are logged too (status None: not handled), one per injected fault, with what was sent
    billed = {c["key"]: c for c in app["calls"] if c["status"] == 200}
    assert len(billed) == 12 and len(app["calls"]) == 12 + sum(injected.values())
    faulted = [c for c in app["calls"] if c["status"] is None]
    sent_for = {"429": 429, "500": 500, "503": 529 if kind == "anthropic" else 503}
    assert sorted(c["fault"] for c in faulted) == sorted(k for k, n in injected.items() for _ in range(n))
    assert all(c["status_sent"] == sent_for[c["fault"]] and c["output_tokens"] == 0 for c in faulted)
    for req, out in outs:
        c = billed[req.key()]
        assert (c["input_tokens"], c["output_tokens"]) == (out.usage.input_tokens, out.usage.output_tokens)


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_persistent_429_exhausts_retries(kind):
    cfg = FaultConfig(rate=1.0, kinds=("429",), retry_after_s=0)
    out, app = asyncio.run(_call(kind, _request(kind, None), faults=cfg, policy=HostPolicy(**{**_fast_kw(), "max_attempts": 3})))
    assert isinstance(out, RetriesExhausted) and out.attempts == 3 and "429" in out.last
    # the handler never ran: three logged tries, none billed
    assert [(c["status"], c["fault"], c["status_sent"]) for c in app["calls"]] == [(None, "429", 429)] * 3


@pytest.mark.parametrize(
    ("kind", "fault", "want"),
    [
        ("openai", "429", ["http 429", '"rate_limit_exceeded"']),
        ("anthropic", "429", ["http 429", '"rate_limit_error"']),
        ("anthropic", "503", ["http 529", '"overloaded_error"']),  # Anthropic's overload status
        ("gemini", "429", ["http 429", '"RESOURCE_EXHAUSTED"', "google.rpc.QuotaFailure"]),
        ("gemini", "500", ["http 500", '"INTERNAL"']),
    ],
)
def test_injected_faults_speak_each_apis_error_shape(kind, fault, want):
    cfg = FaultConfig(rate=1.0, kinds=(fault,), retry_after_s=0)
    out, _ = asyncio.run(_call(kind, _request(kind, None), faults=cfg, policy=HostPolicy(**{**_fast_kw(), "max_attempts": 2})))
    assert isinstance(out, RetriesExhausted)
    last = out.last.replace(" ", "")
    for w in want:
        assert w.replace(" ", "") in last, (w, out.last)


def test_gemini_injected_429_carries_retry_info_not_a_header():
    """Gemini names the wait only in the body's RetryInfo (dcdpr/jp#1061): the fake sends no Retry-After header,
    so a client that reads headers alone is caught here (break34 provider #7)."""
    app = llm_gemini.make_app(faults=FaultConfig(rate=1.0, kinds=("429",), retry_after_s=7))

    async def run():
        import aiohttp

        async with serve(app) as url, aiohttp.ClientSession() as s:
            body = {"contents": [{"parts": [{"text": "hi"}]}]}
            async with s.post(url + "/v1beta/models/g:generateContent", json=body, headers={"x-goog-api-key": KEY}) as r:
                return r.status, r.headers.get("Retry-After"), await r.json()

    status, retry_after, err = asyncio.run(run())
    assert status == 429 and retry_after is None
    types = [d["@type"] for d in err["error"]["details"]]
    assert "type.googleapis.com/google.rpc.RetryInfo" in types
    assert err["error"]["details"][types.index("type.googleapis.com/google.rpc.RetryInfo")]["retryDelay"] == "7s"


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_malformed_200_is_outcome_unknown_not_retried_inside_the_request(kind):
    """A paid endpoint's unusable 2xx may have been billed: re-sending it under the same reservation could
    pay past the cap, so the HTTP layer reports it at once (the model caller counts it and retries the
    task with a new reservation)."""
    cfg = FaultConfig(rate=1.0, kinds=("malformed",))
    out, app = asyncio.run(_call(kind, _request(kind, None), faults=cfg, policy=HostPolicy(**{**_fast_kw(), "max_attempts": 3})))
    assert isinstance(out, OutcomeUnknown) and "unusable 2xx body" in str(out)
    assert getattr(out, "possibly_billed", None) == 1
    assert [c["status"] for c in app["calls"]] == [200]  # the truncated answer was billed, and sent once


def test_malformed_200_from_a_free_endpoint_is_retried_then_reported():
    """Where nothing is billed (``retry_unknown_outcome=True``), an unusable body is simply retried."""

    async def go():
        app = llm_openai.make_app(faults=FaultConfig(rate=1.0, kinds=("malformed",)), require_auth=False)
        async with serve(app) as base, HttpClient() as http:
            pol = HostPolicy(**{**_fast_kw(), "max_attempts": 3, "retry_unknown_outcome": True})
            try:
                await http.request("POST", base + "/v1/chat/completions", json={"model": "m", "messages": [
                    {"role": "user", "content": "hi"}]}, policy=pol, validate=lambda r: orjson.loads(r.body)["usage"])
            except RetriesExhausted as exc:
                return exc, app
        return None, app

    out, app = asyncio.run(go())
    assert isinstance(out, RetriesExhausted) and "invalid body" in out.last and out.possibly_billed == 3
    assert len(app["calls"]) == 3


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_reset_after_send_is_outcome_unknown_not_retried(kind):
    cfg = FaultConfig(rate=1.0, kinds=("reset",))
    # the host policy would retry unknown outcomes; a paid provider must override that
    pol = HostPolicy(**{**_fast_kw(), "retry_unknown_outcome": True})
    out, app = asyncio.run(_call(kind, _request(kind, None), faults=cfg, policy=pol))
    assert isinstance(out, OutcomeUnknown)
    assert len(app["calls"]) == 1 and app["calls"][0]["status"] == 200  # processed (billed) once, never re-sent


def _fast_kw() -> dict:
    return {f: getattr(FAST, f) for f in FAST.__slots__}


# -- bodies that are not answers ---------------------------------------------------------------------
def test_gemini_blocked_prompt_is_content_blocked_with_usage():
    req = ModelRequest(provider="gemini", model="test-model", prompt="please [[sandbox:block]] this", params={"max_output_tokens": 20})
    out, app = asyncio.run(_call("gemini", req))
    assert isinstance(out, ContentBlocked) and out.retryable is False and "OTHER" in str(out)
    assert out.usage is not None and out.usage.input_tokens == math.ceil(len(req.prompt) / 4)
    assert len(app["calls"]) == 1  # a definite answer: not retried


async def _static_app_call(kind: str, payload: dict, status: int = 200, attempts: int = 2):
    """Serve a fixed JSON answer at the API's path and call it through the provider."""
    hits = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(dict(request.headers))
        return web.json_response(payload, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/messages", handler)
    app.router.add_post("/v1beta/models/{name}", handler)
    async with serve(app) as url, HttpClient(default_policy=HostPolicy(**{**_fast_kw(), "max_attempts": attempts})) as http:
        prov = make_provider(ProviderSettings(kind=kind, model="test-model", base_url=_base(kind, url), api_key=KEY), http)
        try:
            return await prov.generate(_request(kind, None)), hits
        except Exception as exc:
            return exc, hits


def test_openrouter_error_inside_200_is_not_an_answer():
    out, hits = asyncio.run(_static_app_call("openai", {"error": {"code": 502, "message": "upstream died"}}))
    assert isinstance(out, OutcomeUnknown) and "upstream died" in str(out) and len(hits) == 1


def test_openai_refusal_text_is_the_answer():
    payload = {
        "model": "gpt-x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "refusal": "I can't help."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
    }
    out, _ = asyncio.run(_static_app_call("openai", payload))
    assert out.text == "I can't help." and out.usage.output_tokens == 4


def test_anthropic_joins_text_blocks_and_counts_cache_tokens():
    payload = {
        "type": "message",
        "model": "claude-x",
        "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "{\"a\":"}, {"type": "text", "text": "1}"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 100, "output_tokens": 9, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 0},
    }
    out, hits = asyncio.run(_static_app_call("anthropic", payload))
    assert out.text == '{"a":1}' and out.usage.input_tokens == 120 and out.usage.output_tokens == 9
    h = {k.lower(): v for k, v in hits[0].items()}
    assert h["x-api-key"] == KEY and h["anthropic-version"] == "2023-06-01" and len(h["x-request-key"]) == 64


def test_gemini_thinking_tokens_count_as_output_and_max_tokens_without_parts_is_empty():
    payload = {
        "candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS", "index": 0}],
        "usageMetadata": {"promptTokenCount": 50, "totalTokenCount": 250, "thoughtsTokenCount": 200},
        "modelVersion": "gemini-x",
    }
    out, hits = asyncio.run(_static_app_call("gemini", payload))
    assert out.text == "" and out.finish_reason == "MAX_TOKENS" and out.usage.output_tokens == 200
    h = {k.lower(): v for k, v in hits[0].items()}
    assert h["x-goog-api-key"] == KEY


def test_gemini_safety_candidate_is_blocked_and_answer_without_usage_is_kept():
    payload = {"candidates": [{"finishReason": "SAFETY", "index": 0}], "usageMetadata": {"promptTokenCount": 5}}
    out, hits = asyncio.run(_static_app_call("gemini", payload))
    assert isinstance(out, ContentBlocked) and len(hits) == 1
    # s13-usage2: an answer with text and no usageMetadata is an answer whose usage was not reported (was
    # OutcomeUnknown: retried, paid again, dead-lettered)
    out, hits = asyncio.run(_static_app_call("gemini", {"candidates": [{"content": {"parts": [{"text": "x"}]}}]}))
    assert not isinstance(out, Exception) and out.text == "x" and out.usage.reported is False and len(hits) == 1


def test_provider_parse_malformed_directly_raises_provider_error():
    prov = make_provider(ProviderSettings(kind="openai", model="m", base_url="http://127.0.0.1:9"))
    with pytest.raises(MalformedResponse):
        prov.decode(_request("openai", None), b'{"choices": [], "usage": {}}')
    with pytest.raises(MalformedResponse):
        prov.decode(_request("openai", None), b'{"choices": [{"message": {"content": 5}}], "usage": {}}')
    # s13-usage: readable text with an impossible count is an answer whose usage was not reported
    resp = prov.decode(_request("openai", None), b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -1}}')
    assert resp.text == "x" and resp.usage.reported is False


# -- secrets -------------------------------------------------------------------------------------------
def test_key_never_in_repr_or_public_dict():
    s = ProviderSettings(kind="anthropic", model="claude-x", api_key=KEY, headers={"X-Title": "geoagent"})
    assert KEY not in repr(s) and KEY not in str(s.public_dict())
    assert s.public_dict()["api_key_set"] is True
    prov = make_provider(s)
    assert KEY not in repr(prov)


def test_key_echoed_by_a_server_is_scrubbed_from_errors():
    async def run():
        async def handler(request: web.Request) -> web.Response:
            return web.json_response({"error": {"message": f"bad header {request.headers.get('Authorization')}"}}, status=400)

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind="openai", model="m", base_url=url + "/v1", api_key=KEY), http)
            with pytest.raises(PermanentHTTPError) as ei:
                await prov.generate(_request("openai", None))
            return ei.value

    err = asyncio.run(run())
    assert err.status == 400
    assert KEY not in str(err) and KEY not in err.body_excerpt and KEY not in repr(err.args)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_no_auth_server_accepts_keyless_calls_but_still_checks_sent_keys(kind):
    async def run():
        app = MODULES[kind].make_app(api_keys=(KEY,), require_auth=False, calls_max=2)
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            keyless = make_provider(ProviderSettings(kind=kind, model="m", base_url=_base(kind, url)), http)
            outs = [await keyless.generate(ModelRequest(provider=kind, model="m", prompt=f"q{i}")) for i in range(3)]
            wrong = make_provider(ProviderSettings(kind=kind, model="m", base_url=_base(kind, url), api_key="sk-wrong-000000"), http)
            with pytest.raises(PermanentHTTPError):
                await wrong.generate(ModelRequest(provider=kind, model="m", prompt="q"))
        return outs, app

    outs, app = asyncio.run(run())
    assert all(o.text for o in outs)
    assert [c["status"] for c in app["calls"]] == [200, BAD_KEY_STATUS[kind]]  # bounded to the newest 2


def test_provider_without_shared_client_opens_and_closes_its_own():
    async def run():
        app = llm_anthropic.make_app(api_keys=(KEY,))
        async with serve(app) as url:
            prov = make_provider(ProviderSettings(kind="anthropic", model="m", base_url=url, api_key=KEY, policy=FAST))
            out = await prov.generate(ModelRequest(provider="anthropic", model="m", prompt="hello"))
            own = prov._own_http
            await prov.aclose()
            return out, own, prov._own_http

    out, own, after = asyncio.run(run())
    assert out.text and own is not None and after is None
