"""SQLite queue schema versions 2 and 3 (geoagent.runtime.sqlite_queue, "Version 1 ..."): a queue file made by the
schema of version 1 (sessions up to 8; its DDL is frozen below, exactly as that code wrote it) keeps working.
Read-only looks (``read_counts``, ``read_planned``, ``status``) read it unchanged; the first open by a writer adds the
charge columns and the queue clock's mark and sets version 3 with every task intact, after which charged nacks and
refunds by charge ids work. The hot path (lease, ack, an uncharged nack) runs the same statements as version 1 plus
the two of the queue clock (read the mark, move it). Version 2 -> 3: ``tests/test_queue_sqlite_clock_step.py``.
"""

from __future__ import annotations

import sqlite3
import time
from types import SimpleNamespace

import anyio
import orjson
import pytest

from geoagent.runtime.queue import QueueCounts, QueueError, Refund, open_queue
from geoagent.runtime.sqlite_queue import CLOCK_MARK, SCHEMA_VERSION, SQLiteQueue, queue_path, read_counts, read_planned

#: the DDL of schema version 1, as ``sqlite_master`` of a file made by that code shows it
V1_DDL = (
    """CREATE TABLE tasks (
        id         INTEGER PRIMARY KEY,
        key        TEXT    NOT NULL UNIQUE,
        payload    BLOB    NOT NULL,
        state      INTEGER NOT NULL,
        not_before REAL    NOT NULL,
        attempts   INTEGER NOT NULL DEFAULT 0,
        lease_id   TEXT,
        last_error TEXT,
        created_at REAL    NOT NULL
    )""",
    "CREATE INDEX tasks_state_time ON tasks (state, not_before)",
    "CREATE TABLE counts (state INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
)
REASON = "RetriesExhausted: 2 attempts to http://127.0.0.1:9/x failed; last: connection: Connect call failed"


