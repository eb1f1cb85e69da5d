"""Adversarial review of session 17's SQLite queue clock (``geoagent.runtime.sqlite_queue``, module docstring "Time").

Attacks that found the code right, kept as guards: a lease held by one handle while another handle's write takes a
long backward step out of the stored times (extend and ack still hold; nobody else gets the task before its real
deadline); many short steps in a row (each held, their sum rebased once past REBASE_AFTER_S); hand-back of a gone
process's lease and ``requeue_dead`` across a long step; the mark row in ``counts`` (recount, ``counts``,
:func:`read_counts` ignore it, recount leaves it); read-only looks at a version-2 file change no byte of it; a fake
clock at 0 or below.

One finding, in the docstring only: a long step is measured from the mark (the time of the queue's last write), not
from the wall clock just before the step, so a backoff or lease deadline ends *later* than the real time it had
left, by the time between that last write and the step (never earlier, as the docstring said):
:func:`test_a_long_step_measured_at_the_mark_ends_late_never_early`.

Every case uses the queue's injectable clock and real files; expectations are hand-computed times and an independent
``sqlite3`` reading of the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3

import pytest
from test_queue_sqlite_clock_step import T0, FakeClock, _v2_file, queue_handles

from geoagent.runtime.queue import QueueCounts, StaleLease
from geoagent.runtime.sqlite_queue import (CLOCK_MARK, REBASE_AFTER_S, SQLiteQueue, count_done, queue_path,
                                           read_counts, read_payloads, read_planned)

HOUR_S = 3600.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queue(tmp_path, clock):
    """Handles on one file (each another process's view), closed at teardown."""
    yield from queue_handles(queue_path(tmp_path, "camp", "edge"), clock, seed=5)


def _stored(path, key: str) -> tuple[int, float]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT state, not_before FROM tasks WHERE key = ?", (key,)).fetchone()
    finally:
        conn.close()


def _mark(path) -> float:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT n FROM counts WHERE state = ?", (CLOCK_MARK,)).fetchone()[0]
    finally:
        conn.close()


def test_a_lease_held_by_one_handle_survives_another_handles_rebase(make_queue, clock):
    """Worker A holds ``a`` (300 s lease); the clock steps back an hour; worker B's put takes the step out of the
    stored times, but not out of lease deadlines: A's lease ends late, never early (B gets nothing at 299 s), and
    A's renewal (from the wall clock) and ack still hold."""
    a_side, b_side = make_queue(), make_queue()
    a_side.put_many_sync([("a", {})])
    (held,) = a_side.lease_sync(1, 300.0)
    clock.now = T0 - HOUR_S
    b_side.put_many_sync([("b", {})])  # the rebase
    assert _stored(a_side.path, "a") == (1, T0 + 300.0)  # the deadline is left to the holder's renewal
    assert [t.key for t in b_side.lease_sync(5, 10_000.0)] == ["b"]
    clock.now = T0 - HOUR_S + 299.0
    assert b_side.lease_sync(5, 60.0) == [] and b_side.counts_sync() == QueueCounts(leased=2)
    assert asyncio.run(a_side.extend([held], 300.0)) == []  # renewed from the wall clock, now past the mark
    clock.now = T0 - HOUR_S + 500.0
    assert b_side.lease_sync(5, 60.0) == []  # 201 s after the renewal: still held
    a_side.ack_sync(held)
    assert b_side.counts_sync() == QueueCounts(leased=1, done=1)


def test_a_long_step_measured_at_the_mark_ends_late_never_early(make_queue, clock):
    """The queue's last write was at T0 (a nack with a 300 s backoff); 200 s pass without a write; the clock steps
    back an hour. The next write shifts the stored times by mark - wall = 3400 s, not the 3600 s of the step, so the
    backoff, which had 100 s of real time left, now has 300 s: it ends 200 s late (the time from the last write to
    the step), never early."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    (first,) = queue.lease_sync(1, 1000.0)
    assert queue.nack_sync(first, "HTTP 500", backoff_s=300.0) == "ready"
    clock.now = T0 + 200.0 - HOUR_S  # 200 s later, then an hour back
    assert [t.key for t in queue.lease_sync(1, 1000.0)] == ["b"]  # the write that shifts
    state, due = _stored(queue.path, "a")
    assert state == 0 and due - clock.now == pytest.approx(300.0)  # not the 100 s it had left
    clock.now += 299.0
    assert queue.lease_sync(1, 60.0) == []
    clock.now += 2.0
    assert [t.key for t in queue.lease_sync(1, 60.0)] == ["a"]


def test_many_short_steps_in_a_row_are_held_then_taken_out_once_past_the_limit(make_queue, clock):
    """Five steps back of 50 s in a row (no real time passing), each followed by a put: a step is held at the mark
    until the wall clock is more than REBASE_AFTER_S behind it, then the next write takes the distance out. Ready
    tasks stay leasable at once and in put order, none is lost, and a backoff set before the steps never ends early
    in real time (at most one held step, REBASE_AFTER_S, late)."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("n", {})])
    _, n = queue.lease_sync(2, 1000.0)
    assert queue.nack_sync(n, "HTTP 500", backoff_s=120.0) == "ready"  # due 120 s of real time from now
    for i in range(5):
        clock.now -= 50.0
        queue.put_many_sync([(f"p{i}", {})])
        assert _mark(queue.path) - clock.now <= REBASE_AFTER_S  # never held past the limit
    start = clock.now
    assert [t.key for t in queue.lease_sync(10, 1000.0)] == [f"p{i}" for i in range(5)]  # at once, in put order
    clock.now = start + 119.0
    assert queue.lease_sync(10, 1000.0) == []  # "n": not before its 120 s
    clock.now = start + 120.0 + REBASE_AFTER_S
    assert [t.key for t in queue.lease_sync(10, 1000.0)] == ["n"]
    assert queue.recount_sync() == QueueCounts(leased=7)


def test_hand_back_and_requeue_across_a_long_step(make_queue, clock):
    """A gone process's lease handed back after a long step is ready at once (at the wall clock, after the shift),
    and so is a requeued dead task; neither is left waiting for the clock to catch up."""
    queue = make_queue(max_attempts=3)
    queue.put_many_sync([("a", {}), ("b", {})])
    a, b = queue.lease_sync(2, 600.0)
    queue.dead_letter_sync(b, "HTTP 404")
    clock.now = T0 - HOUR_S
    assert queue.expire_leases_sync() == 1  # the shift and the hand-back, one transaction
    assert queue.requeue_dead_sync() == 1
    assert sorted(t.key for t in queue.lease_sync(5, 60.0)) == ["a", "b"]
    with pytest.raises(StaleLease):
        queue.ack_sync(a)


def test_the_mark_row_is_no_state(make_queue, clock):
    """``counts`` holds the mark as one more row: counts, read_counts and recount ignore it; recount leaves it."""
    queue = make_queue()
    queue.put_many_sync([(k, {}) for k in "abc"])
    queue.ack_sync(queue.lease_sync(1, 60.0))
    clock.now = T0 + 10.0
    mark = _mark(queue.path)
    assert queue.recount_sync() == QueueCounts(ready=2, done=1)
    assert _mark(queue.path) >= mark and queue.counts_sync() == QueueCounts(ready=2, done=1)
    assert read_counts(queue.path.parent.parent, "camp", "edge") == QueueCounts(ready=2, done=1)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_only_looks_leave_a_version_2_file_byte_for_byte(tmp_path, clock):
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    before = _digest(path)
    assert read_counts(tmp_path, "camp", "edge") == QueueCounts(ready=2, done=1)
    plan = read_planned(tmp_path, "camp", "edge", ["r1", "d", "zz"])
    assert plan.states == {"r1": "ready", "d": "done"} and plan.idle == frozenset({"r1", "r2"})
    assert count_done(tmp_path, "camp", "edge", [("m", "d"), ("m", "r1")]) == {"m": 1}
    assert set(read_payloads(tmp_path, "camp", "edge", ["r1", "d"])) == {"r1", "d"}
    look = SQLiteQueue(path, clock=clock, create=False, migrate=False)
    try:
        assert look.dead_letters_sync() == [] and look.state_of("r2") == "ready"
    finally:
        look.close_sync()
    assert _digest(path) == before
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    finally:
        conn.close()


@pytest.mark.parametrize("start", [0.0, -50.0])
def test_a_fake_clock_at_zero_or_below(make_queue, clock, start):
    clock.now = start
    queue = make_queue()
    queue.put_many_sync([("a", {})])
    (held,) = queue.lease_sync(1, 10.0)
    clock.now = start + 9.0
    assert queue.lease_sync(1, 10.0) == [] and queue.counts_sync() == QueueCounts(leased=1)
    clock.now = start + 11.0
    (again,) = queue.lease_sync(1, 10.0)
    assert again.key == "a" and again.lease_id != held.lease_id
