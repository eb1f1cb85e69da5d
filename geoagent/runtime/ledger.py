"""Cost ledger with a hard cap, in ``state/<campaign>/campaign.sqlite`` (shared with the response store).

Issue 2 point 7. Before a paid call the model caller *reserves* a worst-case cost (estimated input tokens x
input price + ``max_output_tokens`` x output price); the call starts only if

    spent + unknown + open reservations + this reservation <= cap           (all in USD)

and the check-and-insert runs in one ``BEGIN IMMEDIATE`` transaction, so it holds across coroutines,
threads and processes sharing the file. Afterwards exactly one of these closes the reservation:

* :meth:`Ledger.settle` - the call returned; its actual cost becomes spend (the response store calls it
  inside the same transaction that stores the response, so "stored" and "paid for" never disagree);
* :meth:`Ledger.release` - the call was certainly not sent or not billed (e.g. HTTP 400): nothing spent;
* :meth:`Ledger.mark_unknown` - the outcome is unknown (connection dropped after sending): the provider may
  have billed it, so it stays counted at the reservation amount as *unknown-outcome spend*.

Crash recovery (conservative, by design): when a :class:`Ledger` opens, reservations still *open* whose
owning process is gone (same host, pid no longer running or reused; in another pid namespace, container or boot
of the machine, its run's owner lock file no longer held) are converted to unknown-outcome
spend at their reservation amount. A crashed process may have sent those calls; we cannot know whether
the provider billed them, so we count them. Reservations of live processes (other workers on the same
file) are left alone; ``recover_all=True`` converts every open reservation (use it only when no other
process can be using the file). This can make the ledger's total exceed the provider's real bill, never
fall short of it.

Amounts are stored as integer nano-USD (1e-9 USD) so cap comparisons are exact (20 x $0.05 == $1.00);
reservations round up, settlements round to nearest.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import secrets as _pysecrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace as _dc_replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from geoagent import constants as C
from geoagent.runtime.errors import PicklableError
from geoagent.runtime.procs import boot_id, proc_start, process_alive
from geoagent.runtime.sqlite_wal import connect, create_whole, damaged_file_error, enable_wal, is_reading_only
from geoagent.runtime.stage import BudgetStop

T = TypeVar("T")
#: a schema script's table statement and its rows, for :meth:`CampaignDB._stand_ins`
_CREATE_TABLE_RE = re.compile(r"\s*CREATE TABLE IF NOT EXISTS (\w+)")
_INSERT_ROWS_RE = re.compile(r"\s*INSERT OR IGNORE INTO (\w+)")

NANO_PER_USD = 1_000_000_000
#: the ``note`` of a settled reservation whose answer reported no usable usage (``Usage.reported`` False): it was
#: settled at its reservation, the worst case (:meth:`Ledger.settle`), and is counted per model as
#: ``unreported_calls`` / ``unreported_usd`` (:meth:`Ledger.spend_by_model`)
USAGE_NOT_REPORTED = "usage not reported: booked at the reservation (worst case)"


#: binary-float noise tolerated before a reservation is rounded up, relative to the nano-USD amount: ``usd * 1e9``
#: is within about one unit in the last place (2.2e-16 relative) of the decimal amount meant; 1e-15 is ~4.5 of them
_ROUND_UP_NOISE = 1e-15


def usd_to_nano(usd: float, *, round_up: bool = False) -> int:
    """USD -> integer nano-USD (ceil when ``round_up``, for reservations; else nearest).

    Rounding up first takes off the binary-float noise of the product, so an amount that is a whole number of
    nano-USD stays that number (``0.05 * 1e9 = 50000000.00000001``, ``32.02 * 1e9 = 32020000000.000004``): the noise
    grows with the amount, so the tolerance is relative (:data:`_ROUND_UP_NOISE`), and at least 1e-6 nano-USD.

    Raises
    ------
    ValueError
        ``usd`` is negative, NaN or infinite.
    """
    if not math.isfinite(usd) or usd < 0:
        raise ValueError(f"amount must be a finite, non-negative number of USD, got {usd!r}")
    scaled = usd * NANO_PER_USD
    return int(math.ceil(scaled - max(1e-6, scaled * _ROUND_UP_NOISE))) if round_up else int(round(scaled))


def nano_to_usd(nano: int) -> float:
    return nano / NANO_PER_USD


class LedgerError(RuntimeError):
    """Misuse of the ledger (unknown reservation id, corrupt state)."""


class BudgetExhausted(PicklableError, BudgetStop):
    """Reserving this call could push spend past the cap. The model caller turns it into ``BudgetStop``.

    Attributes are in USD: ``requested_usd``, ``spent_usd``, ``unknown_usd``, ``reserved_usd``, ``cap_usd``.
    Picklable (:class:`~geoagent.runtime.errors.PicklableError`): the five amounts travel.
    """

    def __init__(self, requested_usd: float, spent_usd: float, unknown_usd: float, reserved_usd: float, cap_usd: float):
        self.requested_usd = requested_usd
        self.spent_usd = spent_usd
        self.unknown_usd = unknown_usd
        self.reserved_usd = reserved_usd
        self.cap_usd = cap_usd
        super().__init__(
            f"budget exhausted: spent ${spent_usd:.6f} + unknown ${unknown_usd:.6f} + reserved ${reserved_usd:.6f}"
            f" + this call ${requested_usd:.6f} > cap ${cap_usd:.6f}"
        )


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run the schema ``script`` on autocommit connection ``conn`` in one ``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled
    back on error): its statements one by one committed each on its own, so another process could read a table
    made and its first row not yet written (race45 #1: ``ledger_totals`` without its row, an ``IndexError``)."""
    try:
        conn.executescript(f"BEGIN IMMEDIATE;\n{script}\n;\nCOMMIT;")  # the script's last ; may be left out
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


# ------------------------------------------------------------------------------------------------
# the shared SQLite file
# ------------------------------------------------------------------------------------------------


