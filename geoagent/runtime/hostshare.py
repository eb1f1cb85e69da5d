"""Per-host limits shared by every process of one campaign on one machine (issue 2, point 4).

A campaign can scale out over several processes (``run.py run CFG --stages ...``). Each process has its own
:class:`~geoagent.runtime.http.HttpClient`, whose per-host limiter alone would give EVERY process the full
configured rate and concurrency, and whose ``Retry-After`` pause would hold back only the process that got
it. (A model's own limit key on its host, :func:`geoagent.runtime.http.limit_key`, ``"host/model"``, is one
more "host" here: its rows, shares, turns and pauses are the key's, so two models on one provider are shared
out apart, as the providers limit them; a host's pause reaches its model keys in every process through the
host's own entry on the board, :mod:`geoagent.runtime.http` "Limit keys".) :class:`HostShare` fixes both through
a small SQLite board, ``state/<campaign>/hosts.sqlite``
(:data:`HOSTS_DB`; stdlib ``sqlite3``, WAL, ``BEGIN IMMEDIATE``, ``busy_timeout``), which only a
background task touches: the request path reads nothing but memory, except at hosts so slow that the
processes take turns on the board for every send (below).

Membership and shares
---------------------
Every process registers one row per host it actually calls (on its first request to that host): pid,
process start time, boot id, a heartbeat, and the last membership it has adopted. Every
:data:`POLL_S` (0.25 s) the background task writes its heartbeat, reads the host's rows and sets its own
limiter (through the host state's ``set_policy``, as :meth:`HttpClient.set_policy` does: it keeps the
recent admissions) to its share, where
``n`` counts the host's rows (live, joining, and departed ones still inside their hold time):

* rate: ``floor(rate / n)`` per ``period_s``; when that is 0 (fewer requests per period than processes,
  e.g. Nominatim's 1/s with 2 processes) the limiter gets the fraction ``rate / n`` (one request per
  ``n * period_s / rate``) AND every send takes a turn on the board (:func:`takes_turns`, next
  section), which keeps the sends of all processes :func:`turn_spacing_s` apart. With ``n == 1`` the
  share is the full policy (the limiter is not touched at all: a lone process behaves exactly as
  without this module).
* a policy set later by other code (``HttpClient.set_policy``, e.g. a crawl client applying a host's
  documented limits, even before every request) becomes the new full policy of the host, and this
  process's limiter gets its share of it at once (``_Host.adjust``), never the whole.
* concurrency: ``ceil(concurrency / n)``; the total may exceed the configured cap by up to ``n - 1``,
  and for a moment after a change (``set_policy`` swaps the semaphore while holders of the old one are
  still in flight).

Why a joining process cannot push any window past the rate (integer shares)
--------------------------------------------------------------------------
Let ``W`` be the host's window with the client's safety margin (``_throttle_params(policy)[1]``; the
server counts windows of ``period_s <= W``). A process Q that applies a share ``s`` at time ``t_Q``
admits a request only when fewer than ``s`` of its own stamps lie in the last ``W`` seconds, so every
window that starts after ``t_Q`` holds at most ``s`` of Q's requests. A new process P inserts its row
(sequence number ``seq_P``) and sends nothing until

1. every older live row Q (``seq_Q < seq_P``) reports ``adopted_seq >= seq_P``: Q has applied a share
   computed from a row set that contains P, at ``adopted_at``; and
2. ``now >= max(adopted_at) + W``, and ``now >= gone_at + W`` for every older row that has left or
   died (its share did not count P; ``gone_at`` bounds its last request, see below).

Take any server-side window (``period_s <= W`` long) and the ``k`` processes that send in it. For any
two of them, X older than Y: Y's requests go out at ``t >= adopted_at(X) + W``, so the window starts
after X adopted a share counting Y; and Y's own row set always contained X (X's row existed before Y's
insert, and a departed X keeps counting for ``W`` after its last request). So every sender i uses a
share computed with ``n_i >= k``, holds at most ``floor(rate / n_i) <= rate / k`` requests in the
window, and the window holds at most ``rate``. An older row that departed without adopting P sent its
last request before ``gone_at``, i.e. before every window that holds P's requests. The first process
of a host (no older row) opens after one board write (milliseconds), not after ``W``.

Turns (hosts whose share would be fractional)
--------------------------------------------
Integer shares cannot serve a host that allows fewer requests per period than there are processes:
each process would get a fraction of one request, and nothing would keep two processes from sending
within the same window (Nominatim: at most 1 request/s for the whole application). For such a host
(:func:`takes_turns`: ``n >= 2`` and ``floor(rate / n) == 0``) the processes take turns, FIFO, through
the board's ``tickets`` queue and the host's ``next_at`` (CLOCK_MONOTONIC, table ``turns``):

1. after the local admission (limiter slot, pause, gate) a request puts a ticket into the host's queue
   (one per process at a time) and looks again until it is at the head (it sleeps until the earliest
   time the tickets ahead could have sent, at least :data:`TURN_POLL_MIN_S`, at most ``poll_s``);
2. at the head it waits until ``next_at``, then until any pause is over and the gate is open (looking
   at the board again after such a wait), and returns to :class:`HttpClient`;
3. when the request's headers are handed to the socket (the same aiohttp trace hook that stamps the
   limiter), ``next_at`` becomes that SEND time plus :func:`turn_spacing_s` (``period_s / rate`` plus
   the client's safety margin: 1.1 s for 1/s) and the ticket leaves the queue, in one board
   transaction on the board thread; a request that ends (or is cancelled) unsent just leaves.

Since ``next_at`` is set from when the previous request actually went out, not from when its turn was
granted, a delay between the grant and the send (connection set-up, a busy event loop) only makes the
next send later: client-side send times are at least the spacing apart, and the margin (10%, at least
20 ms) absorbs the remaining socket-to-server jitter, as for one process's limiter. Costs: one board
transaction to queue, about one more to look again when another process is ahead, one to pass the turn
on; only at these slow hosts (a whole share never touches the board per request).

A dead turn holder: a ticket at the head whose process is gone (pid gone or reused, another boot, its
member row gone, or its heartbeat older than :data:`STALE_S`) is removed by the next process that looks,
and ``next_at`` becomes at least that moment plus the spacing (the dead process may have sent just
before it died), so a SIGKILL costs the host one spacing plus the look's delay. A live holder keeps the
turn until its request is sent or given up, also while it waits out a pause or a stalled connect.

Why the window bound holds with turns. A process's limiter keeps its fractional share (one request per
``n * spacing``), so in a server window it sends at most one request, and it adopts a membership that
makes it take turns only once no request of its own that took no turn is still on its way (its
``adopted_at`` is then at least its last such send; a newcomer opens a window after that). Take a
window with ``k`` senders. If one of them sent without a turn (a whole share, ``n_i >= k`` as above,
``floor(rate / n_i) >= 1``, so ``rate >= k``), every sender sends at most ``max(1, floor(rate / n_i))
<= rate / k`` requests in it: at most ``rate`` in all. Otherwise every request in it took a turn, turns
are at least the spacing apart, and a window of ``period_s`` holds at most ``rate`` of them.

Leaving is the direction a process may grow in, but a departed process's recent requests are still in
the server's window: a row that leaves (clean close, or found dead: pid gone or start time changed,
another boot, or heartbeat older than :data:`STALE_S`) keeps counting for ``W`` after it was marked
gone (for a dead process: from ``min(now, last heartbeat + LEASE_S)``, since it could not send after
its lease ran out), so nobody grows into a window that still holds the departed process's requests.
A process whose own heartbeat is older than :data:`LEASE_S` (< :data:`STALE_S`; e.g. its event loop
was frozen) closes its gate until its next board write; if the others declared it gone meanwhile, it
re-joins as new. A re-run long after a crash finds the dead rows with an old ``gone_at`` and starts at
once with the full share.

Retry-After across processes
----------------------------
A pause (``Retry-After`` on a 429/503, or :meth:`HttpClient.pause_host`) is written to the board at once
(the background task is woken, ``until`` is the absolute ``time.monotonic()`` end: CLOCK_MONOTONIC is
system-wide on Linux) and every other process picks it up on its next poll. Documented lag: another
process may still START requests for up to :data:`POLL_S` plus one board transaction (milliseconds; more
under heavy lock contention, bounded by ``busy_timeout``) after the 429 reached the first one; requests
already in flight cannot be recalled. Every pause also closes the gate until the board has been read
AFTER the pause ends, so a process that wakes from a pause checks for a longer pause posted meanwhile
before its first send.

A board that fails (the SQLite file locked past ``busy_timeout``, the Redis server gone)
-------------------------------------------------------------------------------------------
The background task keeps ticking every :data:`POLL_S` (the lease closes the gates meanwhile, so nothing is
sent on a stale share) and a turn keeps looking. The log says so once per outage, not once per failed board
call: one warning at the first failure (:class:`_BoardOutage`), the later failures of the same outage at debug
level, and one warning line when a board call succeeds again (how long it failed, how many calls).

A board that refuses (the Redis server says no: the URL's credentials refused, ``WRONGPASS`` / ``NOAUTH``, after a
password change that cut the board's connection, or an ACL user without a command it needs, ``NOPERM``) is no
outage: waiting does not end it. The board's :meth:`refusal` (``RedisBoard.refusal``) recognises it; the first
such failure stops the background task (no retry, no warning line: the command that ends on it says it once) and is
kept in :attr:`HostShare.refused`; from then on every gate is closed for good and a request at it, waiting or new,
raises the refusal (a fresh error of its type each time), as does a turn, so the stage that made the request fails
with it and the run ends as at a queue's or the ledger's refusal (exit 2, :mod:`geoagent.runtime.redis_retry`),
instead of waiting at a closed gate for ever (session 19). Leaving (rows marked gone) is tried once, quietly.

Limits
------
* One machine (this SQLite board): liveness uses pids, ``/proc`` start times and boot id, and times are
  CLOCK_MONOTONIC; a row of this kernel in another pid namespace (a container sharing the state folder) is
  judged by its heartbeat only (:func:`_row_gone`: its pids mean nothing here); a state folder shared over a network file system by several machines is not supported.
  Several machines share a board on Redis instead (:mod:`geoagent.runtime.hostshare_redis`: the same rules
  and proof, times on the server's clock, liveness by heartbeat across machines).
* Every process must hold the same policy for a host (same config and code); shares are computed
  from each process's own policy.
* A process keeps its share of a host until it closes its services or dies, also while it no longer
  calls the host (others do not grow meanwhile).
* A run that starts less than one window after another run of the same campaign stopped waits out
  that window before its first request to the host (the stopped run's last requests still count).
* Turns: a process whose event loop freezes for longer than ``STALE_S - LEASE_S`` between its last
  check (lease, pause) and the write of its headers, while others declared it gone and took its turn,
  could still send out of turn. A change of a host's policy while several processes call it is not
  coordinated (each applies it on its own); set policies before the first request.

Source: issue 2 ("Rate limit" acceptance; point 4). Nominatim's usage policy (1 request/s) is the
motivating case: https://operations.osmfoundation.org/policies/nominatim/.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import math
import os
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from geoagent.runtime.http import HostPolicy, HttpClient, _HostState, _throttle_params
from geoagent.runtime.procs import boot_id, pid_alive, proc_start, proc_stat
from geoagent.runtime.sqlite_wal import enable_wal

log = logging.getLogger(__name__)

#: File name of the board inside ``state/<campaign>/``.
HOSTS_DB = "hosts.sqlite"
#: Background poll interval (s): heartbeat, membership refresh, pause board read.
POLL_S = 0.25
#: A process sends only while its own last heartbeat is younger than this (s).
LEASE_S = 4.0
#: Others declare a row gone when its heartbeat is older than this (s). Must exceed LEASE_S.
STALE_S = 10.0
#: SQLite busy timeout (ms).
BUSY_TIMEOUT_MS = 10_000
#: Pauses older than this (s after their end) are deleted from the board.
PAUSE_KEEP_S = 60.0
#: Shortest wait (s) between two looks at a host's turn queue while another process holds the turn.
TURN_POLL_MIN_S = 0.02

_SCHEMA = """
CREATE TABLE IF NOT EXISTS members (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pstart TEXT NOT NULL,
    boot TEXT NOT NULL,
    joined_at REAL NOT NULL,
    heartbeat REAL NOT NULL,
    hold_s REAL NOT NULL,
    adopted_seq INTEGER NOT NULL DEFAULT 0,
    adopted_at REAL NOT NULL DEFAULT 0,
    gone_at REAL
);
CREATE INDEX IF NOT EXISTS members_host ON members(host);
CREATE TABLE IF NOT EXISTS pauses (
    host TEXT PRIMARY KEY,
    until REAL NOT NULL,
    boot TEXT NOT NULL,
    set_by INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    host TEXT PRIMARY KEY,
    next_at REAL NOT NULL,
    boot TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tickets (
    ticket INTEGER PRIMARY KEY AUTOINCREMENT,
    token TEXT NOT NULL UNIQUE,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pstart TEXT NOT NULL,
    boot TEXT NOT NULL,
    member INTEGER NOT NULL,
    since REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tickets_host ON tickets(host, ticket);
"""


def share_policy(policy: HostPolicy, n: int) -> HostPolicy:
    """The part of ``policy`` one of ``n`` processes may use (see the module docstring).

    Parameters
    ----------
    policy : HostPolicy
        The host's configured policy (``rate`` requests per ``period_s`` seconds, ``concurrency``).
    n : int
        Processes counted for the host (>= 1).

    Returns
    -------
    HostPolicy
        ``policy`` itself when ``n == 1``; else a copy with ``rate = floor(rate / n)`` (or the fraction
        ``rate / n`` when that floor is 0) and ``concurrency = ceil(concurrency / n)``; other fields kept.

    Raises
    ------
    ValueError
        ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"share_policy: n must be >= 1, got {n}")
    if n == 1:
        return policy
    whole = math.floor(policy.rate / n)
    rate = float(whole) if whole >= 1 else policy.rate / n
    return dataclasses.replace(policy, rate=rate, concurrency=max(1, math.ceil(policy.concurrency / n)))


def takes_turns(policy: HostPolicy, n: int) -> bool:
    """Whether ``n`` processes sharing a host with ``policy`` take turns on the board for every send.

    True when ``n >= 2`` and ``floor(rate / n) == 0``: the share would be a fraction of one request per
    period (e.g. Nominatim's 1 request/s with 2 processes), so only turns keep sends from different
    processes apart (see the module docstring).
    """
    return n >= 2 and math.floor(policy.rate / n) == 0


def turn_spacing_s(policy: HostPolicy) -> float:
    """Least time in seconds between two sends to a host whose processes take turns.

    ``period_s / rate`` plus the client's safety margin (:data:`~geoagent.runtime.http.RATE_MARGIN_FRACTION`
    of it, at least :data:`~geoagent.runtime.http.RATE_MARGIN_MIN_S`), as for one process's limiter of a
    fractional rate: 1.1 s for 1 request per 1 s.

    Raises
    ------
    ValueError
        ``rate`` or ``period_s`` not > 0.
    """
    if policy.rate <= 0 or policy.period_s <= 0:
        raise ValueError(f"HostPolicy.rate and period_s must be > 0, got rate={policy.rate} period_s={policy.period_s}")
    return _throttle_params(HostPolicy(rate=1.0, period_s=policy.period_s / policy.rate))[1]


def _identity() -> str:
    """This process's machine identity on the board: :func:`geoagent.runtime.procs.boot_id` (the kernel boot id
    plus ``"/pidns:<inode>"`` of this process's pid namespace; '' = unknown). Rows with this identity are judged by
    pid and start time; rows of the same kernel in another pid namespace (a container sharing the host's network
    and this state folder) by their heartbeat only, since their pids mean nothing here."""
    return boot_id() or ""


def _boot_id() -> str:
    """The kernel's boot id alone (:func:`_identity` without the pid namespace; '' = unknown): the domain of the
    board's CLOCK_MONOTONIC times (pauses, ``next_at``), which every pid namespace of one kernel shares."""
    return _kernel(_identity())


def _kernel(identity: str) -> str:
    """The kernel boot id part of a stored identity (a bare boot id, as older boards wrote it, is its own)."""
    return identity.split("/pidns:", 1)[0]


def _row_gone(mine: str, boot: str, pid: int, pstart: str, heartbeat_age_s: float) -> bool | None:
    """Whether a member or ticket row (its identity ``boot``, ``pid``, ``pstart``; heartbeat ``heartbeat_age_s`` s
    old) is gone, seen from identity ``mine``: None when it is another boot's (dropped at once, its times are
    another clock's); for this kernel, gone when its heartbeat is older than :data:`STALE_S`, or (same pid
    namespace only) when :func:`_alive` says its process ended."""
    if _kernel(boot) != _kernel(mine):
        return None
    if heartbeat_age_s > STALE_S:
        return True
    return boot == mine and not _alive(pid, pstart)


def _proc_start(pid: int) -> str:
    """Start time of ``pid`` as the board stores it (:func:`geoagent.runtime.procs.proc_start`; '' = unknown)."""
    return proc_start(pid) or ""


def _alive(pid: int, pstart: str) -> bool:
    """Whether process ``pid`` that started at ``pstart`` (``_proc_start``; '' = unknown) still runs: its pid
    exists, and (``pstart`` known) the process holding it started then and is no zombie (state ``Z``: it has
    exited), and its ``/proc`` entry did not vanish meanwhile. Stricter than the ledger's check on purpose: a
    member that is gone must not keep its turn (:mod:`geoagent.runtime.procs`: its :func:`pid_alive` tells a
    zombie)."""
    if pid_alive(pid) is False:
        return False
    if pstart:
        st = proc_stat(pid)
        if st is None:
            return not Path("/proc").is_dir()  # vanished between the two checks (or no /proc at all)
        state, start = st
        if state == "Z" or start != pstart:
            return False
    return True


class _FreeSend:
    """Token of a send that takes no turn (the host's share is whole): counts it until it went out."""

    __slots__ = ("host",)

    def __init__(self, host: _Host) -> None:
        self.host = host

    def done(self, when_s: float, sent: bool) -> None:
        h = self.host
        h.free_inflight -= 1
        if sent and when_s > h.last_free_sent:
            h.last_free_sent = when_s


class _Turn:
    """This process's turn at a host (a ticket at the head of the host's queue on the board)."""

    __slots__ = ("host", "token", "finished")

    def __init__(self, host: _Host, token: str) -> None:
        self.host = host
        self.token = token
        self.finished = False

    def done(self, when_s: float, sent: bool) -> None:
        """The request's headers went out at ``when_s`` (``sent``), or it ended unsent: pass the turn on."""
        if not self.finished:
            self.finished = True
            self.host.turn_done(self.token, when_s if sent else None)


class _BoardOutage:
    """One warning per board outage instead of one per failed board call (module docstring).

    The background task ticks every ``poll_s`` and a turn looks again every ``poll_s`` while the board fails,
    so logging every failure floods the log (4 lines/s) until the run closes. :meth:`failed` logs the first
    failure of an outage as a warning and the others at debug level; :meth:`ok` logs one warning line when the
    board answers again (seconds since the first failure, failed calls). Used on the event loop only.
    """

    def __init__(self, where: Path) -> None:
        self.where = where
        self.since: float | None = None  # monotonic s of the outage's first failure (None: the board answers)
        self.failures = 0  # failed board calls of the current outage

    def failed(self, what: str, exc: BaseException) -> None:
        """A board call (``what``: ``"tick"``, ``"turn of <host>"``, ...) failed with ``exc``."""
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            log.warning("hostshare: board %s (%s): %s; retrying every poll, logged once until the board answers again",
                        self.where, what, exc)
        else:
            log.debug("hostshare: board %s (%s) still failing (%d calls): %s", self.where, what, self.failures, exc)

    def ok(self) -> None:
        """A board call succeeded: ends the outage (one line) if there was one."""
        if self.since is not None:
            log.warning("hostshare: board %s answers again after %.1f s (%d failed call(s))", self.where,
                        time.monotonic() - self.since, self.failures)
            self.since, self.failures = None, 0


class _Host:
    """This process's view of one shared host; also the ``gate`` of its ``_HostState``."""

    def __init__(self, share: HostShare, key: str, state: _HostState) -> None:
        self.share = share
        self.key = key
        self.state = state
        self.base = state.policy
        self.hold_s = _throttle_params(self.base)[1]
        self.seq: int | None = None
        self.ready = False  # joined: every older process adopted us and a window has passed
        self.need_check = False  # a pause ended: read the board once more before sending
        self.n = 1  # processes counted at the last board read
        self.current = self.base  # the share applied to the limiter
        self.current_since = 0.0  # monotonic s when ``current`` was applied
        self.adopted_seq = 0
        self.adopted_at = 0.0
        self.open_at = math.inf  # monotonic s at which a joining process may open (once known)
        self.turns = False  # every send takes a turn on the board (takes_turns(base, n))
        self.spacing_s = turn_spacing_s(self.base)
        self.turn_lock = asyncio.Lock()  # one ticket of this process in the host's queue at a time
        self.free = _FreeSend(self)
        self.free_inflight = 0  # sends that took no turn and have not gone out yet
        self.last_free_sent = -math.inf  # monotonic s of the latest send that took no turn

    # gate protocol (called on the request path: memory only)
    def is_open(self) -> bool:
        return (self.ready and not self.need_check and time.monotonic() - self.share.last_heartbeat < LEASE_S
                and self.share.refused is None)

    async def wait_open(self) -> None:
        """Wait until the gate opens (or the share has stopped).

        Raises
        ------
        Exception
            The board's refusal (:attr:`HostShare.refused`, module docstring), at once or when it comes.
        """
        if self.seq is None:
            self.share.wake()  # not registered yet: tick now (later wake-ups are scheduled by the loop)
        # the loop ticks at least every poll_s while hosts exist, and once more when it stops
        while not self.is_open() and not self.share.stopped:
            self.share.raise_if_refused()
            await self.share.ticked.wait()
        self.share.raise_if_refused()

    async def take_turn(self, before_wait: Callable[[], Awaitable[object]] | None = None) -> _Turn | _FreeSend:
        """Wait until this process may send to the host; the token's ``done()`` must follow (HttpClient).

        Whole shares (``self.turns`` false): no wait, no board access. Turns: put a ticket in the host's
        queue on the board; once it is at the head, wait until the host's ``next_at`` (the previous
        send's time plus :func:`turn_spacing_s`), then until any pause is over and the gate is open.
        The ticket leaves the queue when ``done()`` reports the send (``next_at`` moves to that send's
        time plus the spacing) or that nothing was sent. Cancelled or failing: the ticket is removed.
        ``before_wait`` (the request's, :meth:`geoagent.runtime.http.HttpClient.request`; one-shot) is awaited
        before each wait; what it raises ends the call like a failure (no ticket, no turn).
        """
        share = self.share
        if not self.turns or share._closing:
            self.free_inflight += 1
            return self.free
        if before_wait is not None and self.turn_lock.locked():
            await before_wait()
        await self.turn_lock.acquire()
        token = share.new_token()
        try:
            while True:
                share.raise_if_refused()
                if share._closing:  # leaving: the board is going away, the gates are detached
                    self.turn_lock.release()
                    share.release(self.key, token, None)
                    self.free_inflight += 1
                    return self.free
                try:
                    look = await share._run(share._turn_db, self.key, token, self.seq or 0, self.spacing_s)
                except share.board_errors as exc:
                    if share.refuse(exc):
                        continue  # raised at the top
                    share.outage.failed(f"turn of {self.key}", exc)
                    await asyncio.sleep(share.poll_s)
                    continue
                share.outage.ok()
                now = time.monotonic()
                if before_wait is not None and (look["ahead"] > 0 or max(look["now"], look["next_at"]) > now
                                                or now < self.state.paused_until or not self.is_open()):
                    await before_wait()
                if look["ahead"] > 0:
                    # the tickets ahead send at max(now, next_at) + k * spacing at the earliest
                    wake = max(look["now"], look["next_at"]) + (look["ahead"] - 1) * self.spacing_s + TURN_POLL_MIN_S
                    await asyncio.sleep(min(max(wake - now, TURN_POLL_MIN_S), share.poll_s))
                    continue
                slot = max(look["now"], look["next_at"])
                if slot > now:
                    await asyncio.sleep(slot - now)
                if time.monotonic() < self.state.paused_until or not self.is_open():
                    # a pause or a closed gate (lease lapsed, pause check due): wait, then look again
                    while (wait := self.state.paused_until - time.monotonic()) > 0:
                        await asyncio.sleep(wait)
                    if not self.is_open() and not share.stopped:
                        await self.wait_open()
                    continue
                return _Turn(self, token)
        except BaseException:
            share.release(self.key, token, None)  # queued after any board call still running for it
            self.turn_lock.release()
            raise

    def turn_done(self, token: str, sent_at: float | None) -> None:
        """A turn ended: free the queue (and push ``next_at`` to ``sent_at + spacing`` when it sent)."""
        self.share.release(self.key, token, None if sent_at is None else sent_at + self.spacing_s)
        if self.turn_lock.locked():
            self.turn_lock.release()

    def adjust(self, policy: HostPolicy) -> HostPolicy:
        """``_HostState.set_policy`` hook: ``policy`` is the new full policy unless it is our own share.

        Code that sets a host's policy after we applied a share (e.g. a crawl client setting its
        documented limits) changes the BASE; the limiter gets this process's share of it at once.
        """
        if policy is self.current:
            return policy
        self.base = policy
        self.hold_s = _throttle_params(policy)[1]
        self.spacing_s = turn_spacing_s(policy)
        self.turns = takes_turns(policy, self.n)
        share = share_policy(policy, self.n)
        if share != self.current:
            self.current, self.current_since = share, time.monotonic()
        return self.current

    def paused(self, until: float) -> None:
        """``_HostState.on_pause``: publish the pause and read the board again once it is over."""
        self.need_check = True
        if not self.share.applying:
            self.share.pending_pauses[self.key] = max(until, self.share.pending_pauses.get(self.key, 0.0))
        self.share.wake()


class HostShare:
    """Share the per-host limits of ``http`` with the other processes using the board at ``db_path``.

    Parameters
    ----------
    db_path : str or Path or RedisBoard
        The board, normally ``state/<campaign>/hosts.sqlite`` (:func:`board_path`); created if absent. A
        :class:`geoagent.runtime.hostshare_redis.RedisBoard` instead shares the hosts with every machine of a
        ``[backend] kind = "redis"`` campaign (same rules, the server's clock).
    http : HttpClient
        This process's client; every host it calls (present and future) takes part.
    poll_s : float
        Background poll interval in seconds (default :data:`POLL_S`); at most ``LEASE_S / 2``, so the
        heartbeat keeps this process's lease alive.

    Use as ``async with HostShare(path, http):`` inside ``async with http:``. Entering starts the
    background task (no board access on the request path, except the turns of hosts whose share would
    be fractional: :func:`takes_turns`); leaving marks this process's rows gone
    (they keep counting for one window, see the module docstring) and stops the task.

    Raises
    ------
    ValueError
        ``poll_s`` not in ``(0, LEASE_S / 2]``.
    sqlite3.Error, redis.RedisError
        When the board cannot be opened or created (on ``__aenter__``).
    """

    def __init__(self, db_path: Any, http: HttpClient, *, poll_s: float = POLL_S) -> None:
        self.board: Any = None  # a RedisBoard (geoagent.runtime.hostshare_redis), or None: the SQLite file
        self.board_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        if isinstance(db_path, (str, os.PathLike)):
            self.db_path = Path(db_path)
        else:  # the board's storage on Redis: same algorithm, server clock (hostshare_redis module docstring)
            self.board, self.db_path = db_path, Path(repr(db_path))
            self.board_errors = (sqlite3.Error, *db_path.errors)
        self.http = http
        if not 0.0 < float(poll_s) <= LEASE_S / 2:
            raise ValueError(f"HostShare: poll_s must be in (0, {LEASE_S / 2}] s, got {poll_s!r}")
        self.poll_s = float(poll_s)
        self.pid = os.getpid()
        self.pstart = _proc_start(self.pid)
        self.boot = _identity()  # members and tickets: pid checks only within this identity
        self.hosts: dict[str, _Host] = {}
        self.pending_pauses: dict[str, float] = {}
        self.pending_releases: list[tuple[str, str, float | None]] = []  # (host, token, next_at) to retry
        self._token_prefix = f"{self.pid}:{uuid.uuid4().hex}"  # one per HostShare: tests run two in one process
        self._token_seq = itertools.count(1)
        self.applying = False
        self.last_heartbeat = -math.inf
        self.ticked = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hostshare")
        self._conn: sqlite3.Connection | None = None
        self._closing = False
        self.stopped = False  # the background task has ended (gates are detached)
        self.ticks = 0  # board transactions made (diagnostics; about 1 / poll_s per second while calling)
        self.outage = _BoardOutage(self.db_path)  # one warning per board outage, one line when it ends
        #: the board's refusal (module docstring, "A board that refuses"): set once, the share then stops
        self.refused: BaseException | None = None

    @property
    def kernel(self) -> str:
        """The kernel boot id of :attr:`boot`: pauses and turns hold times of this kernel's CLOCK_MONOTONIC."""
        return _kernel(self.boot)

    # ---- lifecycle ---------------------------------------------------------------------------------
    async def __aenter__(self) -> HostShare:
        await self._run(self._open_db)
        self.ticked = asyncio.Event()
        self._wake = asyncio.Event()
        self.http.set_host_listener(self)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="hostshare")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the background task, mark this process's rows gone, close the board (idempotent)."""
        if self._closing:
            return
        self._closing = True
        self.http.set_host_listener(None)
        if self._task is not None:
            # a stop flag, not Task.cancel(): the loop ends after its current tick (a tick is one short
            # board transaction), so no cancellation can be lost in a wait that completes at that moment
            self.wake()
            try:
                await self._task
            except Exception:  # noqa: BLE001 - logged; leaving must not fail the run
                log.exception("hostshare: background task failed")
        for h in self.hosts.values():  # detach: the client is about to close too (open_services)
            h.state.gate = None
            h.state.on_pause = None
        self.stopped = True
        ev, self.ticked = self.ticked, asyncio.Event()
        ev.set()  # release waiters; with the gates gone they pass straight on
        try:
            await self._run(
                self._leave_db,
                [h.seq for h in self.hosts.values() if h.seq is not None],
                {h.key: h.spacing_s for h in self.hosts.values()},
                self.pending_releases,
            )
        except self.board_errors as exc:
            if self.refused is not None or self.refuse(exc):  # said by the command that ends on it
                log.debug("hostshare: could not mark rows gone in %s: %s", self.db_path, exc)
            else:
                log.warning("hostshare: could not mark rows gone in %s: %s", self.db_path, exc)
        await self._run(self._close_db)
        self._pool.shutdown(wait=False)

    def wake(self) -> None:
        """Make the background task poll now."""
        self._wake.set()

    def refuse(self, exc: BaseException) -> bool:
        """Whether the board's failure ``exc`` is a refusal (the board's ``refusal(exc)``: a Redis server that
        refused the URL's credentials or a command; never for the SQLite file); the first one is kept in
        :attr:`refused` (logged at debug level only: the command that ends on it says it), the background task
        stops and every waiter at a gate is woken to raise it (module docstring, "A board that refuses")."""
        check = getattr(self.board, "refusal", None)
        refused = check(exc) if callable(check) else None
        if refused is None:
            return False
        if self.refused is None:
            self.refused = refused
            log.debug("hostshare: board %s refused: %s; stopped (not retried)", self.db_path, refused)
            self._wake.set()
            ev, self.ticked = self.ticked, asyncio.Event()
            ev.set()
        return True

    def raise_if_refused(self) -> None:
        """Raise the board's refusal (a fresh error of its type and message) once there is one.

        Raises
        ------
        Exception
            :attr:`refused`, when set.
        """
        err = self.refused
        if err is None:
            return
        try:
            fresh = type(err)(*err.args)  # one object raised from many requests would chain their tracebacks
        except Exception:  # noqa: BLE001 - an exception class with another constructor
            fresh = err
        raise fresh from None

    def new_token(self) -> str:
        """A ticket name unique over processes, boots and HostShare objects."""
        return f"{self._token_prefix}:{next(self._token_seq)}"

    def release(self, key: str, token: str, next_at: float | None) -> None:
        """Remove ticket ``token`` of ``key`` from the board; push the host's ``next_at`` when given.

        Runs on the board thread after every board call already queued (FIFO); retried by the next
        background tick if it fails. No-op once this share is closed (leaving removes every ticket).
        """
        item = (key, token, next_at)
        try:
            fut = asyncio.get_running_loop().run_in_executor(self._pool, self._release_db, [item])
        except RuntimeError:  # the board thread is shut down: close() removed our tickets
            return

        def _check(f: asyncio.Future[None]) -> None:
            if f.cancelled() or f.exception() is not None:
                exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
                if self.refused is not None or self.refuse(exc):
                    return  # nothing to retry: the share has stopped
                self.outage.failed(f"passing the turn of {key} on; retried by the next tick", exc)
                self.pending_releases.append(item)
                self.wake()

        fut.add_done_callback(_check)

    # ---- HttpClient listener ------------------------------------------------------------------------
    def host_added(self, key: str, state: _HostState) -> None:
        """Called by :class:`HttpClient` for each host state; gates it until this process has joined."""
        if key in self.hosts or self._closing:
            return
        h = _Host(self, key, state)
        self.hosts[key] = h
        state.gate = h
        state.on_pause = h.paused
        self.wake()

    # ---- background --------------------------------------------------------------------------------
    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing and self.refused is None:
            self._wake.clear()
            if self.hosts:
                inp = self._tick_input()
                try:
                    self.ticks += 1
                    snapshot = await self._run(self._tick_db, inp)
                    self.outage.ok()
                    self._apply(snapshot)
                except Exception as exc:  # noqa: BLE001 - keep going: the lease closes the gates meanwhile
                    for key, until in inp["pauses"].items():  # publish them on the next tick
                        self.pending_pauses[key] = max(until, self.pending_pauses.get(key, 0.0))
                    self.pending_releases.extend(inp["releases"])
                    if isinstance(exc, self.board_errors) and self.refuse(exc):
                        break  # not retried: the gates raise it (module docstring, "A board that refuses")
                    if isinstance(exc, self.board_errors):
                        self.outage.failed("tick", exc)
                    else:
                        log.exception("hostshare: tick failed")
                    if not self._closing:
                        await asyncio.sleep(self.poll_s)
                ev, self.ticked = self.ticked, asyncio.Event()
                ev.set()
            now = time.monotonic()
            delay = self.poll_s
            for h in self.hosts.values():
                if h.need_check and h.state.paused_until > now:
                    delay = min(delay, h.state.paused_until - now)
                if not h.ready and now < h.open_at < math.inf:
                    delay = min(delay, h.open_at - now)
            if self._closing:
                break
            timer = loop.call_later(max(0.0, delay), self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()

    def _tick_input(self) -> dict[str, Any]:
        pauses, self.pending_pauses = self.pending_pauses, {}
        releases, self.pending_releases = self.pending_releases, []
        return {
            "hosts": [(h.key, h.seq, h.hold_s, h.adopted_seq, h.adopted_at) for h in self.hosts.values()],
            "pauses": pauses,
            "releases": releases,
        }

    def _apply(self, snap: dict[str, Any]) -> None:
        now = snap["now"]
        self.last_heartbeat = now
        for key, h in list(self.hosts.items()):
            if key not in snap["seqs"]:
                continue  # first seen while this tick's board work ran: the next tick registers it
            seq = snap["seqs"][key]
            if seq != h.seq:  # first registration, or re-join after being declared gone
                h.seq, h.ready, h.open_at = seq, False, math.inf
            rows = snap["rows"][key]
            n = h.n = max(1, len(rows))
            h.turns = takes_turns(h.base, n)
            target = share_policy(h.base, n)
            if target != h.current:
                h.current, h.current_since = target, time.monotonic()
                # the host's own _HostState.set_policy (what HttpClient.set_policy calls): keeps the recent
                # admissions, so a smaller share never lets a burst through. HttpClient's policy table keeps
                # the configured (full) policy.
                h.state.set_policy(target)
                log.debug("hostshare: %s: %d process(es), this one's share %s/%s s, concurrency %d",
                          key, n, target.rate, target.period_s, target.concurrency)
            max_seq = max((r["seq"] for r in rows), default=0)
            if max_seq > h.adopted_seq:
                if not h.turns:
                    h.adopted_seq, h.adopted_at = max_seq, h.current_since
                elif h.free_inflight == 0:
                    # turns from now on; the newcomer waits a window after our last send without a turn
                    # (one admitted before this tick may still have been on its way: adopt once it is out)
                    h.adopted_seq, h.adopted_at = max_seq, max(h.current_since, h.last_free_sent)
            # pauses posted by anyone (ours come back too: harmless, pause() never shortens)
            until = snap["pauses"].get(key)
            if until is not None and until > h.state.paused_until:
                self.applying = True
                try:
                    h.state.pause(until - time.monotonic())
                finally:
                    self.applying = False
            if h.need_check and h.state.paused_until <= now:
                h.need_check = False  # this board read happened after the pause ended
            if not h.ready:
                older = [r for r in rows if r["seq"] < h.seq and r["gone_at"] is None]
                if all(r["adopted_seq"] >= h.seq for r in older):
                    # the older live rows adopted a share counting us; older departed rows (their shares
                    # did not count us) must have left the window: no request of theirs after gone_at
                    since = [r["adopted_at"] for r in older]
                    since += [r["gone_at"] for r in rows if r["seq"] < h.seq and r["gone_at"] is not None]
                    h.open_at = max(since, default=-math.inf) + h.hold_s
                    if time.monotonic() >= h.open_at:
                        h.ready = True
                        log.debug("hostshare: %s: joined as #%s (%d process(es))", key, h.seq, n)

    # ---- board (executor thread only) ---------------------------------------------------------------
    def _open_db(self) -> None:
        if self.board is not None:
            self.board.open(boot=self.boot, pid=self.pid, pstart=self.pstart)
            return
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.db_path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        enable_wal(conn, timeout_s=BUSY_TIMEOUT_MS / 1000)  # processes started together open it at once
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)  # each CREATE ... IF NOT EXISTS is atomic; concurrent openers are safe
        conn.row_factory = sqlite3.Row
        self._conn = conn

    def _close_db(self) -> None:
        if self.board is not None:
            self.board.close()
            return
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _leave_db(self, seqs: list[int], spacings: dict[str, float], releases: list[tuple[str, str, float | None]]) -> None:
        if self.board is not None:
            self.board.leave(seqs, spacings, releases, self._token_prefix)
            return
        if self._conn is None or not (seqs or releases):
            return
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            now = time.monotonic()
            c.executemany("UPDATE members SET gone_at = ? WHERE seq = ? AND gone_at IS NULL", [(now, s) for s in seqs])
            self._release_rows(c, releases)
            # a ticket still here belongs to a request torn down mid-turn: it may have just sent
            mine = (self._token_prefix + ":%",)  # this HostShare's tokens (hex, digits, colons: no wildcards)
            for r in c.execute("SELECT DISTINCT host FROM tickets WHERE token LIKE ?", mine).fetchall():
                self._push_next_at(c, r["host"], now + spacings.get(r["host"], 0.0))
            c.execute("DELETE FROM tickets WHERE token LIKE ?", mine)
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL): keep the real error
                c.execute("ROLLBACK")
            raise

    def _tick_db(self, inp: dict[str, Any]) -> dict[str, Any]:
        if self.board is not None:
            return self.board.tick(inp)
        c = self._conn
        assert c is not None
        c.execute("BEGIN IMMEDIATE")
        try:
            now = time.monotonic()
            self._release_rows(c, inp["releases"])
            c.execute("DELETE FROM pauses WHERE boot != ? OR until < ?", (self.kernel, now - PAUSE_KEEP_S))
            for key, until in inp["pauses"].items():
                c.execute(
                    "INSERT INTO pauses(host, until, boot, set_by) VALUES (?, ?, ?, ?) ON CONFLICT(host) DO UPDATE SET"
                    " until = max(until, excluded.until), set_by = excluded.set_by",
                    (key, until, self.kernel, self.pid),
                )
            seqs: dict[str, int] = {}
            for key, seq, hold_s, adopted_seq, adopted_at in inp["hosts"]:
                if seq is not None:
                    cur = c.execute(
                        "UPDATE members SET heartbeat = ?, adopted_seq = ?, adopted_at = ? WHERE seq = ? AND gone_at IS NULL",
                        (now, adopted_seq, adopted_at, seq),
                    )
                    if cur.rowcount == 1:
                        seqs[key] = seq
                        continue
                cur = c.execute(
                    "INSERT INTO members(host, pid, pstart, boot, joined_at, heartbeat, hold_s) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key, self.pid, self.pstart, self.boot, now, now, hold_s),
                )
                seqs[key] = int(cur.lastrowid or 0)
            mine = set(seqs.values())
            # find the departed: another boot, pid gone or reused, heartbeat stale
            for r in c.execute("SELECT seq, pid, pstart, boot, heartbeat FROM members WHERE gone_at IS NULL").fetchall():
                if r["seq"] in mine:
                    continue
                gone = _row_gone(self.boot, r["boot"], r["pid"], r["pstart"], now - r["heartbeat"])
                if gone is None:  # another boot
                    c.execute("DELETE FROM members WHERE seq = ?", (r["seq"],))
                elif gone:
                    # it cannot have sent after its lease ran out (heartbeat + LEASE_S), nor after now
                    gone_at = min(now, r["heartbeat"] + LEASE_S)
                    c.execute("UPDATE members SET gone_at = ? WHERE seq = ?", (gone_at, r["seq"]))
            c.execute("DELETE FROM members WHERE gone_at IS NOT NULL AND (gone_at + hold_s < ? OR (boot != ? AND boot NOT LIKE ?))",
                      (now, self.kernel, self.kernel + "/pidns:%"))  # boot ids: hex and '-', no wildcards
            rows: dict[str, list[dict[str, Any]]] = {key: [] for key in seqs}
            for r in c.execute("SELECT seq, host, adopted_seq, adopted_at, gone_at FROM members").fetchall():
                if r["host"] in rows:
                    rows[r["host"]].append(dict(r))
            pauses = {r["host"]: r["until"] for r in c.execute("SELECT host, until FROM pauses WHERE until > ?", (now,)).fetchall() if r["host"] in rows}
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL): keep the real error
                c.execute("ROLLBACK")
            raise
        return {"now": now, "seqs": seqs, "rows": rows, "pauses": pauses}

    def _push_next_at(self, c: sqlite3.Connection, key: str, next_at: float) -> None:
        """Raise the host's ``next_at`` to ``next_at`` (a row from another boot is replaced)."""
        cur = c.execute("UPDATE turns SET next_at = max(next_at, ?) WHERE host = ? AND boot = ?", (next_at, key, self.kernel))
        if cur.rowcount == 0:
            c.execute(
                "INSERT INTO turns(host, next_at, boot) VALUES (?, ?, ?)"
                " ON CONFLICT(host) DO UPDATE SET next_at = excluded.next_at, boot = excluded.boot",
                (key, next_at, self.kernel),
            )

    def _release_rows(self, c: sqlite3.Connection, items: list[tuple[str, str, float | None]]) -> None:
        for key, token, next_at in items:
            c.execute("DELETE FROM tickets WHERE token = ?", (token,))
            if next_at is not None:
                self._push_next_at(c, key, next_at)

    def _release_db(self, items: list[tuple[str, str, float | None]]) -> None:
        if self.board is not None:
            self.board.release(items)
            return
        c = self._conn
        if c is None:
            return
        c.execute("BEGIN IMMEDIATE")
        try:
            self._release_rows(c, items)
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL): keep the real error
                c.execute("ROLLBACK")
            raise

    def _turn_db(self, key: str, token: str, member: int, spacing_s: float) -> dict[str, Any]:
        """Queue ticket ``token`` for ``key`` (if not queued), drop dead tickets at the head, look.

        Returns ``now`` (monotonic s), ``next_at`` (no send to the host before it) and ``ahead`` (tickets
        before ours; 0: our turn). A head ticket whose process died (pid gone or reused, other boot,
        member row gone or its heartbeat older than :data:`STALE_S`) is removed; it may have sent just
        before it died, so ``next_at`` becomes at least ``now + spacing_s``.
        """
        if self.board is not None:
            return self.board.turn(key, token, member, spacing_s)
        c = self._conn
        if c is None:
            raise sqlite3.ProgrammingError("hostshare: board closed")
        c.execute("BEGIN IMMEDIATE")
        try:
            now = time.monotonic()
            row = c.execute("SELECT next_at, boot FROM turns WHERE host = ?", (key,)).fetchone()
            next_at = row["next_at"] if row is not None and row["boot"] == self.kernel else 0.0
            mine = c.execute("SELECT ticket FROM tickets WHERE token = ?", (token,)).fetchone()
            if mine is None:  # first look, or others found our lease lapsed and removed the ticket
                cur = c.execute(
                    "INSERT INTO tickets(token, host, pid, pstart, boot, member, since) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (token, key, self.pid, self.pstart, self.boot, member, now),
                )
                ticket = int(cur.lastrowid or 0)
            else:
                ticket = int(mine["ticket"])
            dropped = False
            while True:
                head = c.execute(
                    "SELECT t.ticket, t.pid, t.pstart, t.boot, m.heartbeat, m.gone_at, m.seq AS mseq"
                    " FROM tickets t LEFT JOIN members m ON m.seq = t.member WHERE t.host = ? ORDER BY t.ticket LIMIT 1",
                    (key,),
                ).fetchone()
                if head is None or head["ticket"] == ticket:
                    break
                other_boot = _kernel(head["boot"]) != self.kernel
                dead = (
                    other_boot
                    or head["mseq"] is None
                    or head["gone_at"] is not None
                    or bool(_row_gone(self.boot, head["boot"], head["pid"], head["pstart"], now - head["heartbeat"]))
                )
                if not dead:
                    break
                c.execute("DELETE FROM tickets WHERE ticket = ?", (head["ticket"],))
                if not other_boot:
                    next_at, dropped = max(next_at, now + spacing_s), True
                log.info("hostshare: %s: dropped the turn of process %s (gone)", key, head["pid"])
            if dropped:
                self._push_next_at(c, key, next_at)
            ahead = c.execute("SELECT COUNT(*) FROM tickets WHERE host = ? AND ticket < ?", (key, ticket)).fetchone()[0]
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL): keep the real error
                c.execute("ROLLBACK")
            raise
        return {"now": now, "next_at": next_at, "ahead": int(ahead)}


