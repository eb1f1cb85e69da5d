"""GeoHint's clues and finish reason are cleaned as the parsed place fields are (crawl43 #3).

Answer parser 7 (sec42 #3) cleaned the place fields and evidence texts of control and bidirectional formatting
characters (``geoagent.textfmt.label_text``); the ``clues`` kept them on the queue, and the provider's finish reason
reached the scored row (``extra.finish_reason``, the ``geohint_scored`` export) and the empty-answer breaker's printed
line as the server sent it. Now both are cleaned the same way (answer parser 8: the finish reason is read cleaned, so a
stored value can change), and the answer's text (``parsed.raw``, the response store) is kept as it came.

Real parser stage, scorer, re-reader, raw importer and breaker; no model call (the payloads are what the model caller
puts on the ``responses`` edge).
"""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest

from geoagent.geohint.parse import ANSWER_PARSER_VERSION, finish_reason_text, parse_answer
from geoagent.data.importer import ImportReport
from geoagent.geohint.raw_import import iter_raw
from geoagent.geohint.reparse import reread, updated_row
from geoagent.geohint.stages import TASK_NAME, GeoHintParserStage, score_located
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.scoring.truncation import NO_ANSWER_CUT_OFF
from geoagent.workers.cutoff_breaker import CutOffBreaker

ESC_RED, RLO = "\x1b[31m", "\u202e"
CLUES = ["red\x00 brick\tfacade" + RLO, 7, "\x1b\x07", "  kanji\r\nsigns  "]
ANSWER = json.dumps({"city": "Tokyo", "area": "Shibuya", "building": "unknown", "confidence_area": 0.6,
                     "confidence_building": 0.1, "clues": CLUES})
META = {"task": TASK_NAME, "site": "tokyo_shibuya", "condition": "no_context", "site_lat": 35.66, "site_lon": 139.70}


def test_clues_are_cleaned_text_items_and_the_answer_text_is_kept():
    parsed = parse_answer(ANSWER, "stop")
    assert parsed.clues == ["red brick facade", "kanji signs"]  # the number and the control-only clue are none
    assert parsed.raw == ANSWER and "\x1b\x07" in json.loads(parsed.raw)["clues"]
    assert parse_answer(json.dumps({"city": "Tokyo", "clues": "wide" + RLO + "\nroad"})).clues == ["wide road"]


@pytest.mark.parametrize("value, text", [("stop", "stop"), (" length\n", "length"), ("MAX_TOKENS" + RLO, "MAX_TOKENS"),
                                         ("end" + ESC_RED + "_turn", "end[31m_turn"), ("\x1b\x00", None), ("", None),
                                         (None, None), (3, None)])
def test_the_finish_reason_is_text_without_control_or_bidi_characters(value, text):
    assert finish_reason_text(value) == text


def _parse(text: str, finish: str) -> dict:
    payload = {"model": "m", "request_key": "rk1", "image_id": "img1", "meta": META, "text": text,
               "finish_reason": finish, "input_tokens": 10, "output_tokens": 5}
    ((_key, answer),) = asyncio.run(GeoHintParserStage().handle(Task("k1", payload, 0, "lease"), StageContext("c")))
    return answer


def test_the_parser_stage_queues_and_the_scorer_stores_the_cleaned_reason():
    answer = _parse(ANSWER, "stop" + ESC_RED + RLO)
    assert answer["finish_reason"] == "stop[31m" and answer["parsed"]["clues"] == ["red brick facade", "kanji signs"]
    assert answer["parser_version"] == ANSWER_PARSER_VERSION == 8
    row = score_located("k1", {**answer, "resolved_level": "none"})
    assert row.extra["finish_reason"] == "stop[31m" and row.city == "Tokyo"


def test_a_cut_off_reason_with_control_characters_is_read_as_cut_off():
    # "length\x1b" is the output-token limit: an empty answer cut off there is no answer, in no rate
    answer = _parse("", "length\x1b")
    row = score_located("k2", {**answer, "resolved_level": "none"})
    assert row.extra["finish_reason"] == "length" and row.extra["no_answer"] == NO_ANSWER_CUT_OFF
    assert row.hit is None and row.resolved_level is None
    # a payload queued by parser 7 with the reason as sent: stored cleaned all the same
    old = {**answer, "finish_reason": "length\x1b", "parser_version": 7, "resolved_level": "none"}
    assert score_located("k3", old).extra["finish_reason"] == "length"


def test_a_row_stored_by_parser_7_is_read_again_with_its_reason_cleaned():
    row = score_located("k4", {**_parse(ANSWER, "stop"), "resolved_level": "area"}).to_json()
    row["extra"].update({"parser_version": 7, "finish_reason": "stop" + RLO, "raw": ANSWER})
    got = reread(row, None)  # no store: the row's own extra.raw is the text
    assert got is not None and got.finish == "stop" and got.same_place
    new = updated_row(row, got)
    assert new["extra"]["finish_reason"] == "stop" and new["extra"]["parser_version"] == ANSWER_PARSER_VERSION


def test_the_raw_importer_stores_the_cleaned_reason(tmp_path):
    line = {"location": "tokyo_shibuya", "path": "images/tokyo_shibuya/1.jpg", "model": "gpt-4o", "schema": "forced",
            "context": "none", "repeat": 0, "raw": ANSWER, "usage": {"stop_reason": "end_turn" + RLO + "\x00"}}
    path = tmp_path / "forced_chain_raw.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    rep = ImportReport()
    rows = list(iter_raw(path, {}, rep))
    assert [r.extra["finish_reason"] for r in rows] == ["end_turn"], rep.issues
    assert rows[0].extra["raw"] == ANSWER


def test_the_empty_answer_breaker_prints_the_reason_as_data():
    breaker = CutOffBreaker(threshold=1)
    cut = breaker.answered("flash", "", "length\x1f", max_output_tokens=300)  # str.strip() reads it as "length"
    assert cut is not None and cut.finish_reason == "length" and "\x1f" not in cut.message()
    assert breaker.stops()[0]["finish_reason"] == "length"