class CampaignDB:
    """One connection to ``campaign.sqlite`` (WAL) shared by the ledger and the response store.

    Every transaction is ``BEGIN IMMEDIATE`` (the write lock is taken up front, so concurrent
    read-modify-write across processes cannot interleave) under a per-connection re-entrant lock, so a
    store ``put`` can call ``ledger.settle`` inside its own transaction. Async callers use :meth:`run`,
    which executes on one dedicated thread so the event loop never blocks on the file lock.

    Group commit: jobs queued with :meth:`submit_future` / :meth:`run` while the database thread is busy
    are run together, up to ``group_max`` at a time, inside ONE ``BEGIN IMMEDIATE`` ... ``COMMIT``,
    each job in its own ``SAVEPOINT`` (a job that raises is rolled back alone and gets its exception).
    Every job's future resolves only after that ``COMMIT`` returned, so a caller that acks a queue
    task after ``await db.run(...)`` still acks only durable work. This turns the per-call store and
    ledger writes of many concurrent model calls into one transaction and one thread hand-off per
    group, instead of one of each per call.

    Parameters
    ----------
    path : path
        The SQLite file (parent folders are created).
    busy_timeout_s : float
        How long a transaction waits for another process's write lock before failing (s).
    synchronous : {"NORMAL", "FULL"}
        SQLite ``synchronous`` pragma. ``NORMAL`` (default) in WAL mode survives process crashes (SIGKILL);
        ``FULL`` also survives power loss at the cost of an fsync per commit.
    schema : sequence of str
        Schema scripts of a new file: when ``path`` does not exist it is made whole with them, in one transaction
        (:func:`geoagent.runtime.sqlite_wal.create_whole`), so no other process sees it without its tables.
    """

    #: most jobs run in one group-commit transaction
    group_max: int = 256

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 60.0, synchronous: str = "NORMAL",
                 schema: Sequence[str] = ()):
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError("synchronous must be NORMAL or FULL")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if schema:
            create_whole(self.path, lambda conn: _run_script(conn, "".join(schema)))
        self._conn = connect(  # sqlite3.connect; a read-only folder is one clear error (DatabaseAccessError)
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        mode = enable_wal(self._conn, timeout_s=busy_timeout_s)  # retries concurrent first opens
        if mode != "wal":
            raise LedgerError(f"{self.path}: could not switch to WAL mode (got {mode})")
        self._conn.execute(f"PRAGMA synchronous={synchronous}")
        self._lock = threading.RLock()
        self._depth = 0
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        # group commit: jobs waiting for the database thread, and whether a drain is scheduled
        self._jobs: list[tuple[Callable[[], Any], Any]] = []  # (fn, Future or _LoopSink)
        self._jobs_lock = threading.Lock()
        self._draining = False

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error); nested use joins the outer one."""
        with self._lock:
            if self._closed:
                raise LedgerError(f"{self.path}: database is closed")
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                self._raise_damaged(exc)
                raise
            self._depth = 1
            try:
                yield self._conn
            except BaseException as exc:
                self._depth = 0
                if self._conn.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL): keep that error
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.DatabaseError:
                        if not isinstance(exc, sqlite3.DatabaseError):
                            raise
                if isinstance(exc, sqlite3.DatabaseError):
                    self._raise_damaged(exc)
                raise
            self._depth = 0
            try:
                self._conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                self._raise_damaged(exc)
                raise

    def _raise_damaged(self, exc: sqlite3.DatabaseError) -> None:
        """Raise :class:`geoagent.runtime.sqlite_wal.DatabaseFileError` naming this file when ``exc`` says it is
        damaged (break25 #3: ``run`` and ``export`` printed a traceback for a malformed ``campaign.sqlite``); return
        otherwise (the caller re-raises ``exc``). The step that met the damage wrote nothing (a transaction rolled
        back, a schema script's statements are idempotent); earlier steps may have written."""
        damaged = damaged_file_error(None, exc, self.path, at_open=False)
        if damaged is not None:
            raise damaged from None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Within the block every :meth:`read` of this connection sees the file as one moment: one read transaction
        (``BEGIN`` ... ``COMMIT``; in WAL mode its snapshot is taken at its first read), this connection's lock held,
        so a look's figures agree with each other while a run writes (race45 #6: ``status`` showed stored answers
        and settled calls of different moments). For reads only: a :meth:`transaction` inside it fails. Nested, or
        inside a transaction, it adds nothing."""
        with self._lock:
            if self._closed:
                raise LedgerError(f"{self.path}: database is closed")
            if self._depth or self._conn.in_transaction:
                yield
                return
            self._conn.execute("BEGIN")
            try:
                yield
            except BaseException:
                if self._conn.in_transaction:  # ends the read only: the block's own error is the one to raise
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise
            if self._conn.in_transaction:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.DatabaseError as exc:
                    self._raise_damaged(exc)
                    raise

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one read-only query (autocommit snapshot) and return all rows.

        Raises
        ------
        geoagent.runtime.sqlite_wal.DatabaseFileError
            The query reached a damaged part of the file (``database disk image is malformed``: a file whose
            header is whole opens, and its damage shows only here); the message names the file and what to do.
        """
        with self._lock:
            if self._closed:
                raise LedgerError(f"{self.path}: database is closed")
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                damaged = damaged_file_error(None, exc, self.path, at_open=False)  # earlier writes may exist
                if damaged is None:
                    raise
                raise damaged from None

    def executescript(self, script: str) -> None:
        """Run a schema script. Under :func:`geoagent.runtime.sqlite_wal.reading_only` (``status``, the GeoVerify
        tau guard: the file is read as it is, and the schema scripts write) only :meth:`_stand_ins` are made."""
        if is_reading_only():
            self._stand_ins(script)
            return
        with self._lock:
            try:
                _run_script(self._conn, script)
            except sqlite3.DatabaseError as exc:
                self._raise_damaged(exc)
                raise

    def _stand_ins(self, script: str) -> None:
        """For a look (:meth:`executescript` under ``reading_only``): each table of ``script``'s ``CREATE TABLE IF
        NOT EXISTS`` statements that the file lacks is made as an empty ``TEMP`` table of this connection (with the
        rows of the script's ``INSERT OR IGNORE`` into it), so the look reads it as empty. Nothing is written to the
        file. A file lacks a table while another process is making it: the ledger's and the store's schemas are
        made one after the other, and a look in between read ``no such table: responses`` (ci45: the tau guard of
        a second first run started beside the first ended in a traceback; ``status`` did too)."""
        with self._lock:
            try:
                have = {str(r[0]) for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                made: set[str] = set()
                for statement in script.split(";"):
                    create = _CREATE_TABLE_RE.match(statement)
                    insert = _INSERT_ROWS_RE.match(statement)
                    if create and create.group(1) not in have:
                        self._conn.execute(_CREATE_TABLE_RE.sub(r"CREATE TEMP TABLE \1", statement, count=1))
                        made.add(create.group(1))
                    elif insert and insert.group(1) in made:
                        self._conn.execute(statement)
            except sqlite3.DatabaseError as exc:
                self._raise_damaged(exc)
                raise

    def submit_future(self, fn: Callable[[], T]) -> "Future[T]":
        """Queue ``fn()`` on this database's own thread; return its concurrent future.

        Jobs queued while the thread is busy run as one group commit (see the class docstring); the
        future resolves after the group's ``COMMIT``.
        """
        fut: Future[T] = Future()
        self._enqueue((fn, fut))
        return fut

    def submit_async(self, fn: Callable[[], T]) -> "asyncio.Future[T]":
        """Queue ``fn()`` like :meth:`submit_future`, for a coroutine: return a future of the running loop.

        The futures of one group are resolved by ONE ``loop.call_soon_threadsafe`` after the group's
        ``COMMIT`` (one wake-up of the event loop per group, not one per job). Cancelling the returned
        future does not cancel the job once queued (its transaction still commits).

        Raises
        ------
        RuntimeError
            If called outside a running event loop.
        """
        loop = asyncio.get_running_loop()
        afut: asyncio.Future[T] = loop.create_future()
        self._enqueue((fn, _LoopSink(loop, afut)))
        return afut

    def _enqueue(self, job: tuple[Callable[[], Any], Any]) -> None:
        with self._jobs_lock:
            self._jobs.append(job)
            if self._draining:
                return
            self._draining = True
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"campaign-db-{self.path.stem}")
            executor = self._executor
        executor.submit(self._drain)

    def _drain(self) -> None:
        """Database thread: run queued jobs in groups until none is left."""
        while True:
            with self._jobs_lock:
                if not self._jobs:
                    self._draining = False
                    return
                batch, self._jobs = self._jobs[: self.group_max], self._jobs[self.group_max :]
            jobs = [(fn, fut) for fn, fut in batch if fut.set_running_or_notify_cancel()]
            if len(jobs) == 1:
                fn, fut = jobs[0]
                try:
                    result = fn()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    _resolve([(fut, False, exc)])
                else:
                    _resolve([(fut, True, result)])
            elif jobs:
                self._run_group(jobs)

    def _run_group(self, jobs: list[tuple[Callable[[], Any], Any]]) -> None:
        """Run ``jobs`` in one transaction, each in a savepoint; resolve their futures after ``COMMIT``."""
        outcomes: list[tuple[Any, bool, Any]] = []
        with self._lock:
            try:
                if self._closed:
                    raise LedgerError(f"{self.path}: database is closed")
                if self._depth:
                    raise LedgerError("group commit inside an open transaction")
                self._conn.execute("BEGIN IMMEDIATE")
            except BaseException as exc:  # noqa: BLE001 - every job gets the error
                _resolve([(fut, False, exc) for _, fut in jobs])
                return
            self._depth = 1
            try:
                for fn, fut in jobs:
                    self._conn.execute("SAVEPOINT group_job")
                    try:
                        result = fn()
                    except Exception as exc:  # noqa: BLE001 - this job alone is undone
                        self._conn.execute("ROLLBACK TO group_job")
                        self._conn.execute("RELEASE group_job")
                        outcomes.append((fut, False, exc))
                    else:
                        self._conn.execute("RELEASE group_job")
                        outcomes.append((fut, True, result))
                self._conn.execute("COMMIT")
            except BaseException as exc:  # noqa: BLE001 - nothing of the group is durable
                self._depth = 0
                try:
                    self._conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                _resolve([(fut, False, exc) for _, fut in jobs])
                return
            finally:
                self._depth = 0
        _resolve(outcomes)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking ``fn(*args, **kwargs)`` on this database's own thread and await its result."""
        return await self.submit_async(partial(fn, *args, **kwargs))

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Fire-and-forget ``fn(*args)`` on the database thread (used for clean-up after cancellation)."""
        self.submit_future(partial(fn, *args))

    def close(self) -> None:
        """Finish queued work, then close the connection (idempotent)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()



class _LoopSink:
    """Where a job queued by :meth:`CampaignDB.submit_async` delivers its result: a future of one event loop."""

    __slots__ = ("loop", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: "asyncio.Future[Any]") -> None:
        self.loop = loop
        self.future = future

    def set_running_or_notify_cancel(self) -> bool:
        # a waiter that went away before the job started: skip the job (as a cancelled concurrent future is)
        return not self.future.cancelled()


def _settle_loop_futures(items: list[tuple["asyncio.Future[Any]", bool, Any]]) -> None:
    """On the event loop: hand each job's result or exception to its (not cancelled) future."""
    for afut, ok, value in items:
        if afut.cancelled():
            continue
        if ok:
            afut.set_result(value)
        else:
            afut.set_exception(value)
            if isinstance(value, (sqlite3.Error, OSError)):
                # a write the file system refused (a full disk) fails every job of the group at once, and the
                # tasks that queued some of them may have ended meanwhile (the run stopping on the first one): their
                # futures were printed as "Future exception was never retrieved" tracebacks after the run's one error
                # line (cli36 #7). Marked retrieved; an awaiter still gets the exception
                afut.exception()


def _resolve(outcomes: list[tuple[Any, bool, Any]]) -> None:
    """Resolve job futures after their transaction ended: concurrent futures directly, loop futures with
    one ``call_soon_threadsafe`` per event loop."""
    per_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, bool, Any]]] = {}
    for fut, ok, value in outcomes:
        if isinstance(fut, _LoopSink):
            per_loop.setdefault(fut.loop, []).append((fut.future, ok, value))
        elif ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
    for loop, items in per_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_loop_futures, items)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


