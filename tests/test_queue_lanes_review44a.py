"""The SQLite queue's lanes and release order (review44a #1, #2, #4; geoagent.runtime.sqlite_queue).

#1: a payload whose ``model`` holds a lone surrogate escape (``"a\\ud800"``) passes SQLite's ``json_valid``, and
``json_extract`` turned it into a lane that is not UTF-8 during the 3 -> 4 migration; reading that lane raised out of
every ``lease_lanes`` of the file. Now the migration reads such a payload with orjson (lane NULL), a lane already
stored so is read as bytes, and the lease dead-letters the row as unreadable and hands out the rest.
#2: a task released without delay (a stop) went behind every task ready then, so a resumed run served it after the rest
of its lane (holes in a model's prefix of the plan); it now goes back to its put place, and so does a hand-back; the
migration puts back the tasks an older release moved.
#4: tasks without a lane (put by an older process) were read ``want`` at a time, so thousands of them of one full lane
hid the other lanes' tasks for hundreds of leases; the lease now reads past them (storing their lanes).
"""

from __future__ import annotations

import sqlite3
import time

import orjson
import pytest

from geoagent.runtime.queue import UNREADABLE_PAYLOAD, QueueCounts
from geoagent.runtime.sqlite_queue import SQLiteQueue, queue_path
from tests.test_queue_lane_lease_walk39 import _rows, _v3_file

#: a payload as stored by hand or by other code: orjson never writes a lone surrogate (it refuses one)
SURROGATE = b'{"model": "a\\ud800", "i": 99}'


def _old_put(path, items: list[tuple[str, dict]]) -> None:
    """A put by a process of version 3 or older still running after the file was migrated: no lane."""
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("BEGIN IMMEDIATE")
    now = time.time()
    added = old.executemany("INSERT OR IGNORE INTO tasks (key, payload, state, not_before, created_at) "
                            "VALUES (?, ?, 0, ?, ?)", [(k, orjson.dumps(p), now, now) for k, p in items]).rowcount
    old.execute("UPDATE counts SET n = n + ? WHERE state = 0", (added,))
    old.execute("COMMIT")
    old.close()


def test_a_lone_surrogate_model_is_dead_lettered_at_lease_not_a_failure_of_every_lease(tmp_path):
    path = queue_path(tmp_path, "camp", "requests")
    plan = [(f"k{i}", orjson.dumps({"model": "ab"[i % 2], "i": i}), 0) for i in range(10)]
    _v3_file(path, [*plan[:5], ("bad", SURROGATE, 0), *plan[5:]], time.time() - 5)
    q = SQLiteQueue(path)  # the migration: orjson reads this payload (it refuses it): no lane
    try:
        assert _rows(path)["bad"][3] is None
        got = [t.key for _ in range(3) for t in q.lease_lanes_sync(4, 60, {"a": 2, "b": 2})]
        assert sorted(got) == [f"k{i}" for i in range(10)]
        (dead,) = q.dead_letters_sync()
        assert dead.key == "bad" and dead.reason.startswith(UNREADABLE_PAYLOAD) and str(path) in dead.reason
        assert q.counts_sync() == QueueCounts(leased=10, dead=1)
        with pytest.raises(TypeError, match="not JSON-serialisable"):  # put never stores such a lane
            q.put_many_sync([("bad2", {"model": "a\ud800"})])
        assert q.state_of("bad2") is None
    finally:
        q.close_sync()


def test_a_lane_already_stored_as_bytes_that_are_not_utf8_stops_no_lease(tmp_path):
    """A file migrated by session-44 code holds such a lane (``a`` + the surrogate's three bytes): the lane walk reads
    it as bytes, leases it as a lane not asked for, and the lease dead-letters the row (its payload is unreadable)."""
    q = SQLiteQueue(tmp_path / "q.sqlite")
    try:
        q.put_many_sync([(f"k{i}", {"model": "ab"[i % 2]}) for i in range(6)])
        with q._lock:  # what json_extract of that payload stored
            q._conn.execute("INSERT INTO tasks (key, payload, state, not_before, created_at, lane) "
                            "VALUES ('bad', ?, 0, 0, 0, CAST(x'61eda080' AS TEXT))", (SURROGATE,))
            q._conn.execute("UPDATE counts SET n = n + 1 WHERE state = 0")
        got = q.lease_lanes_sync(10, 60, {"a": 1, "b": 1, "c": 5})
        assert [t.key for t in got] == ["k0", "k1"]  # a and b get one each; the bad row was leased, then dead
        assert [d.key for d in q.dead_letters_sync()] == ["bad"]
        assert [t.key for t in q.lease_lanes_sync(10, 60, {"a": 5, "b": 5})] == ["k2", "k3", "k4", "k5"]
    finally:
        q.close_sync()


