"""A scored row deleted from campaign.sqlite by hand is scored again by the next run, from the answer queued for the
scorer: no new model call, no spend (walk21 #6).

Before: the scorer writes a task's row before it acknowledges the task, and a put of a key the queue holds is a
no-op, so once the row was gone (deleted by hand after a damaged-row error said "restore it from a backup", with
no backup) no run scored that task again: the run said complete, the report counted one answer fewer (169 of 170)
and "Missing trials: none". Now the run reopens the task on the scorer's input edge
(:func:`geoagent.engine.rescore_lost_rows`) and says so; the row comes back as it was.

Real runs through the CLI, in this process: the release replay (GeoVerify) and a three-site GeoHint campaign over
the sandbox fakes (both skipped without the release data).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from _model_harness import geohint_three_sites_toml
from geoagent.cli import main

REPLAY = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geocontext_replay.toml"


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    got = capsys.readouterr()
    return rc, got.out, got.err


def _stored(db: Path, table: str) -> tuple[dict[str, dict], int, float]:
    """The table's rows by key (JSON), the number of stored model answers and the ledger's spend in USD."""
    with sqlite3.connect(db) as c:
        rows = {k: json.loads(r) for k, r in c.execute("SELECT key, row FROM results WHERE tbl = ?", (table,))}
        answers = c.execute("SELECT count(*) FROM responses").fetchone()[0]
        spend = c.execute("SELECT coalesce(sum(cost_usd), 0) FROM responses").fetchone()[0]
    return rows, answers, spend


@pytest.mark.parametrize("kind", ["geoverify", "geohint"])
def test_a_deleted_scored_row_is_scored_again_without_a_model_call(kind, release_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    if kind == "geoverify":
        cfg, name, table, edge = REPLAY, "geocontext-replay", "geoverify_scored", "answers"
    else:
        cfg = tmp_path / "gh.toml"
        cfg.write_text(geohint_three_sites_toml("gh-deleted", geohint="n_boot = 0"), encoding="utf-8")
        name, table, edge = "gh-deleted", "geohint_scored", "located"
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    db = tmp_path / "state" / name / "campaign.sqlite"
    rows, answers, spend = _stored(db, table)
    assert len(rows) >= 10 and answers >= 10
    gone = sorted(rows)[len(rows) // 2: len(rows) // 2 + 2]
    with sqlite3.connect(db) as c:  # one row damaged, one deleted by hand
        c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", ("{not json", table, gone[0]))
        c.execute("DELETE FROM results WHERE tbl = ? AND key = ?", (table, gone[1]))
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 2 and "Traceback" not in err, out[-2000:] + err[-2000:]
    reopened = f"1 planned task scored by an earlier run had no row in results table {table!r}"
    assert reopened in err, err[-3000:]  # the deleted row's task, reopened before the damaged row stopped the run
    # the damaged row's message names the statement that deletes it, and what the next run does then
    statement = re.search(r"\(sqlite3: (DELETE FROM results WHERE .*?;)\)", err)
    assert statement and "the next run of the campaign scores it again from its queued answer (no new model call)" in err, err[-2000:]
    with sqlite3.connect(db) as c:
        assert c.execute(statement.group(1)).rowcount == 1

    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert (reopened in err  # the damaged row's, deleted as its message said
            and f"queued on edge {edge} to be scored again" in err and "no new model call" in err), err[-3000:]
    again, answers_again, spend_again = _stored(db, table)
    assert (answers_again, spend_again) == (answers, spend)  # no model call, no spend
    assert set(again) == set(rows)
    for key in gone:  # the row is the one the scorer wrote the first time
        assert again[key] == rows[key], key

    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")  # nothing more to do: said once
    assert rc == 0 and "had no row in results table" not in err, out[-2000:] + err[-2000:]


def test_the_rescored_tables_are_the_scorers_tables():
    """The damaged-row message offers deletion exactly for the tables a scorer writes one row per task of."""
    from geoagent.geohint.stages import SCORED_TABLE as GEOHINT
    from geoagent.geoverify.stages import SCORED_TABLE as GEOVERIFY
    from geoagent.runtime.store import RESCORED_TABLES

    assert RESCORED_TABLES == {GEOVERIFY, GEOHINT}