def _v1_file(root, campaign: str = "old", edge: str = "a"):
    """A version-1 queue file in WAL mode: ``r`` ready with 2 attempts, ``l`` leased under an expired lease, ``d``
    done, ``x`` dead (3 attempts, REASON); the counts table as version 1 kept it. Returns the path."""
    path = queue_path(root, campaign, edge)
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statement in V1_DDL:
        conn.execute(statement)
    now = time.time()
    rows = [("r", 0, now - 5, 2, None, "HTTP 500"), ("l", 1, now - 1, 0, "2.deadbeef", None),
            ("d", 2, now - 3, 1, None, "HTTP 500"), ("x", 3, now - 2, 3, None, REASON)]
    conn.executemany("INSERT INTO tasks (key, payload, state, not_before, attempts, lease_id, last_error, created_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     [(k, orjson.dumps({"k": k}), st, nb, a, lid, err, now - 10) for k, st, nb, a, lid, err in rows])
    conn.executemany("INSERT INTO counts (state, n) VALUES (?, ?)", [(0, 1), (1, 1), (2, 1), (3, 1)])
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    return path


def _version_and_columns(path) -> tuple[int, list[str]]:
    conn = sqlite3.connect(path)
    try:
        return (conn.execute("PRAGMA user_version").fetchone()[0],
                [r[1] for r in conn.execute("PRAGMA table_info(tasks)")])
    finally:
        conn.close()


V1_COLUMNS = ["id", "key", "payload", "state", "not_before", "attempts", "lease_id", "last_error", "created_at"]
OLD_COUNTS = QueueCounts(ready=2, leased=0, done=1, dead=1)  # the expired lease counts as ready


def test_read_only_looks_read_a_version_1_file_and_change_nothing(tmp_path):
    path = _v1_file(tmp_path)
    assert read_counts(tmp_path, "old", "a") == OLD_COUNTS
    plan = read_planned(tmp_path, "old", "a", ["r", "x", "new"])
    assert plan.states == {"r": "ready", "x": "dead"} and [k for k, _ in plan.pending] == ["r", "l"]
    # status opens its looks with migrate=False (geoagent.status._open)
    from geoagent.status import _open

    cfg = SimpleNamespace(queues_root=lambda: tmp_path, name="old", queue_options=lambda: {"max_attempts": 5})
    q = _open(cfg, path)
    try:
        assert q.schema_version == 1
        assert q.counts_sync() == OLD_COUNTS
        assert [(d.key, d.attempts, d.reason) for d in q.dead_letters_sync()] == [("x", 3, REASON)]
        assert q.state_of("d") == "done"
        # what needs version 2 refuses on such a handle instead of failing half-way
        with pytest.raises(QueueError, match="schema version 2"):
            q.requeue_dead_sync()
        with pytest.raises(QueueError, match="schema version 2"):
            q.refund_attempts_sync([Refund.of_charges("r", ["c"])])
    finally:
        q.close_sync()
    assert _version_and_columns(path) == (1, V1_COLUMNS)


def test_the_first_writer_migrates_a_version_1_file_and_every_task_survives(tmp_path):
    path = _v1_file(tmp_path)

    async def main():
        q = open_queue(tmp_path, "old", "a", max_attempts=3, backoff_base_s=0.0, backoff_max_s=0.0)
        try:
            assert q.schema_version == SCHEMA_VERSION == 4  # version 4 (walk39 #1) adds the lane column
            assert await q.counts() == OLD_COUNTS
            assert await q.put("d", {}) is False  # still the idempotency record
            got = {t.key: t for t in await q.lease(10, 60)}
            assert {k: (t.attempts, t.payload, t.last_error) for k, t in got.items()} == {
                "r": (2, {"k": "r"}, "HTTP 500"), "l": (0, {"k": "l"}, None)}
            # charges on the migrated file: A's charge dead-letters r (2 -> 3), B charges l (0 -> 1)
            assert await q.nack(got["r"], REASON, backoff_s=0, charge="A.1") == "dead"
            assert await q.nack(got["l"], REASON, backoff_s=0, charge="B.1") == "ready"
            res = await q.refund_attempts([Refund.of_charges("r", ["A.1"], dead_reason=REASON),
                                           Refund.of_charges("l", ["B.1"]),
                                           Refund("x", 3, expected=3, dead_reason=REASON)])  # by expected count
            assert (res.refunded, res.revived, res.skipped) == (["l"], ["r", "x"], [])
            assert res.given == {"r": 1, "l": 1, "x": 3}
            back = {t.key: t.attempts for t in await q.lease(10, 60)}
            assert back == {"r": 2, "l": 0, "x": 0}
            assert await q.counts() == QueueCounts(leased=3, done=1)
        finally:
            await q.close()

    anyio.run(main)
    assert _version_and_columns(path) == (4, [*V1_COLUMNS, "charges", "dead_charge", "lane"])
    # a read-only look at the migrated file works the same, and a writer's reopen changes nothing more
    assert read_counts(tmp_path, "old", "a") == QueueCounts(leased=3, done=1)
    SQLiteQueue(path).close_sync()
    assert _version_and_columns(path) == (4, [*V1_COLUMNS, "charges", "dead_charge", "lane"])


def test_a_newer_schema_version_is_refused_by_name(tmp_path):
    path = _v1_file(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    for migrate in (True, False):
        with pytest.raises(QueueError, match="schema version 7"):
            SQLiteQueue(path, migrate=migrate)


def test_hot_path_statements_are_those_of_version_1(tmp_path):
    """Lease, ack and an uncharged nack run exactly the statements of version 1 plus the queue clock's two (counted
    with SQLite's trace hook; none reads or writes the charge columns): BEGIN, the mark, two lease probes, two count
    updates, the mark moved, COMMIT; BEGIN, the mark, one update, two count updates, the mark moved, COMMIT; BEGIN,
    the mark, one select, one update, two count updates, the mark moved, COMMIT."""
    q = SQLiteQueue(queue_path(tmp_path, "hot", "a"), backoff_base_s=0.0)
    try:
        q.put_many_sync([("a", {}), ("b", {})])
        seen: list[str] = []
        q._conn.set_trace_callback(seen.append)
        tasks = q.lease_sync(2, 60)
        lease, seen[:] = list(seen), []
        q.ack_sync(tasks[0])
        ack, seen[:] = list(seen), []
        assert q.nack_sync(tasks[1], "HTTP 500") == "ready"
        nack = list(seen)
        q._conn.set_trace_callback(None)
    finally:
        q.close_sync()
    assert (len(lease), len(ack), len(nack)) == (8, 7, 8)
    assert not [s for s in lease + ack + nack if "charge" in s]
    assert nack[2].startswith("SELECT attempts FROM tasks WHERE id = ")
    mark = [f"SELECT n FROM counts WHERE state = {CLOCK_MARK}", "UPDATE counts SET n = "]
    assert all(s[1] == mark[0] and s[-2].startswith(mark[1]) for s in (lease, ack, nack))