def test_a_release_without_delay_and_a_hand_back_keep_the_put_place(tmp_path):
    """A stop gives its tasks in flight back (``release``): on resume they are their lane's next tasks, not behind
    the rest of it; a delayed release (a deferral) still lines up behind; a gone process's lease (hand-back) goes back
    to its put place too."""
    now = [1000.0]
    q = SQLiteQueue(tmp_path / "q.sqlite", clock=lambda: now[0])
    try:
        for i in range(6):
            q.put_many_sync([(f"a{i}", {"model": "a"})])
            now[0] += 1
        a0, a1 = q.lease_lanes_sync(2, 60, {"a": 2})
        now[0] += 5
        q.release_sync([a1, a0])
        got = q.lease_lanes_sync(3, 60, {"a": 3})
        assert [t.key for t in got] == ["a0", "a1", "a2"]  # before: a2, a3, a4 (a0 and a1 went to the back)
        q.release_sync(got[:1])
        asyncio_release(q, got[1:2], delay_s=2.0)
        assert sorted(t.key for t in q.lease_sync(3, 60)) == ["a0", "a3", "a4"]  # (returned in row order)
        now[0] += 3
        assert sorted(t.key for t in q.lease_sync(3, 60)) == ["a1", "a5"]  # the deferral ended
        assert q.expire_leases_sync() == 6  # every holder gone: back to put order, one attempt each
        assert sorted((t.key, t.attempts) for t in q.lease_sync(3, 60)) == [("a0", 1), ("a1", 1), ("a2", 1)]
    finally:
        q.close_sync()


def asyncio_release(q: SQLiteQueue, tasks, delay_s: float) -> None:
    import asyncio

    asyncio.run(q.release(tasks, delay_s=delay_s))


def test_the_migration_puts_tasks_an_older_release_moved_back_in_place(tmp_path):
    """Version 3 released a task at ``not_before`` = the release time: the migration sets it back to its put time,
    but not a deferral still running (a release with a delay) nor a nacked task waiting out its backoff."""
    path = queue_path(tmp_path, "camp", "requests")
    t0 = time.time() - 100
    _v3_file(path, [(f"a{i}", orjson.dumps({"model": "a"}), 0) for i in range(5)], t0)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE tasks SET not_before = ?, created_at = ? - 10 + id WHERE key = 'a0'", (t0 + 50, t0))  # released
    conn.execute("UPDATE tasks SET not_before = ? WHERE key = 'a1'", (time.time() + 3600,))  # deferred, still running
    conn.execute("UPDATE tasks SET not_before = ?, attempts = 1 WHERE key = 'a2'", (t0 + 50,))  # nacked, retry due
    conn.close()
    q = SQLiteQueue(path)
    try:
        rows = _rows(path)
        assert rows["a0"][1] == pytest.approx(t0 - 9) and rows["a1"][1] > time.time() and rows["a2"][1] == t0 + 50
        assert [t.key for t in q.lease_lanes_sync(5, 60, {"a": 5})] == ["a0", "a3", "a4", "a2"]
    finally:
        q.close_sync()


def test_many_tasks_without_a_lane_of_a_full_lane_hide_no_other_lanes_tasks(tmp_path):
    """2,000 tasks of lane a put without a lane (an older process), then lane b's: one lease with a full finds b's
    tasks, and every a task read on the way gets its lane stored (ready, untouched), so none is read again."""
    path = queue_path(tmp_path, "camp", "requests")
    _v3_file(path, [], time.time() - 5)
    q = SQLiteQueue(path)  # the migration
    try:
        _old_put(path, [(f"a{i:04d}", {"model": "a"}) for i in range(2000)] + [(f"b{i}", {"model": "b"})
                                                                                for i in range(3)])
        got = q.lease_lanes_sync(4, 60, {"a": 0, "b": 4})
        assert [t.key for t in got] == ["b0", "b1", "b2"]  # before: [] (the first 4 rows of a, read again each lease)
        rows = _rows(path)
        assert all(rows[f"a{i:04d}"][::3] == (0, "a") for i in range(2000))
        assert q.counts_sync() == QueueCounts(ready=2000, leased=3)
        assert [t.key for t in q.lease_lanes_sync(2, 60, {"a": 2, "b": 4})] == ["a0000", "a0001"]
    finally:
        q.close_sync()


def test_a_crash_loop_does_not_charge_the_same_tasks_until_they_die(tmp_path):
    """review44f #1: a gone process's lease went back to its put place every time, so in a crash loop (each new
    process killed before its calls end) the next process leased the same first tasks of every model again and,
    after ``max_attempts`` restarts, they were dead-lettered for the crashes alone. A task goes back to its put place
    the first time only; handed back again in a row, behind: each task is charged at most twice in a row, none dies."""
    q = SQLiteQueue(tmp_path / "q.sqlite", max_attempts=5)
    try:
        q.put_many_sync([(f"{m}|{i:03d}", {"model": m}) for i in range(40) for m in "abc"])
        leased = []
        for _restart in range(6):
            got = q.lease_lanes_sync(12, 60, {"a": 4, "b": 4, "c": 4})
            leased.append(sorted(t.key for t in got))
            q.expire_leases_sync()  # killed before any call ended: the next start hands its leases back
        assert leased[1] == leased[0]  # the first crash: back at their put place, leased first again
        assert not set(leased[2]) & set(leased[0])  # the second in a row: behind, other tasks leased
        c = q.counts_sync()
        assert (c.dead, c.ready) == (0, 120), c
        assert max(t.attempts for t in q.lease_sync(120, 60)) == 2
    finally:
        q.close_sync()
