"""API clients against the documented wire formats (session 37, providers37).

Before:

* #1 OpenRouter's transient 402 (the account's in-flight spending budget is full, ``error.metadata.limit_source =
  "openrouter_in_flight_budget"``, with ``Retry-After``; openrouter.ai/docs/use-cases/limits, "In-flight spending
  budget": "transient, and the response includes a Retry-After header") failed at once as a billing refusal and
  stopped the model for the whole run;
* #2 OpenRouter's error during generation (HTTP 200, ``choices[0].finish_reason = "error"``, ``choices[0].error``)
  was stored and scored as the model's answer when ``content`` held "" or part of an answer;
* #3 a ``Retry-After`` HTTP-date without a zone (asctime, ``-0000``) was read in local time: a 2-minute wait became
  5 hours in New York and none in Tokyo (RFC 9110 section 5.6.7: every HTTP-date is UTC);
* #4 any pageviews 404 read as "0 views", a wrong base URL's plain 404 page too;
* #5 a ``Retry-After`` on a 529 (Anthropic's "overloaded", as the sandbox sends it) was ignored;
* #6 ``[crawl.screener] overpass_timeout_s`` above the Overpass HTTP timeout made the client drop and resend queries
  the server was still running, without a word (now a warning when the config is loaded).
"""

from __future__ import annotations

import email.utils
import re
import time

import anyio
import pytest
from aiohttp import web

from geoagent.clients.pageviews import PageviewsClient, PageviewsError
from geoagent.crawl.settings import CrawlSettings
from geoagent.providers.errors import MalformedResponse
from geoagent.runtime.http import (HostPolicy, HttpClient, PermanentHTTPError, RetriesExhausted, is_transient_402,
                                   parse_retry_after)
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import credential_refusal

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=3, backoff_base_s=0.01, backoff_max_s=5.0,
                  timeout_s=10)
IN_FLIGHT_402 = {"error": {"code": 402, "message": "Your in-flight requests would exceed your available credits",
                           "metadata": {"limit_source": "openrouter_in_flight_budget"}}}
CALLS = web.AppKey("calls", list)
CREDITS_402 = {"error": {"code": 402, "message": "Insufficient credits. Add more using https://openrouter.ai/credits"}}


def _chat_app(first: tuple[int, dict, dict]) -> web.Application:
    """An OpenAI-compatible endpoint whose first answer is ``first`` (status, body, headers), then a normal answer."""
    calls: list[float] = []

    async def chat(request: web.Request) -> web.Response:
        calls.append(time.monotonic())
        if len(calls) == 1:
            status, body, headers = first
            return web.json_response(body, status=status, headers=headers)
        return web.json_response({"id": "x", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app[CALLS] = calls
    return app


def _post(app: web.Application, policy: HostPolicy = FAST):
    async def main():
        async with serve(app) as base, HttpClient(default_policy=policy) as http:
            return await http.request("POST", base + "/v1/chat/completions", json={"model": "m", "messages": []})

    return anyio.run(main)


@pytest.mark.parametrize("headers", [{"Retry-After": "1"}, {}])
def test_openrouter_in_flight_402_is_waited_out_and_retried(headers):
    app = _chat_app((402, IN_FLIGHT_402, headers))
    resp = _post(app)
    assert resp.status == 200
    calls = app[CALLS]
    assert len(calls) == 2  # before: 1 call, PermanentHTTPError, and the model stopped as refused for billing
    if headers:
        assert calls[1] - calls[0] >= 0.95  # the Retry-After wait, not the 0.01 s backoff


def test_a_402_with_neither_marker_nor_wait_stays_a_billing_refusal():
    app = _chat_app((402, CREDITS_402, {}))
    with pytest.raises(PermanentHTTPError) as e:
        _post(app)
    assert e.value.status == 402 and credential_refusal(e.value) is True
    assert len(app[CALLS]) == 1


def test_a_transient_402_that_outlives_the_retries_is_no_billing_refusal():
    async def always(request: web.Request) -> web.Response:
        return web.json_response(IN_FLIGHT_402, status=402)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", always)
    with pytest.raises(RetriesExhausted) as e:
        _post(app, HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01,
                              backoff_max_s=0.02, timeout_s=10))
    assert credential_refusal(e.value) is None  # the model is not stopped as refused for billing


def test_is_transient_402():
    assert is_transient_402(402, {"retry-after": "3"}, "")
    assert is_transient_402(402, {"retry-after-ms": "300"}, "")
    assert is_transient_402(402, {}, '{"error": {"metadata": {"limit_source": "openrouter_in_flight_budget"}}}')
    assert not is_transient_402(402, {}, '{"error": {"metadata": {"limit_source": "openrouter_credits"}}}')
    assert not is_transient_402(429, {"Retry-After": "3"}, "")


def test_a_529_retry_after_is_honoured():
    app = _chat_app((529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                     {"Retry-After": "1"}))
    assert _post(app).status == 200
    calls = app[CALLS]
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.95  # before: retried after the 0.01 s backoff


@pytest.mark.parametrize("tz", ["UTC", "America/New_York", "Asia/Tokyo"])
def test_retry_after_dates_without_a_zone_are_utc(tz, monkeypatch):
    if not hasattr(time, "tzset"):
        pytest.skip("no time.tzset here")
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        now = 1_780_000_000.0
        when = now + 120
        imf = email.utils.formatdate(when, usegmt=True)
        asctime = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(when))
        minus_zero = email.utils.formatdate(when, usegmt=False, localtime=False).replace("+0000", "-0000")
        for value in (imf, asctime, minus_zero):
            assert parse_retry_after(value, now) == pytest.approx(120.0), (tz, value)
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("marker", [llm_openai.MIDSTREAM_ERROR_MARKER, llm_openai.FILTER_MARKER])
def test_openrouter_error_during_generation_is_no_answer(marker):
    """The OpenAI-compatible provider against the sandbox fake, which sends OpenRouter's 200 body of an upstream
    failure after part of the answer (``content`` '{"answer": "Par'). A paid call's unusable 2xx body is an unknown
    outcome (the model caller settles it and never stores it as an answer)."""
    from geoagent.providers.base import ModelRequest
    from geoagent.providers.errors import ContentBlocked
    from geoagent.providers.openai_compat import OpenAICompatProvider
    from geoagent.providers.settings import ProviderSettings
    from geoagent.runtime.http import OutcomeUnknown

    app = llm_openai.make_app(require_auth=False)

    async def main():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="gpt-4o", base_url=base + "/v1"), http)
            req = ModelRequest(provider="openai", model="gpt-4o", prompt="Where was this taken? " + marker,
                               params={"max_tokens": 50})
            try:
                return await prov.generate(req)
            except (OutcomeUnknown, ContentBlocked) as exc:
                return exc

    got = anyio.run(main)
    if marker == llm_openai.FILTER_MARKER:  # the withheld answer beside it keeps its reading
        assert isinstance(got, ContentBlocked)
        return
    # before: ModelResponse(text='{"answer": "Par', finish_reason='error'), stored and scored
    assert isinstance(got, OutcomeUnknown) and "Provider returned error" in str(got), got


