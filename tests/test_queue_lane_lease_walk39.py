"""Leasing by lane on the SQLite queue (walk39 #1; geoagent.runtime.queue ``lease_lanes``, sqlite_queue "Version 1 ...").

A task's lane is its payload's ``model`` text, stored at put in the ``lane`` column (schema version 4). ``lease_lanes``
hands out at most the count asked of each lane named, in lease order, and leaves every other task of those lanes
exactly as it was (state, ready time, attempts): no release, no delay. A version-3 file (the DDL that code wrote,
frozen below) is read as it is by a read-only look and migrated by the first writer, which fills the lane of the
rows already there (by SQLite's JSON functions; by orjson a payload holding a NUL, and every one where SQLite has no
JSON functions); rows a version-3 process still running puts after that get their lane from the lane lease. The Redis
backend leases by lane too, each lane's tasks in a stream of their own (tests/test_redis_lanes44.py runs this file's
sequences there); the interface's default says it cannot (``supports_lane_lease`` False).
"""

from __future__ import annotations

import sqlite3
import time

import orjson
import pytest

from geoagent.runtime.queue import QueueCounts, QueueError, WorkQueue
from geoagent.runtime import sqlite_queue
from geoagent.runtime.sqlite_queue import CLOCK_MARK, SCHEMA_VERSION, SQLiteQueue, _encode, _fill_lanes, queue_path

#: the DDL of schema version 3 (sessions 17-42), as that code wrote a new file
V3_DDL = (
    """CREATE TABLE tasks (
        id         INTEGER PRIMARY KEY,
        key        TEXT    NOT NULL UNIQUE,
        payload    BLOB    NOT NULL,
        state      INTEGER NOT NULL,
        not_before REAL    NOT NULL,
        attempts   INTEGER NOT NULL DEFAULT 0,
        lease_id   TEXT,
        last_error TEXT,
        created_at REAL    NOT NULL,
        charges    TEXT,
        dead_charge TEXT
    )""",
    "CREATE INDEX tasks_state_time ON tasks (state, not_before)",
    "CREATE TABLE counts (state INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
)


def _v3_file(path, payloads: list[tuple[str, bytes, int]], t0: float) -> None:
    """A version-3 queue file in WAL mode holding ``payloads`` (key, stored payload bytes, state), put at ``t0`` in
    that order; its counts and clock mark as that code kept them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statement in V3_DDL:
        conn.execute(statement)
    conn.executemany("INSERT INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, ?, ?, ?)",
                     [(k, p, st, t0, t0) for k, p, st in payloads])
    n = {s: sum(1 for *_, st in payloads if st == s) for s in range(4)}
    conn.executemany("INSERT INTO counts (state, n) VALUES (?, ?)", [*n.items(), (CLOCK_MARK, t0)])
    conn.execute("PRAGMA user_version = 3")
    conn.close()


def _rows(path) -> dict[str, tuple]:
    """key -> (state, not_before, attempts, lane or '-' when the file has no lane column)."""
    conn = sqlite3.connect(path)
    try:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(tasks)")]
        lane = "lane" if "lane" in cols else "'-'"
        return {k: tuple(rest) for k, *rest in conn.execute(f"SELECT key, state, not_before, attempts, {lane} FROM tasks")}
    finally:
        conn.close()


def _version_and_indexes(path) -> tuple[int, list[str]]:
    conn = sqlite3.connect(path)
    try:
        return (conn.execute("PRAGMA user_version").fetchone()[0],
                sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                                  "AND name LIKE 'tasks_%'")))
    finally:
        conn.close()


def _plan(n: int = 4) -> list[tuple[str, bytes, int]]:
    """Two models' tasks interleaved as a plan puts them (a0 b0 a1 b1 ...), one without a model, one done."""
    out = [(f"{m}{i}", orjson.dumps({"model": m, "i": i}), 0) for i in range(n) for m in ("a", "b")]
    return [*out, ("none", orjson.dumps({"i": -1}), 0), ("d", orjson.dumps({"model": "a"}), 2)]


