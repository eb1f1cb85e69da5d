"""GeoVerify stores the provider's finish reason cleaned, as GeoHint does (fixreason43 #1; verdict parser 11).

Before: GeoVerify's scored rows kept ``finish_reason`` as the server sent it, and ``parse_reason`` quoted it with its
control and bidirectional formatting characters (``"... finish reason MAX_TOKENS\\u2066)"``), into the store, the
``geoverify_scored`` export and ``geoverify_parse_failures.csv``. GeoHint's answer parser 8 cleaned its own (crawl43
#3). Now the parser stage queues it cleaned, the scorer and the re-reader store it cleaned, and a row stored by
verdict parser 10 is read again by the next run. The response store keeps the reason as sent.

Real parser and scorer stages, the real re-reader over a SQLite campaign store; no model call.
"""

from __future__ import annotations

import asyncio

from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, parse_verdict
from geoagent.geoverify.reparse import refresh_stored_rows
from geoagent.geoverify.score import cut_off_reason, scored_row
from geoagent.geoverify.stages import SCORED_TABLE, GeoVerifyParserStage, GeoVerifyScorerStage
from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.runtime.store import open_campaign_state

ESC, RLO, LRI = "\x1b[31m", "\u202e", "\u2066"
TRIAL = {"trial_id": "img1|main|Old Mill", "image_id": "img1", "site": "s1", "arm": "main", "band": "signal",
         "truth": "yes", "cand": "Old Mill", "d_km": 0.05, "referenceability": 3.0}
VERDICT_NO = '{"verdict": "no", "confidence": 0.7}'
#: an unclosed reasoning block the model finished itself: read up to its JSON object when the reason says "stop"
UNCLOSED = "<think>\nThe mill is on the river, the photo shows a car park.\nSo:\n" + VERDICT_NO + "\n"
BAD = set("\x1b\u202e\u2066\x00\n")


def test_the_parser_version_names_the_change():
    assert VERDICT_PARSER_VERSION == 11


def test_a_scored_row_stores_and_quotes_the_reason_cleaned():
    row = scored_row(TRIAL, "m", parse_verdict(""), finish_reason="MAX_TOKENS" + LRI)
    assert row["finish_reason"] == "MAX_TOKENS" and row["truncated"] is True
    assert row["parse_reason"].startswith("empty answer cut off at the output-token limit (finish reason MAX_TOKENS)")
    withheld = scored_row(TRIAL, "m", parse_verdict(""), finish_reason=" SAFETY\x00" + RLO + "\n")
    assert withheld["finish_reason"] == "SAFETY"
    assert "(stopped by the provider's content filter, finish reason SAFETY: no answer" in withheld["parse_reason"]
    # an escape sequence loses its ESC; its printable rest stays, as the text spells it (no known reason then)
    spelled = scored_row(TRIAL, "m", parse_verdict(""), finish_reason="SAFETY" + ESC)
    assert (spelled["finish_reason"], spelled["parse_reason"]) == ("SAFETY[31m", "empty answer")
    for r in (row, withheld):
        assert not BAD & set(r["finish_reason"] + r["parse_reason"]), r
    # a reason of nothing but such characters is none (no known reason: a parse failure, not cut off)
    blank = scored_row(TRIAL, "m", parse_verdict(""), finish_reason=RLO + "\x00")
    assert (blank["finish_reason"], blank["truncated"], blank["parse_reason"]) == (None, False, "empty answer")
    assert cut_off_reason(parse_verdict("no idea"), "length" + RLO).endswith("(cut off at the output-token limit, "
                                                                            "finish reason length)")


def _stages(payload: dict) -> tuple[dict, dict]:
    async def main() -> tuple[dict, dict]:
        ctx = StageContext("c")
        ((_k, answer),) = await GeoVerifyParserStage().handle(Task("k1", payload, 0, "l1"), ctx)
        ((_k, row),) = await GeoVerifyScorerStage().handle(Task("k1", answer, 0, "l2"), ctx)
        return answer, row

    return asyncio.run(main())


def test_the_parser_stage_queues_and_the_scorer_stores_the_cleaned_reason():
    payload = {"model": "m", "request_key": "rk1", "trial": TRIAL, "text": UNCLOSED, "finish_reason": "stop" + LRI,
               "input_tokens": 10, "output_tokens": 5}
    answer, row = _stages(payload)
    assert answer["finish_reason"] == "stop" and answer["parser_version"] == VERDICT_PARSER_VERSION
    assert (row["finish_reason"], row["verdict"], row["parse_ok"], row["truncated"]) == ("stop", "no", True, False)
    _answer, cut = _stages({**payload, "text": "", "finish_reason": "length" + ESC})
    assert (cut["finish_reason"], cut["truncated"], cut["verdict"]) == ("length[31m", False, None)
    _answer, cut = _stages({**payload, "text": "", "finish_reason": "length" + RLO})
    assert cut["finish_reason"] == "length" and cut["truncated"] is True
    assert "(finish reason length)" in cut["parse_reason"] and not BAD & set(cut["parse_reason"])


def test_a_row_stored_by_verdict_parser_10_is_read_again_with_its_reason_cleaned(tmp_path):
    """A version-10 row kept the reason as sent; before rev43b #1 its unclosed reasoning block was no answer, its
    empty cut-off answer was named 'the end of the model's context window'. The next run's refresh re-reads both
    from the stored text and stores the reason cleaned; the response store keeps its record as sent."""
    with open_campaign_state("fr43", root=tmp_path) as st:
        for key, text, finish in (("k-stop", UNCLOSED, "stop" + LRI), ("k-cut", "", "length" + RLO)):
            st.store.put(key, {"model": "m"}, ModelResponse(text=text, usage=Usage(100, 12), latency_s=0.1,
                                                            finish_reason=finish), None)
        v10_stop = {**scored_row(TRIAL, "m", parse_verdict(UNCLOSED, "stop_sequence")), "parser_version": 10,
                    "finish_reason": "stop" + LRI, "request_key": "k-stop"}
        v10_cut = {**scored_row({**TRIAL, "trial_id": "t2"}, "m", parse_verdict("")), "parser_version": 10,
                   "finish_reason": "length" + RLO, "request_key": "k-cut", "truncated": True,
                   "parse_reason": "empty answer (cut off at the end of the model's context window, finish reason "
                                   "length" + RLO + ": a higher max_output_tokens does not help)"}
        assert v10_stop["parse_ok"] is False  # as version 10 stored it (the reason then read as no known one)
        st.store.put_results(SCORED_TABLE, [("a", v10_stop), ("b", v10_cut)])
        got = refresh_stored_rows(st.store, SCORED_TABLE)
        rows = dict(st.store.iter_results(SCORED_TABLE))
        kept = st.store.get("k-cut").finish_reason
    assert (got.stale, got.reparsed, got.changed, got.versions) == (2, 2, 1, (10,))
    a, b = rows["a"], rows["b"]
    assert (a["finish_reason"], a["verdict"], a["parse_ok"], a["parser_version"]) == ("stop", "no", True, 11)
    assert (b["finish_reason"], b["truncated"], b["parser_version"]) == ("length", True, 11)
    assert b["parse_reason"].startswith("empty answer cut off at the output-token limit (finish reason length)")
    assert kept == "length" + RLO  # the response store keeps the record as the provider sent it
