"""Adversarial review (session 3) of the HTTP model providers' answer handling, against local servers.

Each case serves one documented-shape body from an aiohttp server on 127.0.0.1 (no function-level mocks)
and calls it through the real provider and HttpClient. Token counts are computed by hand from the body.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from geoagent.providers import ContentBlocked, ModelRequest, ProviderSettings, make_provider
from geoagent.providers.errors import ReplayRecordedError
from geoagent.runtime.http import HostPolicy, HttpClient, OutcomeUnknown
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 23, seed="review-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)


def _base(kind: str, url: str) -> str:
    return url + "/v1" if kind == "openai" else url


async def _call_once(kind: str, respond):
    """Serve ``await respond(request)`` at the API's paths (OpenAI, Anthropic, Gemini); call it once through
    the provider of ``kind``; return (outcome or exception, the handler's log)."""
    hits: list = []

    async def handler(request: web.Request) -> web.Response:
        return await respond(request, hits)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/messages", handler)
    app.router.add_post("/v1beta/models/{name}", handler)
    async with serve(app) as url, HttpClient(default_policy=FAST) as http:
        prov = make_provider(ProviderSettings(kind=kind, model="m", base_url=_base(kind, url), api_key=KEY), http)
        req = ModelRequest(provider=kind, model="m", prompt="Where is this?", params={"max_output_tokens": 64})
        try:
            return await prov.generate(req), hits
        except Exception as exc:  # returned for assertions
            return exc, hits


async def _serve_once(kind: str, payload: dict, status: int = 200):
    """Serve ``payload`` at the API's path; call it once through the provider; return (outcome, request bodies)."""

    async def respond(request: web.Request, hits: list) -> web.Response:
        hits.append(await request.json())
        return web.json_response(payload, status=status)

    return await _call_once(kind, respond)


def _openai(content, usage, finish="stop", **msg):
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, **msg}, "finish_reason": finish}],
            "usage": usage}


def _gemini(parts, usage, finish="STOP"):
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
            "usageMetadata": usage, "modelVersion": "m"}


# -- usage that lacks the output count must never settle as 0 output tokens --------------------------------
def test_openai_usage_without_completion_tokens_uses_total_minus_prompt():
    out, hits = asyncio.run(_serve_once("openai", _openai('{"city": "Porto"}', {"prompt_tokens": 12, "total_tokens": 19})))
    assert not isinstance(out, Exception), out
    assert (out.usage.input_tokens, out.usage.output_tokens) == (12, 7)  # 19 - 12


def test_openai_usage_without_any_output_count_is_not_settled_as_zero():
    # before: completion_tokens defaulted to 0, so a paid answer settled at the input price only (under-count).
    # s13-usage: it is an answer whose usage was not reported (the model caller books it at its worst case)
    out, hits = asyncio.run(_serve_once("openai", _openai('{"city": "Porto"}', {"prompt_tokens": 12})))
    assert not isinstance(out, Exception) and len(hits) == 1, out
    assert out.text == '{"city": "Porto"}' and out.usage.reported is False


def test_gemini_usage_without_candidates_count_is_not_counted_from_the_total():
    # s14-usage: before, output = total - prompt (15 here); a body without candidatesTokenCount says 0 candidate
    # tokens (the JSON mapping omits zeros) beside text, and its total may be a stream chunk's running total
    body = _gemini([{"text": '{"city": "Porto"}'}], {"promptTokenCount": 30, "totalTokenCount": 45, "thoughtsTokenCount": 5})
    out, hits = asyncio.run(_serve_once("gemini", body))
    assert not isinstance(out, Exception) and len(hits) == 1, out
    assert out.text == '{"city": "Porto"}' and out.usage.reported is False


def test_gemini_empty_answer_without_candidates_count_is_counted_from_the_total():
    body = {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}],
            "usageMetadata": {"promptTokenCount": 30, "totalTokenCount": 45, "thoughtsTokenCount": 15}}
    out, _ = asyncio.run(_serve_once("gemini", body))
    assert (out.usage.input_tokens, out.usage.output_tokens, out.usage.reported) == (30, 15, True)


@pytest.mark.parametrize("api,body", [
    ("openai", _openai('{"city": "Porto"}', {"prompt_tokens": 12, "completion_tokens": 0, "total_tokens": 12})),
    ("openai", _openai('{"city": "Porto"}', {"prompt_tokens": 12, "total_tokens": 12})),
    ("gemini", _gemini([{"text": '{"city": "Porto"}'}], {"promptTokenCount": 30, "candidatesTokenCount": 0,
                                                         "thoughtsTokenCount": 7, "totalTokenCount": 37}))],
    ids=["openai-zero", "openai-total-equals-prompt", "gemini-zero-candidates"])
def test_zero_output_for_a_non_empty_answer_is_not_reported(api, body):
    # s14-usage: before, accepted as free output (settled at the input price only)
    out, hits = asyncio.run(_serve_once(api, body))
    assert not isinstance(out, Exception) and len(hits) == 1, out
    assert out.usage.reported is False