def test_a_version_3_file_is_read_as_it_is_then_migrated_with_every_lane_filled(tmp_path):
    path = queue_path(tmp_path, "camp", "requests")
    t0 = time.time() - 5
    _v3_file(path, _plan(), t0)
    before = _rows(path)
    look = SQLiteQueue(path, create=False, migrate=False)  # status: reads, writes nothing
    try:
        assert look.schema_version == 3 and not look.supports_lane_lease
        assert look.counts_sync() == QueueCounts(ready=9, done=1)
        with pytest.raises(QueueError, match="schema version 4"):
            look.lease_lanes_sync(2, 60, {"a": 1})
    finally:
        look.close_sync()
    assert _version_and_indexes(path) == (3, ["tasks_state_time"]) and _rows(path) == before

    q = SQLiteQueue(path)  # the first writer migrates
    try:
        assert q.schema_version == SCHEMA_VERSION == 4 and q.supports_lane_lease
        assert _version_and_indexes(path) == (4, ["tasks_state_time"])  # the lane index comes with the first lane lease
        rows = _rows(path)
        assert {k: v[3] for k, v in rows.items()} == {**{f"{m}{i}": m for i in range(4) for m in "ab"},
                                                      "none": None, "d": "a"}
        assert {k: v[:3] for k, v in rows.items()} == {k: v[:3] for k, v in before.items()}  # nothing else moved
        # b full: a's first task, the one without a model, and none of b's
        got = q.lease_lanes_sync(10, 60, {"a": 1, "b": 0})
        assert [t.key for t in got] == ["a0", "none"]
        assert _version_and_indexes(path) == (4, ["tasks_state_lane_time", "tasks_state_time"])
        # b's tasks untouched: ready, at their put time, no attempt
        assert all(_rows(path)[f"b{i}"][:3] == (0, t0, 0) for i in range(4))
        assert [t.key for t in q.lease_lanes_sync(10, 60, {"a": 2, "b": 3})] == ["b0", "a1", "b1", "a2", "b2"]
        assert q.counts_sync() == QueueCounts(ready=2, leased=7, done=1)
        assert q.put_many_sync([("c0", {"model": "c"}), ("d", {"model": "a"})]) == 1  # put stores the lane
        assert _rows(path)["c0"][3] == "c"
    finally:
        q.close_sync()
    SQLiteQueue(path).close_sync()  # a reopen changes nothing more
    assert _version_and_indexes(path)[0] == 4


