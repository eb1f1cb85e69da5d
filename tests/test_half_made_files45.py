"""A look at a campaign whose SQLite files another process is making this instant reads them as empty (ci45).

A first run makes ``campaign.sqlite`` in steps: the ledger's tables, then the store's (``responses``, ``results``),
each its own script. A look in between (``status``; the GeoVerify tau guard, which reads before and under the plan
lock) found the file but no ``responses`` table and ended in a traceback (``sqlite3.OperationalError: no such
table: responses``): in CI a second first run at another tau, started beside the first, exited 1 with that traceback
where it must be refused (exit 2). A look now reads a table the file lacks as an empty one of its own connection
(``TEMP``), writing nothing to the file. A queue file whose tables are not made yet (``user_version`` 0: made in one
transaction after the file switched to WAL) is read as no queue.

The half-made files are made by the project's own openers stopped part-way (the ledger without the store; the
queue's WAL switch without its schema), so the state is the one a look meets in that instant.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from test_geoverify_tau_bands42 import write_build_toml

REPO = Path(__file__).resolve().parents[1]


def _half_made_campaign(state_root: Path, name: str) -> Path:
    """``<state_root>/<name>/campaign.sqlite`` with the ledger's tables and not the store's, as a first run leaves
    it between the two schema scripts."""
    from geoagent.runtime.ledger import CampaignDB, Ledger

    path = state_root / name / "campaign.sqlite"
    path.parent.mkdir(parents=True)
    db = CampaignDB(path)
    try:
        Ledger(db, 1.0)
    finally:
        db.close()
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "ledger_totals" in tables and "responses" not in tables, tables
    return path


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def test_a_look_reads_a_half_made_campaign_file_as_empty_and_writes_nothing(tmp_path):
    from geoagent.runtime.sqlite_wal import reading_only
    from geoagent.runtime.store import open_campaign_state

    path = _half_made_campaign(tmp_path, "half")
    before = _tables(path)
    with reading_only():
        with open_campaign_state("half", root=tmp_path, recover=False) as state:
            assert state.store.count_responses() == 0
            assert state.store.count_responses_by_model() == {}
            assert list(state.store.iter_results("geoverify_scored")) == []
            summary = state.ledger.summary()
            assert (summary.calls, summary.spent_usd, summary.cap_usd) == (0, 0.0, 1.0)  # the file's own ledger
    assert _tables(path) == before  # the stand-in tables were the look's own (TEMP), not the file's
    # a writer then makes the rest as before
    with open_campaign_state("half", root=tmp_path) as state:
        assert state.store.count_responses() == 0
    assert {"responses", "results"} <= _tables(path)


def test_status_and_a_run_at_another_tau_meet_a_half_made_campaign_file(tmp_path, release_dir):
    """The CI failure's path end to end: ``status`` shows the half-made campaign; a run at 200 m runs; a run at
    150 m is then refused by the tau guard (exit 2), not a traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_QUEUES": str(tmp_path / "queues"),
           "GEOAGENT_STATE": str(tmp_path / "state"), "GEOAGENT_RUNS_INDEX": str(tmp_path / "runs.jsonl")}
    cfgs = {tau: write_build_toml(tmp_path / f"h{tau}.toml", "gv-half", release_dir, tau) for tau in (150, 200)}
    _half_made_campaign(tmp_path / "state", "gv-half")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "run.py"), *args], env=env, cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=240)

    look = cli("status", str(cfgs[200]))
    assert look.returncode == 0 and "Traceback" not in look.stderr, look.stderr[-3000:]
    assert "calls 0" in look.stdout, look.stdout
    first = cli("run", str(cfgs[200]), "--no-live")
    assert first.returncode == 0, first.stderr[-3000:]
    second = cli("run", str(cfgs[150]), "--no-live")
    assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-3000:]
    assert "was run at tau_m = 200 m" in second.stderr and "Nothing was run or changed" in second.stderr


def test_a_queue_file_whose_tables_are_not_made_yet_is_read_as_no_queue(tmp_path):
    from geoagent.runtime.sqlite_queue import SQLiteQueue, queue_path, read_counts
    from geoagent.runtime.sqlite_wal import connect, enable_wal, reading_only

    path = queue_path(tmp_path, "camp", "requests")
    path.parent.mkdir(parents=True)
    conn = connect(path, isolation_level=None)  # the creator's first steps: the file, WAL, no schema yet
    assert enable_wal(conn, timeout_s=5) == "wal"
    conn.close()
    assert path.stat().st_size > 0 and _tables(path) == set()
    with reading_only():
        assert read_counts(tmp_path, "camp", "requests") is None
    assert _tables(path) == set()  # the look made nothing
    # the creator then makes it as before, and a look counts its tasks
    queue = SQLiteQueue.open(tmp_path, "camp", "requests")
    try:
        assert queue.put_many_sync([("k1", {"model": "m"})]) == 1
    finally:
        queue.close_sync()
    with reading_only():
        counts = read_counts(tmp_path, "camp", "requests")
    assert counts is not None and (counts.total, counts.ready) == (1, 1)
