"""The providers decide on the finish reason as the cut-off checks read it, and keep it as sent (fixreason43 #2).

Before: Gemini took an empty candidate for an empty answer only when ``finishReason`` was exactly ``MAX_TOKENS``, so
``"MAX_TOKENS\\u2066"`` (a server's reason with a bidirectional formatting character after it) was a malformed body:
retried at a cost, dead-lettered, and never seen by the empty-answer breaker, which reads reasons cleaned since
rev43b #1. OpenAI-compatible ``content: null`` with ``"length\\u2066"`` or ``"content_filter\\u2066"``, and Anthropic's
``"refusal\\u2066"`` without text, were likewise judged on the raw text. Now every decision reads the reason through
:func:`geoagent.scoring.truncation.finish_reason_key`; the answer (and so the response store) keeps it as sent.

Real providers over HTTP against the local fakes, which append the suffix to every finish reason they send
(``make_app(finish_reason_suffix=...)``); no function-level mocks.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.errors import ContentBlocked
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_anthropic, llm_gemini, llm_openai
from geoagent.sandbox.llm_common import CALLS_KEY
from geoagent.sandbox.server import serve
from geoagent.scoring.truncation import is_finished, is_no_answer, is_withheld
from geoagent.workers.cutoff_breaker import empty_cut_off

LRI, RLO = "\u2066", "\u202e"
#: one attempt: a reply read as a malformed body would fail the call here, not be retried
ONCE = HostPolicy(rate=1000, period_s=1.0, concurrency=2, max_attempts=1, timeout_s=5.0)


def _ask(app, settings: dict[str, Any], prompt: str, max_output_tokens: int, base_path: str = "") -> tuple[Any, list]:
    """The provider's answer (or the ContentBlocked it raised) to one request, and the fake's call log."""

    async def main():
        async with serve(app) as base, HttpClient(default_policy=ONCE) as http:
            prov = make_provider(ProviderSettings(base_url=base + base_path, **settings), http)
            req = ModelRequest(provider=settings["kind"], model=settings["model"], prompt=prompt,
                               params={"max_output_tokens": max_output_tokens})
            try:
                return await prov.generate(req), list(app[CALLS_KEY])
            except ContentBlocked as exc:
                return exc, list(app[CALLS_KEY])

    return asyncio.run(main())


GEMINI = {"kind": "gemini", "model": "gemini-2.5-flash", "api_key": "k"}


@pytest.mark.parametrize("suffix", ["", LRI, " \x1b"])
def test_gemini_empty_max_tokens_candidate_is_an_empty_answer_the_breaker_counts(suffix):
    # a cap at or below the fake's thinking tokens: a candidate without parts, finishReason MAX_TOKENS + suffix
    resp, calls = _ask(llm_gemini.make_app(finish_reason_suffix=suffix), GEMINI, "Where is this?", 100)
    assert resp.text == "" and resp.finish_reason == "MAX_TOKENS" + suffix  # kept as sent
    assert calls[0]["finish_reason"] == "MAX_TOKENS" + suffix and len(calls) == 1
    assert empty_cut_off(resp.text, resp.finish_reason) and is_no_answer(resp.finish_reason, False)
    assert resp.usage.output_tokens == 100  # billed: the whole cap went on thinking


def test_gemini_withheld_and_finished_answers_read_the_reason_cleaned():
    app = llm_gemini.make_app(finish_reason_suffix=RLO)
    blocked, _calls = _ask(app, GEMINI, "Where is this? " + llm_gemini.WITHHOLD_MARKER, 2000)
    assert isinstance(blocked, ContentBlocked) and blocked.reason == "answer withheld: finishReason SAFETY"
    resp, _calls = _ask(llm_gemini.make_app(finish_reason_suffix=RLO), GEMINI, "Where is this?", 2000)
    assert resp.text and resp.finish_reason == "STOP" + RLO and is_finished(resp.finish_reason)


OPENAI_REASONING = {"kind": "openai", "model": "gpt-5-mini", "reasoning_model": True,
                    "max_tokens_field": "max_completion_tokens"}


@pytest.mark.parametrize("style", ["openai", "vllm"])
def test_openai_content_null_cut_off_with_a_suffixed_length_is_an_empty_answer(style):
    # vLLM's reasoning parser sends content null: read as empty only for the finish reason "length"
    app = llm_openai.make_app(require_auth=False, reasoning_style=style, finish_reason_suffix=LRI)
    resp, calls = _ask(app, OPENAI_REASONING, "Where is this?", 64, "/v1")
    assert resp.text == "" and resp.finish_reason == "length" + LRI and len(calls) == 1
    assert empty_cut_off(resp.text, resp.finish_reason)


def test_openai_content_filter_with_a_suffix_is_a_withheld_answer():
    app = llm_openai.make_app(require_auth=False, finish_reason_suffix=LRI)
    got, calls = _ask(app, {"kind": "openai", "model": "gpt-4o"}, "Where? " + llm_openai.FILTER_MARKER, 50, "/v1")
    assert isinstance(got, ContentBlocked) and len(calls) == 1
    assert calls[0]["finish_reason"] == "content_filter" + LRI and is_withheld(calls[0]["finish_reason"])


def test_anthropic_refusal_with_a_suffix_is_a_withheld_answer():
    app = llm_anthropic.make_app(require_auth=False, finish_reason_suffix=LRI)
    claude = {"kind": "anthropic", "model": "claude-x"}
    got, _calls = _ask(app, claude, "Where is this? [[sandbox:refuse]]", 50)
    assert isinstance(got, ContentBlocked), got  # before: stored as an empty answer
    resp, _calls = _ask(llm_anthropic.make_app(require_auth=False, finish_reason_suffix=LRI), claude, "Where?", 50)
    assert resp.text and resp.finish_reason == "end_turn" + LRI and is_finished(resp.finish_reason)
