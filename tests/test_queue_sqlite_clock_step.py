"""The SQLite queue's clock never runs backwards (geoagent.runtime.sqlite_queue, "Time"): a backward step of the wall
clock (NTP correction, VM resume, an operator fixing the date) must not stall tasks that were ready before it.

Before the queue clock, every task put ready at t had ``not_before = t``; after the wall clock stepped back by X no
worker could lease it until real time caught up (X seconds, hours if the clock had been hours ahead), while
``counts`` still called it ready. The queue clock is ``max(wall clock, high-water mark stored in the file)``, so:
ready tasks stay leasable at once, in every process (the mark is in the file, not in a process's memory);
after a short step (up to REBASE_AFTER_S) backoffs and lease deadlines are measured on the held queue clock (never
shorter; in real time they stretch by up to X); after a long one (an hour here) the next write moves the stored
times back by X, so they keep the real time they had left instead of waiting X more; ``counts`` and the other read-only looks use the same clock, so they agree with ``lease``; a forward step
behaves as before; a file of schema version 2 is migrated (a read-only look leaves it as it is). Every case uses
the queue's injectable clock (:class:`FakeClock`), never a mock of the queue; expectations are hand-computed times
and an independent ``sqlite3`` reading of the file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator

import orjson
import pytest

from geoagent.runtime.queue import QueueCounts, Refund
from geoagent.runtime.sqlite_queue import REBASE_AFTER_S, SCHEMA_VERSION, SQLiteQueue, queue_path

T0 = 100_000.0  #: unix s of the puts before the step
STEP_S = 3600.0  #: a long step back (an hour): taken out of the stored times by the next write
SHORT_S = 20.0  #: a short step back (up to REBASE_AFTER_S): the queue clock holds at the mark


class FakeClock:
    """A settable wall clock (unix s) shared by the queues of one test."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def queue_handles(path, clock, seed: int) -> Iterator[Callable[..., SQLiteQueue]]:
    """Generator behind the ``make_queue`` fixtures of the queue-clock tests: yields a factory of handles on the
    queue file ``path`` (each a fresh object: another process's view) on ``clock``, closes them all afterwards."""
    opened: list[SQLiteQueue] = []

    def make(**options) -> SQLiteQueue:
        options.setdefault("clock", clock)
        options.setdefault("seed", seed)
        queue = SQLiteQueue(path, **options)
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close_sync()


@pytest.fixture
def make_queue(tmp_path, clock):
    yield from queue_handles(queue_path(tmp_path, "camp", "edge"), clock, seed=3)


def not_before(path, key: str) -> float:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT not_before FROM tasks WHERE key = ?", (key,)).fetchone()[0]
    finally:
        conn.close()


def test_ready_tasks_put_before_a_backward_step_are_leased_at_once(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {}), ("c", {})])
    clock.now = T0 - STEP_S
    assert queue.counts_sync() == QueueCounts(ready=3)
    assert [t.key for t in queue.lease_sync(10, 60)] == ["a", "b", "c"]  # at once, in put order


def test_a_fresh_handle_after_the_step_sees_them_ready(make_queue, clock):
    """Another process opening the file after the step (no memory of the time before it) leases them at once,
    and its ``counts`` agree."""
    first = make_queue()
    first.put_many_sync([("a", {}), ("b", {})])
    first.close_sync()
    clock.now = T0 - STEP_S
    second = make_queue()
    assert second.counts_sync() == QueueCounts(ready=2)
    assert [t.key for t in second.lease_sync(10, 60)] == ["a", "b"]
    look = make_queue(create=False, migrate=False)  # a read-only look (status) agrees
    assert look.counts_sync() == QueueCounts(leased=2)


