"""Tests of the durable SQLite WAL queue (issue 2, point 2, and the "many workers, one machine" acceptance).

Every expectation is checked against an independent reading of the database file (a separate plain
``sqlite3`` connection) or against hand-computed values (backoff formula), never against the queue's
own bookkeeping alone. Time-dependent semantics (expiry, backoff) use an injected fake clock, plus one
real-time expiry test with wide margins.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from geoagent.runtime.queue import DeadLetter, QueueCounts, QueueError, StaleLease, Task, open_queue
from geoagent.runtime.sqlite_queue import SQLiteQueue, queue_path, read_counts

REPO_ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    """A settable unix clock shared by a queue under test."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def raw_rows(path: Path) -> dict[str, dict]:
    """Read every task row with an independent connection: key -> column dict."""
    conn = sqlite3.connect(path)
    try:
        conn.row_factory = sqlite3.Row
        return {row["key"]: dict(row) for row in conn.execute("SELECT * FROM tasks")}
    finally:
        conn.close()


def raw_state_counts(path: Path) -> dict[str, int]:
    names = {0: "ready", 1: "leased", 2: "done", 3: "dead"}
    conn = sqlite3.connect(path)
    try:
        got = dict(conn.execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall())
    finally:
        conn.close()
    return {name: got.get(state, 0) for state, name in names.items()}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queue(tmp_path, clock):
    """Factory of queues on one file under tmp_path, all closed at teardown."""
    opened: list[SQLiteQueue] = []

    def make(edge: str = "edge", **options) -> SQLiteQueue:
        options.setdefault("clock", clock)
        options.setdefault("seed", 7)
        queue = SQLiteQueue.open(tmp_path / "queues", "camp", edge, **options)
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close_sync()


# --------------------------------------------------------------------------- opening and layout
def test_open_queue_creates_wal_file_under_campaign_folder(tmp_path):
    queue = open_queue(tmp_path, "camp-1", "requests")
    try:
        path = tmp_path / "camp-1" / "requests.sqlite"
        assert isinstance(queue, SQLiteQueue) and queue.path == path and path.is_file()
        assert queue.name == "requests"
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()
    finally:
        queue.close_sync()


@pytest.mark.parametrize("campaign, edge", [("../up", "e"), ("c", "a/b"), ("", "e"), ("c", ".hidden"), ("c", "x..y")])
def test_unsafe_names_are_rejected(tmp_path, campaign, edge):
    with pytest.raises(ValueError, match="unsafe"):
        open_queue(tmp_path, campaign, edge)
    assert not any(tmp_path.iterdir())  # nothing created


def test_create_false_and_read_counts_on_missing_queue(tmp_path):
    with pytest.raises(FileNotFoundError, match="no queue file"):
        SQLiteQueue(queue_path(tmp_path, "c", "e"), create=False)
    assert read_counts(tmp_path, "c", "e") is None
    assert not (tmp_path / "c").exists()


def test_not_a_queue_file_is_a_clear_error(tmp_path):
    path = tmp_path / "c" / "e.sqlite"
    path.parent.mkdir()
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(QueueError, match="cannot open"):
        SQLiteQueue(path)
    assert path.read_bytes() == b"this is not a database" * 100  # never overwritten


def test_bad_options(tmp_path):
    path = tmp_path / "q.sqlite"
    for bad in ({"max_attempts": 0}, {"backoff_base_s": -1}, {"synchronous": "SOMETIMES"}, {"put_chunk": 0}):
        with pytest.raises(ValueError):
            SQLiteQueue(path, **bad)


def test_lease_and_dead_letter_queries_use_the_index(make_queue):
    """Lease, expired-lease probe and dead-letter listing are index searches, never table scans."""
    queue = make_queue()
    conn = sqlite3.connect(queue.path)
    queries = [
        "SELECT id FROM tasks WHERE state = 0 AND not_before <= 1 ORDER BY not_before LIMIT 32",
        "SELECT count(*) FROM tasks WHERE state = 1 AND not_before <= 1",
        "SELECT key FROM tasks WHERE state = 3 ORDER BY not_before DESC LIMIT 100",
    ]
    for sql in queries:
        plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert "USING COVERING INDEX tasks_state_time" in plan or "USING INDEX tasks_state_time" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort step
    # the statements the queue really runs: rowid look-ups driven by the index, never a SCAN
    from geoagent.runtime.sqlite_queue import _ACK_SQL, _LEASE_SQL

    lease_params = {"expires": 1, "token": "t", "now": 1, "n": 32, "from_state": 0}
    for sql, params in ((_LEASE_SQL, lease_params), (_ACK_SQL, (1, 1, "1.t", "k"))):
        plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "USING INTEGER PRIMARY KEY" in plan and "SCAN" not in plan, plan
    conn.close()