# ------------------------------------------------------------------------------------------------
# ledger
# ------------------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_totals (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    cap_nusd INTEGER NOT NULL DEFAULT 0,
    spent_nusd INTEGER NOT NULL DEFAULT 0,
    reserved_nusd INTEGER NOT NULL DEFAULT 0,
    unknown_nusd INTEGER NOT NULL DEFAULT 0,
    overrun_nusd INTEGER NOT NULL DEFAULT 0,
    calls INTEGER NOT NULL DEFAULT 0,
    unknown_calls INTEGER NOT NULL DEFAULT 0,
    released_calls INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO ledger_totals (id) VALUES (1);
CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY,
    request_key TEXT NOT NULL,
    model TEXT,
    amount_nusd INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'settled', 'released', 'unknown')),
    actual_nusd INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    owner TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,
    created_at REAL NOT NULL,
    closed_at REAL,
    note TEXT
);
CREATE INDEX IF NOT EXISTS reservations_open ON reservations (owner) WHERE state = 'open';
CREATE INDEX IF NOT EXISTS reservations_key ON reservations (request_key);
CREATE INDEX IF NOT EXISTS reservations_overrun ON reservations (id) WHERE state = 'settled' AND actual_nusd > amount_nusd;
CREATE TABLE IF NOT EXISTS ledger_owners (
    token TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    proc_start TEXT,
    started_at REAL NOT NULL,
    lease_owner TEXT
);
"""

def _held_lease_owner(folder: Path) -> str | None:
    """This process's :func:`~geoagent.runtime.sqlite_queue.lease_owner` id when it holds its owner lock file in
    ``folder`` (a run's: :func:`geoagent.engine.run_lock` with ``owner``; only this process makes a file of its own
    random id), else None (a ledger opened outside a run)."""
    from geoagent.runtime.sqlite_queue import lease_owner

    me = lease_owner()
    return me if (folder / f"{me}.lock").is_file() else None


def _lock_free(path: Path) -> bool:
    """Whether the owner lock file ``path`` is held by no process: missing (its process ended, or a scan removed
    it after that process died), or it can be locked now (its process died). Its holder keeps it locked from
    before it opens the ledger to after it closes it, in every pid namespace and container of the machine
    (``flock`` is the kernel's)."""
    import fcntl

    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return True
    except OSError:
        return False  # cannot tell: alive
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return False
    finally:
        fh.close()  # releases the lock if it was taken
    return True


def _owner_host() -> str:
    """What the ``host`` column of ``ledger_owners`` names for this process: the host name, then ``"|"`` and
    :func:`geoagent.runtime.procs.boot_id` (kernel boot id and pid namespace) where known. An owner's pid is judged
    only by a process with the same value: containers of one host that share its network and the campaign file
    have the same host name but pids of their own (before, one took the other's live owner for a crashed one and
    turned its open reservations into unknown-outcome spend). A row with the bare host name (written before this)
    is still judged by its pid on this host, as before."""
    boot = boot_id()
    return socket.gethostname() + (f"|{boot}" if boot else "")


def _pid_alive(pid: int, started: str | None) -> bool:
    """Whether ledger owner process ``pid``, recorded with start time ``started``
    (:func:`geoagent.runtime.procs.proc_start`; None: unknown), still runs: the shared reader's
    :func:`geoagent.runtime.procs.process_alive` (its pid exists, it is no zombie, and where both start times can
    be read, the process holding it started when the recorded one did; else the pid was reused)."""
    return process_alive(pid, started)


@dataclass(frozen=True, slots=True)
class Reservation:
    """An open reservation: ``amount_usd`` is held against the cap until settled, released or marked unknown.

    ``input_tokens`` / ``output_tokens``: the worst-case token counts ``amount_usd`` was priced from (the input
    estimate x ``[budget] input_estimate_factor`` and the request's ``max_output_tokens``), kept with the
    reservation in memory by the caller that made it (:func:`with_worst_tokens`; not stored), so a call booked at
    its worst case without a request at hand (:func:`geoagent.workers.billing.close_failed_call`) books these
    tokens with its cost; 0 when the caller did not say.
    """

    id: int
    request_key: str
    amount_nusd: int
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def amount_usd(self) -> float:
        return nano_to_usd(self.amount_nusd)


def with_worst_tokens(reservation: Reservation, input_tokens: int, output_tokens: int) -> Reservation:
    """``reservation`` with the worst-case token counts its amount was priced from (tokens, >= 0; see
    :class:`Reservation`). The same reservation for the ledger (its ``id``); only the copy in hand carries them."""
    return _dc_replace(reservation, input_tokens=max(0, int(input_tokens)),
                               output_tokens=max(0, int(output_tokens)))


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """Ledger totals. USD amounts; ``calls`` are settled calls; tokens are settled usage; ``overrun_calls``
    of the settled calls were billed more than their reservation (by ``overrun_usd`` in all): the provider
    billed more than the worst case assumed, so calls in flight could pass the cap (a surprise to report)."""

    cap_usd: float
    spent_usd: float
    reserved_usd: float
    unknown_usd: float
    overrun_usd: float
    calls: int
    unknown_calls: int
    released_calls: int
    input_tokens: int
    output_tokens: int
    open_reservations: int
    overrun_calls: int = 0

    @property
    def total_usd(self) -> float:
        """Spend that counts against the cap once in-flight calls finish: settled + unknown outcome."""
        return self.spent_usd + self.unknown_usd

    @property
    def committed_usd(self) -> float:
        """``total_usd`` plus open reservations."""
        return self.spent_usd + self.unknown_usd + self.reserved_usd

    @property
    def remaining_usd(self) -> float:
        return max(0.0, self.cap_usd - self.committed_usd)

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__slots__}
        d.update(total_usd=self.total_usd, committed_usd=self.committed_usd, remaining_usd=self.remaining_usd)
        return d


