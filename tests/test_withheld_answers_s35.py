"""Answers stopped by the provider's content filter (session 35; carried as "answer text" from session 34).

A Gemini candidate ending on a blocking finishReason (SAFETY, RECITATION, ...) WITH some text, an OpenAI answer with
finish_reason ``content_filter`` and partial content, and an Anthropic answer with stop_reason ``refusal`` (its
classifiers intervened) were stored and scored like answers the model finished: a GeoHint answer with nothing parsed
counted as a miss, while the same block with no text at all is dead-lettered as missing
(geoagent.providers.errors.ContentBlocked). Now they follow the cut-off rule (geoagent.scoring.truncation): parsed, an
answer, scored; nothing parsed, no answer, in no rate, counted and named in the reports. Expected values are hand
counts of the answers below.
"""

from __future__ import annotations

import polars as pl
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.stages import as_no_answer, score_located
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.score import cut_off_reason
from geoagent.providers.gemini import BLOCKING_FINISH_REASONS
from geoagent.scoring.truncation import (NO_ANSWER_CUT_OFF, NO_ANSWER_WITHHELD, TruncationCount, is_no_answer,
                                         is_withheld, warning_lines)

from test_cutoff_loose_ends import _payload


@pytest.mark.parametrize("reason", ["SAFETY", "RECITATION", "content_filter", "refusal", " Refusal "])
def test_a_content_filters_finish_reason_with_nothing_parsed_is_no_answer(reason):
    assert is_withheld(reason) and is_no_answer(reason, parsed=False)
    assert not is_no_answer(reason, parsed=True)  # parsed: an answer, scored
    for finished in ("stop", "end_turn", "STOP", None):
        assert not is_withheld(finished) and not is_no_answer(finished, parsed=False)


def test_every_finish_reason_the_gemini_provider_blocks_on_counts_as_withheld():
    assert BLOCKING_FINISH_REASONS and all(is_withheld(r) for r in BLOCKING_FINISH_REASONS)


def test_geohint_scores_a_withheld_unparsed_answer_as_no_answer_and_says_why():
    blocked = score_located("k1", _payload(1, finish_reason="SAFETY", parsed=False))
    assert blocked.hit is None and blocked.echo is None and blocked.extra["no_answer"] == NO_ANSWER_WITHHELD
    cut = score_located("k2", _payload(2, finish_reason="length", parsed=False))
    assert cut.extra["no_answer"] == NO_ANSWER_CUT_OFF
    parsed = score_located("k3", _payload(3, finish_reason="RECITATION", parsed=True, hit=True))
    assert parsed.hit is True and parsed.extra.get("no_answer") is None
    # a row stored before this rule (hit False: a miss) reads as no answer in the export
    old = score_located("k4", _payload(4, finish_reason="stop", parsed=False)).to_json()
    old["extra"]["finish_reason"] = "refusal"
    assert as_no_answer(old)["hit"] is None and old["extra"]["no_answer"] == NO_ANSWER_WITHHELD


def test_geohint_rates_leave_withheld_unparsed_answers_out_and_count_them():
    # model m, forced: 2 hits, 1 miss, 1 finished unparsed (a miss), 2 withheld with nothing parsed, 1 withheld that
    # parsed and hit; hit rate (2 + 1) / 5 = 60 %, before: 3 / 7
    agg = GeoHintAggregator()
    results = [score_located(f"h{i}", _payload(i, finish_reason="stop", parsed=True, hit=i < 2)) for i in range(3)]
    results.append(score_located("u", _payload(3, finish_reason="stop", parsed=False)))
    results += [score_located(f"w{i}", _payload(4 + i, finish_reason="SAFETY", parsed=False)) for i in range(2)]
    results.append(score_located("wp", _payload(6, finish_reason="content_filter", parsed=True, hit=True)))
    for r in results:
        agg.add(r)
    cell = agg.select(model="m", condition="forced")
    assert (cell.n, cell.hits) == (5, 3) and cell.hit_rate == pytest.approx(0.6)
    assert agg.n_no_answer(model="m") == 2 and agg.n_no_answer_withheld(model="m") == 2
    (count,) = agg.truncation.values()
    assert (count.n, count.n_withheld, count.n_withheld_unparsed, count.n_truncated) == (7, 3, 2, 0)
    lines = warning_lines({"m": count}, setting="x")
    assert lines == ["Withheld: 3 of the 7 answers of m were stopped by the provider's content filter (finish reason "
                     "SAFETY, RECITATION, content_filter, refusal or another blocking reason); 2 with nothing parsed "
                     "are no answer, left out of every rate, 1 parsed and is scored."], lines