# --------------------------------------------------------------------------- put
def test_put_is_idempotent_by_key_in_every_state(make_queue):
    queue = make_queue(max_attempts=1)
    assert asyncio.run(queue.put("a", {"v": 1})) is True
    assert asyncio.run(queue.put("a", {"v": 2})) is False
    assert queue.put_many_sync([(f"k{i}", {"i": i}) for i in range(4)]) == 4
    # drive k0 done, k1 leased, k2 dead; k3 and a stay ready
    tasks = {t.key: t for t in queue.lease_sync(3, 60)}
    assert set(tasks) == {"a", "k0", "k1"}
    queue.ack_sync(tasks["k0"])
    queue.release_sync(tasks["a"])
    assert queue.nack_sync(tasks["k1"], "boom") == "dead"  # max_attempts=1
    k2 = [t for t in queue.lease_sync(5, 60) if t.key == "k2"][0]
    before = raw_rows(queue.path)
    assert queue.put_many_sync([("a", {"v": 9}), ("k0", {}), ("k1", {}), ("k2", {}), ("k3", {})]) == 0
    assert asyncio.run(queue.put("k2", {"v": 9})) is False
    assert raw_rows(queue.path) == before  # nothing changed: state, payload, lease, attempts
    assert raw_rows(queue.path)["a"]["payload"] == b'{"v":1}'
    queue.ack_sync(k2)  # the existing lease is still valid


def test_put_validation_names_the_key_and_writes_nothing(make_queue):
    queue = make_queue()
    with pytest.raises(TypeError, match="non-empty str"):
        queue.put_many_sync([("", {})])
    with pytest.raises(TypeError, match="'bad'.*JSON"):
        queue.put_many_sync([("ok", {}), ("bad", {"x": object()})])
    with pytest.raises(TypeError, match="must be a dict"):
        asyncio.run(queue.put("k", ["not", "a", "dict"]))
    assert raw_rows(queue.path) == {}
    assert queue.counts_sync() == QueueCounts()


def test_put_many_commits_per_chunk(make_queue):
    queue = make_queue(put_chunk=10)
    items = [(f"k{i:02d}", {"i": i}) for i in range(35)]
    assert asyncio.run(queue.put_many(iter(items))) == 35  # a generator works too
    assert len(raw_rows(queue.path)) == 35
    bad = [(f"n{i:02d}", {"i": i}) for i in range(25)] + [("n25", {"x": {1, 2}})]
    with pytest.raises(TypeError, match="n25"):
        queue.put_many_sync(bad)
    # chunks 0-9 and 10-19 committed; the chunk holding the bad item (20-25) wrote nothing
    assert sorted(k for k in raw_rows(queue.path) if k.startswith("n")) == [f"n{i:02d}" for i in range(20)]
    assert queue.put_many_sync(bad[:25]) == 5  # re-putting completes the rest


def test_payload_round_trip(make_queue):
    queue = make_queue()
    payload = {"prompt": "où est-ce ? 東京", "image_id": "123", "lat": 48.8566, "n": [1, 2, None], "ok": True}
    queue.put_many_sync([("k", payload)])
    (task,) = asyncio.run(queue.lease(1, 30))
    assert task.payload == payload and task.attempts == 0 and task.last_error is None


# --------------------------------------------------------------------------- lease
@pytest.mark.parametrize("inline", [True, False])
def test_lease_fifo_limits_and_exclusive(make_queue, inline):
    queue = make_queue(inline=inline)
    keys = [f"t{i:03d}" for i in range(100)]

    async def go():
        assert await queue.put_many([(k, {"k": k}) for k in keys]) == 100
        first = await queue.lease(30, 60)
        second = await queue.lease(30, 60)
        assert await queue.lease(0, 60) == []
        return first, second

    first, second = asyncio.run(go())
    assert [t.key for t in first] == keys[:30] and [t.key for t in second] == keys[30:60]
    lease_ids = [t.lease_id for t in first + second]
    assert len(set(lease_ids)) == 60
    assert queue.counts_sync() == QueueCounts(ready=40, leased=60)
    rows = raw_rows(queue.path)
    assert all(rows[t.key]["state"] == 1 and rows[t.key]["lease_id"] == t.lease_id for t in first)
    rest = queue.lease_sync(1000, 60)
    assert [t.key for t in rest] == keys[60:] and queue.lease_sync(10, 60) == []
    with pytest.raises(ValueError, match="visibility_timeout_s"):
        queue.lease_sync(1, 0)