def test_finish_reason_error_without_an_error_object_is_no_answer_either():
    data = {"id": "gen-1", "object": "chat.completion", "model": "m", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "error"}]}
    from geoagent.providers.base import ModelRequest
    from geoagent.providers.openai_compat import OpenAICompatProvider
    from geoagent.providers.settings import ProviderSettings

    async def main():
        async with HttpClient(default_policy=FAST) as http:
            prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="m", base_url="http://127.0.0.1:9/v1"), http)
            import orjson

            with pytest.raises(MalformedResponse, match='finish_reason "error"'):
                prov.parse(ModelRequest(provider="openai", model="m", prompt="p"), data, orjson.dumps(data))

    anyio.run(main)


def test_a_pageviews_404_without_the_apis_no_data_body_is_an_error():
    async def plain_404(request: web.Request) -> web.Response:
        return web.Response(status=404, text="404: Not Found")  # aiohttp's own page: a wrong base path

    async def no_data(request: web.Request) -> web.Response:
        return web.json_response({"type": "https://mediawiki.org/wiki/HyperSwitch/errors/not_found",
                                  "title": "Not found.", "method": "get", "detail": "no data", "uri": "/x"},
                                 status=404, content_type="application/problem+json")

    async def no_data_aqs2(request: web.Request) -> web.Response:  # the live API's body since AQS 2.0 (review37 #1)
        return web.json_response({"detail": "The date(s) you used are valid, but we either do not have data for those "
                                  "date(s), or the project you asked for is not loaded yet. Please check "
                                  "documentation for more information.", "method": "get", "status": 404,
                                  "title": "Not Found", "type": "about:blank", "uri": "/x"},
                                 status=404, content_type="application/problem+json")

    async def html_404(request: web.Request) -> web.Response:  # a proxy's page
        return web.Response(status=404, text="<html><body>Not Found</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/wrong/{tail:.*}", plain_404)
    app.router.add_get("/right/{tail:.*}", no_data)
    app.router.add_get("/aqs2/{tail:.*}", no_data_aqs2)
    app.router.add_get("/proxy/{tail:.*}", html_404)

    async def main():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            ua = "geoagent-test/0.1 (contact: mailto:test@example.org)"
            zeros = [await PageviewsClient(http, base + path, ua).total("Rose Garden", "20240101", "20240107")
                     for path in ("/right", "/aqs2")]
            for path in ("/wrong", "/proxy"):
                with pytest.raises(PageviewsError, match="no-data answer"):
                    await PageviewsClient(http, base + path, ua).total("Rose Garden", "20240101", "20240107")
            return zeros

    for zero in anyio.run(main):
        assert (zero.views, zero.days_with_data) == (0, 0)