def test_geoverify_names_a_withheld_answer_and_keeps_its_counts_across_a_save(tmp_path):
    parsed = parse_verdict("")
    assert "stopped by the provider's content filter, finish reason refusal" in cut_off_reason(parsed, "refusal")
    assert cut_off_reason(parse_verdict('{"verdict": "yes", "confidence": 0.7}'), "SAFETY") is None
    agg = GeoVerifyAggregator()
    rows = [dict(trial_id=f"t{i}", model="m", site="s", arm="main", band="signal", truth="yes",
                 verdict=v, conf=0.7 if v else None, finish_reason=f)
            for i, (v, f) in enumerate([("yes", "stop"), (None, "SAFETY"), ("no", "refusal"), (None, "stop")])]
    agg.update(pl.DataFrame(rows))
    c = agg.truncation[("m", "main")]
    assert (c.n, c.n_withheld, c.n_withheld_unparsed, c.n_truncated) == (4, 2, 1, 0)
    agg.save(tmp_path)
    again = GeoVerifyAggregator.load(tmp_path)
    assert again.truncation[("m", "main")] == c
    # state saved before these counts were kept (no such columns) loads with zeros
    trunc = pl.read_parquet(tmp_path / "agg_trunc.parquet").drop(["n_withheld", "n_withheld_unparsed"])
    trunc.write_parquet(tmp_path / "agg_trunc.parquet")
    old = GeoVerifyAggregator.load(tmp_path).truncation[("m", "main")]
    assert old == TruncationCount(4, 0, 0, 0, 0, 0)


def test_the_cutoff_table_and_table_11_count_withheld_answers_as_such():
    """review35b #3, #4: the notes pointed to the table 'cutoff' for withheld answers it did not count, and Table
    11's note called them cut off."""
    from geoagent.report.geohint import table11, table_cutoff

    agg = GeoHintAggregator()
    for i in range(4):
        agg.add(score_located(f"h{i}", _payload(i, finish_reason="stop", parsed=True, hit=i < 2)))
    for i in range(2):
        agg.add(score_located(f"w{i}", _payload(4 + i, finish_reason="SAFETY", parsed=False)))
    table = table_cutoff(agg)
    assert table.columns[-2:] == ["Withheld by the content filter", "Withheld, no answer (left out)"]
    model_row = next(r for r in table.rows if r[0] == "m")
    assert model_row[2:] == [6, 0, 0.0, 0, 0, 2, 2], model_row
    # not collapsed to "0 of N cut off": something was withheld (one model: the view only drops the pooled row)
    assert table.shown is None or "Answers cut off" not in table.shown.columns
    assert "Withheld: 2 of the 6 answers of m" in table.notes
    # Table 11 is of forced_chain answers: the same answers under that condition
    chain = GeoHintAggregator()
    for i in range(2):
        p = _payload(i, finish_reason="SAFETY", parsed=False)
        p["meta"]["condition"] = p["meta"]["schema"] = "forced_chain"
        chain.add(score_located(f"c{i}", p))
    notes = table11(chain).notes
    assert "stopped by the provider's content filter (2 of them), with nothing parsed" in notes, notes
    assert "cut off at the output-token limit with nothing parsed" not in notes


def test_a_campaign_that_parses_nothing_says_nothing_of_parsing():
    """review35b #5: the generic campaign counts every answer as parsed, and its withheld line said they 'parsed and
    are scored'."""
    count = TruncationCount()
    count.add("SAFETY", True)
    count.add("stop", True)
    (line,) = warning_lines({"g": count}, setting="x", scored=False)
    assert line.startswith("Withheld: 1 of the 2 answers of g were stopped") and "parsed" not in line, line