def test_tasks_put_after_the_step_queue_behind_the_earlier_ones(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([("a", {})])
    clock.now = T0 - SHORT_S
    queue.put_many_sync([("z", {})])  # put at the held queue clock, not at the stepped wall clock
    assert not_before(queue.path, "z") == T0
    queue.put_many_sync([("b", {})])
    assert [t.key for t in queue.lease_sync(10, 60)] == ["a", "z", "b"]


def test_a_backoff_waits_its_full_time_in_queue_time_across_a_short_step(make_queue, clock):
    """A nack's backoff set before a short step is not shortened (the queue clock never runs back, and it holds at
    the mark until the wall clock passes it); one set after the step is measured from the held clock."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    a, b = queue.lease_sync(2, 60)
    assert queue.nack_sync(a, "HTTP 500", backoff_s=30.0) == "ready"
    assert not_before(queue.path, "a") == T0 + 30.0
    clock.now = T0 - SHORT_S
    assert queue.nack_sync(b, "HTTP 500", backoff_s=30.0) == "ready"
    assert not_before(queue.path, "b") == T0 + 30.0  # from the held clock, not T0 - SHORT_S + 30
    clock.now = T0 - 1.0  # 19 s of real time later: the queue clock has not moved
    assert queue.lease_sync(10, 60) == [] and queue.counts_sync() == QueueCounts(ready=2)
    clock.now = T0 + 29.9
    assert queue.lease_sync(10, 60) == []
    clock.now = T0 + 30.1
    assert sorted(t.key for t in queue.lease_sync(10, 60)) == ["a", "b"]


def test_a_lease_deadline_is_kept_in_queue_time_and_counts_agree_with_lease(make_queue, clock):
    """A lease taken before the step is not expired early by the held clock, nor late once the wall clock is
    past the mark; ``counts`` (expired leases count as ready) says exactly what ``lease`` then does."""
    queue = make_queue()
    queue.put_many_sync([("a", {})])
    (held,) = queue.lease_sync(1, 10.0)
    clock.now = T0 - SHORT_S
    assert queue.counts_sync() == QueueCounts(leased=1) and queue.lease_sync(1, 10.0) == []
    clock.now = T0 + 9.9
    assert queue.counts_sync() == QueueCounts(leased=1) and queue.lease_sync(1, 10.0) == []
    clock.now = T0 + 10.1
    assert queue.counts_sync() == QueueCounts(ready=1)
    (again,) = queue.lease_sync(1, 10.0)
    assert again.key == "a" and again.lease_id != held.lease_id


def test_releases_requeues_and_revivals_after_the_step_are_ready_at_once(make_queue, clock):
    """Every way back to ready-at-once uses the queue clock: release, requeue_dead, a refund's revival, the
    hand-back of a gone process's lease, a zero-backoff nack."""
    queue = make_queue(max_attempts=2)
    queue.put_many_sync([(k, {}) for k in "abcdef"])
    got = {t.key: t for t in queue.lease_sync(6, 60)}
    queue.dead_letter_sync(got["b"], "HTTP 404")
    assert queue.nack_sync(got["c"], "HTTP 500", backoff_s=0, charge="c.1") == "ready"
    (c,) = queue.lease_sync(1, 60)
    assert queue.nack_sync(c, "HTTP 500", backoff_s=0, charge="c.2") == "dead"
    clock.now = T0 - SHORT_S
    queue.release_sync(got["a"])
    assert queue.requeue_dead_sync(["b"]) == 1
    res = queue.refund_attempts_sync([Refund.of_charges("c", ["c.2"], dead_reason="HTTP 500")])
    assert res.revived == ["c"]
    assert queue.nack_sync(got["d"], "HTTP 500", backoff_s=0) == "ready"
    assert queue.expire_leases_sync() == 2  # e and f: their process is gone
    assert {k: not_before(queue.path, k) for k in "abcdef"} == dict.fromkeys("abcdef", T0)
    assert sorted(t.key for t in queue.lease_sync(10, 60)) == list("abcdef")


def test_failure_times_never_run_backwards(make_queue, clock):
    """``dead_letters`` lists newest failure first by the stored time: one after the step is not older."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    a, b = queue.lease_sync(2, 60)
    queue.dead_letter_sync(a, "HTTP 404")
    clock.now = T0 - SHORT_S
    queue.dead_letter_sync(b, "HTTP 410")
    assert [d.failed_at for d in queue.dead_letters_sync()] == [T0, T0]


def test_the_queue_clock_follows_the_wall_clock_again_once_past_the_mark(make_queue, clock):
    queue = make_queue()
    queue.put_many_sync([("a", {})])
    clock.now = T0 - SHORT_S
    queue.put_many_sync([("b", {})])
    clock.now = T0 + 100.0
    queue.put_many_sync([("c", {})])
    (a,) = queue.lease_sync(1, 60)
    assert queue.nack_sync(a, "HTTP 500", backoff_s=5.0) == "ready"
    assert not_before(queue.path, "c") == T0 + 100.0 and not_before(queue.path, "a") == T0 + 105.0


def test_a_forward_step_behaves_as_before(make_queue, clock):
    """A forward step is real time passing, for the queue: leases expire and backoffs end."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    a, _ = queue.lease_sync(2, 60.0)
    assert queue.nack_sync(a, "HTTP 500", backoff_s=300.0) == "ready"
    clock.now = T0 + STEP_S
    assert queue.counts_sync() == QueueCounts(ready=2)
    assert sorted(t.key for t in queue.lease_sync(10, 60)) == ["a", "b"]


def test_a_lease_poll_of_an_empty_queue_writes_nothing(make_queue, clock):
    """The mark is advanced only by a transaction that stores a time: polling an empty queue adds no WAL frame."""
    queue = make_queue()
    queue.put_many_sync([("a", {})])
    queue.ack_sync(queue.lease_sync(1, 60))
    wal = queue.path.with_name(queue.path.name + "-wal")
    size = wal.stat().st_size
    for _ in range(20):
        clock.now += 1.0
        assert queue.lease_sync(10, 60) == []
    assert wal.stat().st_size == size


# --------------------------------------------------------------------------- a file of schema version 2
#: the DDL of schema version 2 (sessions 9-16), as ``sqlite_master`` of a file made by that code shows it
V2_DDL = (
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
    "INSERT INTO counts (state, n) VALUES (0, 2), (1, 0), (2, 1), (3, 0)",
)


def _v2_file(path) -> None:
    """A version-2 queue file in WAL mode as that code left it: ``r1``, ``r2`` put ready at T0, ``d`` done."""
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statement in V2_DDL:
        conn.execute(statement)
    conn.executemany("INSERT INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, ?, ?, ?)",
                     [(k, orjson.dumps({"k": k}), st, T0, T0) for k, st in (("r1", 0), ("r2", 0), ("d", 2))])
    conn.execute("PRAGMA user_version = 2")
    conn.close()


def _version_and_counts_rows(path) -> tuple[int, list[tuple[int, float]]]:
    conn = sqlite3.connect(path)
    try:
        return (conn.execute("PRAGMA user_version").fetchone()[0],
                conn.execute("SELECT state, n FROM counts ORDER BY state").fetchall())
    finally:
        conn.close()


def test_a_version_2_file_is_read_as_it_is_then_migrated_and_keeps_its_tasks_ready(tmp_path, clock):
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    clock.now = T0 + 0.5
    look = SQLiteQueue(path, clock=clock, create=False, migrate=False)  # status: reads, writes nothing
    try:
        assert look.schema_version == 2 and look.counts_sync() == QueueCounts(ready=2, done=1)
    finally:
        look.close_sync()
    assert _version_and_counts_rows(path) == (2, [(0, 2), (1, 0), (2, 1), (3, 0)])
    queue = SQLiteQueue(path, clock=clock)  # the first writer migrates (the mark starts at its clock)
    try:
        assert queue.schema_version == SCHEMA_VERSION == 4
        version, rows = _version_and_counts_rows(path)
        assert version == 4 and rows[1:] == [(0, 2), (1, 0), (2, 1), (3, 0)] and rows[0][0] < 0
        clock.now = T0 - STEP_S
        assert queue.counts_sync() == QueueCounts(ready=2, done=1)
        assert [t.key for t in queue.lease_sync(10, 60)] == ["r1", "r2"]
        assert queue.put_many_sync([("d", {}), ("n", {})]) == 1  # still the idempotency record
    finally:
        queue.close_sync()


def test_a_read_only_handle_on_a_version_2_file_still_takes_charges(tmp_path, clock):
    """What needs version 2 (charges, refunds by charge id, requeue) keeps working on a version-2 file opened with
    ``migrate=False``; it runs on the wall clock, as version 2 did."""
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    q = SQLiteQueue(path, clock=clock, create=False, migrate=False)
    try:
        t, _ = q.lease_sync(2, 60)
        assert q.nack_sync(t, "HTTP 500", backoff_s=0, charge="x.1") == "ready"
        assert q.refund_attempts_sync([Refund.of_charges("r1", ["x.1"])]).refunded == ["r1"]
    finally:
        q.close_sync()
    assert _version_and_counts_rows(path)[0] == 2


def _mark(path) -> float | None:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT n FROM counts WHERE state = -1").fetchone()
        return None if row is None else row[0]
    finally:
        conn.close()


@pytest.mark.parametrize("step", [SHORT_S, STEP_S])
def test_a_step_back_taken_before_the_upgrade_is_undone_by_the_migration(tmp_path, clock, step):
    """The wall clock stepped back while version-2 code ran (its tasks were put and acked at T0, ahead of the clock
    now). Before (session 18): the migration started the mark at the migrating process's clock, T0 - step, so the
    tasks put before the step stayed unleasable for the step's length (an hour here), as on version 2. Now the mark
    starts at the newest time the file records (T0: the puts and the ack), so the step is held (short) or taken out
    by the first write (long), as for a step taken after the upgrade."""
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    clock.now = T0 - step
    queue = SQLiteQueue(path, clock=clock)
    try:
        assert _mark(path) == T0  # before: T0 - step
        assert [t.key for t in queue.lease_sync(10, 60)] == ["r1", "r2"]  # before: [] for `step` s
        if step > REBASE_AFTER_S:  # the first write took the step out: the queue runs on the wall clock again
            assert _mark(path) == T0 - step and not_before(path, "r1") == T0 - step + 60
        else:  # held at the mark
            assert _mark(path) == T0 and not_before(path, "r1") == T0 + 60
    finally:
        queue.close_sync()


def test_the_migration_mark_ignores_times_legitimately_ahead(tmp_path, clock):
    """A running backoff (a ready task's not_before) and a lease deadline lie ahead of the clock without any step:
    the mark starts at the wall clock, not at them, and neither task becomes leasable early."""
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executemany("INSERT INTO tasks (key, payload, state, not_before, created_at, attempts, lease_id) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)",
                     [("backoff", b"{}", 0, T0 + 3000.0, T0 - 5.0, 1, None),
                      ("held", b"{}", 1, T0 + 300.0, T0 - 5.0, 0, "5.other-0")])
    conn.execute("UPDATE counts SET n = n + 1 WHERE state IN (0, 1)")
    conn.close()
    clock.now = T0 + 1.0
    queue = SQLiteQueue(path, clock=clock)
    try:
        assert _mark(path) == T0 + 1.0
        assert [t.key for t in queue.lease_sync(10, 60)] == ["r1", "r2"]
        assert not_before(path, "backoff") == T0 + 3000.0 and not_before(path, "held") == T0 + 300.0
    finally:
        queue.close_sync()


def test_a_lost_mark_row_starts_again_at_the_newest_time_the_file_records(make_queue, clock):
    """A version-3 file whose mark row is gone (a repair by hand, a copy of the table): before, the queue ran on the
    wall clock for good and a step back stalled the tasks put before it; now the first write adds the mark again,
    started at the newest recorded time (the puts and the ack at T0), so the step is taken out as usual."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {}), ("c", {})])
    queue.ack_sync(queue.lease_sync(1, 60))
    conn = sqlite3.connect(queue.path, isolation_level=None)
    conn.execute("DELETE FROM counts WHERE state = -1")
    conn.close()
    clock.now = T0 - STEP_S
    other = make_queue()
    assert [t.key for t in other.lease_sync(10, 60)] == ["b", "c"]  # before: [] for an hour
    assert _mark(queue.path) == T0 - STEP_S  # re-added at T0, then the step was taken out


# --- a long step back (over REBASE_AFTER_S): the next write takes it out of the stored times ---------------------

def test_a_long_step_keeps_the_real_time_a_backoff_had_left(make_queue, clock):
    """Holding the clock through a long step would delay a retry by the whole step (here an hour); the first write
    after it moves the stored times back by the step, so the backoff ends when it had 300 s left."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    (a,) = queue.lease_sync(1, 60)
    assert queue.nack_sync(a, "HTTP 500", backoff_s=300.0) == "ready"
    clock.now = T0 - STEP_S
    queue.put_many_sync([("c", {})])  # any write: the shift, in the same transaction
    assert not_before(queue.path, "a") == T0 + 300.0 - STEP_S
    assert [t.key for t in queue.lease_sync(10, 1000)] == ["b", "c"]  # ready ones at once, in order
    clock.now = T0 - STEP_S + 299.0
    assert queue.lease_sync(10, 60) == []
    clock.now = T0 - STEP_S + 301.0  # before the shift: not until T0 + 300, an hour later
    assert [t.key for t in queue.lease_sync(10, 60)] == ["a"]


def test_a_long_step_leaves_a_lease_deadline_to_its_holders_renewal(make_queue, clock):
    """A lease deadline is not moved by the shift (a step undone later must not end a live lease early): the lease
    ends late, not early, and the holder's renewal sets it from the wall clock."""
    queue = make_queue()
    queue.put_many_sync([("a", {}), ("b", {})])
    (held,) = queue.lease_sync(1, 60.0)
    clock.now = T0 - STEP_S
    assert [t.key for t in queue.lease_sync(1, 600.0)] == ["b"]  # a write: the shift
    assert not_before(queue.path, "a") == T0 + 60.0  # the deadline as it was
    clock.now = T0 - STEP_S + 61.0
    assert queue.counts_sync() == QueueCounts(leased=2)  # late, not early
    assert asyncio.run(queue.extend([held], 60.0)) == []  # the holder's renewal: from the wall clock
    assert not_before(queue.path, "a") == T0 - STEP_S + 121.0
    clock.now = T0 - STEP_S + 122.0
    assert queue.counts_sync() == QueueCounts(ready=1, leased=1)
    (again,) = queue.lease_sync(1, 60.0)
    assert again.key == "a" and again.lease_id != held.lease_id


def test_a_long_step_undone_by_a_step_forward_ends_no_live_lease_early(make_queue, clock):
    """The session-17 review's case: A leases ``a`` for 300 s; the wall clock wrongly steps back 295 s; B writes (the
    shift); the clock is corrected forward 15 s after A's lease began. Before: the shift had moved A's deadline back
    295 s, so B leased ``a`` again while A's lease had 285 s left, and A's ack raised StaleLease."""
    a_side, b_side = make_queue(), make_queue()
    a_side.put_many_sync([("a", {})])
    (held,) = a_side.lease_sync(1, 300.0)
    clock.now = T0 - 295.0
    b_side.put_many_sync([("b", {})])  # the shift
    clock.now = T0 + 15.0  # corrected
    assert [t.key for t in b_side.lease_sync(5, 600.0)] == ["b"]  # not "a": its lease is live
    a_side.ack_sync(held)
    assert b_side.counts_sync() == QueueCounts(leased=1, done=1)

def test_a_long_step_is_taken_out_once_and_reads_before_it_hold(make_queue, clock):
    """Reads before the first write hold at the mark (ready tasks count as ready); the shift moves ready, leased and
    dead tasks' times together and leaves done tasks' times; a later write does not shift again."""
    queue = make_queue()
    queue.put_many_sync([(k, {}) for k in "abcd"])
    got = {t.key: t for t in queue.lease_sync(2, 60)}  # a, b
    queue.ack_sync(got["a"])
    queue.dead_letter_sync(got["b"], "HTTP 404")
    clock.now = T0 - STEP_S
    look = make_queue()  # another process, opened after the step
    assert look.counts_sync() == QueueCounts(ready=2, done=1, dead=1)
    assert not_before(queue.path, "c") == T0  # a read shifts nothing
    look.put_many_sync([("e", {})])
    assert {k: not_before(queue.path, k) for k in "abcde"} == {
        "a": T0, "b": T0 - STEP_S, "c": T0 - STEP_S, "d": T0 - STEP_S, "e": T0 - STEP_S}
    clock.now = T0 - STEP_S + 5.0
    queue.put_many_sync([("f", {})])
    assert not_before(queue.path, "c") == T0 - STEP_S and not_before(queue.path, "f") == T0 - STEP_S + 5.0
    assert [t.key for t in queue.lease_sync(10, 60)] == ["c", "d", "e", "f"]


@pytest.mark.parametrize("step, shifted", [(REBASE_AFTER_S, False), (REBASE_AFTER_S + 1.0, True)])
def test_the_shift_starts_past_rebase_after_s(make_queue, clock, step, shifted):
    queue = make_queue()
    queue.put_many_sync([("a", {})])
    clock.now = T0 - step
    queue.put_many_sync([("b", {})])
    assert not_before(queue.path, "a") == (T0 - step if shifted else T0)
    assert not_before(queue.path, "b") == (T0 - step if shifted else T0)
    assert [t.key for t in queue.lease_sync(10, 60)] == ["a", "b"]