def test_an_overpass_query_timeout_above_the_http_timeout_is_warned_of():
    s = CrawlSettings(contact="me@example.org", screener={"overpass_timeout_s": 180})
    (note,) = s.load_warnings()
    assert re.search(r"overpass_timeout_s = 180 .* timeout_s = 60 \(the default\).* timeout_s = 190 or more", note)
    assert CrawlSettings(contact="me@example.org", screener={"overpass_timeout_s": 180},
                         policies={"overpass": {"timeout_s": 190}}).load_warnings() == []
    assert CrawlSettings(contact="me@example.org").load_warnings() == []  # the defaults: [timeout:25] against 60 s


@pytest.mark.parametrize("marker", ["", "[[sandbox:refuse]]"])
def test_an_anthropic_refusal_before_any_text_is_a_withheld_answer(marker):
    """#7: ``stop_reason: "refusal"`` with no text was stored as an empty answer, where OpenAI's content_filter
    without content and Gemini's SAFETY without parts are withheld answers (ContentBlocked, with the usage)."""
    from geoagent.providers.anthropic import AnthropicProvider
    from geoagent.providers.base import ModelRequest
    from geoagent.providers.errors import ContentBlocked
    from geoagent.providers.settings import ProviderSettings
    from geoagent.sandbox import llm_anthropic

    app = llm_anthropic.make_app(require_auth=False)

    async def main():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            prov = AnthropicProvider(ProviderSettings(kind="anthropic", model="claude-x", base_url=base), http)
            req = ModelRequest(provider="anthropic", model="claude-x", prompt="Where was this taken? " + marker,
                               params={"max_tokens": 50})
            try:
                return await prov.generate(req)
            except ContentBlocked as exc:
                return exc

    got = anyio.run(main)
    if not marker:
        assert got.text and got.finish_reason == "end_turn"
        return
    assert isinstance(got, ContentBlocked) and "stop_reason refusal" in str(got)
    assert got.usage is not None and got.usage.output_tokens == 1


def test_a_rule_over_several_crawl_keys_names_the_section_not_an_empty_key():
    """A model validator's refusal has no key of its own: it read "key 'crawl.': image_audit.model = ..."."""
    from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings

    with pytest.raises(CrawlConfigError) as e:
        load_crawl_settings({"contact": "me@example.org", "evaluated_models": ["x"], "image_audit": {"model": "x"}})
    assert str(e.value) == ("config: [crawl]: image_audit.model = 'x' is also an evaluated model; the auditor must "
                            "not be one")


def test_a_502_wait_of_one_model_does_not_pause_the_hosts_other_models():
    """review37 #2: with Retry-After read on every retried status, a 502 of one model behind a gateway paused every
    model of the host (model B waited 1.7 s for model A's 2 s). A 503 or 529 (the host's own condition) still pauses
    the host; any other wait pauses the request's limit key only."""
    seen: list[tuple[float, str]] = []
    t0 = time.monotonic()

    async def chat(request: web.Request) -> web.Response:
        model = (await request.json())["model"]
        seen.append((time.monotonic() - t0, model))
        if model == "a" and len([m for _t, m in seen if m == "a"]) == 1:
            return web.json_response({"error": {"code": 502, "message": "upstream error"}}, status=502,
                                     headers={"Retry-After": "2"})
        return web.json_response({"id": "x", "object": "chat.completion", "model": model, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)

    from geoagent.runtime.http import host_key, limit_key

    async def main():
        async with serve(app) as base:
            keys = {m: limit_key(host_key(base), m) for m in ("a", "b")}
            async with HttpClient(default_policy=FAST, model_policies={k: FAST for k in keys.values()}) as http:
                async def one(model: str, delay: float) -> float:
                    await anyio.sleep(delay)
                    start = time.monotonic()
                    await http.request("POST", base + "/v1/chat/completions", json={"model": model},
                                       limit=keys[model])
                    return time.monotonic() - start

                took: dict[str, float] = {}

                async def run(model: str, delay: float) -> None:
                    took[model] = await one(model, delay)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(run, "a", 0.0)
                    tg.start_soon(run, "b", 0.3)
                return took

    took = anyio.run(main)
    assert took["a"] >= 1.9  # model a waited as its 502 asked
    assert took["b"] < 1.0, took  # model b went on (before: 1.71 s)
