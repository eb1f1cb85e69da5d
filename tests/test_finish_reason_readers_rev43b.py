"""Rev43b #1: every reader of a provider's finish reason reads it the same way.

Answer parser 8 (crawl43 #3) cleans GeoHint's finish reason of control and bidirectional formatting characters
before it is stored and counted, so an empty answer whose reason is ``length`` followed by U+202E was no answer in
the report. The empty-answer breaker read the reason as the provider sent it with ``str.strip()``, which keeps
U+202E and U+2066: such answers never tripped it, and a model could keep spending its whole output limit on empty
answers. Now the breaker, the ``is_*`` helpers of :mod:`geoagent.scoring.truncation` (for callers that do not clean
first) and GeoVerify's cut-off reason all read it through :func:`geoagent.textfmt.finish_reason_text`.

The end-to-end test runs the real engine against the local OpenAI-compatible fake (a reasoning model id whose cap is
at or below the fake's reasoning tokens answers ``content: ""``, ``finish_reason: "length"``: documented in
:mod:`geoagent.sandbox.llm_openai`), with an outer aiohttp middleware that appends U+202E to the finish reason of
each answer, as a server that writes its own reason could.
"""

from __future__ import annotations

import json

import anyio
import pytest
from aiohttp import web

from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table
from geoagent.config import load_config
from geoagent.engine import EXIT_INCOMPLETE, run_campaign
from geoagent.geohint.parse import finish_reason_text as parse_finish_reason_text
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.score import cut_off_reason
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.scoring.truncation import is_finished, is_no_answer, is_output_limit, is_truncated, is_withheld
from geoagent.textfmt import finish_reason_text
from geoagent.workers.cutoff_breaker import CUT_OFF_EMPTY_TO_STOP, empty_cut_off

RLO, LRI = "\u202e", "\u2066"
KEY = made_up_key("sk-", 40, seed="rev43b")
N = 30


def test_the_cleaning_function_is_still_importable_from_the_answer_parser():
    assert parse_finish_reason_text is finish_reason_text


@pytest.mark.parametrize("reason", ["length" + RLO, "MAX_TOKENS" + LRI, "max_tokens\x1b", " Length\u200f\n",
                                    # format characters a place name may keep are no part of a keyword (review43c #8)
                                    "max_tokens\u200b", "length\ufeff", "MAX_TOKENS\u2060", "length\u200d",
                                    # other invisible default-ignorable code points (review43d #6)
                                    "length\u034f", "length\ufe0f", "length\u3164", "length\u115f", "length\u2800"])
def test_the_breaker_and_the_report_agree_on_an_output_limit_reason_with_formatting_characters(reason):
    # the report reads the stored reason cleaned: no answer; the breaker reads the reason as sent: now the same
    assert is_no_answer(reason, False) and is_no_answer(finish_reason_text(reason), False)
    assert empty_cut_off("", reason) and empty_cut_off(None, finish_reason_text(reason))
    assert is_truncated(reason) and is_output_limit(reason) and not is_finished(reason)
    assert not empty_cut_off("{}", reason)  # text: never counted, whatever the reason


@pytest.mark.parametrize("reason, finished, withheld, no_answer, breaker", [
    ("stop" + RLO, True, False, False, False),
    ("end_turn" + LRI, True, False, False, False),
    ("SAFETY\x1b", False, True, True, False),                               # withheld: no answer, no limit to raise
    ("model_context_window_exceeded" + RLO, False, False, True, False),     # the context window: no higher limit helps
    ("len" + RLO + "gth", False, False, True, True),                        # cleaned as the report cleans it
    ("length stop", False, False, False, False),
    ("\x1b" + RLO, False, False, False, False),                             # nothing left: no recorded reason
    (None, False, False, False, False),
    (7, False, False, False, False),
])
def test_every_reader_reads_a_reason_the_same_way_raw_or_cleaned(reason, finished, withheld, no_answer, breaker):
    for value in (reason, finish_reason_text(reason)):
        assert is_finished(value) is finished and is_withheld(value) is withheld, value
        assert is_no_answer(value, False) is no_answer and empty_cut_off("", value) is breaker, value


def test_geoverify_names_a_cut_off_reason_with_formatting_characters_as_the_output_limit():
    # before, is_truncated said cut off but the output-limit check did not: "the end of the model's context window"
    reason = cut_off_reason(parse_verdict("", "length" + RLO), "length" + RLO)
    assert reason is not None and "cut off at the output-token limit" in reason and "context window" not in reason


def _bidi_finish_reason(app: web.Application) -> None:
    """Append U+202E to ``choices[0].finish_reason`` of every answer of ``app`` (outermost middleware)."""

    @web.middleware
    async def suffix(request: web.Request, handler):
        resp = await handler(request)
        if not isinstance(resp, web.Response) or resp.status != 200 or not resp.body:
            return resp
        body = json.loads(resp.body)
        for choice in body.get("choices") or []:
            if isinstance(choice.get("finish_reason"), str):
                choice["finish_reason"] += RLO
        return web.json_response(body, headers={k: v for k, v in resp.headers.items()
                                                 if k.lower() not in ("content-type", "content-length")})

    app.middlewares.insert(0, suffix)


def test_a_model_whose_empty_answers_end_with_a_bidi_character_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv("GA_REV43B_KEY", KEY)
    app = llm_openai.make_app(api_keys=[KEY])
    _bidi_finish_reason(app)

    async def main():
        async with serve(app) as base:
            reasoning = model_table("g5", base_url=base, key_var="GA_REV43B_KEY", model="gpt-5-mini",
                                    max_output_tokens=256, concurrency=2) + "reasoning_model = true\n"
            with pytest.warns(Warning, match="reasoning model"):  # the load's warning of a low cap, as intended
                cfg = load_config(generic_campaign(tmp_path, name="rev43b", n=N, cap_usd=5.0, models=reasoning))
            return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    reasons = {c.get("finish_reason") for c in app["calls"] if c.get("status") == 200}
    assert reasons == {"length"}, reasons  # the fake cut every answer off empty (its log has the reason it chose)
    assert out.status == "incomplete" and out.exit_code == EXIT_INCOMPLETE, out.summary()
    line = next((ln for ln in out.stop_reasons if "came back empty" in ln), None)
    assert line is not None, out.summary()
    assert line.startswith(f"model g5: its last {CUT_OFF_EMPTY_TO_STOP} answers came back empty, cut off at the "
                           "output-token limit (max_output_tokens = 256, finish reason length): "), line
    # stopped after the 10th: only the requests already in flight (concurrency 2) were sent after it
    assert CUT_OFF_EMPTY_TO_STOP <= len(app["calls"]) <= CUT_OFF_EMPTY_TO_STOP + 2, len(app["calls"])