def test_gemini_answer_without_any_output_count_is_not_settled_as_zero():
    # before s13-usage2: OutcomeUnknown (unusable body), asked again up to max_attempts times and dead-lettered;
    # now an answer whose usage was not reported (the model caller books it at its worst case, never as 0 output)
    out, hits = asyncio.run(_serve_once("gemini", _gemini([{"text": '{"city": "Porto"}'}], {"promptTokenCount": 30})))
    assert not isinstance(out, Exception) and len(hits) == 1, out
    assert out.text == '{"city": "Porto"}' and out.usage.reported is False


def _anthropic(text, usage, **extra):
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            **({"usage": usage} if usage != "omit" else {}), **extra}


# s13-usage2: an answer whose usage is missing or impossible is an answer (Usage.reported False), sent once
@pytest.mark.parametrize("usage", ["omit", None, "n/a", {}, {"input_tokens": 12},
                                   {"output_tokens": 3}, {"input_tokens": -1, "output_tokens": 3},
                                   {"input_tokens": 12, "output_tokens": 2.5},
                                   {"input_tokens": 12, "output_tokens": 10**12},
                                   {"input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": -5}],
                         ids=["omitted", "null", "string", "empty", "no-output", "no-input", "negative",
                              "fractional", "huge", "negative-cache"])
def test_anthropic_answer_without_usable_usage_is_an_answer_not_reported(usage):
    # before: MalformedResponse -> OutcomeUnknown: retried (paid again) up to max_attempts, then a dead letter
    out, hits = asyncio.run(_serve_once("anthropic", _anthropic('{"city": "Porto"}', usage)))
    assert not isinstance(out, Exception) and len(hits) == 1, out
    assert out.text == '{"city": "Porto"}' and out.usage.reported is False
    assert (out.usage.input_tokens, out.usage.output_tokens) == (0, 0)  # not the provider's: booked at worst case


def test_anthropic_usage_reported_is_unchanged():
    usage = {"input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": None, "cache_read_input_tokens": 4}
    out, _ = asyncio.run(_serve_once("anthropic", _anthropic("ok", usage)))
    assert out.usage.reported is True and (out.usage.input_tokens, out.usage.output_tokens) == (16, 3)


@pytest.mark.parametrize("meta", ["omit", None, [], {}, {"candidatesTokenCount": 4, "totalTokenCount": 9},
                                  {"promptTokenCount": 30, "candidatesTokenCount": -4},
                                  {"promptTokenCount": "30", "candidatesTokenCount": "\u00b2"},
                                  {"promptTokenCount": 30, "totalTokenCount": 20},
                                  {"promptTokenCount": 30, "candidatesTokenCount": 4, "thoughtsTokenCount": 1.5}],
                         ids=["omitted", "null", "list", "empty", "no-prompt", "negative", "non-ascii-digit",
                              "total-below-prompt", "fractional-thoughts"])
def test_gemini_answer_without_usable_usage_is_an_answer_not_reported(meta):
    body = _gemini([{"text": '{"city": "Porto"}'}], None)
    if meta == "omit":
        del body["usageMetadata"]
    else:
        body["usageMetadata"] = meta
    out, hits = asyncio.run(_serve_once("gemini", body))
    assert not isinstance(out, Exception) and len(hits) == 1, out
    assert out.text == '{"city": "Porto"}' and out.usage.reported is False


def test_gemini_empty_max_tokens_answer_without_usage_metadata_is_not_reported():
    # an empty answer (all budget spent thinking) is an answer: no usageMetadata at all is usage not reported
    body = {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}], "modelVersion": "m"}
    out, hits = asyncio.run(_serve_once("gemini", body))
    assert not isinstance(out, Exception) and len(hits) == 1, out
    assert out.text == "" and out.usage.reported is False


def test_gemini_blocked_prompt_and_withheld_answer_keep_their_handling():
    # a blocked prompt (no candidates) and a withheld answer are no answers: unchanged by s13-usage2
    blocked = {"promptFeedback": {"blockReason": "OTHER"}, "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}}
    out, _ = asyncio.run(_serve_once("gemini", blocked))
    assert isinstance(out, ContentBlocked) and (out.usage.input_tokens, out.usage.output_tokens) == (5, 0)
    out, _ = asyncio.run(_serve_once("gemini", {"promptFeedback": {"blockReason": "OTHER"}}))
    assert isinstance(out, ContentBlocked) and out.usage is None
    # s14-usage: a withheld answer without usageMetadata is withheld all the same (before: OutcomeUnknown, retried)
    out, hits = asyncio.run(_serve_once("gemini", {"candidates": [{"finishReason": "SAFETY", "index": 0}]}))
    assert isinstance(out, ContentBlocked) and out.usage is None and "SAFETY" in str(out) and len(hits) == 1


def test_gemini_empty_max_tokens_answer_without_candidates_count_is_zero_output():
    # no text came back and no output was reported: 0 output tokens is what the body says
    body = {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}], "usageMetadata": {"promptTokenCount": 30}}
    out, _ = asyncio.run(_serve_once("gemini", body))
    assert not isinstance(out, Exception), out
    assert (out.usage.input_tokens, out.usage.output_tokens, out.text) == (30, 0, "")


