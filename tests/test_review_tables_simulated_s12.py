"""The review tables of a crawl whose referenceability auditor is simulated carry the column ``simulated`` as the
other auditor tables do: ``audit_review_resolved`` (the model's rating beside the decision, every queue item) and
``audit_review_log`` hold the simulated auditor's ratings (``familiarity_model``). Before, the review merge added
these tables after the flags merge listed the auditor tables, so they came without the column."""

from __future__ import annotations

import json

import polars as pl

from geoagent.cli import main
from tests.test_crawl_review_verdicts import CRAWL_CONFIG, _config_with_review


def test_review_tables_are_flagged_simulated(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(CRAWL_CONFIG), "--no-live"]) == 0
    state = isolated_roots / "state" / "crawl-sandbox"
    queue = [json.loads(x) for x in (state / "audit_review_queue.jsonl").read_text().splitlines() if x.strip()]
    rv = isolated_roots / "review.csv"
    rv.write_text(f"site,qid,decision,reviewer\n{queue[0]['site']},{queue[0]['qid']},keep,ana\n", encoding="utf-8")
    assert main(["crawl", str(_config_with_review(isolated_roots, rv)), "--no-live"]) == 0
    capsys.readouterr()
    for table in ("audit_review_resolved", "audit_review_log"):
        df = pl.read_parquet(state / "export" / f"{table}.parquet")
        assert df.height > 0, table
        assert df.schema.get("simulated") == pl.Boolean, (table, df.columns)
        assert df["simulated"].to_list() == [True] * df.height, table
    note = (state / "export" / "export_note.txt").read_text(encoding="utf-8")
    assert "audit_review_resolved" in note and "audit_review_log" in note