def cap_changed_warning(before_nusd: int, cap_nusd: int, running: int, where: str = "", *,
                        committed_nusd: int = 0) -> None:
    """Warn (:class:`geoagent.config.SetupWarning`, one ``warning:`` line on the CLI) that this process changed the
    campaign's cap from ``before_nusd`` to ``cap_nusd`` (nano-USD) while ``running`` other processes of it run
    (``where``: e.g. " (maybe on another machine)"): each keeps to the lower of its own cap and the campaign's.
    ``committed_nusd``: the campaign's spend so far (settled + unknown outcome + open reservations, nano-USD); when a
    lowered cap is already below it, the line says so (walk31 #1: it said the running process "stops at $0.30 at the
    latest", and both runs then ended at $0.3481 with no word why)."""
    import warnings

    from geoagent.config import SetupWarning

    def usd(n: int) -> str:  # whole cents as such, else to the micro-dollar
        return f"${nano_to_usd(n):.2f}" if n % 10_000_000 == 0 else f"${nano_to_usd(n):.6f}"

    those = "the one already running" if running == 1 else "those already running"
    # rev25 (6): not "the cap it started with": a process's limit is the lower of its own cap and the campaign's
    # as it is at each reservation, which an earlier run may have lowered since it started
    effect = (f"{those} go{'es' if running == 1 else ''} on under {'its' if running == 1 else 'their'} own cap where "
              f"that is lower than {usd(cap_nusd)}" if cap_nusd > before_nusd else
              f"{those} stop{'s' if running == 1 else ''} at {usd(cap_nusd)} at the latest")
    if cap_nusd < before_nusd and committed_nusd >= cap_nusd:
        effect = (f"no process starts another call: the campaign has already spent or reserved {usd(committed_nusd)}, "
                  f"above the new cap, and spend already made stays (calls in flight settle as billed), so its spend "
                  f"ends above {usd(cap_nusd)}")
    warnings.warn(
        f"[budget] cap_usd: {running} other process{'es' if running != 1 else ''} of this campaign "
        f"{'is' if running == 1 else 'are'} running{where}; this run sets the campaign's cap to {usd(cap_nusd)} (it "
        f"was {usd(before_nusd)}): a process keeps to the lower of its own config's cap and the campaign's, so "
        f"{effect}", SetupWarning, stacklevel=3)


