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
import time
from pathlib import Path

import pytest

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


# -- the writers: a new file appears whole (race45) ----------------------------------------------------------------


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_create_whole_makes_the_file_under_another_name_and_links_it_in_one_step(tmp_path):
    from geoagent.runtime.sqlite_wal import create_whole

    target = tmp_path / "x.sqlite"
    seen: list[bool] = []

    def make(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE a (x)")
        seen.append(target.exists())  # mid-way, another process finds no file at the name
        conn.execute("CREATE TABLE b (y)")

    assert create_whole(target, make) is True
    assert seen == [False]
    assert _tables(target) == {"a", "b"} and _hidden(tmp_path) == []
    conn = sqlite3.connect(target)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert create_whole(target, make) is False and seen == [False]  # there already: nothing made


def test_create_whole_leaves_the_file_another_process_linked_first(tmp_path):
    from geoagent.runtime.sqlite_wal import create_whole

    target = tmp_path / "x.sqlite"

    def make(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE mine (x)")
        other = sqlite3.connect(target)  # the other process wins the race meanwhile
        other.execute("CREATE TABLE theirs (x)")
        other.close()

    assert create_whole(target, make) is False
    assert _tables(target) == {"theirs"} and _hidden(tmp_path) == []


def test_a_new_campaign_file_and_queue_file_hold_their_tables_from_the_start(tmp_path):
    from geoagent.runtime.sqlite_queue import SCHEMA_VERSION, SQLiteQueue
    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state("whole", root=tmp_path) as state:
        assert state.store.count_responses() == 0
    path = tmp_path / "whole" / "campaign.sqlite"
    assert {"ledger_totals", "reservations", "ledger_owners", "responses", "results"} <= _tables(path)
    assert _hidden(path.parent) == []
    queue = SQLiteQueue.open(tmp_path / "q", "whole", "requests")
    queue.close_sync()
    qpath = tmp_path / "q" / "whole" / "requests.sqlite"
    conn = sqlite3.connect(qpath)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        rows = conn.execute("SELECT state, n FROM counts ORDER BY state").fetchall()
        assert rows[1:] == [(0, 0), (1, 0), (2, 0), (3, 0)] and rows[0][0] == -1  # and the clock's mark
        assert abs(rows[0][1] - time.time()) < 600
    finally:
        conn.close()
    assert _hidden(qpath.parent) == []


def test_a_schema_script_is_one_transaction(tmp_path):
    """race45 #1: each statement of a schema script committed on its own, so a look could read ``ledger_totals``
    made and its row not yet written. A script that fails part-way now leaves nothing of itself."""
    from geoagent.runtime.ledger import CampaignDB

    db = CampaignDB(tmp_path / "s.sqlite")
    try:
        with pytest.raises(sqlite3.OperationalError, match="already exists"):
            db.executescript("CREATE TABLE t1 (x); INSERT INTO t1 VALUES (1); CREATE TABLE t1 (y);")
        assert db.read("SELECT name FROM sqlite_master WHERE name = 't1'") == []
        db.executescript("CREATE TABLE t2 (x); INSERT INTO t2 VALUES (2);")
        assert db.read("SELECT x FROM t2") == [(2,)]
    finally:
        db.close()


def test_status_says_queues_are_gone_only_when_the_folder_listed_after_the_record_holds_none(tmp_path):
    """race45 #3: ``status`` listed the queue folder, then read the manifest; a first run making its queue files and
    recording itself in between read as "queues gone or empty (deleted or moved?)", exit 2. The record is read
    first and the folder listed again."""
    from _sim_campaign import run_cli, sim_generic_config
    from geoagent.config import load_config
    from geoagent.status import _state_ran_without_queues

    cfg_path = sim_generic_config(tmp_path, "toctou", concurrency=2, n_requests=3)
    assert run_cli("run", str(cfg_path), "--no-live").returncode == 0
    cfg = load_config(cfg_path)
    assert _state_ran_without_queues(cfg) is None  # a run recorded and its queue files there
    qdir = Path(cfg.queues_root()) / "toctou"
    aside = tmp_path / "aside"
    qdir.rename(aside)
    ran = _state_ran_without_queues(cfg)
    assert ran is not None and ran["runs"] == 1  # recorded, and no queue file: gone
    aside.rename(qdir)


_CRASH_WITH_WAL = """
import os, sys
sys.path.insert(0, {repo!r})
from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.runtime.store import open_campaign_state
q = SQLiteQueue.open({root!r}, "camp", "requests")
q._conn.execute("PRAGMA wal_autocheckpoint = 0")
q.put_many_sync([(f"t{{i}}", {{"model": "m"}}) for i in range(50)])
st = open_campaign_state("camp", root={root!r}, cap_usd=1.0)
st.db._conn.execute("PRAGMA wal_autocheckpoint = 0")
with st.db.transaction() as c:
    c.execute("UPDATE ledger_totals SET calls = calls + 7, spent_nusd = spent_nusd + 5000000")
os._exit(0)  # killed: the commits stay in the -wal files
"""


def test_a_file_removed_beside_its_left_wal_starts_empty(tmp_path):
    """review45a #1: a crash leaves ``campaign.sqlite-wal`` (and a queue's), then the file alone is deleted to start
    over. Made whole and linked in, the new file was a WAL-mode database that SQLite replayed the old WAL into: the
    new campaign began with the old one's calls and spend, the queue with its 50 tasks. Beside a left companion the
    file is made in place as before, empty, and SQLite drops the stale WAL."""
    from geoagent.runtime.sqlite_queue import SQLiteQueue
    from geoagent.runtime.store import open_campaign_state

    run = subprocess.run([sys.executable, "-c", _CRASH_WITH_WAL.format(repo=str(REPO), root=str(tmp_path))],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    qfile, dbfile = tmp_path / "camp" / "requests.sqlite", tmp_path / "camp" / "campaign.sqlite"
    assert Path(f"{qfile}-wal").stat().st_size > 0 and Path(f"{dbfile}-wal").stat().st_size > 0
    qfile.unlink()
    dbfile.unlink()
    queue = SQLiteQueue.open(tmp_path, "camp", "requests")
    try:
        assert queue.counts_sync().total == 0
    finally:
        queue.close_sync()
    with open_campaign_state("camp", root=tmp_path, cap_usd=1.0) as state:
        summary = state.ledger.summary()
        assert (summary.calls, summary.spent_usd) == (0, 0.0)


def test_status_and_dead_read_a_queue_file_whose_tables_are_not_made_as_empty(tmp_path):
    """review45a #6: ``status`` and ``dead`` open the queue files through their own opener, which handed them a file
    at ``user_version`` 0 and failed on its first count ("no such table: counts", exit 2). Such a file (made in place:
    a file system without hard links, an older version, a kill between its WAL switch and its tables) holds no
    task: read as empty, and left as it is."""
    from _sim_campaign import run_cli, sim_generic_config
    from geoagent.runtime.sqlite_wal import connect, enable_wal

    cfg_path = sim_generic_config(tmp_path, "notmade", concurrency=2, n_requests=3)
    assert run_cli("run", str(cfg_path), "--no-live").returncode == 0
    qfile = tmp_path / "queues" / "notmade" / "requests.sqlite"
    for end in ("", "-wal", "-shm"):
        Path(f"{qfile}{end}").unlink(missing_ok=True)
    conn = connect(qfile, isolation_level=None)
    assert enable_wal(conn, timeout_s=5) == "wal"
    conn.close()
    for command in ("status", "dead"):
        out = run_cli(command, str(cfg_path))
        assert out.returncode == 0 and "no such table" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert _tables(qfile) == set()
    status = run_cli("status", str(cfg_path)).stdout
    assert "requests: ready       0  leased     0  done        0  dead     0" in status, status


def test_a_run_removes_the_files_a_process_killed_while_making_one_left(tmp_path):
    """review45a #8: a kill while a new SQLite file was made whole left its hidden temporary file (with ``-wal`` and
    ``-shm``) in the state or queue folder for good. They carry the temporary files' names, and a run's start
    removes those whose process is gone, in the campaign's queue folder too; a live process's are left."""
    from _sim_campaign import run_cli, sim_generic_config

    cfg_path = sim_generic_config(tmp_path, "leftover", concurrency=2, n_requests=3)
    assert run_cli("run", str(cfg_path), "--no-live").returncode == 0
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now
    left = []
    for folder, name in ((tmp_path / "state" / "leftover", "campaign.sqlite"),
                         (tmp_path / "queues" / "leftover", "requests.sqlite")):
        for pid in (gone.pid, os.getpid()):
            for end in ("", "-wal", "-shm"):
                path = folder / f".{name}.{pid}.140000000000.0123abcd.tmp{end}"
                path.write_bytes(b"x")
                left.append((path, pid))
    assert run_cli("run", str(cfg_path), "--no-live").returncode == 0
    for path, pid in left:
        assert path.exists() == (pid == os.getpid()), path
