"""The durable work-queue interface shared by every backend (SQLite WAL: `sqlite_queue`; Redis Streams: `redis_queue`).

A queue holds *tasks*, each identified by a caller-chosen ``key`` (unique within the queue) and carrying a
JSON-serialisable ``payload`` (dict). Semantics every backend must honour:

* ``put``/``put_many`` are idempotent by key: putting a key that already exists (in any state: ready,
  leased, done or dead) is a no-op and returns False for that key.
* ``lease(n, visibility_timeout_s)`` hands out up to n ready tasks whose ``not_before`` has passed; each
  becomes *leased* until ``visibility_timeout_s`` elapses, after which it is ready again (a crashed worker's
  tasks come back). A lease that merely timed out is not a failed attempt: its holder may still be alive and on
  the task (a wall-clock step, a stopped process, a held task left to expire: ``geoagent.runtime.worker``, "Held
  tasks" and "Leases taken again"). Each lease gets a fresh ``lease_id``; ack/nack/release with a stale lease id (the task
  was re-leased by someone else after expiry) raise ``StaleLease`` and change nothing for that task; a
  batch ``ack``/``release`` applies the still-valid leases first, then raises ``StaleLease`` whose
  ``stale_keys`` lists the others.
* ``ack`` marks a task done (kept, so a later put of the same key stays a no-op).
* ``nack(task, reason)`` increments the attempt count; the task becomes ready again after an exponential
  backoff, or *dead* (dead-letter) once ``attempts >= max_attempts``, keeping ``reason``.
* ``dead_letter(task, reason)`` sends a task straight to dead (permanent failure: e.g. HTTP 400).
* ``release(task)`` returns a leased task to ready without counting an attempt (graceful shutdown,
  budget stop). It goes back to its put place in lease order (ahead of the tasks put after it, so a stopped run's
  tasks in flight are the next ones leased on resume and each lane's leases stay a prefix of its plan: review44a #2
  on SQLite, review44d #1 on Redis; expired leases still come first). With a delay it waits that long, then lines up
  behind the tasks ready before it on both.
* ``refund_attempts(refunds)`` (optional) gives back attempts that failures proved were not the task's fault
  (the stage runner: failures of a host that then turned out to be down, when its unreachable breaker opens):
  see :class:`Refund` and :meth:`WorkQueue.refund_attempts`. Exact and idempotent: a nack may record a *charge
  id* on the task (``nack(..., charge=...)``, backends with ``supports_charges``); a refund names the charge ids
  it gives back and the task loses exactly the attempts of those still recorded, once, whatever the order in
  which several chargers refund. ``requeue_dead`` clears the recorded charges; a task that is done or held by a
  live lease is never touched.
* handing back the leases of a process known to be gone (optional, backend-specific: SQLite
  ``expire_leases_sync`` / ``expire_leases_of_sync``, Redis ``hand_back_gone_local``; the campaign engine calls
  them at start-up and from its dead-owner sweep) counts one failed attempt per task, like a nack with the reason
  :func:`process_ended_reason` (prefix :data:`PROCESS_ENDED`), and puts it back ready at once (at its put place, as
  a release, the first time; behind the tasks already ready when the process before ended with it too, so a crash
  loop charges other tasks rather than the same ones until they die: review44f #1; both backends); a task whose
  attempts reach ``max_attempts`` this
  way is dead-lettered with that reason instead
  of being leased again (a task that kills its process, OOM or segfault, is not retried for ever). No charge id.
* ``counts()`` returns ready/leased/done/dead; ``dead_letters()`` lists dead tasks with reasons.
* a stored payload that cannot be read as JSON (a damaged or hand-edited queue) never makes ``lease`` raise: the
  lease dead-letters that task (one attempt counted; reason :func:`unreadable_payload_reason`, prefix
  :data:`UNREADABLE_PAYLOAD`, naming the queue file or Redis hash and the key) and returns the rest of its batch;
  ``dead_letters()`` lists it with the payload ``{}`` (``tests/test_queue_unreadable_payload.py``).
* ``ready_keys()``, ``dead_letter_ready(keys, reason)`` and ``dead_keys(reason_prefix)`` (optional) set aside
  tasks nobody holds: the engine sends the queued tasks of a plan edge that the current plan no longer holds
  (the config changed between runs) to dead with a ``superseded: ...`` reason (:data:`SUPERSEDED`), so they
  are never leased, and ``requeue_dead`` brings them back. ``dead_letter_ready`` is a compare-and-set per task,
  atomic per batch: only a task still *idle* (ready, also one waiting out a nack backoff, or leased under a
  lease that has expired: held by nobody, the task ``lease`` would hand out next) moves; a task held by a live
  lease, done, dead or unknown is left unchanged, so it is safe while other processes lease from the queue.
  The attempt count is kept.
* ``lease_lanes(n, visibility_timeout_s, lanes)`` (optional, backends with ``supports_lane_lease``: SQLite and
  Redis) leases like ``lease`` but at most ``lanes[L]`` tasks of each lane ``L`` it names (0: none), in the same order within each
  lane; tasks of a lane it does not name, or without one, as ``lease`` would. A task's *lane* is its payload's
  :data:`LANE_FIELD` (``model``) when that is a text, fixed at put. Tasks passed over stay ready where they are:
  no attempt, no delay, visible to every process. The stage runner asks only for the lanes with room
  (:mod:`geoagent.runtime.worker`, "Lanes"; walk39 #1).
* ``extend(tasks, visibility_timeout_s)`` (optional) renews leases still held: each becomes leased for
  ``visibility_timeout_s`` from now; returns the keys whose lease is no longer held (unchanged), or None when
  the backend cannot extend leases (the default). A stage runner calls it while it works on a task
  (:class:`geoagent.runtime.leases.LeaseKeeper`), so a task handled for longer than one visibility timeout
  (slow or retried requests) is not handed to another worker meanwhile.

All methods are async so network backends fit the same interface. Return values and ``StaleLease``
describe the effect of the call itself: a backend that retries a call internally (Redis after a lost
reply) must answer the retry as the first run did.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

#: the payload field whose text value is a task's lane (:meth:`WorkQueue.lease_lanes`): the model caller's lanes are
#: its models (:meth:`geoagent.workers.model_caller.ModelCaller.lane_of` reads the same field)
LANE_FIELD = "model"

#: the reason prefix of a task set aside because the current plan no longer holds it
#: (:meth:`WorkQueue.dead_letter_ready`): not a failure, and ``dead --requeue`` brings it back
SUPERSEDED = "superseded:"

#: joins the reason of a task set aside after a failure had dead-lettered it (:meth:`WorkQueue.set_aside_dead`)
#: and that failure's own reason, kept after it so a later plan that holds the task again restores the failure
#: (:meth:`WorkQueue.restore_failed`) rather than sending it again unasked
FAILED_BEFORE = " | it had failed before: "

#: the reason prefix of a delivery whose process ended while it held the task (killed, out of memory, crashed),
#: counted when a later process hands the dead process's leases back (:func:`process_ended_reason`)
PROCESS_ENDED = "ProcessEnded:"
_ENDED_HEAD = PROCESS_ENDED + " its process ended while working on it "
_ENDED_ROW = re.compile(re.escape(_ENDED_HEAD) + r"(\d+) times? in a row")


#: the reason prefix of a task whose stored payload cannot be read as JSON (a damaged or hand-edited queue file): a
#: lease that meets it dead-letters it with :func:`unreadable_payload_reason` and hands out the rest of its batch,
#: instead of raising on every lease that picks it up (fixrev43a aside)
UNREADABLE_PAYLOAD = "unreadable payload:"


def unreadable_payload_reason(where: str, key: str, exc: BaseException) -> str:
    """The dead-letter reason of task ``key`` whose payload ``where`` (the queue file, or the Redis key, that holds
    it) cannot be read (``exc``: the decoder's error), as both backends word it; starts with
    :data:`UNREADABLE_PAYLOAD`. Names the place first, so ``status``'s clipped line still shows it."""
    return (f"{UNREADABLE_PAYLOAD} task {key!r} in {where}: its stored payload is not a JSON object ({exc}; a damaged "
            "or hand-edited queue?), so it cannot run: dead-lettered when leased, the rest of its batch went on")


#: JSON's names of the values orjson reads (for :class:`PayloadNotObject`'s text)
_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


class PayloadNotObject(ValueError):
    """A stored payload that is JSON but not a JSON object (``[1, 2]``, ``null``, a text, a number): ``put`` stores
    only dicts, so it was edited by hand, and a stage reading fields of it would fail (review43d #2)."""


def decode_payload(blob: bytes | str) -> tuple[dict[str, Any] | None, BaseException | None]:
    """``(payload, None)`` for a stored payload ``blob`` read as a JSON object (orjson), or ``(None, error)`` when it
    cannot be read so: not JSON, not UTF-8, not text at all, or JSON but not an object (:class:`PayloadNotObject`;
    ``put`` stores only dicts, so each is a damaged or hand-edited row). Every reader of stored queue payloads goes
    through it: the backends' leases and dead-letter lists, and the read-only looks (``read_planned``,
    ``read_payloads``, ``ready_payloads``; review43d #1: a bare ``orjson.loads`` there raised on such a row)."""
    try:
        payload = orjson.loads(blob)
    except (orjson.JSONDecodeError, TypeError) as exc:
        return None, exc
    if not isinstance(payload, dict):
        # before, a list or null was handed out and the stage failed on it max_attempts times (review43d #2)
        return None, PayloadNotObject(f"a JSON {_JSON_KINDS.get(type(payload), 'value')}, not an object")
    return payload, None


def payload_or_empty(blob: bytes | str) -> Any:
    """A stored payload read as JSON (:func:`decode_payload`), or ``{}`` when it cannot be read: what a dead-letter list
    shows for a task dead-lettered for an unreadable payload (its reason, :func:`unreadable_payload_reason`, says
    why), so that ``dead`` and ``status`` list it instead of raising."""
    payload, exc = decode_payload(blob)
    return {} if exc is not None else payload


def ended_in_a_row(last_error: str | None) -> int:
    """How many deliveries in a row ended with their process (the count in a :func:`process_ended_reason` text);
    0 for any other reason or None."""
    m = _ENDED_ROW.match(last_error or "")
    return int(m.group(1)) if m else 0


def process_ended_reason(in_a_row: int, attempts: int, max_attempts: int, dead: bool, before: str | None) -> str:
    """The reason kept for a task whose process ended while it held the task (its lease handed back by a later
    process), as both queue backends word it (the Redis backend builds the same text in Lua: ``_HAND_BACK``).

    Parameters
    ----------
    in_a_row : int
        Deliveries in a row that ended so, this one included (>= 1).
    attempts, max_attempts : int
        The task's failed attempts with this one counted, and the queue's ``max_attempts``.
    dead : bool
        Whether this delivery dead-lettered the task (``attempts >= max_attempts``).
    before : str or None
        The task's previous reason: named after a dead letter when it was another failure.
    """
    times = f"{in_a_row} time{'' if in_a_row == 1 else 's'} in a row (killed, out of memory or crashed)"
    if not dead:
        return (f"{_ENDED_HEAD}{times}; handed back by a later process, {attempts} of {max_attempts} deliveries "
                "([queue] max_attempts) used")
    text = (f"{_ENDED_HEAD}{times}, the last of its {attempts} deliveries ([queue] max_attempts = {max_attempts}): "
            "dead-lettered, not leased again; fix the cause, then `run.py dead CONFIG --requeue`")
    if before and not before.startswith(PROCESS_ENDED):
        text += f"; the delivery before failed: {before}"
    return text


class QueueError(RuntimeError):
    """Base class of queue errors."""


class StaleLease(QueueError):
    """The lease id no longer owns the task (its visibility timeout expired and it was re-leased).

    ``stale_keys`` (list of str, may be empty) names the stale tasks of a batch call.
    """

    def __init__(self, message: str = "", stale_keys: list[str] | None = None) -> None:
        super().__init__(message)
        self.stale_keys = list(stale_keys or [])


@dataclass(frozen=True, slots=True)
class Task:
    """One leased task.

    Attributes
    ----------
    key : str
        Caller-chosen unique key (idempotency key).
    payload : dict
        JSON-serialisable message body.
    attempts : int
        Number of failed attempts so far (nacks, dead letters, and deliveries whose process ended: handed back by a
        later process), 0 on first delivery.
    lease_id : str
        Token proving ownership of this lease.
    last_error : str or None
        Reason given at the last nack, if any.
    """

    key: str
    payload: dict[str, Any]
    attempts: int
    lease_id: str
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """Task counts by state."""

    ready: int = 0
    leased: int = 0
    done: int = 0
    dead: int = 0

    @property
    def total(self) -> int:
        return self.ready + self.leased + self.done + self.dead

    @property
    def pending(self) -> int:
        """Tasks not yet finished either way (ready + leased)."""
        return self.ready + self.leased


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task that failed permanently."""

    key: str
    payload: dict[str, Any]
    attempts: int
    reason: str
    failed_at: float = field(default=0.0)  # unix seconds


@dataclass(frozen=True, slots=True)
class Refund:
    """Attempts to give back to one task (:meth:`WorkQueue.refund_attempts`), in one of two forms.

    *By charge ids* (``charges`` non-empty; exact, what the stage runner uses on a backend with
    ``supports_charges``): ``charges`` names the charge ids that this caller's nacks recorded on the task
    (``nack(task, reason, charge=...)``), ``attempts == len(charges)``, ``expected`` is not used (None). The queue
    removes the named charges still recorded on the task and takes off one attempt per charge removed, so each
    charger gets back exactly what it charged, once, in whatever order several chargers refund; a charge already
    refunded, cleared by ``requeue_dead``, or of a task that is done, gives back nothing. Build one with
    :meth:`Refund.of_charges`.

    *By expected count* (``charges`` empty; the original form, kept for callers without charge ids): a
    compare-and-set on the task's attempt count. It applies only while the task still has exactly ``expected``
    attempts, so when two processes charged one task and the earlier charger refunds last, its refund is skipped
    (the task keeps that attempt). Do not mix both forms on one task.

    Attributes
    ----------
    key : str
        The task.
    attempts : int
        How many attempts to give back (>= 1); the count never goes below 0. By charge ids: ``len(charges)``.
    expected : int or None
        By expected count: the task's attempt count right after the last attempt being refunded was charged (the
        caller saw the nack that counted it); the refund applies only while the task still has exactly this count.
        By charge ids: None (ignored).
    dead_reason : str or None
        Whether the refund may return a dead task to ready (None: a dead task is left dead). By expected count: the
        reason the refunded failures stored when they dead-lettered the task; a task still dead with exactly this
        reason (and ``expected`` attempts) is revived. By charge ids: any non-None value; the task is revived when
        the nack that dead-lettered it recorded one of ``charges`` (the reason is not compared).
    charges : tuple of str
        The charge ids given back (distinct, non-empty); empty for a refund by expected count.
    """

    key: str
    attempts: int
    expected: int | None = None
    dead_reason: str | None = None
    charges: tuple[str, ...] = ()

    @classmethod
    def of_charges(cls, key: str, charges: Iterable[str], dead_reason: str | None = None) -> "Refund":
        """A refund by charge ids: give back to task ``key`` the attempts that the nacks with these charge ids
        (distinct) charged it; ``dead_reason`` not None: revive the task if one of them dead-lettered it."""
        ids = tuple(charges)
        return cls(key, len(ids), None, dead_reason, ids)


@dataclass(frozen=True, slots=True)
class RefundResult:
    """What :meth:`WorkQueue.refund_attempts` did, key by key (each key of the call in exactly one list).

    ``refunded``: tasks whose attempts were decreased and whose state was kept (queued: ready, or leased under an
    expired lease; by charge ids also a dead task whose dead-lettering charge was not named); ``revived``: dead
    tasks returned to ready with their attempts decreased; ``leased``: tasks held by a live lease, left unchanged
    (the caller may try again once the lease ended); ``skipped``: left unchanged because done, unknown, or
    nothing of the refund applies any more (by expected count: dead for another reason, or the count is no longer
    ``expected``; by charge ids: none of the named charges is still recorded). ``given``: for each refunded or
    revived key, how many attempts it got back.
    """

    refunded: list[str] = field(default_factory=list)
    revived: list[str] = field(default_factory=list)
    leased: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    given: dict[str, int] = field(default_factory=dict)


def check_refunds(refunds: Sequence[Refund]) -> list[Refund]:
    """Validate refunds for :meth:`WorkQueue.refund_attempts` (shared by the backends).

    Raises
    ------
    TypeError
        An item is not a :class:`Refund`.
    ValueError
        ``attempts < 1``, an empty key, or a key given twice; by expected count: ``expected`` None or < 0; by
        charge ids: a charge id that is not a non-empty str, one given twice, or ``attempts != len(charges)``.
    """
    out = list(refunds)
    seen: set[str] = set()
    for r in out:
        if not isinstance(r, Refund):
            raise TypeError(f"refund_attempts takes Refund items, got {type(r).__name__}")
        if not (isinstance(r.key, str) and r.key):
            raise ValueError(f"refund: the key must be a non-empty str, got {r.key!r}")
        if r.charges:
            ids = list(r.charges)
            if not all(isinstance(c, str) and c for c in ids) or len(set(ids)) != len(ids):
                raise ValueError(f"refund of {r.key!r}: charge ids must be distinct non-empty str, got {ids!r}")
            if int(r.attempts) != len(ids):
                raise ValueError(f"refund of {r.key!r}: attempts ({r.attempts!r}) must equal the number of charge "
                                 f"ids ({len(ids)})")
        elif r.expected is None or int(r.attempts) < 1 or int(r.expected) < 0:
            raise ValueError(f"refund of {r.key!r}: need attempts >= 1 and expected >= 0 (or charge ids), got "
                             f"{r.attempts!r}, {r.expected!r}")
        if r.key in seen:
            raise ValueError(f"refund: key {r.key!r} given twice")
        seen.add(r.key)
    return out


def check_aside_reason(reason: object) -> None:
    """Raise ValueError unless ``reason`` is a text that starts with :data:`SUPERSEDED` and holds no
    :data:`FAILED_BEFORE` (the reason :meth:`WorkQueue.set_aside_dead` records before a failure's own)."""
    if not isinstance(reason, str) or not reason.startswith(SUPERSEDED) or FAILED_BEFORE in reason:
        raise ValueError(f"a set-aside reason must start with {SUPERSEDED!r} and not hold {FAILED_BEFORE!r}; "
                         f"got {reason!r}")


def check_key_sequence(keys: object, op: str) -> None:
    """Raise ``TypeError`` when ``keys``, the keys given to queue operation ``op``, is one string (iterated, it would
    name one task per character) instead of a sequence of keys."""
    if isinstance(keys, str):
        raise TypeError(f"{op} takes a sequence of keys, not one string")


class WorkQueue(abc.ABC):
    """Abstract durable queue for one edge between two workers."""

    name: str
    #: whether ``nack`` records charge ids and ``refund_attempts`` takes refunds by charge ids (:class:`Refund`)
    supports_charges: bool = False
    #: whether :meth:`lease_lanes` leases by lane (walk39 #1; SQLite, and Redis since session 44); False (the
    #: interface's default): it returns None and the caller leases with :meth:`lease`
    supports_lane_lease: bool = False

    @abc.abstractmethod
    async def put(self, key: str, payload: dict[str, Any]) -> bool:
        """Enqueue one task; return True if added, False if the key already existed (no-op)."""

    @abc.abstractmethod
    async def put_many(self, items: Iterable[tuple[str, dict[str, Any]]]) -> int:
        """Enqueue many tasks in one transaction; return the number actually added."""

    @abc.abstractmethod
    async def lease(self, n: int, visibility_timeout_s: float) -> list[Task]:
        """Lease up to ``n`` ready tasks for ``visibility_timeout_s`` seconds (may return fewer or none)."""

    @abc.abstractmethod
    async def ack(self, tasks: Task | Sequence[Task]) -> None:
        """Mark leased tasks done. Raises ``StaleLease`` if a lease is no longer held."""

    @abc.abstractmethod
    async def nack(self, task: Task, reason: str, *, backoff_s: float | None = None,
                   charge: str | None = None) -> str:
        """Record a failed attempt; return the new state, ``"ready"`` or ``"dead"``.

        ``backoff_s`` overrides the computed exponential backoff (e.g. from ``Retry-After``). ``charge`` (only on
        a backend with ``supports_charges``): a charge id, unique to this nack (e.g. a process token and a
        counter), recorded on the task with the attempt it counts, so a later refund by charge ids can give back
        exactly that attempt (:class:`Refund`); it is forgotten by ``requeue_dead`` and by the refund itself.
        """

    @abc.abstractmethod
    async def dead_letter(self, task: Task, reason: str) -> None:
        """Move a leased task straight to the dead-letter state with ``reason``."""

    @abc.abstractmethod
    async def release(self, tasks: Task | Sequence[Task], *, delay_s: float = 0.0) -> None:
        """Return leased tasks to ready without counting an attempt.

        ``delay_s`` (seconds, >= 0): the tasks are not leased again before that long from now (a backoff with
        no attempt counted; the stage runner's deferral of a task whose lane is full, :mod:`geoagent.runtime.worker`,
        "Lanes"). 0 (default): leasable at once, in lease order at its put place (both backends; Redis since
        review44d #1: module docstring). Raises ``ValueError`` for a negative ``delay_s``."""

    async def lease_lanes(self, n: int, visibility_timeout_s: float, lanes: Mapping[str, int]) -> list[Task] | None:
        """Lease up to ``n`` tasks as :meth:`lease` does (expired leases first, then ready tasks in lease order), but
        at most ``lanes[L]`` of each lane ``L`` named in ``lanes`` (0 or less: none of it); tasks of a lane not named,
        or without a lane, are leased as :meth:`lease` would. A task's lane is its payload's :data:`LANE_FIELD` when
        a text. The tasks passed over are not touched: they stay ready in their place (no attempt counted, no delay),
        for this caller's next lease or another process's. Returned in lease order. None: this backend cannot lease
        by lane (the default; see :attr:`supports_lane_lease`).

        Raises
        ------
        ValueError
            ``visibility_timeout_s`` not > 0.
        """
        return None

    async def extend(self, tasks: Sequence[Task], visibility_timeout_s: float) -> list[str] | None:
        """Renew the leases of ``tasks`` for ``visibility_timeout_s`` seconds from now (module docstring); return
        the keys whose lease is no longer held (left unchanged), or None: this backend does not extend leases."""
        return None

    async def refund_attempts(self, refunds: Sequence[Refund]) -> RefundResult | None:
        """Give back attempts charged to tasks by failures that were not their fault; one transaction.

        For each :class:`Refund` (keys distinct):

        * a task held by a live lease is left unchanged (``leased``: its holder's ack, nack or release stays
          valid; the caller may try again once the lease ended); a task done or unknown is left unchanged
          (``skipped``);
        * *by charge ids*: of the named charges, those still recorded on the task (ready, leased under a lease
          that has expired: held by nobody, or dead) are removed and the task loses one attempt per charge
          removed (never below 0); its state, backoff and last error are kept (``refunded``), except that a dead
          task whose dead-lettering nack recorded one of the removed charges goes back to ready now, like
          ``requeue_dead`` but with the attempts it has left (``revived``; only when ``dead_reason`` is not
          None). None of the charges still recorded (a repeated refund, one after ``requeue_dead``, a charge of
          another task): ``skipped``. Each charge is given back at most once, so several processes' refunds of
          one task add up exactly, in any order;
        * *by expected count*: a compare-and-set on the task's attempt count. A task queued (as above) whose count
          is ``expected`` gets ``max(0, expected - attempts)`` attempts (``refunded``); a dead task with
          ``expected`` attempts whose stored reason is ``dead_reason`` (not None) goes back to ready now with that
          many (``revived``); anything else, dead for another reason or whose count moved on, is ``skipped``.

        Idempotent: a repeated call (or a backend's retry after a lost reply) refunds nothing more. Returns what
        happened to each key (and ``given``: the attempts each refunded or revived key got back), or None when
        this backend cannot refund attempts (the default).

        Raises
        ------
        TypeError, ValueError
            Malformed refunds (:func:`check_refunds`).
        """
        check_refunds(refunds)
        return None

    async def ready_keys(self) -> list[str] | None:
        """Keys of the tasks idle now: ready (also waiting out a nack backoff) or leased under an expired lease
        (held by nobody), in no set order. A snapshot: another process may lease some before the caller acts on
        it, so act through :meth:`dead_letter_ready` (a compare-and-set). Memory: one str per such task. None:
        this backend cannot list them (the default)."""
        return None

    async def dead_letter_ready(self, keys: Sequence[str], reason: str) -> list[str] | None:
        """Send each of ``keys`` that is still idle (ready, waiting out a backoff, or leased under an expired
        lease) straight to dead with ``reason``, without counting an attempt; atomic per batch (one transaction or
        script), a compare-and-set per task: a task held by a live lease, done, dead or unknown is left unchanged.
        Idempotent (a repeat moves nothing more). Returns the keys moved, or None: this backend cannot (the
        default). ``requeue_dead`` brings them back.

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "dead_letter_ready")
        return None

    async def tasks_by_model(self, *, not_counting: Collection[str] = ()
                             ) -> dict[str | None, tuple[int, int]] | None:
        """Per the ``model`` field of the task payloads (None: a payload without a text ``model``): ``(done,
        unfinished)``, the tasks done and those not done (ready, leased, or dead for any reason but
        :data:`SUPERSEDED`: a task set aside as no longer planned is not work left); read only, a snapshot. The
        unfinished tasks whose keys are in ``not_counting`` (those the run is about to set aside,
        :attr:`geoagent.engine.PlanCheck.unplanned`) are not counted. For a config change's verdict per model
        (:func:`geoagent.runtime.drift.decide`). None: this backend cannot tell (the default)."""
        return None

    async def done_among(self, keys: Iterable[str]) -> list[str] | None:
        """Those of ``keys`` whose task is done now, in the order given (repeats dropped); read only, a snapshot.
        None: this backend cannot tell (the default)."""
        return None

    async def count_left(self, entries: Iterable[tuple[str, str]]) -> dict[str, int] | None:
        """Per group, how many of ``entries`` (``(group, key)`` pairs, e.g. ``(model, task key)`` of a recorded plan:
        :func:`geoagent.runtime.scope.left_in_plan`) are still to do here: ready (also waiting out a backoff, or
        leased under an expired lease) or leased. Every group of ``entries`` gets a count (0 for none); a key the
        queue does not hold, or holds done or dead (dead-lettered, set aside), counts for nothing. Each entry counts
        on its own: a key listed twice counts twice, once for each entry's group, on every backend (rev43a #5; a
        recorded plan lists each key once: its keys name their model). Read only, in chunks (memory: one chunk);
        each chunk a snapshot. None: this backend cannot tell (the default), or (Redis)
        no task was ever put on this queue, as the SQLite readers of a missing file
        (:func:`geoagent.runtime.sqlite_queue.count_left`) answer. redispace43: the engine counts each model's work
        left (its pacing, the per-model ETA) through it on a Redis campaign, which has no queue file."""
        return None

    async def count_done(self, entries: Iterable[tuple[str, str]]) -> dict[str, int] | None:
        """As :meth:`count_left`, counting the tasks of ``entries`` that are done (for the plan edge: the model
        caller stored their answer; :func:`geoagent.runtime.scope.answered_in_plan`)."""
        return None

    async def reopen_done(self, keys: Sequence[str]) -> int | None:
        """Move each of ``keys`` that is done back to ready, attempts reset to 0 and its payload unchanged, so the
        stage reading this edge handles it again; a compare-and-set per task, atomic per batch: a ready, leased,
        dead or unknown task is left unchanged, and a repeat moves nothing more. Returns the number moved, or None:
        this backend cannot (the default).

        For a result the stage wrote that was removed from the store afterwards (outside geoagent): the engine
        reopens the task that wrote it (:func:`geoagent.engine.rescore_lost_rows`). A put of the same output on the
        stage's output edge is a no-op while that edge holds the key, so the engine reopens the key there too when it
        is done there (the next stage gets the output again).

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "reopen_done")
        return None

    async def earlier_reasons(self, keys: Sequence[str], reason_prefix: str) -> dict[str, str] | None:
        """Of ``keys``, the tasks not dead whose last recorded error (kept by :meth:`requeue_dead`) starts with
        ``reason_prefix``: key -> that text (e.g. the ``superseded: ...`` reason of a task set aside earlier and
        requeued by hand, so setting it aside again keeps its reason); None when this backend cannot tell (the
        default)."""
        return None

    async def set_aside_dead(self, keys: Sequence[str], reason: str) -> list[str] | None:
        """Relabel each of ``keys`` that is dead by a failure (its reason does not start with :data:`SUPERSEDED`)
        as set aside: its reason becomes ``reason + FAILED_BEFORE + the failure's reason`` (``reason`` starts with
        :data:`SUPERSEDED`); it stays dead, attempts and charges kept. A compare-and-set per task, atomic per
        batch: a task not dead, already set aside or unknown is left unchanged; a repeat changes nothing more.
        Returns the keys relabelled, or None: this backend cannot (the default).

        For a re-plan that no longer holds a task a failure had dead-lettered: it is not missing work of the
        current plan (a run, ``status`` and the exports leave :data:`SUPERSEDED` tasks out), and
        :meth:`restore_failed` gives the failure back when a later plan holds it again.

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "set_aside_dead")
        return None

    async def restore_failed(self, keys: Sequence[str]) -> list[str] | None:
        """Undo :meth:`set_aside_dead`: each of ``keys`` that is dead with a :data:`SUPERSEDED` reason holding
        :data:`FAILED_BEFORE` gets back the failure's reason (the text after the first :data:`FAILED_BEFORE`) and
        stays dead (``dead --requeue`` retries it). A compare-and-set per task, atomic per batch; any other task is
        left unchanged. Returns the keys restored, or None: this backend cannot (the default).

        Raises
        ------
        TypeError
            ``keys`` is a single string.
        """
        check_key_sequence(keys, "restore_failed")
        return None

    async def dead_keys(self, reason_prefix: str = "") -> list[str] | None:
        """Keys of the dead tasks whose stored reason starts with ``reason_prefix`` (all: ``""``), in no set
        order; None: this backend cannot list them (the default)."""
        return None

    @abc.abstractmethod
    async def counts(self) -> QueueCounts:
        """Current counts by state."""

    @abc.abstractmethod
    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Most recent dead tasks with their reasons."""

    @abc.abstractmethod
    async def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Move dead tasks (all, or the given keys) back to ready with attempts reset and their recorded charge ids
        cleared (a refund naming them later gives back nothing); return count."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources (connections)."""


def open_queue(root: "str | bytes | object", campaign: str, edge: str, **options: Any) -> WorkQueue:
    """Open the SQLite queue for ``edge`` of ``campaign`` under ``root`` (``queues/<campaign>/<edge>.sqlite``).

    Options: ``max_attempts`` (default 5), ``backoff_base_s`` (2.0), ``backoff_max_s`` (300.0).
    """
    from geoagent.runtime.sqlite_queue import SQLiteQueue  # local import keeps the interface light

    return SQLiteQueue.open(root, campaign, edge, **options)