def test_the_migration_fills_by_sql_past_a_payload_that_sqlite_cannot_read(tmp_path):
    """rev43a #2: payloads that are not JSON to SQLite (hand-edited rows) keep lane NULL, as orjson reads them, and
    no longer undo the one-statement fill: the statement sets every other lane, and Python (the per-row UPDATE,
    seen by SQLite's trace) writes only the rows whose payload holds a ``\\u`` escape (a NUL here: rev43a #4; any
    ``\\u`` since review44a #1)."""
    rows = [("a0", orjson.dumps({"model": "a"}), 0), ("bad", b"\xff not json", 0), ("cut", b'{"model": "a"', 0),
            ("b0", orjson.dumps({"model": "b"}), 0), ("n", orjson.dumps({"model": 7}), 0),
            ("nul", orjson.dumps({"model": "a\x00b"}), 0),
            ("nul_elsewhere", orjson.dumps({"model": "c", "x": "\x00"}), 0)]
    rows += [(f"k{i}", orjson.dumps({"model": "abc"[i % 3]}), 0) for i in range(30)]
    path = queue_path(tmp_path, "camp", "requests")
    _v3_file(path, rows, time.time() - 5)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("ALTER TABLE tasks ADD COLUMN lane TEXT")  # the migration's own steps, traced
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    conn.execute("BEGIN IMMEDIATE")
    _fill_lanes(conn)
    conn.execute("COMMIT")
    conn.set_trace_callback(None)
    per_row = [s for s in seen if s.startswith("UPDATE tasks SET lane = ") and "json" not in s]  # parameters bound
    ids = [k for k, *_ in rows]
    assert [s.rpartition(" = ")[2] for s in per_row] == [str(ids.index("nul") + 1), str(ids.index("nul_elsewhere") + 1)]
    lanes = dict(conn.execute("SELECT key, lane FROM tasks"))
    conn.close()
    assert lanes == {k: _encode(k, orjson.loads(p))[2] if k not in ("bad", "cut") else None for k, p, _ in rows}
    assert lanes["nul"] == "a\x00b" and lanes["nul_elsewhere"] == "c"  # as put stores them, NUL and all

    path2 = queue_path(tmp_path, "camp2", "requests")  # and through the real migration
    _v3_file(path2, rows, time.time() - 5)
    q = SQLiteQueue(path2)
    try:
        assert {k: v[3] for k, v in _rows(path2).items()} == lanes
        assert q.counts_sync() == QueueCounts(ready=len(rows))
        assert q.put_many_sync([("nul2", {"model": "a\x00b"})]) == 1  # put gives the lane the migration gave
        assert _rows(path2)["nul2"][3] == lanes["nul"]
        conn = sqlite3.connect(path2, isolation_level=None)  # no lease can read them (orjson refuses them too)
        conn.execute("DELETE FROM tasks WHERE key IN ('bad', 'cut')")
        conn.close()
        got = q.lease_lanes_sync(100, 60, {"a\x00b": 0, "a": 0})  # so one count holds for both; "a" is not it
        assert {t.key for t in got} == set(lanes) - {"bad", "cut", "nul", "a0"} - {f"k{i}" for i in range(0, 30, 3)}
    finally:
        q.close_sync()


def test_without_json_functions_the_migration_walks_the_rows_in_chunks(tmp_path, monkeypatch):
    """rev43a #2: where SQLite has no JSON functions, orjson reads every payload, FILL_LANES_CHUNK rows at a time by
    row id (3 here), over gaps in the ids and a negative id; the lanes are those the SQL fill gives."""
    monkeypatch.setattr(sqlite_queue, "FILL_LANES_CHUNK", 3)
    path = tmp_path / "q.sqlite"
    _v3_file(path, [(f"k{i}", orjson.dumps({"model": "ab"[i % 2]} if i % 5 else {"i": i}), 0) for i in range(20)],
             time.time() - 5)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM tasks WHERE id IN (4, 5, 6, 11)")
    conn.execute("INSERT INTO tasks (id, key, payload, state, not_before, created_at) VALUES (-7, 'neg', ?, 0, 1, 1)",
                 (orjson.dumps({"model": "z"}),))
    conn.execute("ALTER TABLE tasks ADD COLUMN lane TEXT")
    selects: list[str] = []
    conn.set_trace_callback(lambda s: selects.append(s) if s.startswith("SELECT id, payload") else None)
    sqlite_queue._fill_lanes_in_python(conn, "1")
    conn.set_trace_callback(None)
    by_python = dict(conn.execute("SELECT key, lane FROM tasks"))
    conn.execute("UPDATE tasks SET lane = NULL")
    conn.execute(sqlite_queue._FILL_LANES_SQL)
    assert dict(conn.execute("SELECT key, lane FROM tasks")) == by_python
    conn.close()
    assert by_python["neg"] == "z" and by_python["k0"] is None and by_python["k1"] == "b"
    assert len(selects) == 6  # 17 rows, 3 at a time