# -- content filtered: a definite answer, not a malformed body -------------------------------------------
def test_openai_content_filter_with_null_content_is_blocked_with_usage():
    # before: MalformedResponse -> OutcomeUnknown -> the task retried (and paid) again for the same filtered prompt
    body = _openai(None, {"prompt_tokens": 12, "completion_tokens": 0, "total_tokens": 12}, finish="content_filter")
    out, hits = asyncio.run(_serve_once("openai", body))
    assert isinstance(out, ContentBlocked) and out.retryable is False and "content_filter" in str(out)
    assert out.usage is not None and (out.usage.input_tokens, out.usage.output_tokens) == (12, 0)
    assert len(hits) == 1


# -- replay records with unusable usage ----------------------------------------------------------------

@pytest.mark.parametrize("usage", [{"input_tokens": "many", "output_tokens": 3}, {"input_tokens": 10, "output_tokens": -4},
                                   {"input_tokens": 1.5, "output_tokens": 3}, {"input_tokens": True, "output_tokens": 3}])
def test_replay_record_with_unusable_usage_is_a_recorded_error_naming_key_and_file(tmp_path, usage):
    # before: int("many") raised a bare ValueError (task retried to the dead letter without a word of where),
    # and a negative count went into the ledger's token totals
    path = tmp_path / "rec.jsonl"
    path.write_text(json.dumps({"key": "k1", "text": "{}", "usage": usage}) + "\n")
    prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_key_field="rk"))
    with pytest.raises(ReplayRecordedError) as ei:
        asyncio.run(prov.generate(ModelRequest(provider="replay", model="m", prompt="p", meta={"rk": "k1"})))
    msg = str(ei.value)
    assert "k1" in msg and "rec.jsonl" in msg and ("input_tokens" in msg or "output_tokens" in msg)


def test_replay_record_with_numeric_string_usage_still_reads(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text(json.dumps({"key": "k1", "text": "ok", "usage": {"input_tokens": "12", "output_tokens": 3.0}}) + "\n")
    prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_key_field="rk"))
    out = asyncio.run(prov.generate(ModelRequest(provider="replay", model="m", prompt="p", meta={"rk": "k1"})))
    assert (out.text, out.usage.input_tokens, out.usage.output_tokens) == ("ok", 12, 3)


# -- 2xx bodies that are not the API's JSON ------------------------------------------------------------
async def _serve_raw(kind: str, body_of, headers: dict | None = None):
    """Serve ``body_of(request)`` (bytes) with status 200; call once; return (outcome, hits)."""

    async def respond(request: web.Request, hits: list) -> web.Response:
        hits.append(1)
        return web.Response(body=body_of(request), status=200, headers=headers or {"Content-Type": "application/json"})

    return await _call_once(kind, respond)


def _echo_auth_html(request: web.Request) -> bytes:
    seen = request.headers.get("Authorization") or request.headers.get("x-api-key") or request.headers.get("x-goog-api-key")
    return f"<html><body><h1>502 Bad Gateway</h1><p>upstream refused credentials {seen}</p></body></html>".encode()


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("body_of", [_echo_auth_html, lambda r: b'{"choices": [{"message": {"content": "caf\xe9"}}]}',
                                     lambda r: b"", lambda r: b"null", lambda r: b'{"choices": []}'],
                         ids=["html-echoing-key", "latin1", "empty", "null", "empty-choices"])
def test_unusable_200_is_outcome_unknown_sent_once_and_never_shows_the_key(kind, body_of):
    out, hits = asyncio.run(_serve_raw(kind, body_of))
    if kind == "openai" and body_of is not _echo_auth_html and b"caf" in body_of(None):
        # s13-usage: Latin-1 text is read (lenient_json) and a missing usage is no reason to refuse the answer
        assert not isinstance(out, Exception) and out.usage.reported is False and len(hits) == 1, out
        return
    assert isinstance(out, OutcomeUnknown) and "unusable 2xx body" in str(out)
    assert len(hits) == 1  # may have been billed: not re-sent inside the request
    assert KEY not in str(out) and KEY not in repr(out.args) and KEY not in str(vars(out))


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_gzip_encoded_answer_is_read(kind):
    import gzip

    payload = {
        "openai": _openai("gz ok", {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
        "anthropic": {"type": "message", "model": "m", "content": [{"type": "text", "text": "gz ok"}], "stop_reason": "end_turn",
                      "usage": {"input_tokens": 3, "output_tokens": 2}},
        "gemini": _gemini([{"text": "gz ok"}], {"promptTokenCount": 3, "candidatesTokenCount": 2}),
    }[kind]
    out, _ = asyncio.run(_serve_raw(kind, lambda r: gzip.compress(json.dumps(payload).encode()),
                                    {"Content-Type": "application/json", "Content-Encoding": "gzip"}))
    assert not isinstance(out, Exception), out
    assert (out.text, out.usage.input_tokens, out.usage.output_tokens) == ("gz ok", 3, 2)