def board_path(state_dir: str | Path) -> Path:
    """The board of the campaign whose state folder is ``state_dir``: ``<state_dir>/hosts.sqlite``."""
    return Path(state_dir) / HOSTS_DB


def board_pauses(state_dir: str | Path) -> dict[str, float]:
    """The pauses in force on the campaign's board (``<state_dir>/hosts.sqlite``): ``{host or limit key: seconds
    left}``, longest first; read-only (opens nothing for writing, creates nothing; {} without a board).

    A pause is a ``Retry-After`` on a 429 (a model's limit key, ``host/model``) or a 503 (the host, on a provider's
    own API; :func:`geoagent.runtime.http.pauses_whole_host`), or
    :meth:`~geoagent.runtime.http.HttpClient.pause_host`, as a process of the campaign published it; a process of
    the campaign started now waits it out too. Only pauses of this boot count (their ``until`` is this machine's
    ``time.monotonic()``, s). Used by ``status``."""
    path = board_path(state_dir)
    if not path.is_file():
        return {}
    from geoagent.runtime.sqlite_wal import DatabaseFileError, connect_read_only

    try:
        conn = connect_read_only(path, timeout=1.0)  # mode=ro, or immutable=1 where that would create files
    except (sqlite3.Error, DatabaseFileError):  # a damaged board holds only pauses: `run` names it, status goes on
        return {}
    try:
        now = time.monotonic()
        rows = conn.execute("SELECT host, until FROM pauses WHERE boot = ? AND until > ?", (_boot_id(), now)).fetchall()
    except sqlite3.Error:  # an older board without the table, or a locked file: status shows what it can
        return {}
    finally:
        conn.close()
    return dict(sorted(((str(h), float(u) - now) for h, u in rows), key=lambda kv: -kv[1]))