def test_rows_an_old_process_puts_after_the_migration_keep_their_lanes_count(tmp_path):
    """rev43a #1: a process of version 3 still running after another one migrated the file puts with that version's
    statements (no lane). ``lease_lanes`` reads the model of such a task from its payload: a full lane's tasks stay
    ready, untouched, and the lane is stored; the counts stay exact."""
    path = queue_path(tmp_path, "camp", "requests")
    _v3_file(path, [("a0", orjson.dumps({"model": "a"}), 0)], time.time() - 5)
    q = SQLiteQueue(path)  # the migration
    try:
        old = sqlite3.connect(path, isolation_level=None)  # the old process's put (sqlite_queue of sessions 17-42)
        old.execute("BEGIN IMMEDIATE")
        added = old.executemany(
            "INSERT OR IGNORE INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, 0, ?, ?)",
            [(k, orjson.dumps(p), time.time(), time.time()) for k, p in
             [("a1", {"model": "a"}), ("a2", {"model": "a"}), ("b1", {"model": "b"}), ("x", {"i": 1})]]).rowcount
        old.execute("UPDATE counts SET n = n + ? WHERE state = 0", (added,))
        old.execute("COMMIT")
        old.close()
        assert {k: v[3] for k, v in _rows(path).items()} == {"a0": "a", "a1": None, "a2": None, "b1": None, "x": None}
        got = q.lease_lanes_sync(10, 60, {"a": 1, "b": 0})
        assert [t.key for t in got] == ["a0", "x"]  # a full after a0, b closed: a1, a2 and b1 stay
        rows = _rows(path)
        assert {k: v[3] for k, v in rows.items()} == {"a0": "a", "a1": "a", "a2": "a", "b1": "b", "x": None}
        assert [rows[k][:1] + rows[k][2:3] for k in ("a1", "a2", "b1")] == [(0, 0)] * 3  # ready, no attempt
        assert [t.key for t in q.lease_lanes_sync(10, 60, {"a": 1, "b": 1})] == ["a1", "b1"]
        assert q.counts_sync() == QueueCounts(ready=1, leased=4)
    finally:
        q.close_sync()


def test_lease_lanes_takes_expired_leases_first_and_keeps_each_lanes_order(tmp_path):
    """Per lane: expired leases first (a crashed worker's tasks), then ready tasks in put order; a task nacked for a
    retry comes back at its backoff's end, behind its lane's tasks ready before. The counts stay exact."""
    now = [1000.0]
    q = SQLiteQueue(tmp_path / "q.sqlite", clock=lambda: now[0], backoff_base_s=0.0, backoff_max_s=0.0)
    try:
        q.put_many_sync([(f"{m}{i}", {"model": m}) for i in range(5) for m in ("a", "b")])
        first = q.lease_lanes_sync(3, 10, {"a": 2, "b": 1})
        assert [t.key for t in first] == ["a0", "b0", "a1"]
        now[0] += 11  # their leases expire
        assert [t.key for t in q.lease_lanes_sync(2, 10, {"a": 1, "b": 1})] == ["a0", "b0"]
        assert q.counts_sync() == QueueCounts(ready=8, leased=2)  # a1's expired lease counts as ready
        got = q.lease_lanes_sync(10, 10, {"a": 2, "b": 0})
        assert [t.key for t in got] == ["a1", "a2"]
        a2 = got[1]
        now[0] += 1
        assert q.nack_sync(a2, "HTTP 500", backoff_s=0) == "ready"
        assert [t.key for t in q.lease_lanes_sync(10, 10, {"a": 2, "b": 0})] == ["a3", "a4"]
        assert [t.key for t in q.lease_lanes_sync(10, 10, {"a": 5, "b": 0})] == ["a2"]
        assert [t.key for t in q.lease_lanes_sync(3, 10, {})] == ["b1", "b2", "b3"]  # no lane named: as lease
        assert q.counts_sync() == QueueCounts(ready=1, leased=9)
    finally:
        q.close_sync()


def test_which_backends_lease_by_lane():
    """The interface's default cannot (the stage runner then leases and defers, as before); both backends can (the
    Redis backend since session 44: a stream per lane)."""
    assert WorkQueue.supports_lane_lease is False
    from geoagent.runtime.redis_queue import RedisStreamsQueue

    assert RedisStreamsQueue.supports_lane_lease is True