def test_visibility_timeout_expiry_and_redelivery(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    old = {t.key: t for t in queue.lease_sync(2, 10.0)}
    clock.advance(9.9)
    assert queue.lease_sync(5, 10.0) == []
    assert queue.counts_sync() == QueueCounts(leased=2)
    queue.ack_sync(old["b"])  # acking before anyone re-leases is fine even when late
    clock.advance(0.2)  # a's lease has now expired
    assert queue.counts_sync() == QueueCounts(ready=1, done=1)  # expired leases count as ready
    (again,) = queue.lease_sync(5, 10.0)
    assert again.key == "a" and again.lease_id != old["a"].lease_id and again.attempts == 0
    with pytest.raises(StaleLease):
        queue.ack_sync(old["a"])
    assert raw_rows(queue.path)["a"]["state"] == 1  # stale ack changed nothing
    queue.ack_sync(again)
    assert raw_state_counts(queue.path) == {"ready": 0, "leased": 0, "done": 2, "dead": 0}


def test_visibility_timeout_expiry_real_clock(tmp_path):
    """The same with the real clock (wide margins: 1.5 s timeout, checked well before and after)."""

    async def go():
        async with SQLiteQueue(tmp_path / "q.sqlite") as queue:
            await queue.put("a", {})
            t0 = time.monotonic()
            (first,) = await queue.lease(1, 1.5)
            early = await queue.lease(1, 1.5)
            assert time.monotonic() - t0 < 1.5 and early == []
            await asyncio.sleep(1.5 - (time.monotonic() - t0) + 0.3)
            (second,) = await queue.lease(1, 30)
            assert second.key == "a" and second.lease_id != first.lease_id
            with pytest.raises(StaleLease):
                await queue.release(first)
            await queue.ack(second)
            assert await queue.counts() == QueueCounts(done=1)

    asyncio.run(go())


def test_expired_leases_are_served_before_ready_tasks(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([("old", {})])
    queue.lease_sync(1, 5.0)
    clock.advance(1.0)
    queue.put_many_sync([("new", {})])
    clock.advance(10.0)
    assert [t.key for t in queue.lease_sync(1, 5.0)] == ["old"]


# --------------------------------------------------------------------------- stale leases
def test_stale_lease_on_every_operation_changes_nothing(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([("a", {"x": 1})])
    (old,) = queue.lease_sync(1, 5.0)
    clock.advance(6.0)
    (new,) = queue.lease_sync(1, 5.0)
    before = raw_rows(queue.path)
    for op in (
        lambda: queue.ack_sync(old),
        lambda: queue.release_sync([old]),
        lambda: queue.nack_sync(old, "late"),
        lambda: queue.dead_letter_sync(old, "late"),
        lambda: asyncio.run(queue.ack(old)),
        lambda: asyncio.run(queue.nack(old, "late")),
        lambda: queue.ack_sync(Task(key="a", payload={}, attempts=0, lease_id="forged")),
    ):
        with pytest.raises(StaleLease, match="no longer held"):
            op()
        assert raw_rows(queue.path) == before
    assert queue.counts_sync() == QueueCounts(leased=1)
    queue.ack_sync(new)
    with pytest.raises(StaleLease):  # a second ack of the same lease is stale too
        queue.ack_sync(new)


def test_batch_ack_with_one_stale_lease_applies_the_others(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([(k, {}) for k in "abcd"])
    tasks = queue.lease_sync(4, 5.0)
    clock.advance(6.0)
    (b_again,) = [t for t in queue.lease_sync(1, 5.0) if t.key == "a"] or [None]
    assert b_again is not None  # 'a' (oldest) was re-leased
    with pytest.raises(StaleLease) as info:
        asyncio.run(queue.ack(tasks))
    assert info.value.stale_keys == ["a"]
    rows = raw_rows(queue.path)
    assert [rows[k]["state"] for k in "abcd"] == [1, 2, 2, 2]
    assert queue.counts_sync() == QueueCounts(leased=1, done=3)


# --------------------------------------------------------------------------- nack, backoff, dead letters
def test_nack_backoff_is_exponential_with_equal_jitter(make_queue, clock):
    base, cap = 2.0, 20.0
    queue = make_queue(max_attempts=10, backoff_base_s=base, backoff_max_s=cap)
    queue.put_many_sync([("a", {})])
    for attempt in range(1, 10):
        (task,) = queue.lease_sync(1, 60)
        assert task.attempts == attempt - 1
        assert task.last_error == (None if attempt == 1 else f"fail {attempt - 1}")
        t_nack = clock.now
        assert queue.nack_sync(task, f"fail {attempt}") == "ready"
        delay = raw_rows(queue.path)["a"]["not_before"] - t_nack
        nominal = min(cap, base * 2 ** (attempt - 1))  # 2, 4, 8, 16, 20, 20, ...
        assert nominal / 2 <= delay <= nominal, (attempt, delay)
        clock.advance(delay - 0.01)
        assert queue.lease_sync(1, 60) == []  # not before the backoff has passed
        clock.advance(0.02)
    row = raw_rows(queue.path)["a"]
    assert row["attempts"] == 9 and row["last_error"] == "fail 9" and row["state"] == 0


def test_backoff_jitter_spreads_and_respects_bounds(make_queue, clock):
    queue = make_queue(max_attempts=100, backoff_base_s=8.0, backoff_max_s=8.0, seed=1)
    queue.put_many_sync([(f"k{i}", {}) for i in range(200)])
    tasks = queue.lease_sync(200, 60)
    for task in tasks:
        queue.nack_sync(task, "x")
    delays = [row["not_before"] - clock.now for row in raw_rows(queue.path).values()]
    assert min(delays) >= 4.0 and max(delays) <= 8.0
    # uniform on [4, 8]: mean 6, sd 4/sqrt(12) = 1.155; 200 draws -> the mean is within 0.3 of 6
    assert abs(sum(delays) / len(delays) - 6.0) < 0.3
    assert len({round(d, 6) for d in delays}) > 190


def test_nack_backoff_override_is_exact(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([("a", {})])
    (task,) = queue.lease_sync(1, 60)
    assert asyncio.run(queue.nack(task, "429", backoff_s=5.0)) == "ready"
    assert raw_rows(queue.path)["a"]["not_before"] == pytest.approx(clock.now + 5.0)
    with pytest.raises(ValueError):
        (task,) = queue.lease_sync(1, 60) or [task]
        queue.nack_sync(task, "x", backoff_s=-1)


def test_dead_after_max_attempts_keeps_reason_and_time(make_queue, clock):
    queue = make_queue(max_attempts=3, backoff_base_s=1.0)
    queue.put_many_sync([("a", {"p": 1})])
    states = []
    for attempt in range(3):
        (task,) = queue.lease_sync(2, 60)
        states.append(queue.nack_sync(task, f"HTTP 500 #{attempt + 1}"))
        clock.advance(10.0)
    assert states == ["ready", "ready", "dead"]
    died_at = clock.now - 10.0
    queue.put_many_sync([("a", {"p": 2}), ("b", {"p": 3})])  # re-putting a dead key is a no-op
    clock.advance(1000.0)
    assert [t.key for t in queue.lease_sync(5, 60)] == ["b"]  # a is never delivered again
    (dead,) = queue.dead_letters_sync()
    assert dead == DeadLetter(key="a", payload={"p": 1}, attempts=3, reason="HTTP 500 #3", failed_at=died_at)
    assert queue.counts_sync() == QueueCounts(leased=1, dead=1)


def test_dead_letter_direct_and_listing_order(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([(f"k{i}", {"i": i}) for i in range(5)])
    tasks = queue.lease_sync(5, 60)
    for task in tasks:
        asyncio.run(queue.dead_letter(task, f"HTTP 400: bad request {task.key}"))
        clock.advance(1.0)
    listed = asyncio.run(queue.dead_letters(limit=3))
    assert [d.key for d in listed] == ["k4", "k3", "k2"]  # most recent first
    assert listed[0].reason == "HTTP 400: bad request k4" and listed[0].attempts == 1
    assert listed[0].failed_at == pytest.approx(clock.now - 1.0)
    assert queue.counts_sync() == QueueCounts(dead=5)


def test_release_counts_no_attempt_and_is_immediately_leasable(make_queue):
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    tasks = queue.lease_sync(2, 60)
    asyncio.run(queue.release(tasks))
    again = queue.lease_sync(2, 60)
    assert sorted(t.key for t in again) == ["a", "b"] and all(t.attempts == 0 for t in again)


def test_requeue_dead_all_or_by_key(make_queue):
    queue = make_queue(max_attempts=2)
    queue.put_many_sync([(k, {}) for k in "abc"])
    for task in queue.lease_sync(3, 60):
        queue.dead_letter_sync(task, "no")
    assert asyncio.run(queue.requeue_dead(["b", "zz"])) == 1
    (b,) = queue.lease_sync(5, 60)
    assert b.key == "b" and b.attempts == 0 and b.last_error == "no"
    assert queue.requeue_dead_sync() == 2
    assert sorted(t.key for t in queue.lease_sync(5, 60)) == ["a", "c"]
    with pytest.raises(TypeError):
        queue.requeue_dead_sync("abc")


# --------------------------------------------------------------------------- counts and persistence
def test_counts_match_an_independent_count_after_random_operations(make_queue, clock):
    queue = make_queue(max_attempts=3, backoff_base_s=0.5)
    rng = random.Random(3)
    held: list[Task] = []
    for step in range(400):
        op = rng.random()
        if op < 0.25:
            queue.put_many_sync([(f"k{rng.randrange(300)}", {"s": step}) for _ in range(rng.randint(1, 8))])
        elif op < 0.45:
            held += queue.lease_sync(rng.randint(1, 6), rng.choice([1.0, 30.0]))
        elif held:
            task = held.pop(rng.randrange(len(held)))
            action = rng.choice(["ack", "nack", "release", "dead"])
            try:
                {"ack": queue.ack_sync, "release": queue.release_sync}.get(action, lambda t: None)(task)
                if action == "nack":
                    queue.nack_sync(task, "e")
                elif action == "dead":
                    queue.dead_letter_sync(task, "e")
            except StaleLease:
                pass
        if op > 0.97:
            queue.requeue_dead_sync()
        clock.advance(rng.random())
        if step % 50 == 0:
            stored = raw_state_counts(queue.path)
            conn = sqlite3.connect(queue.path)
            expired = conn.execute(
                "SELECT count(*) FROM tasks WHERE state = 1 AND not_before <= ?", (clock.now,)
            ).fetchone()[0]
            conn.close()
            assert queue.counts_sync() == QueueCounts(
                ready=stored["ready"] + expired,
                leased=stored["leased"] - expired,
                done=stored["done"],
                dead=stored["dead"],
            )
    assert queue.recount_sync() == QueueCounts(**raw_state_counts(queue.path))


def test_state_survives_close_and_reopen(tmp_path, clock):
    path = tmp_path / "q.sqlite"
    queue = SQLiteQueue(path, clock=clock)
    queue.put_many_sync([(f"k{i}", {"i": i}) for i in range(10)])
    leased = queue.lease_sync(4, 60)
    queue.ack_sync(leased[:2])
    queue.close_sync()
    with pytest.raises(QueueError, match="closed"):
        queue.counts_sync()
    reopened = SQLiteQueue(path, clock=clock)
    assert reopened.counts_sync() == QueueCounts(ready=6, leased=2, done=2)
    reopened.ack_sync(leased[2:])  # leases survive a restart
    assert read_counts(tmp_path, "q", "q") is None  # different layout: the helper looks under root/campaign
    assert reopened.counts_sync() == QueueCounts(ready=6, done=4)
    reopened.close_sync()


def test_read_counts_from_another_connection(tmp_path):
    queue = open_queue(tmp_path, "camp", "scored")
    queue.put_many_sync([("a", {}), ("b", {})])
    queue.lease_sync(1, 60)
    assert read_counts(tmp_path, "camp", "scored") == QueueCounts(ready=1, leased=1)
    queue.close_sync()


# --------------------------------------------------------------------------- concurrency
def test_busy_write_lock_goes_to_the_thread_without_blocking_the_loop(tmp_path):
    """Another connection holds the write lock for 0.5 s: the ack waits on the worker thread while the
    event loop keeps running (ticks continue), then succeeds."""
    path = tmp_path / "q.sqlite"

    async def go():
        async with SQLiteQueue(path) as queue:
            await queue.put_many([("a", {}), ("b", {})])
            tasks = await queue.lease(2, 60)
            blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            blocker.execute("BEGIN IMMEDIATE")
            threading.Timer(0.5, lambda: blocker.execute("COMMIT")).start()
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            tick_task = asyncio.create_task(ticker())
            t0 = time.monotonic()
            await queue.ack(tasks)
            waited = time.monotonic() - t0
            tick_task.cancel()
            blocker.close()
            assert waited >= 0.4  # it really waited for the lock
            assert ticks >= 10  # ... without blocking the loop
            assert queue.busy_fallbacks == 1
            assert await queue.counts() == QueueCounts(done=2)

    asyncio.run(go())


@pytest.mark.parametrize("inline", [True, False])
def test_many_coroutines_share_one_queue_object(tmp_path, inline):
    """20 coroutines of one event loop lease and ack through one SQLiteQueue: each task acked once."""
    keys = [f"k{i:04d}" for i in range(2000)]

    async def go():
        async with SQLiteQueue(tmp_path / "q.sqlite", inline=inline) as queue:
            await queue.put_many([(k, {}) for k in keys])
            acked: list[str] = []

            async def consumer(seed: int) -> None:
                rng = random.Random(seed)
                while tasks := await queue.lease(rng.randint(1, 20), 60.0):
                    await asyncio.sleep(0)
                    await queue.ack(tasks)
                    acked.extend(t.key for t in tasks)

            await asyncio.gather(*(consumer(i) for i in range(20)))
            assert sorted(acked) == keys
            assert await queue.counts() == QueueCounts(done=len(keys))

    asyncio.run(go())


@pytest.mark.parametrize("checkpoint_every", [10, 10**9])
def test_wal_checkpoints_run_off_the_event_loop(tmp_path, checkpoint_every):
    """With inline calls SQLite's auto-checkpoint is off (with a huge ``checkpoint_every`` the pages stay
    in the WAL); the queue's own passive checkpoints on the worker thread copy them into the database."""
    path = tmp_path / "q.sqlite"

    async def go():
        async with SQLiteQueue(path, checkpoint_every=checkpoint_every) as queue:
            assert queue.inline
            assert queue._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
            size0 = path.stat().st_size
            for i in range(50):  # ~0.9 MB of payload
                await queue.put_many([(f"k{i}-{j}", {"pad": "x" * 500}) for j in range(32)])
            deadline = time.monotonic() + (10 if checkpoint_every == 10 else 1)
            while path.stat().st_size < size0 + 500_000 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert (path.stat().st_size >= size0 + 500_000) == (checkpoint_every == 10)
            assert await queue.counts() == QueueCounts(ready=50 * 32)

    asyncio.run(go())


def test_synchronous_full_uses_the_thread_and_works(tmp_path):
    async def go():
        async with SQLiteQueue(tmp_path / "q.sqlite", synchronous="FULL") as queue:
            assert queue.inline is False
            assert queue._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
            await queue.put_many([("a", {}), ("b", {})])
            tasks = await queue.lease(2, 60)
            await queue.ack(tasks[0])
            assert await queue.nack(tasks[1], "x", backoff_s=0) == "ready"
            assert await queue.counts() == QueueCounts(ready=1, done=1)

    asyncio.run(go())


def _lease_ack_worker(path: str, out: str, seed: int, ready: Any = None, go: Any = None) -> None:
    """Child process: lease random batches and ack them until the queue is empty; record acked keys.

    With ``ready``/``go`` (multiprocessing events) it opens the queue, says it is ready, and starts leasing
    only when the parent lets every worker go at once (on a loaded machine a spawned child can otherwise
    take half a minute to start, and the first one drains the queue alone)."""
    rng = random.Random(seed)
    acked: list[str] = []

    async def run() -> None:
        async with SQLiteQueue(path) as queue:
            if ready is not None:
                ready.set()
                go.wait(120)
            idle = 0
            while idle < 20:
                tasks = await queue.lease(rng.randint(1, 16), 60.0)
                if not tasks:
                    idle += 1
                    await asyncio.sleep(0.01)
                    continue
                idle = 0
                await queue.ack(tasks)
                acked.extend(t.key for t in tasks)

    asyncio.run(run())
    Path(out).write_text(json.dumps(acked))


def test_four_processes_lease_and_ack_each_task_exactly_once(tmp_path):
    path = tmp_path / "q.sqlite"
    keys = [f"task-{i:05d}" for i in range(3000)]
    queue = SQLiteQueue(path)
    queue.put_many_sync([(k, {"k": k}) for k in keys])
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"acked-{i}.json" for i in range(4)]
    readies = [ctx.Event() for _ in outs]
    go = ctx.Event()
    procs = [ctx.Process(target=_lease_ack_worker, args=(str(path), str(o), i, r, go))
             for i, (o, r) in enumerate(zip(outs, readies))]
    for p in procs:
        p.start()
    for r in readies:
        assert r.wait(120)
    go.set()  # all four lease from the same moment
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    per_process = [json.loads(o.read_text()) for o in outs]
    all_acked = [k for acked in per_process for k in acked]
    assert len(all_acked) == len(keys) and sorted(all_acked) == keys  # each exactly once, none lost
    assert sum(1 for acked in per_process if acked) >= 2  # the work really was shared
    assert raw_state_counts(path) == {"ready": 0, "leased": 0, "done": 3000, "dead": 0}
    assert queue.counts_sync() == QueueCounts(done=3000)
    queue.close_sync()


_CRASH_CHILD = r"""
import asyncio, sys
from geoagent.runtime.sqlite_queue import SQLiteQueue

async def main():
    queue = SQLiteQueue(sys.argv[1])
    while True:
        tasks = await queue.lease(8, 600.0)
        if not tasks:
            await asyncio.sleep(0.01)
            continue
        await queue.put_many([("out-" + t.key, {}) for t in tasks])
        await queue.ack(tasks)
        print(" ".join(t.key for t in tasks), flush=True)  # reported only after the ack returned

asyncio.run(main())
"""


def test_sigkill_loses_no_acknowledged_work(tmp_path):
    """SIGKILL a worker at random moments (3 kills, restarting it each time): every ack that returned is
    still done after reopening, the file is intact, the counts table is exact, and leases held at the
    last kill come back once their visibility timeout passes."""
    path = tmp_path / "q.sqlite"
    queue = SQLiteQueue(path)
    queue.put_many_sync([(f"k{i:05d}", {}) for i in range(50_000)])
    queue.close_sync()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    rng = random.Random(5)
    reported: list[str] = []
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _CRASH_CHILD, str(path)], stdout=subprocess.PIPE, env=env, text=True
        )
        target = len(reported) + rng.randint(500, 2_000)
        while len(reported) < target:
            line = child.stdout.readline()
            assert line, "worker ended early"
            reported += line.split()
        time.sleep(rng.uniform(0.0, 0.02))  # land the kill anywhere in the lease/put/ack cycle
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
        reported += rest.split()
        assert child.returncode == -signal.SIGKILL
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    rows = raw_rows(path)
    assert all(rows[k]["state"] == 2 and rows["out-" + k]["state"] == 0 for k in reported)
    clock = FakeClock(time.time() + 601.0)  # past every visibility timeout of the dead worker
    queue = SQLiteQueue(path, clock=clock)
    stored = raw_state_counts(path)
    assert queue.recount_sync() == QueueCounts(**stored)  # the counts table was exact at the kill
    assert queue.counts_sync() == QueueCounts(ready=stored["ready"] + stored["leased"], done=stored["done"])
    held = {k for k, row in rows.items() if row["state"] == 1}
    assert len(held) <= 3 * 8  # at most one batch per killed worker (none if killed between batches)
    redelivered = queue.lease_sync(100, 60.0)
    assert held <= {t.key for t in redelivered}  # expired leases come back first
    queue.close_sync()


# --------------------------------------------------------------------------- soak: 8 workers + aggregator
SOAK_S = 60.0


def _soak_feeder(root: str, out: str, feed_s: float) -> None:
    """Put new tasks on queue1 in random batches for feed_s seconds (plus duplicate re-puts)."""
    result = {"keys": 0, "error": None}
    try:
        async def run() -> None:
            rng = random.Random(99)
            async with SQLiteQueue.open(root, "soak", "queue1") as q1:
                i, t_end = 0, time.monotonic() + feed_s
                while time.monotonic() < t_end:
                    n = rng.randint(1, 40)
                    items = [(f"t{j:07d}", {"j": j, "pad": "x" * rng.randint(0, 400)}) for j in range(i, i + n)]
                    dup = [(f"t{rng.randrange(i + 1):07d}", {"dup": True})] if i else []
                    await q1.put_many(items + dup)
                    i += n
                    await asyncio.sleep(0.03)
                result["keys"] = i

        asyncio.run(run())
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        result["error"] = repr(exc)
    Path(out).write_text(json.dumps(result))


def _soak_worker(root: str, out: str, wid: int, feeder_done: str, deadline: float) -> None:
    """Move tasks queue1 -> queue2: lease, (sometimes nack/release), put output, ack input."""
    result = {"acked": [], "nacked": 0, "released": 0, "fallbacks": 0, "error": None}
    try:
        async def run() -> None:
            rng = random.Random(wid)
            async with SQLiteQueue.open(root, "soak", "queue1", max_attempts=1000) as q1, \
                    SQLiteQueue.open(root, "soak", "queue2") as q2:
                while time.time() < deadline:
                    tasks = await q1.lease(rng.randint(1, 32), 60.0)
                    if not tasks:
                        if Path(feeder_done).exists() and (await q1.counts()).pending == 0:
                            break
                        await asyncio.sleep(0.02)
                        continue
                    keep = []
                    for task in tasks:
                        roll = rng.random()
                        if roll < 0.03:
                            await q1.nack(task, f"flaky in worker {wid}", backoff_s=0.05)
                            result["nacked"] += 1
                        elif roll < 0.04:
                            await q1.release(task)
                            result["released"] += 1
                        else:
                            keep.append(task)
                    await asyncio.sleep(0.001 * len(keep))  # the "work"
                    await q2.put_many([(t.key, {"from": wid, "j": t.payload.get("j")}) for t in keep])
                    await q1.ack(keep)
                    result["acked"] += [t.key for t in keep]
                result["fallbacks"] = q1.busy_fallbacks + q2.busy_fallbacks

        asyncio.run(run())
    except BaseException as exc:  # noqa: BLE001
        result["error"] = repr(exc)
    Path(out).write_text(json.dumps(result))


def _soak_aggregator(root: str, out: str, workers_done: list[str], deadline: float) -> None:
    """Consume queue2 until every worker has finished and queue2 is drained."""
    result = {"acked": [], "max_wal_bytes": 0, "error": None}
    wals = [queue_path(root, "soak", e).with_name(e + ".sqlite-wal") for e in ("queue1", "queue2")]
    try:
        async def run() -> None:
            async with SQLiteQueue.open(root, "soak", "queue2") as q2:
                while time.time() < deadline:
                    for wal in wals:
                        try:
                            result["max_wal_bytes"] = max(result["max_wal_bytes"], wal.stat().st_size)
                        except FileNotFoundError:  # the last connection to close deletes the WAL
                            pass
                    tasks = await q2.lease(64, 60.0)
                    if not tasks:
                        if all(Path(p).exists() for p in workers_done) and (await q2.counts()).pending == 0:
                            break
                        await asyncio.sleep(0.02)
                        continue
                    await q2.ack(tasks)
                    result["acked"] += [t.key for t in tasks]

        asyncio.run(run())
    except BaseException as exc:  # noqa: BLE001
        result["error"] = repr(exc)
    Path(out).write_text(json.dumps(result))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_eight_worker_processes_and_aggregator_for_60s(tmp_path):
    """Acceptance (issue 2): 8 worker processes plus the aggregator on the same queue files for 60 s
    raise no "database is locked" (or any) error and lose nothing: every key is done exactly once in
    each queue."""
    root = str(tmp_path / "queues")
    for edge in ("queue1", "queue2"):  # create both files up front
        SQLiteQueue.open(root, "soak", edge).close_sync()
    ctx = multiprocessing.get_context("spawn")
    deadline = time.time() + SOAK_S + 120.0  # hard stop for a hung child; normal runs end at ~SOAK_S
    feeder_out = tmp_path / "feeder.json"
    worker_outs = [tmp_path / f"worker-{i}.json" for i in range(8)]
    agg_out = tmp_path / "aggregator.json"
    procs = [ctx.Process(target=_soak_feeder, args=(root, str(feeder_out), SOAK_S))]
    procs += [
        ctx.Process(target=_soak_worker, args=(root, str(o), i, str(feeder_out), deadline))
        for i, o in enumerate(worker_outs)
    ]
    agg_args = (root, str(agg_out), [str(o) for o in worker_outs], deadline)
    procs.append(ctx.Process(target=_soak_aggregator, args=agg_args))
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=max(1.0, deadline - time.time() + 10))
    assert [p.exitcode for p in procs] == [0] * len(procs)

    feeder = json.loads(feeder_out.read_text())
    workers = [json.loads(o.read_text()) for o in worker_outs]
    aggregator = json.loads(agg_out.read_text())
    errors = [r["error"] for r in [feeder, aggregator, *workers] if r["error"]]
    assert errors == []  # no "database is locked", no anything
    expected = [f"t{j:07d}" for j in range(feeder["keys"])]
    assert len(expected) > 5_000
    moved = [k for w in workers for k in w["acked"]]
    assert len(moved) == len(expected) and sorted(moved) == expected  # each acked once in queue1
    assert sorted(aggregator["acked"]) == expected  # and once in queue2
    assert sum(w["nacked"] for w in workers) > 0 and sum(1 for w in workers if w["acked"]) == 8
    for edge in ("queue1", "queue2"):
        path = queue_path(root, "soak", edge)
        assert raw_state_counts(path) == {"ready": 0, "leased": 0, "done": len(expected), "dead": 0}
        assert read_counts(root, "soak", edge) == QueueCounts(done=len(expected))
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
    assert aggregator["max_wal_bytes"] < 64 * 2**20  # checkpoints keep the WAL bounded under load
    print(
        f"soak: {len(expected)} tasks; busy fallbacks to the thread: {sum(w['fallbacks'] for w in workers)}; "
        f"largest WAL seen {aggregator['max_wal_bytes'] / 2**20:.1f} MiB"
    )


def test_release_with_a_delay_keeps_the_task_back_without_counting_an_attempt(make_queue, clock):
    """``release(tasks, delay_s=...)`` (the stage runner's deferral of a task whose lane is full): the task is
    ready again (counted so: a burst run does not end meanwhile) but not leased before the delay has passed,
    no attempt is counted, and it lines up behind the tasks that were ready before it."""
    queue = make_queue()
    queue.put_many_sync([("a", {"i": 1}), ("b", {"i": 2})])
    (a,) = queue.lease_sync(1)
    asyncio.run(queue.release([a], delay_s=2.0))
    assert queue.counts_sync().ready == 2 and queue.counts_sync().leased == 0
    clock.advance(1.0)
    assert [t.key for t in queue.lease_sync(5)] == ["b"]
    clock.advance(1.5)
    (again,) = queue.lease_sync(5)
    assert again.key == "a" and again.attempts == 0
    with pytest.raises(ValueError):
        asyncio.run(queue.release([again], delay_s=-1.0))
