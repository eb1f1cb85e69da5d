"""The worker (stage) interface: an async consumer of one queue that produces into the next.

INTERFACE FILE (the runner that drives stages lives in :mod:`geoagent.runtime.worker`).

A stage leases tasks from its ``input_edge``, calls :meth:`Stage.handle` for each (at most
``concurrency`` at once), puts the returned messages on its ``output_edge`` (idempotent by key), and only
then acks the input task. So a crash at any point redelivers the task and the keyed outputs make the
redelivery harmless. Exceptions decide the task's fate:

* :class:`PermanentFailure` (or ``PermanentHTTPError``) -> dead-letter with the reason, no retry;
* :class:`BudgetStop` -> the task is released untouched and the runner stops leasing (budget exhausted);
* :class:`Held` -> the task cannot run in this process now (its model's API key was refused): the runner
  keeps its lease, untouched (no attempt counted), never hands it to the stage again during this lease,
  keeps dispatching every other task, and releases it when the stage ends (or earlier, when the stage
  names it in :meth:`Stage.resumed_holds`);
* :class:`Abandoned` -> the task was given up before it did anything that counts, because the runner was
  asked to stop (e.g. a model request still waiting for its host's slot, not yet sent): released untouched
  (no attempt counted). A stage learns of the stop through :meth:`Stage.stop_requested`;
* :class:`Missing` -> the work is recorded as missing (retries exhausted): dead-letter, counted by reports;
* any other exception -> nack (attempt counted, exponential backoff, dead after max attempts).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from geoagent.runtime.queue import Task

Message = tuple[str, dict[str, Any]]  # (key, payload) for the output edge


class PermanentFailure(Exception):
    """The task can never succeed (bad input, 4xx): dead-letter it with this reason."""


class Missing(PermanentFailure):
    """Retries exhausted: the result is *missing*, never a wrong answer (issue 2 point 10)."""


class BudgetStop(Exception):
    """The cost cap would be exceeded: stop dispatching, release the task, drain.

    :attr:`fix` says what lifts the stop, for the run's summary and its reports' interim line; a stop by another cap
    than the campaign's USD one (the geocoder's Nominatim request cap) says its own."""

    #: what lifts the stop (the run's summary: ``budget exhausted: N requests not dispatched; <fix>``)
    fix: str = "raise [budget] cap_usd and re-run"


def other_budget_fixes(fixes: Iterable[str]) -> list[str]:
    """Of the fixes of the budget stops a run met (:attr:`BudgetStop.fix`), those of other caps than the campaign's
    USD one (the geocoder's Nominatim cap), once each, in order: the engine's summary and ``status`` say them instead
    of, or beside, the USD cap's."""
    return [f for f in dict.fromkeys(str(f) for f in fixes) if f != BudgetStop.fix]


class Abandoned(Exception):
    """A stop was requested before this task did anything that counts (nothing sent, nothing paid): the
    runner releases it untouched (no attempt counted), so the next run does it. Raise it only after
    :meth:`Stage.stop_requested` was called; the message says why."""


class Deferred(Exception):
    """This task cannot be attempted before ``delay_s`` seconds from now, and nothing it did counts (nothing sent,
    nothing paid: e.g. its host asked for a pause longer than the call's backoff while its request waited to be
    sent): the runner returns it to the queue with that delay and no attempt counted
    (:meth:`geoagent.runtime.queue.WorkQueue.release` with ``delay_s``), so it holds nothing (no lease, no ledger
    reservation) through the pause and is delivered again after it."""

    #: seconds (>= 0) before the task may be leased again
    delay_s: float = 0.0


class Held(Exception):
    """This task cannot run in this process now, though other tasks can (e.g. its model's authentication
    breaker is open): the runner holds its lease without counting an attempt and releases it, untouched,
    when the stage ends (:mod:`geoagent.runtime.worker`, "Held tasks"). The message says why."""


@dataclass(slots=True)
class StageContext:
    """What the runner gives a stage: campaign name, roots and shared services by name.

    ``services`` holds process-wide singletons (``http`` client, ``store``, ``ledger``, ``providers``
    by model name, ``config``); stages look up what they need and must not create their own sessions.
    """

    campaign: str
    services: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        try:
            return self.services[name]
        except KeyError:
            raise KeyError(f"stage context has no service {name!r}; have {sorted(self.services)}") from None


@dataclass(frozen=True, slots=True)
class Lane:
    """One lane of a stage's input (:meth:`Stage.lanes`; :mod:`geoagent.runtime.worker`, "Lanes").

    Attributes
    ----------
    cap : int
        The most tasks of the lane the runner hands to the stage at once (in a worker or waiting for one), >= 1.
    rate_per_s : float
        The most tasks of the lane per second it can finish (its own rate limit; > 0, ``math.inf`` when it has
        none): tasks deferred while the lane is full are spaced back into the queue at this rate.
    work : int
        The lane's tasks this run has to do (its tasks ready or leased when the run started); > 0: the lane is
        paced by its share of that work against the other paced lanes' (:mod:`geoagent.runtime.worker`, "Lanes":
        a lane ahead of the others is deferred like a full one; a lane with no task left here to take, its work
        done or held by another process, paces nobody); 0 (default): not paced.
    """

    cap: int
    rate_per_s: float = math.inf
    work: int = 0


class Stage(abc.ABC):
    """One worker's job. Subclasses set the class attributes and implement :meth:`handle`."""

    name: str
    input_edge: str
    output_edge: str | None = None
    concurrency: int = 8
    #: tasks leased per round trip to the queue
    lease_batch: int = 32
    #: True: the runner hands waiting tasks (up to ``lease_batch``) to :meth:`handle_batch` at once
    batched: bool = False
    visibility_timeout_s: float = 300.0
    #: the most seconds one task (or batch) may be handled before the runner cancels it and nacks it with its
    #: reason; None: the campaign's ``[queue] task_timeout_s``, else derived from the HTTP policies
    #: (:mod:`geoagent.runtime.worker`, "Task ceiling"). A campaign's ``[queue] task_timeout_s`` overrides it
    task_timeout_s: float | None = None
    #: True: a stop request cancels this stage's in-flight tasks at once (released untouched, no attempt
    #: counted) instead of giving them the runner's grace period. Only for stages whose work in flight costs
    #: nothing when repeated and leaves nothing half done (free HTTP lookups, e.g. the geocoder); never for a
    #: stage that makes paid calls (a call already sent may be billed: it keeps the grace period)
    cancel_on_stop: bool = False
    #: False: the stage sends no HTTP request (parsers, scorers, aggregators), so no configured rate paces it
    #: (:meth:`pace_keys` is empty); True (default): :meth:`pace_keys` says which keys pace it
    sends_http: bool = True
    #: True: :meth:`lane_of` is the queue's own lane of a task (its payload's
    #: :data:`~geoagent.runtime.queue.LANE_FIELD` text, the model caller's model), so on a queue that leases by lane
    #: (:attr:`~geoagent.runtime.queue.WorkQueue.supports_lane_lease`) the runner leases only tasks of lanes with room
    #: and a full lane's tasks stay queued in their place (:mod:`geoagent.runtime.worker`, "Lanes"; walk39 #1).
    #: False (default): a full lane's tasks are leased and deferred
    queue_lanes: bool = False

    def runner_mode(self, *, watch: bool, probe_after_s: float, probe_max_s: float) -> None:  # noqa: B027
        """Called once by the runner before :meth:`start`: whether it runs the stage in watch mode (``watch``:
        a daemon, ``run --watch``, that keeps polling; False: a burst run that ends when the input drains) and
        its half-open settings for unreachable hosts (seconds before the first probe, and the most the
        doubling cool-down waits; :mod:`geoagent.runtime.worker`, "Unreachable hosts"). Optional hook: the
        model caller's own host breaker probes with the same settings in watch mode."""

    def resumed_holds(self) -> list[str]:
        """Keys of tasks this stage held (:class:`Held`) that may run now (the model caller: their model's host
        answered again, or one held task is to probe it). The runner releases those it still holds (ready again,
        untouched: no attempt counted), so they are leased and handled again. Called by the runner before
        every lease; keep it cheap. Default: none."""
        return []

    async def start(self, ctx: StageContext) -> None:  # noqa: B027 - optional hook
        """Called once before the first task (open files, warm caches)."""

    @abc.abstractmethod
    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        """Process one task and return the messages for ``output_edge`` (empty list if none)."""

    async def handle_batch(self, tasks: list[Task], ctx: StageContext) -> list[list[Message] | Exception]:
        """Process several tasks at once (used when ``batched = True``); one result per task, in order.

        Each result is the task's output messages, or the exception that decides its fate (as if
        :meth:`handle` had raised it). The default calls :meth:`handle` for each task in turn; a stage
        overrides it to do one database transaction for the whole batch. An exception raised by this
        method itself applies to every task of the batch.
        """
        results: list[list[Message] | Exception] = []
        for task in tasks:
            try:
                results.append(await self.handle(task, ctx))
            except Exception as exc:  # noqa: BLE001 - handed to the runner, which decides the fate
                results.append(exc)
        return results

    async def flush(self, ctx: StageContext) -> None:  # noqa: B027 - optional hook
        """Called after commits (at most every ``flush_interval_s`` of the runner, 1 s by default) and once
        at shutdown; aggregators rewrite their live report here."""

    def lanes(self) -> dict[str, Lane] | None:
        """This stage's lanes, by name, once :meth:`start` ran; None (default): one lane, no per-lane admission.

        A stage whose tasks wait on separate limits (the model caller: each model's rate and concurrency on its
        host) names them here, and :meth:`lane_of` says which a task is in; the runner then hands the stage at
        most :attr:`Lane.cap` tasks of a lane at once and gives a task of a full lane back to the queue unstarted
        (no attempt counted) for later, so one slow lane cannot fill every worker (:mod:`geoagent.runtime.worker`,
        "Lanes"). Called once, after :meth:`start`."""
        return None

    def pace_keys(self) -> Collection[str] | None:
        """The HTTP limit keys whose configured rates pace this stage's tasks, once :meth:`start` ran: host keys
        (:func:`geoagent.runtime.http.host_key`) and model limit keys (:func:`geoagent.runtime.http.limit_key`).
        The runner's stall threshold counts their slowest rate window
        (:meth:`geoagent.runtime.http.HttpClient.pace_s`, :attr:`geoagent.runtime.worker.StageStats.pace_s`), so
        a stage paced by a slow configured limit is not reported as stalled. None (default): every key of the
        process's HTTP client (for a stage whose hosts are not known ahead: never too low); empty: a stage that
        sends no request (default when :attr:`sends_http` is False). Called about once a second; keep it cheap."""
        return None if self.sends_http else ()

    def lane_of(self, task: Task) -> str | None:
        """The lane of ``task`` (a key of :meth:`lanes`), or None: admitted without a lane's cap. Must not raise;
        called for every leased task when :meth:`lanes` named any, so keep it a dict lookup."""
        return None

    def lane_open(self, lane: str) -> bool:
        """Whether the tasks of ``lane`` can run now (default True). False (the model caller: its model's
        authentication, empty-answer or host breaker is open): the lane's share of its work stops counting in the
        pacing of the other lanes (:mod:`geoagent.runtime.worker`, "Lanes"), so they never wait for a lane that
        cannot move. Called for each leased task of a paced lane; keep it cheap."""
        return True

    def lane_leasable(self, lane: str) -> bool:
        """Whether the runner may lease tasks of ``lane`` now (default: :meth:`lane_open`). False: the lane gets no
        lease quota, so its tasks stay queued, visible to every other process, instead of being leased only to be
        held (review44a #3); the runner holds them only once nothing else is left to it (a burst run, to end). A
        stage whose held tasks must still arrive to be probed (the model caller in watch mode: a host waited for)
        says True for such a lane. Called for each lane before every lane lease; keep it cheap."""
        return self.lane_open(lane)

    def runnable(self) -> bool:
        """Whether any task of the input edge can still run in this process (default True). False (e.g. the
        model caller once every model's API key was refused): the runner stops leasing, lets in-flight tasks
        finish, releases held ones and ends the stage; queued tasks stay ready for a later run. Called by
        the runner before every lease; keep it cheap."""
        return True

    def unreachable_hint(self, host: str) -> str | None:
        """What a user should check when ``host`` (``"hostname:port"`` or ``"hostname"``) cannot be reached and
        the runner stopped the stage (:mod:`geoagent.runtime.worker`, "Unreachable hosts"), e.g. the config
        key holding its URL; None: a generic hint."""
        return None

    def stop_requested(self) -> None:  # noqa: B027 - optional hook
        """Called once (synchronously, on the event loop) when the runner is asked to stop (SIGINT/SIGTERM):
        in-flight tasks get the grace period; a stage may give up tasks that have not yet begun their
        side effects (e.g. paid calls not yet sent) by raising :class:`Abandoned` from :meth:`handle`."""

    async def stop(self, ctx: StageContext) -> None:  # noqa: B027 - optional hook
        """Called once at shutdown after the last flush."""