class Ledger:
    """Reserve / settle / release / mark-unknown against a hard cap (see module docstring).

    Parameters
    ----------
    db : CampaignDB
        The campaign database (shared with :class:`geoagent.runtime.store.ResponseStore`).
    cap_usd : float, optional
        The cap (USD) of this process's config. Stored in the file as the campaign's cap; None keeps the stored
        cap (e.g. a read-only ``status``). A process reserves against the lower of its own cap and the campaign's
        (walk25 #1: a second run started with a higher cap, then stopped, raised the cap of a run already going,
        which went past the cap it was started with; a lower cap still stops every process of the campaign).
        When another process of the campaign is running and this changes the stored cap, a
        :class:`geoagent.config.SetupWarning` says so.
    recover : bool
        Convert open reservations of dead processes to unknown-outcome spend on open (default True).
    recover_all : bool
        Convert *every* open reservation (only when no other process can be using the file).
    """

    def __init__(self, db: CampaignDB, cap_usd: float | None = None, *, recover: bool = True, recover_all: bool = False):
        self.db = db
        db.executescript(_SCHEMA)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{_pysecrets.token_hex(6)}"
        #: the campaign's owner lock files (:func:`_lock_free`), beside its database
        self.locks_dir = Path(db.path).parent / C.OWNER_LOCKS_DIR
        if "lease_owner" not in {r[1] for r in db.read("PRAGMA table_info(ledger_owners)")}:
            # a file of before session 38: a run adds the column below; a look (read-only) reads NULL for it
            self._OWNERS_SQL = self._OWNERS_SQL.replace("lease_owner", "NULL")
            self._OPEN_OWNERS_SQL = self._OPEN_OWNERS_SQL.replace("lease_owner", "NULL", 1)
        #: this process's own cap (nano-USD), None: the campaign's stored cap alone (:meth:`reserve`)
        self.own_cap_nusd = usd_to_nano(cap_usd) if cap_usd is not None else None
        #: opened by a look (`status`, a dry run of a campaign that ran): reads only, registers and retires no owner
        self.read_only = is_reading_only()
        if self.read_only:  # `status`: reads the ledger, registers no owner and books nothing
            self.recovered = 0
            return
        with db.transaction() as conn:
            if "lease_owner" not in {r[1] for r in conn.execute("PRAGMA table_info(ledger_owners)")}:
                conn.execute("ALTER TABLE ledger_owners ADD COLUMN lease_owner TEXT")  # a file of before session 38
            # the column is there now (added here, or by another process since the look above: review38 #8): the
            # class's statements, reading it
            self.__dict__.pop("_OWNERS_SQL", None)
            self.__dict__.pop("_OPEN_OWNERS_SQL", None)
            before, committed = conn.execute(
                "SELECT cap_nusd, spent_nusd + unknown_nusd + reserved_nusd FROM ledger_totals WHERE id = 1").fetchone()
            others = conn.execute(self._OWNERS_SQL).fetchall()
            conn.execute(
                "INSERT INTO ledger_owners (token, host, pid, proc_start, started_at, lease_owner)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (self.owner, _owner_host(), os.getpid(), proc_start(os.getpid()), time.time(),
                 _held_lease_owner(self.locks_dir)),
            )
            if self.own_cap_nusd is not None:
                conn.execute("UPDATE ledger_totals SET cap_nusd = ? WHERE id = 1", (self.own_cap_nusd,))
        if self.own_cap_nusd is not None and int(before) != self.own_cap_nusd:
            gone = set(self._gone_owners(others))
            running = [t for t, *_ in others if t not in gone]
            if running:
                cap_changed_warning(int(before), self.own_cap_nusd, len(running), committed_nusd=int(committed))
        self.recovered = self.recover(all_owners=recover_all) if (recover or recover_all) else 0

    def _limit(self, cap: int) -> int:
        """The cap this process reserves against (nano-USD): the lower of the campaign's ``cap`` and its own."""
        return cap if self.own_cap_nusd is None else min(int(cap), self.own_cap_nusd)

    # -- start-up recovery ------------------------------------------------------------------------

    #: every owner (token, host, pid, process start time, lease owner id); a file of before session 38 opened
    #: read-only has no ``lease_owner`` column (:meth:`__init__` reads NULL for it then)
    _OWNERS_SQL = "SELECT token, host, pid, proc_start, lease_owner FROM ledger_owners"
    #: the owners holding open reservations (as :data:`_OWNERS_SQL`)
    _OPEN_OWNERS_SQL = (_OWNERS_SQL + " WHERE token IN (SELECT DISTINCT owner FROM reservations WHERE state = 'open')")

    def _gone_owners(self, owners: Iterable[tuple[str, str, int, str | None, str | None]], *,
                     all_owners: bool = False) -> list[str]:
        """Tokens of the ``(token, host, pid, proc_start, lease_owner)`` owners whose open reservations
        :meth:`recover` closes: every other owner with ``all_owners``, else the other owners whose process is gone:
        on this host and in this pid namespace by its pid (:func:`_pid_alive`); elsewhere (another boot of this
        machine, another container or pid namespace, whose pids mean nothing here) by the owner lock file it held
        while it ran, when it recorded one (:func:`_lock_free`: runtime38 #2, reservations of a process killed
        before a reboot, or in a container since replaced, held the cap for good); an owner recorded without
        one (a ledger opened outside a run, or by a version before session 38) on another host is never judged
        from here."""
        here = {_owner_host(), socket.gethostname()}  # the bare name: rows written before the pid namespace
        gone = []
        for token, h, pid, ps, lease in owners:
            if token == self.owner:
                continue
            if all_owners:
                gone.append(token)
            elif h in here:
                if not _pid_alive(pid, ps):
                    gone.append(token)
            elif lease and all(c in "0123456789abcdef" for c in lease) and _lock_free(self.locks_dir / f"{lease}.lock"):
                gone.append(token)
        return gone

    def recover(self, *, all_owners: bool = False) -> int:
        """Turn open reservations of crashed processes into unknown-outcome spend; return how many."""
        now = time.time()
        with self.db.transaction() as conn:
            dead = self._gone_owners(conn.execute(self._OPEN_OWNERS_SQL).fetchall(), all_owners=all_owners)
            converted = 0
            for token in dead:
                rows = conn.execute(
                    "SELECT id, amount_nusd FROM reservations WHERE owner = ? AND state = 'open'", (token,)
                ).fetchall()
                total = sum(a for _, a in rows)
                conn.execute(
                    "UPDATE reservations SET state = 'unknown', closed_at = ?, note = 'owner process gone'"
                    " WHERE owner = ? AND state = 'open'",
                    (now, token),
                )
                conn.execute(
                    "UPDATE ledger_totals SET reserved_nusd = reserved_nusd - ?, unknown_nusd = unknown_nusd + ?,"
                    " unknown_calls = unknown_calls + ? WHERE id = 1",
                    (total, total, len(rows)),
                )
                conn.execute("DELETE FROM ledger_owners WHERE token = ?", (token,))
                converted += len(rows)
        return converted

    def gone_open(self) -> tuple[float, int]:
        """``(USD, count)`` of the open reservations whose owner process is gone: what :meth:`recover` (a run's
        start-up) would turn into unknown-outcome spend now, by the same rule (:meth:`_gone_owners`: another
        owner on this host whose pid no longer runs, or runs a process started later). Read-only: nothing is
        closed or written (the dry run counts them as spend already booked, as the run will). ``(0.0, 0)`` when
        there are none."""
        dead = self._gone_owners(self.db.read(self._OPEN_OWNERS_SQL))
        if not dead:
            return 0.0, 0
        marks = ",".join("?" * len(dead))
        total, n = self.db.read(f"SELECT COALESCE(SUM(amount_nusd), 0), COUNT(*) FROM reservations"
                                f" WHERE state = 'open' AND owner IN ({marks})", tuple(dead))[0]
        return nano_to_usd(int(total)), int(n)

    def gone_open_by_model(self) -> dict[str, tuple[float, int]]:
        """:meth:`gone_open` per ``[[models]]`` name (the name each reservation recorded; ``""`` for reservations made
        without one): name -> ``(USD, count)`` of the open reservations whose owner process is gone, in name order;
        models without such reservations are left out (``{}`` when there are none). Read-only."""
        dead = self._gone_owners(self.db.read(self._OPEN_OWNERS_SQL))
        if not dead:
            return {}
        marks = ",".join("?" * len(dead))
        rows = self.db.read(f"SELECT COALESCE(model, ''), COALESCE(SUM(amount_nusd), 0), COUNT(*) FROM reservations"
                            f" WHERE state = 'open' AND owner IN ({marks}) GROUP BY COALESCE(model, '')", tuple(dead))
        return {str(m): (nano_to_usd(int(total)), int(n)) for m, total, n in sorted(rows)}

    def retire(self) -> None:
        """Forget this process's owner record if it holds no open reservation (call before closing); nothing for a
        ledger opened read-only (:attr:`read_only`: it registered none)."""
        if self.read_only:
            return
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM ledger_owners WHERE token = ? AND NOT EXISTS"
                " (SELECT 1 FROM reservations WHERE owner = ? AND state = 'open')",
                (self.owner, self.owner),
            )

    # -- the four operations ------------------------------------------------------------------------

    def reserve(self, request_key: str, worst_case_usd: float, *, model: str | None = None) -> Reservation:
        """Hold ``worst_case_usd`` against the cap for one call; raise :class:`BudgetExhausted` if it does not fit.

        Raises
        ------
        BudgetExhausted
            spent + unknown + open reservations + ``worst_case_usd`` > cap (USD): the lower of the campaign's cap
            and this process's own (:meth:`_limit`).
        """
        amount = usd_to_nano(worst_case_usd, round_up=True)
        with self.db.transaction() as conn:
            cap, spent, reserved, unknown = conn.execute(
                "SELECT cap_nusd, spent_nusd, reserved_nusd, unknown_nusd FROM ledger_totals WHERE id = 1"
            ).fetchone()
            cap = self._limit(cap)
            if spent + unknown + reserved + amount > cap:
                raise BudgetExhausted(
                    nano_to_usd(amount), nano_to_usd(spent), nano_to_usd(unknown), nano_to_usd(reserved), nano_to_usd(cap)
                )
            cur = conn.execute(
                "INSERT INTO reservations (request_key, model, amount_nusd, state, owner, created_at)"
                " VALUES (?, ?, ?, 'open', ?, ?)",
                (request_key, model, amount, self.owner, time.time()),
            )
            conn.execute("UPDATE ledger_totals SET reserved_nusd = reserved_nusd + ? WHERE id = 1", (amount,))
            return Reservation(int(cur.lastrowid), request_key, amount, model)

    def open_elsewhere(self, request_key: str) -> bool:
        """Whether another owner (process) holds an open reservation for ``request_key`` (its call may be
        in flight right now). Reservations of dead owners count until :meth:`recover` closes them."""
        row = self.db.read(
            "SELECT 1 FROM reservations WHERE request_key = ? AND state = 'open' AND owner != ? LIMIT 1",
            (request_key, self.owner),
        )
        return bool(row)

    def settle(self, reservation: Reservation, usage: Any, actual_usd: float) -> None:
        """Close a reservation with the call's real usage (``Usage``: input/output tokens) and cost (USD).

        Idempotent: settling an already-settled reservation changes nothing. A reservation marked unknown
        (e.g. by recovery) is settled too, replacing its worst-case amount with the actual cost. If the
        actual cost exceeds the reservation the excess is recorded as ``overrun_usd``. A usage that was not
        reported (``usage.reported`` False: the provider's answer carried no usable count) is settled at no less
        than the reservation amount, with the note :data:`USAGE_NOT_REPORTED`.
        """
        actual = usd_to_nano(actual_usd)
        reported = getattr(usage, "reported", True) is not False
        n_in, n_out = int(getattr(usage, "input_tokens", 0)), int(getattr(usage, "output_tokens", 0))
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT state, amount_nusd, attempts FROM reservations WHERE id = ?", (reservation.id,)
            ).fetchone()
            if row is None:
                raise LedgerError(f"no reservation {reservation.id}")
            state, amount, attempts = row
            if state == "settled":
                return
            if reported:
                conn.execute(
                    "UPDATE reservations SET state = 'settled', actual_nusd = ?, input_tokens = ?, output_tokens = ?,"
                    " attempts = 1, closed_at = ? WHERE id = ?",
                    (actual, n_in, n_out, time.time(), reservation.id),
                )
            else:  # no count from the provider: the worst case, never less (the ledger must not under-count)
                actual = max(actual, int(amount))
                conn.execute(
                    "UPDATE reservations SET state = 'settled', actual_nusd = ?, input_tokens = ?, output_tokens = ?,"
                    " attempts = 1, closed_at = ?, note = ? WHERE id = ?",
                    (actual, n_in, n_out, time.time(), USAGE_NOT_REPORTED, reservation.id),
                )
            d_reserved = amount if state == "open" else 0
            d_unknown = amount * attempts if state == "unknown" else 0
            conn.execute(
                "UPDATE ledger_totals SET spent_nusd = spent_nusd + ?, reserved_nusd = reserved_nusd - ?,"
                " unknown_nusd = unknown_nusd - ?, unknown_calls = unknown_calls - ?, overrun_nusd = overrun_nusd + ?,"
                " calls = calls + 1, input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = 1",
                (actual, d_reserved, d_unknown, attempts if d_unknown else 0, max(0, actual - amount), n_in, n_out),
            )

    def release(self, reservation: Reservation, *, note: str | None = None) -> None:
        """Drop an open reservation: the call was certainly not sent or not billed. No-op if not open."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE reservations SET state = 'released', closed_at = ?, note = ? WHERE id = ? AND state = 'open'",
                (time.time(), note, reservation.id),
            )
            if cur.rowcount:
                conn.execute(
                    "UPDATE ledger_totals SET reserved_nusd = reserved_nusd - ?, released_calls = released_calls + 1"
                    " WHERE id = 1",
                    (reservation.amount_nusd,),
                )

    def mark_unknown(self, reservation: Reservation, *, note: str | None = None, attempts: int = 1) -> None:
        """The call's outcome is unknown (maybe billed): keep it counted at the reservation amount.

        ``attempts`` > 1 when the HTTP layer made several attempts that the provider may each have billed
        (e.g. 2xx bodies that did not parse): each is counted at the reservation amount. That can take
        the total past the cap after the fact; the next reservation then fails. Marking an unknown-outcome
        reservation again with more attempts raises its count to the larger number; fewer change nothing (both
        ledgers alike).
        """
        attempts = max(1, int(attempts))
        total = reservation.amount_nusd * attempts
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE reservations SET state = 'unknown', closed_at = ?, note = ?, attempts = ?"
                " WHERE id = ? AND state = 'open'",
                (time.time(), note, attempts, reservation.id),
            )
            if cur.rowcount:
                conn.execute(
                    "UPDATE ledger_totals SET reserved_nusd = reserved_nusd - ?, unknown_nusd = unknown_nusd + ?,"
                    " unknown_calls = unknown_calls + ? WHERE id = 1",
                    (reservation.amount_nusd, total, attempts),
                )
                return
            # already unknown (marked again with more attempts, as the Redis ledger's MARK_UNKNOWN does: redis36 #3):
            # the count rises to the larger number, each further attempt at the reservation amount
            row = conn.execute("SELECT amount_nusd, attempts FROM reservations WHERE id = ? AND state = 'unknown'",
                               (reservation.id,)).fetchone()
            if row is not None and attempts > int(row[1] or 1):
                more = attempts - int(row[1] or 1)
                conn.execute("UPDATE reservations SET attempts = ?, note = ? WHERE id = ?",
                             (attempts, note, reservation.id))
                conn.execute("UPDATE ledger_totals SET unknown_nusd = unknown_nusd + ?, unknown_calls = unknown_calls + ?"
                             " WHERE id = 1", (int(row[0]) * more, more))

    def calls_settled_here(self) -> int:
        """Calls settled on reservations this ledger (this process) made: the model calls this process paid
        for (the campaign's ``calls`` total counts every process's). One scan of the reservations table."""
        return int(self.db.read("SELECT COUNT(*) FROM reservations WHERE owner = ? AND state = 'settled'",
                                (self.owner,))[0][0])

    def calls_settled_here_by_model(self) -> dict[str, int]:
        """:meth:`calls_settled_here` per ``[[models]]`` name (the name recorded with each reservation; ``""``
        for reservations made without one), e.g. to tell replayed answers from real model calls."""
        rows = self.db.read("SELECT COALESCE(model, ''), COUNT(*) FROM reservations WHERE owner = ? AND "
                            "state = 'settled' GROUP BY COALESCE(model, '')", (self.owner,))
        return {str(m): int(n) for m, n in rows}

    def spend_by_model(self) -> dict[str, dict[str, Any]]:
        """Spend per ``[[models]]`` name (the name each reservation recorded; ``""`` for reservations made
        without one), from the reservation rows (one scan of the table; the reservations have carried the
        model since the ledger's first schema, so older files need no migration).

        Returns
        -------
        dict
            name -> ``{"spent_usd", "unknown_usd", "reserved_usd"}`` (USD: settled cost; unknown-outcome
            amount, each possibly billed attempt at its reservation amount; open reservations) and
            ``{"calls", "unknown_calls", "open_reservations"}`` (counts: settled calls; possibly billed
            attempts of unknown-outcome calls; open reservations), in name order. Models whose reservations
            were all released (never billed) are left out. The sums over the models equal
            :meth:`summary`'s ``spent_usd`` / ``unknown_usd`` / ``reserved_usd`` (:meth:`check_consistency`).
            A model with settled calls whose answers reported no usage (booked at their worst case,
            :data:`USAGE_NOT_REPORTED`) also has ``unreported_calls`` (count) and ``unreported_usd`` (USD, part
            of its ``spent_usd``); the keys are absent for models without such calls.
        """
        rows = self.db.read(
            "SELECT COALESCE(model, ''), state,"
            " COALESCE(SUM(CASE state WHEN 'settled' THEN actual_nusd WHEN 'unknown' THEN amount_nusd * attempts"
            " ELSE amount_nusd END), 0), COUNT(*), COALESCE(SUM(attempts), 0),"
            " COALESCE(SUM(CASE WHEN state = 'settled' AND note = ? THEN 1 ELSE 0 END), 0),"
            " COALESCE(SUM(CASE WHEN state = 'settled' AND note = ? THEN actual_nusd ELSE 0 END), 0)"
            " FROM reservations WHERE state != 'released' GROUP BY COALESCE(model, ''), state",
            (USAGE_NOT_REPORTED, USAGE_NOT_REPORTED),
        )
        out: dict[str, dict[str, Any]] = {}
        for model, state, nusd, n, attempts, n_unreported, unreported_nusd in sorted(rows):
            m = out.setdefault(str(model), {"spent_usd": 0.0, "unknown_usd": 0.0, "reserved_usd": 0.0,
                                            "calls": 0, "unknown_calls": 0, "open_reservations": 0})
            if state == "settled":
                m["spent_usd"], m["calls"] = nano_to_usd(int(nusd)), int(n)
                if int(n_unreported):
                    m["unreported_calls"] = int(n_unreported)
                    m["unreported_usd"] = nano_to_usd(int(unreported_nusd))
            elif state == "unknown":
                m["unknown_usd"], m["unknown_calls"] = nano_to_usd(int(nusd)), int(attempts)
            elif state == "open":
                m["reserved_usd"], m["open_reservations"] = nano_to_usd(int(nusd)), int(n)
        return out

    def summary(self) -> LedgerSummary:
        """Current totals (a consistent snapshot); ``cap_usd`` is the cap this process reserves against (the lower
        of the campaign's and its own; the campaign's for a ledger opened without a cap, e.g. by ``status``)."""
        row = self.db.read(
            "SELECT cap_nusd, spent_nusd, reserved_nusd, unknown_nusd, overrun_nusd, calls, unknown_calls,"
            " released_calls, input_tokens, output_tokens FROM ledger_totals WHERE id = 1"
        )[0]
        n_open = self.db.read("SELECT COUNT(*) FROM reservations WHERE state = 'open'")[0][0]
        n_over = self.db.read(  # a partial index holds just these rows
            "SELECT COUNT(*) FROM reservations WHERE state = 'settled' AND actual_nusd > amount_nusd")[0][0]
        cap, spent, reserved, unknown, overrun, calls, unknown_calls, released, n_in, n_out = row
        return LedgerSummary(
            cap_usd=nano_to_usd(self._limit(cap)),
            spent_usd=nano_to_usd(spent),
            reserved_usd=nano_to_usd(reserved),
            unknown_usd=nano_to_usd(unknown),
            overrun_usd=nano_to_usd(overrun),
            calls=calls,
            unknown_calls=unknown_calls,
            released_calls=released,
            input_tokens=n_in,
            output_tokens=n_out,
            open_reservations=n_open,
            overrun_calls=n_over,
        )

    def check_consistency(self) -> list[str]:
        """Recompute the totals from the reservation rows; return a list of mismatches (empty if none)."""
        rows = self.db.read(
            "SELECT state, COALESCE(SUM(amount_nusd * attempts), 0), COALESCE(SUM(actual_nusd), 0), COUNT(*),"
            " COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(attempts), 0)"
            " FROM reservations GROUP BY state"
        )
        by = {r[0]: r[1:] for r in rows}
        zero = (0, 0, 0, 0, 0, 0)
        t = self.db.read(
            "SELECT spent_nusd, reserved_nusd, unknown_nusd, calls, unknown_calls, input_tokens, output_tokens"
            " FROM ledger_totals WHERE id = 1"
        )[0]
        expect = {
            "spent_nusd": by.get("settled", zero)[1],
            "reserved_nusd": by.get("open", zero)[0],
            "unknown_nusd": by.get("unknown", zero)[0],
            "calls": by.get("settled", zero)[2],
            "unknown_calls": by.get("unknown", zero)[5],
            "input_tokens": by.get("settled", zero)[3],
            "output_tokens": by.get("settled", zero)[4],
        }
        got = dict(zip(expect, t))
        return [f"{k}: totals {got[k]} != rows {v}" for k, v in expect.items() if got[k] != v]

    # -- async front-ends (run on the database thread) --------------------------------------------

    async def areserve(self, request_key: str, worst_case_usd: float, *, model: str | None = None) -> Reservation:
        """Async :meth:`reserve`. If the caller is cancelled meanwhile, the reservation is released."""
        fut = self.db.submit_async(partial(self.reserve, request_key, worst_case_usd, model=model))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            def _undo(f: Any) -> None:
                if not f.cancelled() and f.exception() is None:
                    self.db.submit(self.release, f.result(), note="caller cancelled before sending")

            fut.add_done_callback(_undo)
            raise

    async def asettle(self, reservation: Reservation, usage: Any, actual_usd: float) -> None:
        await self.db.run(self.settle, reservation, usage, actual_usd)

    async def arelease(self, reservation: Reservation, *, note: str | None = None) -> None:
        await self.db.run(self.release, reservation, note=note)

    async def amark_unknown(self, reservation: Reservation, *, note: str | None = None, attempts: int = 1) -> None:
        await self.db.run(self.mark_unknown, reservation, note=note, attempts=attempts)

    async def asummary(self) -> LedgerSummary:
        return await self.db.run(self.summary)
