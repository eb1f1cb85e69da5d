"""The stage runner: drives one :class:`~geoagent.runtime.stage.Stage` over its input queue.

For each stage the runner keeps a fixed pool of ``stage.concurrency`` worker coroutines (anyio task group)
fed through an in-memory stream by one lease loop: it leases batches from the input edge (never more than
the free slots plus a small lease-ahead), and each worker runs :meth:`Stage.handle` for one task at a time.
A stage with ``batched = True`` (sinks that write one database row per task) gets every waiting task, up to
``lease_batch``, in one :meth:`Stage.handle_batch` call instead. Finished tasks are committed in groups:
first the outputs of the whole group go to the output edge in one ``put_many`` (idempotent by key), then
the group's input tasks are acked in one call. A crash anywhere before the ack redelivers the task after its
visibility timeout at the latest (sooner in a campaign run: :func:`geoagent.engine.run_lock`); because outputs are keyed, the redelivery is harmless. While a task waits for a slot or is
being handled, its lease is renewed every third of the visibility timeout (:mod:`geoagent.runtime.leases`), so a
slow task (HTTP retries, rate-limit waits) is not handed to another worker meanwhile. Errors decide a task's fate
(see :mod:`geoagent.runtime.stage`).

Stopping
--------
* ``burst`` mode (campaigns): a stage finishes when every upstream stage has finished and its input edge has
  nothing ready or leased. The first stage's upstream is the planner, which has already enqueued everything.
  A stage whose upstream stages run in other processes (``--stages``) also waits while their work is on its way,
  and, once its input is empty, for an upstream stage with work queued that no process has taken up yet
  (``foreign_upstream``, ``stages_started`` of :class:`StageRunner`; fixstages43).
* :meth:`StageRunner.request_stop` (SIGINT/SIGTERM via :mod:`geoagent.runtime.daemon`): stop leasing, let
  in-flight tasks finish for ``grace_s`` seconds, then cancel the rest and *release* their leases (no attempt
  counted), commit what finished, flush the stage. The stage is told at once (:meth:`Stage.stop_requested`):
  tasks that have not yet begun their side effects (the model caller: requests not yet through its send
  gate, i.e. still waiting for their host's slots) raise :class:`~geoagent.runtime.stage.Abandoned` and are
  released untouched at once; only work already under way (requests already sent) uses the grace period.
  A stage with ``cancel_on_stop = True`` (free lookups only, e.g. the geocoder: nothing is billed and nothing
  is left half done) gets no grace period: its in-flight tasks (a request stalled on a host that does not
  answer, too) are cancelled at once and released untouched.
* :class:`~geoagent.runtime.stage.BudgetStop` from a task: the task is released untouched, the runner stops
  leasing and drains what is in flight; the campaign reports ``budget exhausted``.

Held tasks
----------
A task whose :meth:`Stage.handle` raises :class:`~geoagent.runtime.stage.Held` (the model caller: its model's
API key was refused) is *held*: the runner keeps its lease (no attempt counted, nothing else written), so
the queue does not hand it out again and nothing spins on it, and goes on with every other task. When a held
lease's visibility timeout passes the task is leased again like any expired lease, the stage raises
``Held`` again at once, and the runner keeps the new lease instead. In burst mode the stage is finished
when nothing is ready and the only leased tasks are its held ones (``leased <= held``: a held lease that
expired counts as ready and is simply leased again first). Every way the runner ends (drained, stop
request, budget stop, cancellation) releases the held tasks untouched, so a re-run finds them ready at once.
Held tasks are kept without their payload (a key and a lease id each). ``StageStats.held`` counts them.
A stage may let held tasks run again before it ends: before every lease the runner releases (untouched) those
it names in :meth:`Stage.resumed_holds` (the model caller in watch mode: its probe of a model host that could
not be reached, and every task of that host once the probe got through), so they are leased again.
Before its first task the runner tells the stage how it runs (:meth:`Stage.runner_mode`: watch mode or burst,
and the half-open settings below).
When nothing more can run in this process (:meth:`Stage.runnable` False: the model caller once EVERY model's
key was refused) the runner stops leasing at once instead of leasing every queued task only to hold it, and
ends the stage as above (``StageStats.blocked``); the queued tasks stay ready, untouched.
Several processes running the same stage each hold their own. A process that holds tasks does not wait for the
others' leases (it ends with work left queued whatever they do): once nothing is ready it ends, and the tasks it
held, released untouched, are ready for the others, which send or hold them in turn; the last process to end
holds what is left. Before (break30 #1), a process waited for the others' leases as for any lease, and processes
that each held tasks waited for each other's: the held leases expired and were re-leased by whichever process
came first, so three processes could wait for ever; none was lost or dead-lettered meanwhile.

Unreachable hosts
-----------------
A task that fails because a host cannot be reached at all (the HTTP layer's
:class:`~geoagent.runtime.http.RetriesExhausted` with ``unreachable``: every attempt, after the host policy's
own retries, failed before the request got through: connection refused, DNS failure, connect timeout) is
nacked like any failure (an attempt counted, dead-lettered after the queue's ``max_attempts`` with its
reason), until ``unreachable_after`` requests in a row to that host failed so, with none getting through in
between (:meth:`~geoagent.runtime.http.HttpClient.unreachable_streak`). Then the breaker opens: the task that
tripped it, and every task that fails the same way afterwards (in flight meanwhile), is released untouched (no
attempt counted), leased-ahead tasks not yet started are released (and, in a stage with ``cancel_on_stop``,
tasks still in flight are cancelled and released untouched at once), the runner stops leasing
(``StageStats.blocked``) and ends the stage; its queued tasks stay ready, so a re-run resumes when the network
is back. ``StageStats.unreachable`` names the host(s); :meth:`StageRunner.unreachable_lines` says it in words
(the campaign engine prints them and ends the run ``incomplete``). The first unreachable failure of each host
and the breaker's opening are logged as warnings (shown without the live display too). When the breaker
opens, the attempts that the failures of its streak were charged are given back (below, "Refunds"), so a
re-run while the host is still down keeps the tasks queued instead of dead-lettering them.

That is for burst runs. In watch mode (``burst=False``: a daemon that keeps picking up new work, ``run
--watch``) the open breaker does not end the stage: it goes *half-open* (the standard circuit breaker). The
stage waits a cool-down (``probe_after_s``, :data:`PROBE_AFTER_S` by default; a stop request ends the wait at
once), lets the tasks still in flight end, then leases ONE task as a probe. If the probe gets through (it
did not fail unreachable: the host answered), the breaker closes: ``StageStats.unreachable`` and ``blocked``
are cleared, the stage resumes normal leasing, and ``host H reachable again; stage S resumed`` is logged
(the HTTP layer reset the host's streak itself when it answered). If the probe fails unreachable, it is
released untouched (no attempt counted) and the breaker re-opens with the cool-down doubled, up to
``probe_max_s`` (:data:`PROBE_MAX_S`). Meanwhile :meth:`StageStats.as_dict` gives each waiting host its
``next_probe_in_s`` and ``next_probe_at`` (Unix time) and ``since`` (when the breaker opened); the progress
stream and ``status`` say "S: waiting for host H (next probe in N s, at T; unreachable since T0: ...; K task(s)
queued on E)" while it waits, and nothing once it closed.
In a ``cancel_on_stop`` stage the tasks in flight when the breaker opens are cancelled and released
untouched one by one (the stage itself keeps running).

Refunds
-------
The failures that formed a streak proved, once the breaker opened, that the host was down: the queue attempts
they cost are not the tasks' fault. The runner records, per host, the attempts its nacks of unreachable failures
charged in the host's current streak (the HTTP layer names each streak,
:attr:`~geoagent.runtime.http.RetriesExhausted.streak_id`; an answer from the host ends it, so a later failure
starts a new one and the older charges are forgotten). When the streak opens a breaker (this runner's, or a
stage's own: the model caller's :class:`~geoagent.workers.model_caller.HostBreaker` marks the exceptions it raises
with ``unreachable_streak`` / ``tripped_streak``), those attempts are refunded with
:meth:`~geoagent.runtime.queue.WorkQueue.refund_attempts`: a task still queued gets its count decreased by what the
streak charged it (never below 0), a task the streak dead-lettered (its last attempt failed below the threshold)
is returned to ready, and a warning says per host how many attempts were refunded and how many dead-lettered
tasks revived (``StageStats.refunded_attempts`` / ``revived``). On a queue with
:attr:`~geoagent.runtime.queue.WorkQueue.supports_charges` (both backends) each such nack records a charge id
(this runner's random token and a counter) on the task, and the refund names the charge ids of its streak: the
queue gives back exactly the attempts of those still recorded, once. So when several processes (each its own HTTP
client and streak) charge one task in the same outage, every one of them gets its own attempts back whatever the
order of their refunds; a repeated refund, one after ``dead --requeue`` (which clears the charges), or of a task
that finished since changes nothing. (On a queue without charge ids the refund is a compare-and-set on the count
the runner saw after its nack, which skips a charge another process counted on top of it.) A task held by another
worker's live lease is left alone; tasks leased by this runner (in flight, held) are refunded once it released
them (before a half-open probe, after held tasks are resumed, and when the stage ends). Late failures of a
streak that already opened the breaker are refunded at once. A task whose own requests fail unreachable while
its host answers other tasks in between never forms a streak long enough to open the breaker: it is nacked and
dead-lettered after ``max_attempts`` as before. A task alone on a host nothing else uses (its own URL) is the one
case the runner cannot tell from an outage: its own redeliveries form the streak, are refunded, and every run stops
on that host (incomplete, the host named, the task left queued) until the input or the host is fixed.

Dead reasons after pauses
-------------------------
A failure that says when to come back (``paused`` with ``retry_after_s``: a host's ``Retry-After`` longer than its
backoff) is nacked with that delay, its reason "paused by the host: ...". At the task's last delivery (its failed
attempts reach the input queue's ``max_attempts``) such a reason would read as if the task still waited, so the
dead reason is worded by :func:`dead_reason` instead: the deliveries used up, the real last failure (the HTTP
status and body) and whether the delivery before was paused too; a dead letter of any other failure whose previous
delivery was paused (``Task.last_error``) says that after its own reason.

Leases taken again
------------------
A task's lease can expire while a worker of this runner is still on it: the wall clock (which lease deadlines
use) stepped forward past the visibility timeout, a suspend and resume or an NTP step, or the process was stopped
that long. The queue then hands the task out again, and the next lease may hand it to this runner itself. The
runner does not give it to a second worker (that would do the task twice at once): it keeps the new lease for the
worker already on it (:meth:`LeaseKeeper.relet`, which renews the new lease from then on) and logs a warning, and
that worker's ack, nack, release or dead letter goes out under the new lease id (:class:`_CurrentLeases`). Leased
by another process instead, the task is done twice as before, and the keyed outputs make that harmless.

Task ceiling
------------
A task may not stay in :meth:`Stage.handle` (or a batch in :meth:`Stage.handle_batch`) for ever: a call that never
returns would otherwise keep its renewed lease for the life of the process. Each stage has a ceiling, in seconds
(``task_timeout_s``): the runner's option (the campaign's ``[queue] task_timeout_s`` when set), else the stage's own
class attribute :attr:`Stage.task_timeout_s`, else :func:`default_task_timeout_s` of the HTTP policies the shared
client knows once the stage started (:data:`TASK_TIMEOUT_FACTOR` times the longest one request can take with every
retry and backoff, at least :data:`TASK_TIMEOUT_MIN_S`). When a task has been handled that long it is cancelled and
nacked with :class:`TaskTimeout` (``stage S: task K still running after N s, its ceiling ([queue]
task_timeout_s): cancelled``; an attempt counted, retried after the queue's backoff, dead-lettered with that reason
after ``max_attempts``), and a warning is logged. Its lease is renewed no more after the ceiling either
(:meth:`LeaseKeeper.limit`), so a handler that ignores the cancellation loses the task one visibility timeout
later, as a crashed worker would. What a cancelled task leaves is the stage's usual cancellation handling (the model
caller: a request already sent is unknown-outcome spend, one not yet sent is released). A half-open probe that
times out gives no verdict on its host. The ceiling counts from the moment a worker starts the task, not from its
lease (a task leased ahead waits for a free slot first), and it stands still while a request of the task waits for
its host's slots (concurrency, rate limit, pause, the cross-process turn: :func:`~geoagent.runtime.http.listen_slot_waits`):
such a wait is the host's own limit, not a hang, so tasks lined up behind a slow rate limit (1 request a minute,
50 tasks at once) wait their turn instead of being cut and dead-lettered by the ceiling.

Lanes
-----
The input edge is one FIFO queue, and the pool of workers is fixed. When a stage's tasks wait on separate limits
(the model caller: each model's rate and concurrency on its host, :func:`~geoagent.runtime.http.limit_key`), the
tasks of a slow lane would wait for their limit while holding workers, leased, until the stage held little else:
head-of-line blocking (measured: a model at 20/s, concurrency 4, ran at ~6/s next to one limited to 2/s, close to
the slow one's pace). A stage that names lanes (:meth:`Stage.lanes`, :meth:`Stage.lane_of`; the model caller: one
per model when a campaign has several) gets at most a lane's :attr:`~geoagent.runtime.stage.Lane.cap` tasks of it
at once (in a worker or waiting for one; the model caller sizes its workers as the sum of the caps, so a lane with
room always finds a worker). A leased task of a full lane is *deferred*: given back to the queue unstarted, no
attempt counted, nothing sent or reserved (:meth:`WorkQueue.release` with a delay), to come back at its lane's next
slot, the lane's ``rate_per_s`` apart (between :data:`DEFER_MIN_S` and :data:`DEFER_MAX_S` from now, rounded up
to :data:`DEFER_STEP_S` so that one release call gives back a run of them); the lease loop goes on leasing past
it. A deferred task lines up behind every task that was ready before it (SQLite orders by ready time, Redis by
stream order), so the fast lanes' queued work comes first and the slow lane's tasks come back about when it can
take them. After :data:`WALK_LEASES` leases in a row that found only tasks of full lanes, the lease loop waits for
a lane to free a slot (at most ~1 s) instead of cycling through them. ``StageStats.deferred`` counts deferrals.
A crash leaves deferred tasks ready (at most :data:`DEFER_MAX_S` late); a stop or budget stop changes nothing for
them. The half-open probe counts in its lane but is never deferred. Batched stages have no lanes. A stage without
lanes (every stage but a multi-model model caller) runs exactly as before: no per-task cost.

Leasing by lane (walk39 #1). Deferral scatters each lane's work: a deferred task goes behind the tasks ready then
while the lease loop walks on through the plan, so a run stopped at the budget cap held each model's answers spread
over a stretch of the plan many times their number (GeoHint: 96 of 128 context answers of two models without their
image's baseline). Where the stage's lanes are the queue's own (:attr:`Stage.queue_lanes`: the model caller, whose
lane is the payload's ``model``) and the queue leases by lane (:attr:`WorkQueue.supports_lane_lease`: SQLite, and
Redis since session 44, a stream per lane), the lease loop asks instead for at most each lane's quota
(:meth:`StageRunner._lane_quota`: its room, and under pacing no more tasks than keep it from running ahead, task by
task as above) with
:meth:`WorkQueue.lease_lanes`: a full or paced lane's tasks stay ready in their place, untouched (no attempt, no
delay, visible to every other process; a crash changes nothing for them), and each lane is leased in plan order. A
task of a lane the stage does not name, or without one, is leased as before. A lane the stage cannot run now
(:meth:`Stage.lane_leasable` False: its model's key refused) gets no quota: its tasks stay queued, visible to other
processes, until nothing else is left to this runner in a burst run, which then holds them (Held tasks) to end
(review44a #3: before, it leased and held the model's whole backlog at once). While every lane is full or held back
the loop waits for a task to end (at most ``poll_s``) before it leases again. Nothing is deferred then
(``deferred`` stays 0) and pacing defers nothing either; a lane is dry (below) after more than :data:`DRY_WALKS`
leases in a row that asked for its tasks and found fewer than asked (none ready), the other dry conditions alike.

Pacing. Lanes with room alone would let each model run at its own limits, so a model with fewer planned tasks
(a ``sampling_rate`` below 1) or a faster host ran far ahead through its share of the plan: a budget stop found it
81 % done beside another model 16 % done, with few items answered by both (walk32 #4), and a cap meant for an
expensive sampled model went mostly to it. A lane with :attr:`~geoagent.runtime.stage.Lane.work` (the model
caller's, under ``[queue] model_pacing = "plan"``, the default) is therefore also deferred, for
:data:`PACED_DEFER_S`, while its share of its work (tasks finished, dead-lettered, in hand or failed and waiting
for their retry, over its ``work``) is ahead of the lowest share among the other paced lanes that still have work and can run (:meth:`Stage.lane_open`)
by more than a few tasks (its cap, at most :data:`PACE_SLACK_TASKS`, over its ``work``). The lane at the lowest share is never held back, and
a lane whose own tasks sit out a pacing deferral with none in hand holds no other lane back meanwhile (it cannot
take work until they come back: two lanes of instant answers, the simulated provider or a replay, took turns being
ahead and the stage sat out each turn's deferral, 1,317 calls in 45 s instead of 1.2 s; break34 config #3), nor
does a lane that ran dry (below), so the stage always moves, and a run stopped anywhere holds about the same share
of each model's work: the same queue prefix, so mostly the same items. With steady paces the run takes as long as before (the slowest model's work
decides it); a model slowed for a while (a slow spell of its host, retries inside its requests) holds the others
back meanwhile, and a rate-limited one cannot make that up later, so the run can take longer (break32b #3: +34 %
when one model answered 80 times slower for its first 30 s). ``model_pacing = "throughput"`` keeps each lane at its
own pace (the shortest run; a stop then holds uneven shares). A lane whose last :data:`FAILING_LANE_DEAD_RUN` tasks
finished here were all dead-lettered (its host answers 500 to every call, retried until its attempts run out) paces
nobody until one of its tasks is answered (review44a #5: such a model set the pace of the others at the speed its
calls failed, about 100 times slower; keeping the models in step is for the answers a stop holds, and a failing
model holds none).

Dry lanes. A lane's ``work`` is its tasks left on the input edge when *this* process started, and its share counts
the tasks this runner took; with another process at work on the same queue (a second ``run``, a ``--stages
model_caller`` beside it, one of them killed), part of a lane's work is done there, so its share here never reaches
1, and once its last task was gone the other lanes were deferred every second for ever: the run never ended
(aggr42: 2 of 3 tries with a SIGKILLed second process). A lane that ran *dry* therefore paces nobody (fixpace42 #1):
none of its tasks is in hand here, none that this runner deferred is still due back (a full lane's slot, a pacing
deferral), none it failed still waits out its backoff (one due back :data:`DRY_MIN_S` s ago that did not come back
here was taken by another process: review42c #1), and a whole walk of the input queue passed without leasing
one (:data:`DRY_WALKS`), and at least :data:`DRY_MIN_S` s since it last leased one (or since it started; review42b
#1: an empty poll ends a walk, and while another process defers a lane's tasks for a moment, its full-lane slots or
pacing deferrals, polls find nothing every ``poll_s``, so two paced processes side by side lost pacing). A walk
ends when a lease finds nothing to lease, or once this runner has leased as many tasks as the input held ready at the walk's
start (:meth:`WorkQueue.counts`, read at most every :data:`DRY_CHECK_S` s and only once pacing deferred a task:
no per-lane count on either backend, Redis keeps none per payload field). Its tasks left, if any, are leased by
another process or wait out a delay set elsewhere; the first of them this runner leases makes it a paced lane
again. Each record's ``lanes`` mark a dry lane ``dry`` (its ``left`` is then 0:
:func:`geoagent.runtime.progress.lanes_eta`). A safety net under that rule: after :data:`PACE_STUCK_S` s in which
leases found only tasks held back by pacing, nothing was admitted and no task of a lane was in hand, the runner
turns pacing off for the rest of its run and says so once (a warning naming each lane's tasks taken / work). A
stage without paced lanes never reads the counts nor keeps walks: its cost is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import re
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import orjson

from geoagent import constants as C
from geoagent.runtime.http import PermanentHTTPError, exception_text, listen_slot_waits, unlisten_slot_waits
from geoagent.runtime.leases import LeaseKeeper
from geoagent.runtime.queue import Refund, StaleLease, Task, WorkQueue
from geoagent.runtime.stage import (Abandoned, BudgetStop, Deferred, Held, Lane, Message, Missing, PermanentFailure, Stage,
                                    StageContext)

log = logging.getLogger(__name__)


#: a stage that has completed something counts as stalled while work is ready for it (queued on its input edge, or in
#: flight) and it has completed nothing for this many of its mean gaps between commits (:meth:`StageStats.stall_after_s`)
STALL_GAPS = 10.0
#: ... and for at least this long, s
STALL_MIN_S = 60.0

#: Lanes (module docstring): the shortest and the longest a task of a full lane is deferred, s
DEFER_MIN_S = 0.2
DEFER_MAX_S = 30.0
#: deferred delays are rounded up to this step (s), so one release call gives back a run of them at once
DEFER_STEP_S = 0.25
#: Pacing (module docstring, "Lanes"): how long a task of a lane ahead of the others is deferred, s; and how many
#: tasks (at most; a lane's cap if lower) a lane may run ahead of the lowest share before it is deferred
PACED_DEFER_S = 1.0
PACE_SLACK_TASKS = 8
#: Pacing, dry lanes (module docstring, "Lanes"; fixpace42 #1): the walks of the input queue that must pass without
#: meeting a task of a lane (nothing of it in hand, none deferred by this runner) before it counts as dry; and the
#: most often (s) the runner reads the input's counts to start a walk
DRY_WALKS = 1
DRY_CHECK_S = 1.0
#: ... and the least time (s) since this runner last leased a task of the lane (review42b #1): empty polls every
#: ``poll_s`` end walks fast, so a lane whose tasks another process deferred for a moment (a full lane's slot there, a
#: pacing deferral) would count as dry after a fraction of a second, and two paced processes side by side lost pacing
DRY_MIN_S = 3.0
#: Pacing, the safety net: seconds of paced deferrals alone (nothing admitted, nothing of a lane in hand) after which
#: the runner drops pacing for the rest of its run (logged once)
PACE_STUCK_S = 30.0
#: Pacing, failing lanes (module docstring, "Lanes"; review44a #5): a lane whose last this many tasks finished here
#: were all dead-lettered, none answered since, paces nobody until one of its tasks succeeds
FAILING_LANE_DEAD_RUN = 10


def pace_ahead(taken: int, work: int, cap: int, lowest_other: float) -> bool:
    """The pacing rule (module docstring, "Lanes"): whether a lane that has taken ``taken`` of its ``work`` tasks
    (finished, dead-lettered, in hand or waiting for a retry) is ahead with one task more: its share then exceeds
    ``lowest_other`` (the lowest share among the other paced lanes that still have work and can run) by more than
    :data:`PACE_SLACK_TASKS` of its tasks (its ``cap`` if lower). The runner (:meth:`StageRunner._ahead`) and the dry
    run's dispatch replay (:func:`geoagent.config.simulate_dispatch`) both decide by it."""
    return (taken + 1) / work > lowest_other + max(1, min(cap, PACE_SLACK_TASKS)) / work


#: leases in a row that found only tasks of full lanes before the lease loop waits for a lane to free a slot
WALK_LEASES = 4
#: seconds a burst stage's input stays drained on end while another process's upstream stage works before it says
#: that it waits (once)
WAIT_SAID_AFTER_S = 5.0
#: the window of the per-lane rates in the progress stream (StageStats.lane_rates), s
LANE_RATE_WINDOW_S = 10.0
#: a stage's rate times the ETA only once this many tasks completed after its first commit (in this process) ...
ETA_MIN_COMPLETIONS = 5
#: ... over at least this many seconds from that first commit (StageStats.eta_ready): the start-up before the first
#: commit (opening the state, planning, the first connection) never counts, nor does a burst of a few quick commits;
#: until then the ETA says "estimating" (geoagent.status.format_eta)
ETA_MIN_WINDOW_S = 5.0


@dataclass(slots=True)
class StageStats:
    """Live counters of one stage (for progress display, ``status`` and the progress stream)."""

    name: str
    done: int = 0
    failed: int = 0  # nacked attempts (will be retried)
    dead: int = 0  # dead-lettered by this process (permanent or missing)
    missing: int = 0  # dead-lettered because retries were exhausted
    released: int = 0
    in_flight: int = 0
    held: int = 0  # tasks held (stage.Held): leased untouched while the stage runs, released at its end
    deferred: int = 0  # tasks of a full lane given back to the queue unstarted, for later (module docstring, "Lanes")
    paced: int = 0  # of those, tasks of a lane ahead of the others' share of their work (module docstring, "Lanes")
    blocked: bool = False  # the stage said nothing more can run here (Stage.runnable): leasing stopped early
    #: burst mode: leasing ended because the input was exhausted (nothing ready or leased, upstream done) and the
    #: stage held no task (held tasks are released to the input at its end: its own): work found on the input
    #: edge after that was queued by another process later, not left by this one
    drained: bool = False
    #: hosts whose unreachable breaker opened (module docstring): host -> (requests in a row, last failure)
    unreachable: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: attempts given back (queue.refund_attempts) because the unreachable failures that charged them proved their
    #: host down when its breaker opened, and dead-lettered tasks of such a streak returned to ready (module docstring)
    refunded_attempts: int = 0
    revived: int = 0
    #: watch mode, breaker open: ``time.monotonic()`` of the next half-open probe (None otherwise)
    next_probe_at: float | None = None
    #: hosts whose unreachable breaker is open -> when it opened (Unix time, s; for ``status``)
    unreachable_since: dict[str, float] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    #: ``time.monotonic()`` when the stage first leased work (None before): a rate over fewer than two commits
    #: counts from here, not from the stage's start (a ``--stages`` process may wait long for upstream work first)
    first_work_at: float | None = None
    finished: bool = False
    budget_stopped: bool = False
    last_errors: deque[str] = field(default_factory=lambda: deque(maxlen=5))
    #: the cost cap's refusals of tasks (:class:`~geoagent.runtime.stage.BudgetStop`), the 5 latest, kept apart from
    #: ``last_errors`` (s14): when the cap stops a run every task in flight is refused, and those refusals pushed the
    #: real errors out of the 5; ``status`` shows them as one line (:func:`geoagent.status.budget_refusals_merged`)
    budget_refusals: deque[str] = field(default_factory=lambda: deque(maxlen=5))
    #: how many tasks the cost cap refused in all (``budget_refusals`` keeps the latest 5 reasons)
    budget_refused: int = 0
    #: what lifts each kind of budget stop the stage met (:attr:`~geoagent.runtime.stage.BudgetStop.fix`), in order
    budget_fixes: list[str] = field(default_factory=list)
    #: per reason in ``last_errors``: (when it last happened, Unix time s; the host it concerns or None; whether it
    #: dead-lettered a task), so a reader can tell an error of a host that has answered since (:meth:`note_error`)
    error_info: dict[str, tuple[float, str | None, bool]] = field(default_factory=dict)
    #: hosts whose unreachable breaker closed (its probe got through) -> when (Unix time, s)
    host_ok_at: dict[str, float] = field(default_factory=dict)
    error_reasons: Counter[str] = field(default_factory=Counter)
    _recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))
    #: lanes (module docstring, "Lanes"): tasks completed per lane, and (time, counts) marks for their rates
    lane_done: dict[str, int] = field(default_factory=dict)
    #: lanes: tasks dead-lettered per lane (with ``lane_done``, what a lane has finished with: its tasks left)
    lane_dead: dict[str, int] = field(default_factory=dict)
    #: paced lanes: those that ran dry (module docstring, "Lanes": no task of them left here to take), as of the
    #: runner's latest lease
    lane_dry: frozenset[str] = frozenset()
    #: the slowest configured rate window of the HTTP keys pacing the stage (:meth:`Stage.pace_keys`), s
    #: (:meth:`geoagent.runtime.http.HttpClient.pace_s`, set by the runner): it may complete nothing that long by
    #: its limits alone (:meth:`stall_after_s`)
    pace_s: float = 0.0
    _lane_marks: deque[tuple[float, dict[str, int]]] = field(default_factory=lambda: deque(maxlen=256))
    #: (monotonic time, ``done``) of the stage's first commit in this process (:meth:`eta_measured`)
    _first_commit: tuple[float, int] | None = None

    def note_error(self, reason: str, host: str | None = None, *, dead: bool = False, dedupe: bool = False) -> None:
        """Record ``reason`` as the stage's latest error (``last_errors``, the 5 latest; ``dedupe``: not again when
        it is among them) and, in ``error_info``, when it happened, the ``host`` it concerns (a host key, or None
        for an error of no host) and whether it dead-lettered a task. A reason seen again gets the new time, so
        an error that recurs after its host answered is not taken for resolved (:func:`split_resolved_errors`)."""
        if not (dedupe and reason in self.last_errors):
            self.last_errors.append(reason)
        old = self.error_info.get(reason)
        self.error_info[reason] = (time.time(), host or (old[1] if old else None), dead or bool(old and old[2]))
        if len(self.error_info) > 4 * (self.last_errors.maxlen or 5):  # forget reasons gone from last_errors
            kept = set(self.last_errors)
            self.error_info = {k: v for k, v in self.error_info.items() if k in kept}

    def note_refusal(self, reason: str, fix: str | None = None) -> None:
        """Record a task the cost cap refused (``reason``: the :class:`~geoagent.runtime.stage.BudgetStop` text, its
        amounts) in ``budget_refusals`` and ``budget_refused``, never in ``last_errors`` (kept for real errors), and
        ``fix``, what lifts that stop, in ``budget_fixes`` (once)."""
        self.budget_refusals.append(reason)
        self.budget_refused += 1
        if fix and fix not in self.budget_fixes:
            self.budget_fixes.append(fix)

    def note_leased(self, n: int, now: float | None = None) -> None:
        """Count ``n`` tasks leased and handed to workers (``in_flight``) at ``now`` (``time.monotonic()`` s;
        default: the clock now); the first such lease sets :attr:`first_work_at`."""
        self.in_flight += n
        if n and self.first_work_at is None:
            self.first_work_at = time.monotonic() if now is None else float(now)

    def record_done(self, n: int, now: float | None = None) -> None:
        """Count ``n`` tasks committed at ``now`` (``time.monotonic()`` seconds; default: the clock now)."""
        self.done += n
        self._recent.append((time.monotonic() if now is None else float(now), self.done))
        if self._first_commit is None:
            self._first_commit = self._recent[-1]

    def eta_measured(self) -> tuple[int, float]:
        """``(tasks, seconds)`` measured for the ETA so far: the tasks committed after the stage's first commit in
        this process and the seconds from that commit to the last one; ``(0, 0.0)`` before a second commit."""
        if self._first_commit is None or not self._recent:
            return 0, 0.0
        t0, n0 = self._first_commit
        t1, n1 = self._recent[-1]
        return n1 - n0, max(0.0, t1 - t0)

    def eta_ready(self) -> bool:
        """Whether the stage's capacity is measured well enough to time the ETA: at least
        :data:`ETA_MIN_COMPLETIONS` tasks after its first commit, over at least :data:`ETA_MIN_WINDOW_S` s
        (:meth:`eta_measured`). Right after a start or resume it is not: one commit's rate counts the start-up,
        two quick commits' a burst."""
        done, span_s = self.eta_measured()
        return done >= ETA_MIN_COMPLETIONS and span_s >= ETA_MIN_WINDOW_S

    def rate_per_s(self, now: float | None = None) -> float:
        """Display throughput, tasks/s: the tasks committed in the window of the last ~64 commits over the time
        from the window's start up to ``now`` (``time.monotonic()`` s; default: the clock now), so it falls as
        time passes without a commit; with fewer than two commits, the run average up to ``now``. A stage that
        stopped completing thus shows a falling rate, never its old one (:meth:`capacity_per_s` is the rate
        while it worked, for the ETA). A finished stage's span ends at its last commit instead
        (:meth:`rate_end`): it completes nothing more because its work is done, so its rate is that of its
        working span, not diluted by the time its process ran on (a ``--stages`` process writing the report
        long after its parser's last commit showed the parser at 0.48/s for 80 answers parsed in about 1 s)."""
        now = self.rate_end(time.monotonic() if now is None else float(now))
        tasks, since = self._window()
        span = now - since
        return tasks / span if span > 0 else 0.0

    def rate_end(self, now: float) -> float:
        """Where the display rate's span ends at ``now`` (monotonic s): ``now`` while the stage runs; once it has
        finished (:attr:`finished`), its last commit (``now`` when it committed nothing)."""
        if self.finished and self._recent:
            return min(now, self._recent[-1][0])
        return now

    def _window(self) -> tuple[int, float]:
        """``(tasks, since)``: the tasks the display rate counts and the monotonic time it counts them from: the
        window of the last ~64 commits (from its first commit); with fewer than two commits every task, from the
        stage's first lease (:attr:`first_work_at`; its start when it leased nothing yet). A finished stage whose
        window still holds its first commit (64 commits or fewer) counts every task from its first lease: its
        whole working span (the window from the first commit left out the first commit's tasks and the time
        before it: 300 tasks committed at once, then 1 more, showed the rate of the 1)."""
        if self.finished and self._recent and self._recent[0] == self._first_commit:
            return self.done, self.started_at if self.first_work_at is None else self.first_work_at
        if len(self._recent) >= 2 and self._recent[-1][0] > self._recent[0][0]:
            (t0, n0), (_, n1) = self._recent[0], self._recent[-1]
            return n1 - n0, t0
        return self.done, self.started_at if self.first_work_at is None else self.first_work_at

    def capacity_per_s(self) -> float:
        """Rate while working, tasks/s: the same window as :meth:`rate_per_s`, but up to its last commit, not up
        to now, so a stage that waits for upstream work (starved, not slower) keeps its measured capacity; 0.0
        before the first commit. The ETA's rate (:func:`geoagent.runtime.progress.pipeline_eta`)."""
        if not self._recent:
            return 0.0
        tasks, since = self._window()
        span = self._recent[-1][0] - since
        return tasks / span if span > 0 else 0.0

    def idle_s(self, now: float | None = None) -> float | None:
        """Seconds since the stage's last commit at ``now`` (monotonic s; default: the clock now); None before
        its first commit."""
        if not self._recent:
            return None
        now = time.monotonic() if now is None else float(now)
        return max(0.0, now - self._recent[-1][0])

    def stall_after_s(self) -> float:
        """How long this stage may complete nothing before it counts as stalled while work is ready for it, s:
        :data:`STALL_GAPS` times its mean gap between commits in the window (before a second commit: the time to
        its first), at least :data:`STALL_MIN_S`, and at least :data:`STALL_MIN_S` more than :attr:`pace_s` (the
        slowest configured rate window: a model limited to 1 request per 120 s may send nothing for 132 s after
        one request, which is its configured pace, not a stall; so 192 s)."""
        if len(self._recent) >= 2:
            gap = (self._recent[-1][0] - self._recent[0][0]) / (len(self._recent) - 1)
        elif self._recent:
            gap = self._recent[-1][0] - self.started_at
        else:
            gap = 0.0
        return max(STALL_MIN_S, STALL_GAPS * gap, float(self.pace_s) + STALL_MIN_S)

    def lane_rates(self, now: float | None = None) -> dict[str, float]:
        """Tasks completed per second of each lane over about the last :data:`LANE_RATE_WINDOW_S` seconds (since the
        stage started when it is younger), at ``now`` (monotonic s; default: the clock now); {} without lanes.
        Each call keeps a mark of the counts (called at each progress tick), so it costs nothing per task."""
        if not self.lane_done:
            return {}
        now = time.monotonic() if now is None else float(now)
        marks = self._lane_marks
        while len(marks) > 1 and now - marks[1][0] >= LANE_RATE_WINDOW_S:
            marks.popleft()
        since, base = marks[0] if marks and now - marks[0][0] >= LANE_RATE_WINDOW_S else (self.started_at, {})
        marks.append((now, dict(self.lane_done)))
        span = now - since
        return {lane: (n - base.get(lane, 0)) / span if span > 0 else 0.0 for lane, n in self.lane_done.items()}

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """The stage's record for the progress stream at ``now`` (monotonic s; default: the clock now).

        Rates (tasks/s): ``rate_per_s`` (display, falls while nothing completes, :meth:`rate_per_s`) counted over
        the last ``rate_window_s`` seconds (so a later reader can carry it on: ``rate * w / (w + age)``,
        :func:`geoagent.runtime.progress.record_as_of`; a finished stage's window ends at its last commit and is
        not carried on), ``capacity_per_s`` (while working, the ETA's,
        :meth:`capacity_per_s`); ``idle_s`` since the last commit (None before the first), ``stall_after_s``
        (:meth:`stall_after_s`); ``eta_ready``, ``eta_measured_done`` and ``eta_measured_s`` (:meth:`eta_ready`:
        whether the capacity times the ETA yet, and the tasks and seconds it is measured over); with lanes, ``lanes``: per lane (the model caller: per model) ``done``, ``dead``
        (dead-lettered) and ``rate_per_s`` (:meth:`lane_rates`), and ``dry: true`` for a paced lane that ran dry
        (``lane_dry``)."""
        now = time.monotonic() if now is None else float(now)
        idle = self.idle_s(now)
        lanes = ({"lanes": {k: {"done": self.lane_done[k], "dead": self.lane_dead.get(k, 0), "rate_per_s": round(r, 3),
                                **({"dry": True} if k in self.lane_dry else {})}
                            for k, r in self.lane_rates(now).items()}} if self.lane_done else {})
        return {
            "stage": self.name,
            "done": self.done,
            "failed": self.failed,
            "dead": self.dead,
            "missing": self.missing,
            "released": self.released,
            "in_flight": self.in_flight,
            "held": self.held,
            "rate_per_s": round(self.rate_per_s(now), 3),
            "rate_window_s": round(max(0.0, self.rate_end(now) - self._window()[1]), 3),
            "capacity_per_s": round(self.capacity_per_s(), 3),
            # whether capacity_per_s times the ETA yet, and what it is measured over (eta_ready)
            "eta_ready": self.eta_ready(),
            "eta_measured_done": self.eta_measured()[0],
            "eta_measured_s": round(self.eta_measured()[1], 1),
            "idle_s": None if idle is None else round(idle, 1),
            "stall_after_s": round(self.stall_after_s(), 1),
            "finished": self.finished,
            "budget_stopped": self.budget_stopped,
            "last_errors": list(self.last_errors),
            "budget_refusals": list(self.budget_refusals),
            "budget_refused": self.budget_refused,
            "budget_fixes": list(self.budget_fixes),
            "unreachable": {h: self._unreachable_info(h, n, last) for h, (n, last) in self.unreachable.items()},
            **lanes,
        }

    def _unreachable_info(self, host: str, n: int, last: str) -> dict[str, Any]:
        info: dict[str, Any] = {"requests": n, "last": last}
        if host in self.unreachable_since:
            info["since"] = round(self.unreachable_since[host], 3)  # Unix time, s
        if self.next_probe_at is not None and not self.finished:  # watch mode: waiting for the host
            left = self.next_probe_at - time.monotonic()
            info["next_probe_in_s"] = round(max(0.0, left), 1)
            info["next_probe_at"] = round(time.time() + left, 3)  # Unix time, s (read by another process)
        return info


#: requests in a row to one host that failed unreachable before a stage runner stops (module docstring)
UNREACHABLE_AFTER = 5
#: the derived task ceiling is at least this many seconds (module docstring, "Task ceiling")
TASK_TIMEOUT_MIN_S = 1800.0
#: ... and this many times the longest one request may take under the slowest known host policy
TASK_TIMEOUT_FACTOR = 4.0


class TaskTimeout(RuntimeError):
    """A task was still being handled when its stage's ceiling passed (module docstring, "Task ceiling"): it was
    cancelled and is nacked (retried later) with this reason."""


def request_worst_s(policy: Any) -> float:
    """The longest one request may take under a host policy, seconds: ``max_attempts`` attempts of up to
    ``timeout_s`` each, with the longest backoff (``backoff_max_s``, which also caps the ``Retry-After`` pause the
    HTTP layer waits out) between them (:class:`geoagent.runtime.http.HostPolicy`). Waits for the host's rate and
    concurrency slots are not bounded by the policy and not counted."""
    attempts = max(1, int(policy.max_attempts))
    return attempts * float(policy.timeout_s) + (attempts - 1) * float(policy.backoff_max_s)


def default_task_timeout_s(policies: Any = ()) -> float:
    """The task ceiling a stage gets when neither the campaign (``[queue] task_timeout_s``) nor the stage sets
    one, seconds: :data:`TASK_TIMEOUT_FACTOR` times :func:`request_worst_s` of the slowest of ``policies`` (and of
    the HTTP layer's default policy), at least :data:`TASK_TIMEOUT_MIN_S`. The default policy (5 attempts of up to
    120 s, backoff up to 30 s) gives 4 x 720 = 2880 s; the public Overpass policy (4 x 60 s, backoff up to 120 s)
    4 x 600 = 2400 s. Generous on purpose: a task that reaches it is taken to hang, and is cancelled and retried.
    """
    from geoagent.runtime.http import HostPolicy

    worst = max(request_worst_s(p) for p in [HostPolicy(), *policies])
    return max(TASK_TIMEOUT_MIN_S, TASK_TIMEOUT_FACTOR * worst)
#: watch mode: seconds after the unreachable breaker opened before the first half-open probe (module docstring)
PROBE_AFTER_S = C.DEFAULT_WATCH_PROBE_AFTER_S
#: watch mode: the cool-down doubles after each failed probe up to this many seconds
PROBE_MAX_S = C.DEFAULT_WATCH_PROBE_MAX_S


def _unreachable_error(exc: BaseException) -> Any:
    """The :class:`~geoagent.runtime.http.RetriesExhausted` with ``unreachable`` behind ``exc`` (itself, or
    what it was raised from / during, two levels deep; not behind ``raise ... from None``), or None. A stage's own
    exception with the same attributes (``unreachable`` True, ``host``, ``streak``, ``streak_id``, ``last``) counts
    as one: the fetch stage's thumbnail host that resolved to no public address
    (:class:`geoagent.crawl.fetcher.ThumbnailHostNotPublic`, counted by :mod:`geoagent.crawl.not_public`)."""
    seen: BaseException | None = exc
    for _ in range(3):
        if seen is None:
            return None
        if getattr(seen, "unreachable", False) is True and getattr(seen, "host", ""):
            return seen
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


def _charged_streak(exc: BaseException) -> tuple[str, int] | None:
    """``(host, streak id)`` of the unreachable streak a failure belongs to (module docstring, "Refunds"): the
    unreachable ``RetriesExhausted`` behind it (:attr:`~geoagent.runtime.http.RetriesExhausted.streak_id`), or an
    ``unreachable_streak`` attribute a stage put on the exception it raised instead (the model caller); None
    when it is no such failure or its streak has no id."""
    hx = _unreachable_error(exc)
    pair = (hx.host, getattr(hx, "streak_id", 0)) if hx is not None else getattr(exc, "unreachable_streak", None)
    try:
        host, sid = pair  # type: ignore[misc]
        sid = int(sid or 0)
    except (TypeError, ValueError):
        return None
    return (str(host), sid) if host and sid > 0 else None


def unreachable_cause(last: str) -> str:
    """A few words for why a host could not be reached, from a ``RetriesExhausted.last`` text:
    ``"DNS lookup failed"``, ``"connect timeout"``, ``"connection refused"`` or ``"connection failed"``; for a name
    that resolved to no public address (a request limited to public addresses, not connected:
    :class:`geoagent.runtime.public_net.NotPublicAddress`), ``"no public address in this network's DNS answer"``
    (crawl43 #1)."""
    low = last.lower()
    if "resolves to no public address" in low:  # before "dns": the lookup answered, with private addresses only
        return "no public address in this network's DNS answer"
    if "dns" in low or "name or service not known" in low or "name resolution" in low or "nodename" in low:
        return "DNS lookup failed"
    if low.startswith("timeout") or "timeout" in low:
        return "connect timeout"
    if "refused" in low or "connect call failed" in low:
        return "connection refused"
    return "connection failed"


def _in_a_row(n: int) -> str:
    return "on 1 request" if n == 1 else f"on {n} consecutive requests"


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun`` with an English plural: ``1 task``, ``4 tasks``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


#: the longest reason stored for a task (queue nack / dead-letter reason), characters
REASON_CHARS = 500
#: how a paused failure's message starts (the model caller's ``CallFailed`` with ``paused``): a task whose last
#: nack reason has it after its type (``"CallFailed: paused by the host: ..."``) waited out a pause in the queue
PAUSED_BY_HOST = "paused by the host: "


def _clean(text: str) -> str:
    """``text`` as a stored reason: known API key values scrubbed (:func:`geoagent.secrets.redact`), terminal
    control characters and line breaks escaped (:func:`geoagent.textfmt.one_line_text`), at most
    :data:`REASON_CHARS` chars."""
    from geoagent.secrets import redact
    from geoagent.textfmt import one_line_text

    text = one_line_text(redact(text))  # one line: a reason is listed one per line (dead, status)
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


def _reason(exc: BaseException) -> str:
    """The error text stored for a task (queue nack / dead-letter reason, the stage's last errors): known API key
    values scrubbed (:func:`geoagent.secrets.redact`; the log filter covers only log lines), terminal control
    characters escaped (:func:`geoagent.textfmt.inert_text`: it may quote an API's error body), at most 500 chars."""
    return _clean(exception_text(exc))  # "TimeoutError (no message)", never a bare "TimeoutError: "


def was_paused(reason: str | None) -> bool:
    """Whether a task's last nack reason (``Task.last_error``) is a pause by its host (:data:`PAUSED_BY_HOST`
    after the error's type): its previous delivery ended in a ``Retry-After`` longer than the host's backoff and
    the task waited it out in the queue."""
    return bool(reason) and str(reason).partition(": ")[2].startswith(PAUSED_BY_HOST)


#: said of a dead-lettered task whose previous delivery was paused by its host (:func:`dead_reason`)
_PAUSED_BEFORE = "the host had paused the task before it (its previous delivery waited out a Retry-After)"


def dead_reason(exc: BaseException, task: Task) -> str:
    """The dead-letter reason of ``task`` failing with ``exc`` at its last delivery (a permanent failure, or a
    nack the queue dead-letters: its attempts reached ``[queue] max_attempts``), at most :data:`REASON_CHARS`.

    A failure that is itself a pause by the host (``paused`` with ``retry_after_s``, the model caller's
    ``CallFailed``: the answer's ``Retry-After`` outlasts the host's backoff, and no delivery is left to wait it
    out) reads as what it is: the deliveries used up, then the real last failure (``last_failure``, e.g. ``http
    429: <body>``, with the HTTP attempts of the last delivery), the pause it asked for, and whether the
    delivery before was paused too; before, it read "paused by the host: ...", as if it were still waiting. Any
    other failure keeps its own reason, followed by :data:`_PAUSED_BEFORE` when the previous delivery was paused
    (``task.last_error``, :func:`was_paused`), shortened so that note always fits."""
    earlier = was_paused(task.last_error)
    delay = getattr(exc, "retry_after_s", None)
    if getattr(exc, "paused", False) and isinstance(delay, (int, float)):
        n = int(task.attempts) + 1
        last = str(getattr(exc, "last_failure", "") or "") or exception_text(exc)
        tries = getattr(exc, "http_attempts", None)
        tries_text = f" ({_count(int(tries), 'HTTP attempt')} in the last delivery)" if isinstance(tries, int) else ""
        before = f", {_PAUSED_BEFORE}" if earlier else " (no earlier delivery of it was paused)"
        asked = getattr(exc, "retry_after_asked_s", None)
        if isinstance(asked, (int, float)):  # the server asked for more than the host's max_retry_after_s
            pause = (f"(the server asked Retry-After {float(asked):g} s, more than the host's max_retry_after_s "
                     f"{float(delay):g} s: retried after the cap, no delivery left)")
            # said first: a long error body is what a 500-character reason cuts short
            return _clean(f"{type(exc).__name__}: retries exhausted after {n} deliver{'y' if n == 1 else 'ies'} "
                          f"([queue] max_attempts) {pause}{before}; last failure{tries_text}: {last}")
        # the pause note first: a long error body is what a 500-character reason cuts short
        return _clean(f"{type(exc).__name__}: retries exhausted after {n} deliver{'y' if n == 1 else 'ies'} ([queue] "
                      f"max_attempts){before}; last failure{tries_text}: {last} (Retry-After {float(delay):g} s, "
                      "longer than the host's backoff_max_s: no delivery left to wait it out)")
    reason = _reason(exc)
    if not earlier:
        return reason
    room = REASON_CHARS - len(_PAUSED_BEFORE) - 2
    if len(reason) > room:
        reason = reason[:room - 3] + "..."
    return f"{reason}; {_PAUSED_BEFORE}"


def refused_by_server(exc: BaseException) -> bool:
    """Whether a stage's failure ``exc`` is the Redis server's refusal, which no retry of the task can end: the
    URL's credentials refused (:func:`geoagent.runtime.redis_retry.auth_refused`; a password changed on the server
    while the run goes on, met by the response store, the ledger or the host-share board's gate inside a stage) or
    a command refused (redis-py's ``NoPermissionError``, ``NOPERM``). Such a failure ends the run (the CLI: exit 2,
    one line), as it does when a queue call meets it; before session 19 the task was nacked as a failure like any
    other, each delivery counting an attempt until it was dead-lettered, while the queues' own connections, still
    authenticated, worked on. The server found to have lost recent writes
    (:class:`geoagent.runtime.backend.ServerLostWrites`, redis39 #1c) ends the run the same way (exit 3): each
    retry would meet it again, and dead-letter the task."""
    from geoagent.runtime.backend import ServerLostWrites

    if isinstance(exc, ServerLostWrites):
        return True
    try:
        from redis.exceptions import NoPermissionError
    except ImportError:  # redis-py absent: no campaign can use Redis
        return False
    from geoagent.runtime.redis_retry import auth_refused

    return isinstance(exc, NoPermissionError) or auth_refused(exc) is not None


class UpstreamWait:
    """The wait of one process's burst runners for the foreign upstream stages no process has taken up yet
    (:class:`StageRunner` ``stages_started``, fixstages43), shared by those runners (fixstages44 #2:
    :func:`geoagent.runtime.daemon.run_pipeline` owns one per run).

    Each runner kept its own clock and verdicts, and a runner starts asking only once the runners before it in
    this process have ended, so ``--stages scorer,aggregator`` waited ``GEOAGENT_UPSTREAM_WAIT_S`` twice over,
    GeoHint's ``--stages geocoder,scorer,aggregator`` three times (30 minutes by default), each runner with its own
    "waiting" and "no process took up" lines. Shared, a stage's clock starts once for the process, a stage found
    taken up (or waited for long enough, or stopped by the cost cap) is so for every runner, and each line is said
    once per process. Plain state; the runners of one event loop read and write it.

    Attributes
    ----------
    taken_up : set of str
        Foreign upstream stages seen taken up by another process, or given up on (the bound, the cost cap).
    began : dict
        Stage -> monotonic s when it was first found with ready tasks and not taken up (the bound's clock).
    stop_asked : set of str
        Stages ``upstream_stop`` was asked about (once per stage).
    base, leased_low : dict
        Stage -> its input's done count at the start, and the fewest of its tasks seen leased since (evidence of
        a process elsewhere: growth above either).
    said, waited_at : set of str, dict
        The stages a waiting line has named, and since when (monotonic s) each was waited for.
    """

    def __init__(self) -> None:
        self.taken_up: set[str] = set()
        self.began: dict[str, float] = {}
        self.stop_asked: set[str] = set()
        self.base: dict[str, int] = {}
        self.leased_low: dict[str, int] = {}
        self.said: set[str] = set()
        self.waited_at: dict[str, float] = {}


class StageRunner:
    """Run one stage until its input is exhausted (burst) or it is asked to stop.

    Parameters
    ----------
    stage : Stage
        The worker's job.
    input_queue : WorkQueue
        Queue of ``stage.input_edge``.
    output_queue : WorkQueue or None
        Queue of ``stage.output_edge`` (None for sinks such as the aggregator).
    ctx : StageContext
        Shared services.
    burst : bool
        Finish when upstream is finished and the input is drained (True), or keep polling forever (False).
    upstream_done : anyio.Event or None
        Set when every upstream stage has finished; None means "no upstream" (already finished).
    foreign_upstream : sequence of (str, WorkQueue)
        Burst mode, the campaign split over processes (``--stages``): (name, input queue) of the stages upstream
        of this one that this process does not run. The input is not exhausted while a task of one of them is
        leased (in flight in another process, its output on the way here), or is ready and ``stages_elsewhere``
        names that stage (a live process runs it: a task waiting out a retry backoff, one deferred by a full
        lane, an output not leased yet), so a downstream process started beside a working upstream one takes its
        work instead of ending at the first empty moment; when no live process runs the stage and nothing of it
        is leased, it ends (its work waits for a process that runs that stage) once a process has taken that
        stage up since this one started, and waits for one to start before that (``stages_started``).
    stages_elsewhere : callable or None
        ``() -> names`` of the stages other live processes of the campaign run
        (:func:`geoagent.runtime.manifest.stages_run_elsewhere`); read at most once a second, with
        ``stages_started`` and after it (one snapshot), and read again, with every count after it, before the runner
        ends while a foreign upstream stage it does not name has ready tasks (fixstages45). None: only leased tasks
        count.
    stages_started : callable or None
        Burst mode with ``foreign_upstream``: ``() -> names`` of the stages another process of the campaign has run
        since this process started (:func:`geoagent.runtime.manifest.stages_run_since`); read at most once a
        second, just before ``stages_elsewhere``. A foreign upstream stage with ready tasks that no process has
        taken up yet keeps the input from being exhausted (fixstages43: a downstream process started before its
        upstream one waits for it instead of ending at once): taken up once ``stages_started`` or
        ``stages_elsewhere`` names it, or more of its input's tasks are leased than the fewest seen leased since
        this runner started, or its input's done count has grown since then (the evidence of a process on another
        machine, Redis; review43e #3: not the dead count, which another process's plan grows by setting tasks aside,
        nor leases a crashed process left). None: the rule is off, ready tasks of a stage no live process runs never
        keep it waiting.
    start_wait_s : float
        The most seconds the input stays not exhausted for a stage no process has taken up (``stages_started``),
        counted per stage from the first time it was found so (review43e #2: a stage whose work arrives once the
        one before it was taken up gets its own bound); after that such a stage counts as taken up (the runner ends
        as it did before fixstages43, its work left for a process that runs that stage). Default ``math.inf``; the
        engine passes ``GEOAGENT_UPSTREAM_WAIT_S`` (:func:`geoagent.runtime.daemon.upstream_wait_s`).
    upstream_wait : UpstreamWait or None
        The clock, verdicts and lines of that wait, shared with the process's other runners (fixstages44 #2: the
        bound is one per process, not one per runner); None: this runner's own.
    upstream_stop : async callable or None
        With ``stages_started``: ``await upstream_stop(stage)`` -> a sentence saying why no process can run foreign
        upstream stage ``stage`` on (the engine's :func:`geoagent.engine.upstream_budget_stop`: the cost cap stopped
        its last run and the cap leaves no room for its next call), or None. A stage it names is not waited for
        (fixstagesbudget43: a downstream process started after a campaign stopped at its cap, to score what it got,
        waited for ever for a model caller that would stop again at once). Asked once per stage, when its input
        holds ready tasks and none leased; None: not asked.
    poll_s : float
        Sleep between empty leases, seconds.
    commit_every : int
        Commit (put outputs, ack inputs) after this many finished tasks, or after ``commit_interval_s``.
    grace_s : float
        On stop, how long in-flight tasks may run before they are cancelled and released, seconds.
    visibility_timeout_s : float or None
        Lease length in seconds (default: the stage's own); a crashed worker's tasks return after it.
    lease_ahead : bool
        Keep up to ``min(lease_batch, concurrency)`` extra tasks leased, waiting for a slot, and lease in
        batches of at least half that while all slots are busy (fewer, larger lease transactions: the
        campaign engine turns it on). Tasks leased ahead and not started when a stop comes are released.
    flush_interval_s : float
        Call :meth:`Stage.flush` after a commit at most this often (seconds), and once at the end.
    unreachable_after : int
        Requests in a row to one host that could not reach it (each after the HTTP layer's own retries)
        before the stage stops (module docstring, "Unreachable hosts"); default :data:`UNREACHABLE_AFTER`.
    probe_after_s, probe_max_s : float
        Watch mode only (``burst=False``): seconds the open breaker waits before its first half-open probe,
        and the most it waits after failed probes (doubling from ``probe_after_s``); defaults
        :data:`PROBE_AFTER_S`, :data:`PROBE_MAX_S` (module docstring, "Unreachable hosts").
    task_timeout_s : float or None
        The most seconds one task may be handled before it is cancelled and nacked (module docstring, "Task
        ceiling"); None: the stage's :attr:`Stage.task_timeout_s`, else :func:`default_task_timeout_s` of the
        policies of the context's ``http`` client, fixed when the stage has started (:attr:`task_timeout_s`).
    """

    def __init__(
        self,
        stage: Stage,
        input_queue: WorkQueue,
        output_queue: WorkQueue | None,
        ctx: StageContext,
        *,
        burst: bool = True,
        upstream_done: anyio.Event | None = None,
        foreign_upstream: Sequence[tuple[str, WorkQueue]] = (),
        stages_elsewhere: Callable[[], Collection[str]] | None = None,
        stages_started: Callable[[], Collection[str]] | None = None,
        start_wait_s: float = math.inf,
        upstream_wait: UpstreamWait | None = None,
        upstream_stop: Callable[[str], Awaitable[str | None]] | None = None,
        poll_s: float = 0.05,
        commit_every: int = 64,
        commit_interval_s: float = 0.05,
        grace_s: float = 30.0,
        visibility_timeout_s: float | None = None,
        lease_ahead: bool = False,
        flush_interval_s: float = 1.0,
        unreachable_after: int = UNREACHABLE_AFTER,
        probe_after_s: float = PROBE_AFTER_S,
        probe_max_s: float = PROBE_MAX_S,
        task_timeout_s: float | None = None,
    ) -> None:
        if task_timeout_s is not None and not task_timeout_s > 0:
            raise ValueError(f"task_timeout_s must be > 0 (seconds) or None, got {task_timeout_s!r}")
        #: the task ceiling in seconds (module docstring, "Task ceiling"); resolved at run() when not given
        self.task_timeout_s: float | None = task_timeout_s
        if unreachable_after < 1:
            raise ValueError(f"unreachable_after must be >= 1, got {unreachable_after!r}")
        if not (probe_after_s >= 0 and probe_max_s >= probe_after_s):
            raise ValueError(f"need 0 <= probe_after_s <= probe_max_s, got {probe_after_s!r}, {probe_max_s!r}")
        self.unreachable_after = unreachable_after
        self.probe_after_s = float(probe_after_s)
        self.probe_max_s = float(probe_max_s)
        self._cooldown_s = self.probe_after_s  # the current half-open cool-down (watch mode)
        self._probe: Task | None = None  # the half-open probe in flight (watch mode)
        #: watch mode: cancel scopes of tasks in flight, cut when the breaker opens in a cancel_on_stop stage
        self._cuttable: set[anyio.CancelScope] = set()  # ceilings of tasks being handled (one at a time)
        self._cut_scopes: set[anyio.CancelScope] = set()  # ... of those, the ones the breaker cancelled
        self._unreachable_seen: set[str] = set()  # hosts whose first unreachable failure was logged
        #: refunds (module docstring, "Refunds"): per host, the latest unreachable streak's id and the attempts its
        #: nacks charged, by task key; the streaks that opened a breaker; refunds not yet applied, by task key
        self._charged: dict[str, tuple[int, dict[str, Refund]]] = {}
        self._tripped: set[tuple[str, int]] = set()
        self._refunds_due: dict[str, tuple[str, Refund]] = {}
        #: charge ids ("<token>.<n>") of this runner's unreachable nacks, when the queue records them
        self._by_charge = bool(getattr(input_queue, "supports_charges", False))
        self._charge_token = os.urandom(6).hex()
        self._charge_seq = 0
        self.stage = stage
        self.lease_ahead = lease_ahead
        self.visibility_timeout_s = visibility_timeout_s or stage.visibility_timeout_s
        # the input queue, each task settled under its newest lease (module docstring, "Leases taken again")
        self.inq: Any = _CurrentLeases(input_queue)
        self._leases = LeaseKeeper(input_queue, self.visibility_timeout_s)  # renews leases while tasks are worked on
        self.outq = output_queue
        self.ctx = ctx
        self.burst = burst
        self.upstream_done = upstream_done
        self.foreign_upstream = tuple(foreign_upstream)
        self._stages_elsewhere = stages_elsewhere
        self._stages_started = stages_started
        #: (monotonic s read, stages_started(), stages_elsewhere()): one snapshot (fixstages45, :meth:`_views`)
        self._views_cache: tuple[float, Collection[str], Collection[str]] | None = None
        #: fixstages43: foreign upstream stages seen taken up by another process (once seen, for good), and each
        #: one's input's done count when this runner started (growth: a process elsewhere at work on it); shared by
        #: the process's runners (fixstages44 #2: UpstreamWait)
        shared = upstream_wait if upstream_wait is not None else UpstreamWait()
        self._taken_up: set[str] = shared.taken_up
        #: fixstagesbudget43: ``(stage) -> why no process can run it on, or None`` (the cost cap), and the stages asked
        self._upstream_stop = upstream_stop if stages_started is not None else None
        self._stop_asked: set[str] = shared.stop_asked
        self._upstream_base: dict[str, int] = shared.base
        #: review43e #3: each foreign upstream input's fewest leased tasks seen since this runner started (those
        #: leased at its start may be a crashed process's, not yet expired: only a lease above it is new)
        self._upstream_leased_low: dict[str, int] = shared.leased_low
        self.start_wait_s = float(start_wait_s)
        #: monotonic s: when each stage was first found with ready tasks and not taken up (the bound's clock, per
        #: stage: review43e #2, a stage waited for once the one before it was taken up gets its own bound; per
        #: process: fixstages44 #2, a runner that starts asking after another ended does not start it again)
        self._start_wait_began: dict[str, float] = shared.began
        self._waiting_since: float | None = None  # since when its input is drained while a foreign upstream works
        self._wait_said = False
        #: the stages not taken up yet that a line has named (fixstages43), and since when each is waited for
        #: (review43e #2: per stage, so a stage waited for later gets its own line; fixstages44 #2: once a process)
        self._start_wait_said: set[str] = shared.said
        self._start_waited_at: dict[str, float] = shared.waited_at
        self.poll_s = poll_s
        self.commit_every = commit_every
        self.commit_interval_s = commit_interval_s
        self.grace_s = grace_s
        self.stats = StageStats(stage.name)
        self._work_noted = False  # the run's "work began" hook was called (_note_work_began)
        self._pace_at = 0.0  # time.monotonic() of the last _note_pace
        self.finished = anyio.Event()
        self._stop = anyio.Event()
        self._cut = anyio.Event()  # the unreachable breaker opened in a cancel_on_stop stage: cancel in-flight work
        self._budget = anyio.Event()
        self._pending: list[tuple[Task, list[Message]]] = []
        #: held tasks by key (payload dropped): leased, released untouched when the stage ends
        self._held: dict[str, Task] = {}
        #: lanes (module docstring, "Lanes"): the stage's lanes (None: none), tasks of each handed to the stage
        #: and not finished, each lane's next deferral slot (monotonic s); set when a full lane frees a slot
        self._lanes: dict[str, Lane] | None = None
        self._lane_busy: dict[str, int] = {}
        #: pacing: tasks of each lane this runner nacked for a retry that have not come back yet, and when the last of
        #: them is due back at the latest (monotonic s): past that by DRY_MIN_S, the ones not back here were taken by
        #: another process (review42c #1: the count never fell, so the lane was never dry)
        self._lane_retrying: dict[str, int] = {}
        self._lane_retry_due: dict[str, float] = {}
        self._lane_next: dict[str, float] = {}
        self._lane_room = asyncio.Event()
        #: lanes the stage cannot run now (:meth:`Stage.lane_leasable` False) -> the room they would have had: given no
        #: quota, so their tasks stay queued, visible to other processes (review44a #3; :meth:`_quota_now`)
        self._shut_lanes: dict[str, int] = {}
        #: pacing (module docstring, "Lanes"): whether any lane is paced (false for good once the safety net,
        #: _pace_stuck, turned pacing off); dry lanes: the walk of the input queue in progress (its number, where it
        #: started in the count of tasks leased, how many it needs: the input's ready count at its start, None until
        #: read, when that was read), tasks leased in all, and per lane the walk in which a task of it was last
        #: leased; since when only paced deferrals happened (the safety net)
        self._pacing = False
        self._walk = 0
        self._walk_from = 0
        self._walk_need: int | None = None
        self._walk_read_at = -math.inf
        self._walked = 0
        self._lane_seen: dict[str, int] = {}
        self._lane_seen_at: dict[str, float] = {}  # per lane, when (monotonic s) a task of it was last leased
        self._stuck_since: float | None = None
        #: leasing by lane (module docstring, "Lanes"; walk39 #1): whether the lease loop asks the queue for tasks of
        #: the lanes with room only, and per lane the leases in a row that asked for some of its tasks and found fewer
        #: (none ready to take: with pacing, a lane runs dry after more than DRY_WALKS of them)
        self._lane_lease = False
        self._lane_short: dict[str, int] = {}
        self._lane_dead_run: dict[str, int] = {}  # dead letters in a row per lane (FAILING_LANE_DEAD_RUN)
        self._last_commit = time.monotonic()
        self._commit_lock = anyio.Lock()
        self.flush_interval_s = flush_interval_s
        self._last_flush = time.monotonic()

    # -- control ------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop leasing; in-flight tasks get ``grace_s`` seconds, then are released.

        Tells the stage once (:meth:`Stage.stop_requested`), so it can abandon tasks that have not yet
        begun their side effects (:class:`~geoagent.runtime.stage.Abandoned`: released untouched).
        """
        if self._stop.is_set():
            return
        self._stop.set()
        # no request of this process makes another attempt (http.RetriesStopped -> Abandoned); first, so a
        # stage hook that fails below cannot keep retries going
        stop_retries = getattr(self.ctx.services.get("http"), "stop_retries", None)
        if stop_retries is not None:
            stop_retries()
        try:
            self.stage.stop_requested()
        except Exception:  # noqa: BLE001 - a stage's hook must not break the shutdown
            log.exception("stage %s: stop_requested failed", self.stage.name)

    @property
    def budget_stopped(self) -> bool:
        return self._budget.is_set()

    # -- main loop ------------------------------------------------------------------------------
    async def run(self) -> StageStats:
        """Run until finished; returns the stage's counters. Never raises for task-level errors.

        Leased tasks go through an in-memory stream to a fixed pool of ``stage.concurrency`` worker
        coroutines (one long-lived coroutine per slot instead of one new task per leased task); a stage
        with ``batched = True`` gets whatever is waiting, up to ``lease_batch`` tasks, in one
        :meth:`Stage.handle_batch` call instead.
        """
        mode = getattr(self.stage, "runner_mode", None)
        if mode is not None:
            mode(watch=not self.burst, probe_after_s=self.probe_after_s, probe_max_s=self.probe_max_s)
        await self.stage.start(self.ctx)
        self.task_timeout_s = self._task_ceiling()
        await self._note_upstream_base()
        self._note_pace()
        batched = bool(getattr(self.stage, "batched", False))
        # sized after start(): a stage may set its concurrency from the config there
        n_workers = min(2, max(1, self.stage.concurrency)) if batched else max(1, self.stage.concurrency)
        lanes = None if batched else self.stage.lanes()
        if lanes:
            self._lanes = dict(lanes)
            self._lane_busy = dict.fromkeys(lanes, 0)
            self._lane_retrying = dict.fromkeys(lanes, 0)
            self.stats.lane_done = dict.fromkeys(lanes, 0)
            self._lane_next = dict.fromkeys(lanes, 0.0)
            self._paced_at = dict.fromkeys(lanes, -math.inf)  # when a task of the lane was last deferred by pacing
            # the run's start counts as a sighting (review42b #1): a second process that starts while the first holds
            # or deferred a lane's tasks must not find that lane dry after its first empty poll
            self._lane_seen_at = dict.fromkeys(lanes, time.monotonic())
            self._pacing = any(spec.work for spec in lanes.values())
            # lease by lane where the queue can and the stage's lanes are the queue's (module docstring, "Lanes")
            self._lane_lease = bool(getattr(self.stage, "queue_lanes", False)
                                    and getattr(self.inq, "supports_lane_lease", False))
            self._lane_short = dict.fromkeys(lanes, 0)
            # dead letters in a row per lane, none answered since (FAILING_LANE_DEAD_RUN; review44a #5)
            self._lane_dead_run = dict.fromkeys(lanes, 0)
        send, recv = anyio.create_memory_object_stream[Task](math.inf)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._commit_ticker)
                tg.start_soon(self._leases.run)
                async with anyio.create_task_group() as work:
                    # a stop request bounds in-flight work by grace_s whenever it comes (also after the
                    # lease loop ended for another reason, e.g. a budget stop with calls still hanging)
                    tg.start_soon(self._grace_watch, work.cancel_scope)
                    tg.start_soon(self._cut_watch, work.cancel_scope)
                    for _ in range(n_workers):
                        work.start_soon(self._batch_worker if batched else self._worker, recv.clone())
                    async with send:  # closing it lets the workers finish what is queued, then return
                        await self._lease_loop(send)
                await self._commit()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                # leased tasks no worker picked up (cancelled after the grace period): give them back
                while True:
                    try:
                        task = recv.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                        break
                    self.stats.in_flight -= 1
                    await self._safe(self.inq.release(task))
                    self.stats.released += 1
                recv.close()
                await self._release_held()
                await self._commit()
                await self._flush_refunds(final=True)
                await self.stage.flush(self.ctx)
                await self.stage.stop(self.ctx)
                self.stats.finished = True
                self.stats.budget_stopped = self._budget.is_set()
                self.finished.set()
        return self.stats

    def _task_ceiling(self) -> float:
        """This stage's task ceiling, seconds (module docstring, "Task ceiling"): the runner's option, else the
        stage's own, else derived from the HTTP policies the shared client knows now (after the stage started)."""
        if self.task_timeout_s is not None:
            return float(self.task_timeout_s)
        own = getattr(self.stage, "task_timeout_s", None)
        if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
            return float(own)
        known = getattr(self.ctx.services.get("http"), "policies", None)
        try:
            policies = list(known()) if callable(known) else []
        except Exception:  # noqa: BLE001 - fall back to the HTTP layer's default policy
            policies = []
        return default_task_timeout_s(policies)

    def _note_pace(self) -> None:
        """Set the stage's :attr:`StageStats.pace_s` from the configured limits of the keys that pace it
        (:meth:`Stage.pace_keys`; None: all) in the shared HTTP client now
        (:meth:`geoagent.runtime.http.HttpClient.pace_s`; 0.0 without a client). Called when the stage started and
        about once a second after (a scale-out share changes as processes come and go)."""
        self._pace_at = time.monotonic()
        pace = getattr(self.ctx.services.get("http"), "pace_s", None)
        try:
            keys = self.stage.pace_keys() if hasattr(self.stage, "pace_keys") else None
            self.stats.pace_s = float(pace(keys)) if callable(pace) else 0.0
        except Exception:  # noqa: BLE001 - a threshold for the display must never break the stage
            log.debug("stage %s: pace of the HTTP limits unknown", self.stage.name, exc_info=True)

    def _timeout(self, task: Task) -> TaskTimeout:
        seconds = float(self.task_timeout_s or 0.0)
        log.warning("stage %s: task %s still running after %g s, its ceiling ([queue] task_timeout_s): cancelled, "
                    "given back to the queue", self.stage.name, task.key, seconds)
        return TaskTimeout(f"stage {self.stage.name}: task {task.key} still running after {seconds:g} s, its ceiling "
                           "([queue] task_timeout_s): cancelled")

    @contextlib.contextmanager
    def _ceiling(self, tasks: list[Task]) -> Iterator[anyio.CancelScope]:
        """The ceiling of ``tasks`` (being handled from now on; module docstring, "Task ceiling"): a cancel scope
        whose deadline is the ceiling, and their leases renewed no longer than it (:meth:`LeaseKeeper.limit`).
        While a request made under it waits for its host's slots (:func:`~geoagent.runtime.http.listen_slot_waits`:
        concurrency, rate, pause, cross-process turn) the ceiling stands still: the deadline (and the lease limit)
        is lifted at the first such wait and set again, with the time that was left, once no request waits."""
        left = float(self.task_timeout_s or math.inf)
        now = asyncio.get_running_loop().time  # anyio.current_time() on asyncio, without its backend look-up per call
        scope = anyio.CancelScope(deadline=now() + left)
        for t in tasks:
            self._leases.limit(t, time.monotonic() + left)
        waiting = 0
        open_ = True  # a request that outlives the handler (a task it left running) changes nothing afterwards

        def listener(delta: int) -> None:
            nonlocal waiting, left
            if not open_:
                return
            if delta > 0:
                waiting += 1
                if waiting == 1:  # the clock stops
                    left = max(0.0, scope.deadline - now())
                    scope.deadline = math.inf
                    for t in tasks:
                        self._leases.limit(t, math.inf)
            elif waiting > 0:
                waiting -= 1
                if waiting == 0:  # ... and runs on with what was left
                    scope.deadline = now() + left
                    for t in tasks:
                        self._leases.limit(t, time.monotonic() + left)

        token = listen_slot_waits(listener)
        try:
            with scope:
                yield scope
        finally:
            open_ = False
            unlisten_slot_waits(token)

    async def _grace_watch(self, work_scope: anyio.CancelScope) -> None:
        """After a stop request, give in-flight tasks ``grace_s`` seconds (none for a stage with
        ``cancel_on_stop``), then cancel (release) the rest."""
        await self._stop.wait()
        with anyio.move_on_after(0.0 if getattr(self.stage, "cancel_on_stop", False) else self.grace_s):
            while self.stats.in_flight:
                await anyio.sleep(0.02)
        work_scope.cancel()

    async def _cut_watch(self, work_scope: anyio.CancelScope) -> None:
        """When the unreachable breaker opens in a ``cancel_on_stop`` stage, cancel (release) in-flight work at
        once instead of letting it retry a host that cannot be reached."""
        await self._cut.wait()
        work_scope.cancel()

    async def _lease_loop(self, send: Any) -> None:
        # Lease ahead (``lease_ahead=True``): up to ``prefetch`` tasks beyond the concurrency wait (leased)
        # for a free worker, and while every worker is busy a new lease waits until at least
        # ``prefetch // 2`` can be taken, so leases (one queue transaction each) come in batches instead of
        # one per finished task.
        # With lanes (module docstring, "Lanes") each lane's cap includes its own lease-ahead instead.
        lanes = self._lanes is not None
        prefetch = max(0, min(self.stage.lease_batch, self.stage.concurrency)) if self.lease_ahead and not lanes else 0
        min_lease = max(1, prefetch // 2)
        walks = 0  # leases in a row whose every task was of a full lane (deferred)
        while not self._stop.is_set() and not self._budget.is_set():
            if self._held:
                await self._release_resumed()
            if self.stats.unreachable and not self.burst:
                await self._half_open(send)  # watch mode (module docstring, "Unreachable hosts")
                continue
            if self.stats.unreachable or not self.stage.runnable():
                # a host cannot be reached, or e.g. every model's key was refused: leasing more would only
                # burn attempts or hold the tasks
                self.stats.blocked = True
                return
            free = self.stage.concurrency + prefetch - self.stats.in_flight
            if free <= 0 or (free < min_lease and self.stats.in_flight >= self.stage.concurrency):
                await anyio.sleep(0.005)
                continue
            # after a lease that deferred tasks of full lanes, lease whole batches to get past them quickly
            n = self.stage.lease_batch if walks else min(free, self.stage.lease_batch)
            if self._lane_lease:  # only tasks of lanes with room; the others stay queued in place (walk39 #1)
                quota, held_back = await self._lane_quota()
                if self._stop.is_set() or self._budget.is_set():
                    continue  # stopped while every lane was full
                tasks = await self.inq.lease_lanes(n, self.visibility_timeout_s, quota)
                if not tasks and self._shut_lanes and self._only_shut_lanes_left():
                    # review44a #3: nothing else to run here: hold the shut lanes' tasks (Held tasks), as every lease
                    # did before, so that a burst run sees its input drained and ends, releasing them untouched
                    tasks = await self.inq.lease_lanes(n, self.visibility_timeout_s,
                                                       {lane: self._shut_lanes.get(lane, 0) for lane in quota})
                if self._pacing:
                    self._lane_asked(quota, tasks, n, held_back)
            else:
                tasks = await self.inq.lease(n, self.visibility_timeout_s)
            if tasks and not (tasks := self._relet(tasks)):
                continue  # only tasks this runner is still on, leased again: lease on
            if not tasks:
                walks = 0
                if self._pacing and not self._lane_lease:  # nothing to lease: a lane with nothing here is dry
                    self._walk_end()  # (module docstring, "Lanes")
                if await self._input_exhausted():
                    # tasks it holds (held tasks, module docstring) go back to the input at its end: this
                    # process's own work, not "queued by another process" after the drain
                    self.stats.drained = not self._held
                    return
                await self._maybe_commit()
                await self._sleep_or_stop(self.poll_s)
                continue
            if lanes:
                n = len(tasks)
                if self._pacing and not self._lane_lease:
                    await self._walk_step(n)
                tasks = await self._admit(tasks)
                walks = 0 if len(tasks) == n else walks + 1
                if not tasks:
                    if walks >= WALK_LEASES:  # only tasks of full lanes ahead: wait until a lane frees a slot
                        self._lane_room.clear()
                        with anyio.move_on_after(min(1.0, self.poll_s * 2 ** min(walks - WALK_LEASES, 10))):
                            await self._lane_room.wait()
                    continue
            self._note_work_began()
            self.stats.note_leased(len(tasks))
            self._leases.add(tasks)
            for task in tasks:
                send.send_nowait(task)
            # let the workers start them before leasing again
            await anyio.sleep(0)

    async def _half_open(self, send: Any) -> None:
        """Watch mode, breaker open: wait out the cool-down (a stop ends it at once) and the tasks still in
        flight, then lease ONE task as the probe; its outcome closes or re-opens the breaker
        (:meth:`_probe_outcome`). One step per call; the lease loop calls it again until the breaker closes."""
        self.stats.blocked = True
        if self._probe is not None:  # the probe is in flight
            await self._sleep_or_stop(self.poll_s)
            return
        wait_s = (self.stats.next_probe_at or 0.0) - time.monotonic()
        if wait_s > 0:
            await self._sleep_or_stop(wait_s)
            return
        if self.stats.in_flight:  # tasks leased before the breaker opened have not ended yet
            await self._sleep_or_stop(self.poll_s)
            return
        await self._flush_refunds()  # nothing of ours in flight: the streak's tasks are all back in the queue
        tasks = await self.inq.lease(1, self.visibility_timeout_s)
        if tasks and not self._relet(tasks):
            return  # a task this runner is still on, leased again
        if not tasks:
            await self._maybe_commit()
            await self._sleep_or_stop(self.poll_s)
            return
        self._note_work_began()
        self._probe = tasks[0]
        if self._lanes is not None:
            self._lane_take(tasks[0])
        self.stats.note_leased(1)
        self._leases.add(tasks)  # worked on like any task: a slow probe must not lose its lease mid-request
        send.send_nowait(tasks[0])
        await anyio.sleep(0)

    def _note_work_began(self) -> None:
        """Before this runner hands its first leased task to a worker: the run's "work began" hook
        (``ctx.services[constants.SERVICE_WORK_BEGAN]``, set by the engine: it records it in the run's manifest
        entry), once per runner. A run killed before any runner got here changed nothing (review40b #5)."""
        if self._work_noted:
            return
        self._work_noted = True
        began = self.ctx.services.get(C.SERVICE_WORK_BEGAN)
        if callable(began):
            began()

    def _relet(self, tasks: list[Task]) -> list[Task]:
        """The tasks of ``tasks`` (just leased) to hand to workers: those a worker of this runner is still on, their
        old lease expired, are kept for that worker under the new lease instead (module docstring, "Leases taken
        again")."""
        fresh: list[Task] = []
        for t in tasks:
            if self._leases.relet(t):
                self.inq.current[t.key] = t.lease_id
                log.warning("stage %s: task %s was leased again while this process was still handling it (its lease "
                            "expired: the wall clock stepped forward past the visibility timeout of %g s, or the process "
                            "was stopped that long); kept under the new lease, not handled twice",
                            self.stage.name, t.key, self.visibility_timeout_s)
            else:
                fresh.append(t)
        return fresh

    def _probe_outcome(self, task: Task, exc: BaseException | None) -> bool:
        """Settle the breaker when ``task`` is the half-open probe (``exc``: its failure, None if it succeeded).

        A probe that failed unreachable re-opens the breaker with the cool-down doubled (up to
        ``probe_max_s``) and returns True: the caller releases it untouched. Any other outcome (the host
        answered, even with an error of its own) closes the breaker: the stage resumes. False for any other
        task, and for a probe abandoned by a stop request (no verdict).
        """
        if self._probe is None or task is not self._probe:
            return False
        self._probe = None
        if isinstance(exc, (Abandoned, TaskTimeout)):  # stopped, or cut by its ceiling: no verdict on the host
            return False
        hx = _unreachable_error(exc) if exc is not None else None
        if hx is not None:
            host = str(hx.host)
            last = str(getattr(hx, "last", "") or "")
            self.stats.unreachable[host] = (int(getattr(hx, "streak", 0) or 0), last)
            self.stats.unreachable_since.setdefault(host, time.time())
            self._cooldown_s = min(self.probe_max_s, self._cooldown_s * 2)
            self.stats.next_probe_at = time.monotonic() + self._cooldown_s
            log.warning("stage %s: host %s still unreachable (%s); next probe in %g s", self.stage.name, host,
                        unreachable_cause(last), self._cooldown_s)
            return True
        for host in self.stats.unreachable:
            self._unreachable_seen.discard(host)  # a new outage is logged again
            self.stats.host_ok_at[host] = time.time()  # its errors so far are resolved (status)
            log.warning("stage %s: host %s reachable again; stage %s resumed", self.stage.name, host,
                        self.stage.name)
        self.stats.unreachable.clear()
        self.stats.unreachable_since.clear()
        self.stats.blocked = False
        self.stats.next_probe_at = None
        self._cooldown_s = self.probe_after_s
        return False

    # -- lanes (module docstring, "Lanes") ----------------------------------------------------------------
    def _lane_take(self, task: Task) -> None:
        """Count ``task`` in its lane (no cap check: the half-open probe)."""
        lane = self.stage.lane_of(task)
        if lane in self._lane_busy:
            self._lane_busy[lane] += 1

    def _lane_dead(self, task: Task) -> None:
        """Count a dead-lettered ``task`` in its lane's ``lane_dead`` (a stage without lanes: nothing)."""
        if self._lanes is None:
            return
        lane = self.stage.lane_of(task)
        if lane in self.stats.lane_done:
            self.stats.lane_dead[lane] = self.stats.lane_dead.get(lane, 0) + 1
            self._lane_dead_run[lane] = self._lane_dead_run.get(lane, 0) + 1

    def _lane_done(self, task: Task) -> None:
        """``task`` left the stage: its lane has one slot more (waking a lease loop that waits for one)."""
        lane = self.stage.lane_of(task)
        busy = self._lane_busy.get(lane) if lane is not None else None
        if busy is not None:
            self._lane_busy[lane] = busy - 1
            self._lane_room.set()

    async def _admit(self, tasks: list[Task]) -> list[Task]:
        """The leased ``tasks`` whose lane has room (counted in it; a task without a lane always), in order. The
        others are given back to the queue unstarted (no attempt counted, :meth:`WorkQueue.release` with a
        delay): each at its lane's next slot (the lane's ``rate_per_s`` apart, between :data:`DEFER_MIN_S` and
        :data:`DEFER_MAX_S` from now, rounded up to :data:`DEFER_STEP_S`), grouped by delay."""
        lanes, busy, nxt = self._lanes or {}, self._lane_busy, self._lane_next
        admitted: list[Task] = []
        later: dict[float, list[Task]] = {}
        now = time.monotonic()
        pacing, seen, walk = self._pacing, self._lane_seen, self._walk
        by_lane = self._lane_lease
        paced = False
        for task in tasks:
            lane = self.stage.lane_of(task)
            spec = lanes.get(lane) if lane is not None else None
            if spec is None:
                admitted.append(task)
                continue
            if pacing:
                seen[lane] = walk  # met in this walk of the queue: not dry
                self._lane_seen_at[lane] = now  # ... nor for DRY_MIN_S s (review42b #1)
            # leased by lane, the quota already kept the lane from running ahead (_lane_quota)
            if busy[lane] < spec.cap and not (pacing and spec.work and not by_lane and self._ahead(lane, spec)):
                busy[lane] += 1
                if task.attempts and self._lane_retrying.get(lane):  # a retry back from its backoff
                    self._lane_retrying[lane] -= 1
                admitted.append(task)
            elif busy[lane] < spec.cap:  # paced: ahead of the other lanes' share of their work
                later.setdefault(PACED_DEFER_S, []).append(task)
                self._paced_at[lane] = now
                self.stats.paced += 1
                paced = True
            else:
                gap = 1.0 / spec.rate_per_s if spec.rate_per_s > 0 else 0.0
                slot = min(max(nxt[lane], now) + gap, now + DEFER_MAX_S)
                nxt[lane] = slot
                delay = min(DEFER_MAX_S, max(DEFER_MIN_S, math.ceil((slot - now) / DEFER_STEP_S) * DEFER_STEP_S))
                later.setdefault(delay, []).append(task)
        for delay, group in later.items():
            await self._safe(self.inq.release(group, delay_s=delay))
            self.stats.deferred += len(group)
        if pacing and not by_lane:  # leased by lane: _lane_asked did both
            if self.stats.lane_dry:  # a dry lane met again is not dry
                self.stats.lane_dry = frozenset(k for k in self.stats.lane_dry if seen.get(k) != walk)
            self._pace_stuck(now, admitted, paced)
        return admitted

    async def _lane_quota(self) -> tuple[dict[str, int], bool]:
        """Leasing by lane (module docstring, "Lanes"; walk39 #1): per lane, how many of its tasks the next lease may
        take (its room: cap less the tasks in hand; with pacing, no more than keep it from running ahead of the
        lowest share among the other lanes: :func:`pace_ahead`, task by task as :meth:`_admit` would), and whether
        pacing held back a lane that had room. Every lane full or held back: waits up to ``poll_s`` for a task to
        end first (a lane frees a slot), so the loop does not poll the queue for nothing."""
        quota, held_back = self._quota_now()
        if not any(quota.values()):
            self._lane_room.clear()
            with anyio.move_on_after(self.poll_s):
                await self._lane_room.wait()
            quota, held_back = self._quota_now()
        return quota, held_back

    def _quota_now(self) -> tuple[dict[str, int], bool]:
        """:meth:`_lane_quota` as things are now."""
        quota: dict[str, int] = {}
        held_back = False
        now = time.monotonic()
        self._shut_lanes = {}
        for lane, spec in (self._lanes or {}).items():
            k = max(0, spec.cap - self._lane_busy.get(lane, 0))
            if k and not self.stage.lane_leasable(lane):
                # review44a #3: a lane whose breaker is open (a refused key) gets none: leased, its tasks were only
                # held, the model's whole backlog out of every other process's reach (a host waited for in watch
                # mode stays leasable: its probe is one of its tasks that arrives)
                self._shut_lanes[lane] = k
                k = 0
            elif k and self._pacing and spec.work:
                low = self._lowest_other(lane, now)
                if low != math.inf:
                    taken, room = self._taken(lane), k
                    k = 0
                    while k < room and not pace_ahead(taken + k, spec.work, spec.cap, low):
                        k += 1
                    held_back = held_back or k == 0
            quota[lane] = k
        return quota, held_back

    def _only_shut_lanes_left(self) -> bool:
        """After a lease by lane that found nothing: whether only the shut lanes' tasks can be left for this runner (a
        burst run, no task in hand, nothing more to come from upstream), so it may hold them and end (review44a #3).
        Before that they stay queued: a process holding them would hide them from every other one."""
        return (self.burst and not self.stats.in_flight and not self._pending
                and (self.upstream_done is None or self.upstream_done.is_set()))

    def _lane_asked(self, quota: Mapping[str, int], tasks: Sequence[Task], n: int, held_back: bool) -> None:
        """After a lease by lane with pacing on (module docstring, "Lanes", dry lanes): a lane asked for tasks that
        got fewer, in a lease not cut at ``n``, had none more ready to take; a lane that got one was met. Updates
        ``stats.lane_dry`` and the safety net (``held_back``: pacing held back a lane with room)."""
        now = time.monotonic()
        got = Counter(self.stage.lane_of(t) for t in tasks)
        short = self._lane_short
        for lane, k in quota.items():
            if got.get(lane):
                short[lane] = 0
                self._lane_seen_at[lane] = now
            elif k > 0 and len(tasks) < n:
                short[lane] = short.get(lane, 0) + 1
        self.stats.lane_dry = frozenset(k for k, v in (self._lanes or {}).items() if v.work and self._dry(k, now))
        self._pace_stuck(now, list(tasks), held_back)

    def _pace_stuck(self, now: float, admitted: list[Task], paced: bool) -> None:
        """The safety net of pacing (module docstring, "Lanes"; fixpace42 #1): after :data:`PACE_STUCK_S` s in which
        leases found only tasks deferred by pacing (``paced``: this lease deferred some), nothing was admitted
        (``admitted``: this lease's) and no task of a lane was in hand, pacing is off for the rest of the run
        (logged once): a lane whose share stays behind with no task of it to take, where the dry-lane rule did not
        see it so, must not hold the others back for ever."""
        if admitted or any(self._lane_busy.values()):
            self._stuck_since = None
            return
        if not paced:
            return
        if self._stuck_since is None:
            self._stuck_since = now
        elif now - self._stuck_since >= PACE_STUCK_S:
            self._pacing = False
            self.stats.lane_dry = frozenset()
            shares = ", ".join(f"{k} {self._taken(k)}/{v.work}" for k, v in (self._lanes or {}).items() if v.work)
            log.warning("stage %s: for %g s every task leased was held back by the pacing rule and none was in hand "
                        "(tasks taken by this process / its work at the start: %s); pacing by each model's share of "
                        "its work is off for the rest of this run, each model now runs at its own limits",
                        self.stage.name, round(now - self._stuck_since, 1), shares)

    async def _walk_step(self, n: int) -> None:
        """After a lease of ``n`` tasks with pacing on (module docstring, "Lanes", dry lanes): count them in the walk
        of the input queue in progress, which ends once it has leased as many tasks as the input held ready at its
        start (:meth:`_walk_end`); a new walk starts at most every :data:`DRY_CHECK_S` s, and only once a task was
        deferred by pacing (one :meth:`WorkQueue.counts` read each)."""
        self._walked += n
        need = self._walk_need
        if need is not None:
            if self._walked - self._walk_from >= need:
                self._walk_end()
            return
        now = time.monotonic()
        if not self.stats.paced or now - self._walk_read_at < DRY_CHECK_S:
            return
        self._walk_read_at = now
        counts = await self.inq.counts()
        self._walk_from, self._walk_need = self._walked, max(0, int(counts.ready))

    def _walk_end(self) -> None:
        """A walk of the input queue ended: this runner leased as many tasks as it held ready at the walk's start, or
        a lease found nothing to lease. The next walk starts at the next :meth:`_walk_step` (its count read then);
        ``stats.lane_dry`` says which lanes are dry now (:meth:`_dry`)."""
        self._walk += 1
        self._walk_need = None
        now = time.monotonic()
        self.stats.lane_dry = frozenset(k for k, v in (self._lanes or {}).items() if v.work and self._dry(k, now))

    def _dry(self, lane: str, now: float) -> bool:
        """Whether paced ``lane`` ran dry (module docstring, "Lanes"; fixpace42 #1): none of its tasks in hand here,
        none deferred by this runner still due back (a full lane's slot, a pacing deferral), none it failed still
        waiting out its backoff, and :data:`DRY_WALKS` whole walks of the input queue and at least :data:`DRY_MIN_S`
        s passed without leasing one (review42b #1: the time floor, since empty polls end walks within a fraction of
        a second while another process defers the lane's tasks for a moment). Its tasks left, if any, are leased by
        another process or wait out a delay set elsewhere: this runner cannot take them, so the lane paces no
        other."""
        walks = self._lane_short.get(lane, 0) if self._lane_lease else self._walk - self._lane_seen.get(lane, -1)
        return (not self._lane_busy.get(lane) and self._retries_settled(lane, now)  # review42b #4: its own retries
                and walks > DRY_WALKS
                and now - self._lane_seen_at.get(lane, -math.inf) >= DRY_MIN_S
                and now >= self._lane_next.get(lane, 0.0) + DEFER_STEP_S
                and now - self._paced_at.get(lane, -math.inf) >= PACED_DEFER_S + DEFER_STEP_S)

    def _retries_settled(self, lane: str, now: float) -> bool:
        """Whether no task of ``lane`` this runner nacked still waits out its backoff (review42b #4). Once the last of
        them was due back :data:`DRY_MIN_S` s ago, those not back here were leased by another process (which then
        finishes or dead-letters them): they are no longer counted (review42c #1: a count that only this runner's
        own lease of the retry decreased kept the lane from ever running dry, and a paced run stalled 30 s until the
        safety net turned pacing off)."""
        if not self._lane_retrying.get(lane):
            return True
        if now < self._lane_retry_due.get(lane, math.inf) + DRY_MIN_S:
            return False
        self._lane_retrying[lane] = 0
        return True

    def _retry_delay_bound(self, task: Task, backoff: Mapping[str, float]) -> float:
        """The longest a task nacked now waits before it is ready again, s: the given ``backoff_s``, else the input
        queue's backoff after this failure (equal jitter: at most ``min(backoff_max_s, backoff_base_s *
        2**(attempts - 1))``; the queue defaults where it names none)."""
        if "backoff_s" in backoff:
            return float(backoff["backoff_s"])
        base = float(getattr(self.inq, "backoff_base_s", C.DEFAULT_BACKOFF_BASE_S))
        top = float(getattr(self.inq, "backoff_max_s", C.DEFAULT_BACKOFF_MAX_S))
        return min(top, base * 2.0 ** min(max(int(task.attempts), 0), 60))

    def _taken(self, lane: str) -> int:
        """Tasks of ``lane`` this run finished, dead-lettered, holds in hand or failed and will retry after its
        backoff (so a model whose calls keep failing does not hold the others back for its backoff delays)."""
        st = self.stats
        return (st.lane_done.get(lane, 0) + st.lane_dead.get(lane, 0) + self._lane_busy.get(lane, 0)
                + self._lane_retrying.get(lane, 0))

    def _ahead(self, lane: str, spec: Lane) -> bool:
        """Whether a paced ``lane`` is ahead of the other paced lanes that still have work and can run
        (:func:`pace_ahead`); a lane whose tasks were deferred by pacing less than :data:`PACED_DEFER_S` ago and
        that has none in hand cannot run until they come back, so it holds no one back meanwhile."""
        low = self._lowest_other(lane, time.monotonic())
        return low != math.inf and pace_ahead(self._taken(lane), spec.work, spec.cap, low)

    def _lowest_other(self, lane: str, now: float) -> float:
        """The lowest share of its work among the paced lanes other than ``lane`` that still have work and can run
        (:meth:`_ahead`); ``math.inf`` when there is none."""
        low = math.inf
        busy, paced_at = self._lane_busy, self._paced_at
        for other, o in (self._lanes or {}).items():
            if other == lane or not o.work:
                continue
            if not busy.get(other) and now - paced_at.get(other, -math.inf) < PACED_DEFER_S:
                continue  # its tasks sit out a pacing deferral, none in hand: it cannot take work now
            if self._dry(other, now):
                continue  # no task of it left here to take (done or leased elsewhere): it paces nobody
            if self._lane_dead_run.get(other, 0) >= FAILING_LANE_DEAD_RUN:
                continue  # its tasks only fail (dead-lettered in a row): it paces nobody (review44a #5)
            share = self._taken(other) / o.work
            if share < 1.0 and share < low and self.stage.lane_open(other):
                low = share
        return low

    async def _input_exhausted(self) -> bool:
        if not self.burst:
            return False
        if self.upstream_done is not None and not self.upstream_done.is_set():
            return False
        if self.stats.in_flight or self._pending:
            return False
        drained, busy_upstream, waited, unseen = await self._drain_check()
        if drained and busy_upstream is None and unseen:
            # fixstages45: a foreign upstream stage's ready tasks were let go because the view of the processes at
            # work (read up to 1 s ago) did not name it; a process that started since then (its manifest entry or,
            # on Redis, its owner record written after that read) and takes them up is in no such view, and this
            # stage ended beside it while its tasks were still on their way (walk45: the geocoder ended under a
            # second after the model caller's process started, its 1874 answers then left for nobody). Ending needs
            # the verdict of a view read after these counts: read it now, and all the counts again after it.
            drained, busy_upstream, waited, _ = await self._drain_check(fresh=True)
        if busy_upstream is None or not drained:
            self._waiting_since = None  # the wait the line speaks of is one unbroken wait
            return drained
        self._say_waiting(waited or busy_upstream[0], *busy_upstream[1:])
        return False

    async def _drain_check(self, *, fresh: bool = False) -> tuple[bool, tuple[Any, ...] | None, list[str], bool]:
        """One look at this runner's input and its foreign upstream inputs (:meth:`_input_exhausted`): ``(drained,
        busy_upstream, waited, unseen)``. ``drained``: nothing of the input ready, and nothing leased but this
        runner's held tasks; ``busy_upstream``: ``(stage, edge, ready tasks not taken up)`` of the first foreign
        upstream stage with work on its way here (None: none); ``waited``: the stages not taken up yet that the
        waiting line names; ``unseen``: a foreign upstream stage's input held ready tasks, none leased, and the
        view of the processes at work (:meth:`_views`) named no live process running it, so that view decided
        it was not busy. ``fresh``: read that view anew first (fixstages45), before any count."""
        if fresh:
            await self._views(fresh=True)
        # Each queue is read at its own moment, and work only moves downstream (a stage puts its outputs, then
        # acks its input): read upstream first, the own input last, so a task that moves from a foreign upstream
        # queue into this input between two reads is seen in the later one (own input first, it was in neither)
        busy_upstream: tuple[Any, ...] | None = None
        waited: list[str] = []  # stages not taken up yet, from the first one holding ready tasks on (review43e #2)
        unseen = False
        for name, q in self.foreign_upstream:  # another process at work upstream: its output is on the way here
            c = await q.counts()
            if c.ready and not c.leased:
                await self._note_upstream_stop(name)  # fixstagesbudget43: a stage the cost cap stopped: no wait
            taken = await self._upstream_taken_up(name, c)
            if waited:
                # review43e #2: a stage after one waited for (the pipeline's data-flow order) that no process has
                # taken up either: that work reaches this one through it too, so the line names both (the waits
                # for a busy stage are said only where no stage waits to be taken up)
                if not taken:
                    waited.append(name)
                continue
            if c.leased or (c.ready and name in await self._elsewhere()):
                busy_upstream = (name, q.name, 0)
                break
            unseen = unseen or bool(c.ready)  # ready, none leased, no live process of it in the view read
            if c.ready and not taken:
                # fixstages43: its work is queued and no process has taken it up since this one started (the
                # upstream process not started yet, e.g. started second by a scheduler): wait for one to start
                busy_upstream = (name, q.name, c.ready)
                waited.append(name)
        counts = await self.inq.counts()
        # held tasks stay leased by this runner until it ends (module docstring: held tasks); a runner that holds
        # some waits for no other process's leases: it ends with work left anyway, and its held tasks, released at
        # its end, are the others' to take (break30 #1: processes that each held tasks waited for each other's)
        drained = counts.ready == 0 and (counts.leased <= len(self._held) or bool(self._held))
        return drained, busy_upstream, waited, unseen

    async def _note_upstream_stop(self, name: str) -> None:
        """fixstagesbudget43: when foreign upstream stage ``name`` is not taken up yet (:meth:`_upstream_taken_up`)
        and ``upstream_stop`` says why no process can run it on (the campaign's cost cap stopped its last run and
        the cap leaves no room for its next call), count it taken up, so this process ends as before once its own
        input is drained instead of waiting for a process that would stop again at once; a warning line says so.
        Asked once per stage (the verdict reads manifest.json, the progress stream and the ledger): a process that
        takes the stage up later is seen as before."""
        if self._upstream_stop is None or name in self._taken_up or name in self._stop_asked:
            return
        self._stop_asked.add(name)
        reason = await self._upstream_stop(name)
        if reason:
            self._taken_up.add(name)
            log.warning("stage %s: not waiting for stage %s: %s", self.stage.name, name, reason)

    async def _note_upstream_base(self) -> None:
        """Record each foreign upstream input's done and leased counts at the runner's start (fixstages43,
        :meth:`_upstream_taken_up`); only where the rule is on (``stages_started``, burst mode)."""
        if self._stages_started is None or not self.burst:
            return
        for name, q in self.foreign_upstream:
            c = await q.counts()
            # the first runner's start stands (fixstages44 #2: shared; a later reading may already count a process
            # elsewhere at work)
            self._upstream_base.setdefault(name, c.done)
            self._upstream_leased_low[name] = min(self._upstream_leased_low.get(name, c.leased), c.leased)

    async def _upstream_taken_up(self, name: str, c: Any) -> bool:
        """Whether foreign upstream stage ``name`` (its input's counts ``c``) has been taken up by another process
        since this runner started (``stages_started`` in the class docstring); True where the rule is off. Once
        true it stays true: a stage taken up and then ended (its host down, the budget spent) leaves its work for a
        later run, as before, rather than keeping this process waiting for a process that already ran it.

        The evidence: ``stages_started`` or ``stages_elsewhere`` names it, its input's done count grew, or more of
        its tasks are leased than the fewest seen leased since this runner started (review43e #3: not its dead
        count, which grows when another process's plan sets tasks aside, and not the leases outstanding at the
        start, which may be a crashed process's until they expire)."""
        if self._stages_started is None or name in self._taken_up:
            return True
        base = self._upstream_base.setdefault(name, c.done)
        low = min(self._upstream_leased_low.get(name, c.leased), c.leased)
        self._upstream_leased_low[name] = low
        started, elsewhere = await self._views()
        if c.leased > low or c.done > base or name in elsewhere or name in started:
            self._taken_up.add(name)
            return True
        if not c.ready:
            return False  # nothing of it to wait for yet: the bound's clock waits too
        now = time.monotonic()
        began = self._start_wait_began.setdefault(name, now)
        if now - began >= self.start_wait_s:  # GEOAGENT_UPSTREAM_WAIT_S: waited long enough
            if self.start_wait_s > 0:
                log.warning("stage %s: no process took up stage %s within %g s (%s): this process ends when its "
                            "own work is done, that stage's work left for a process that runs it", self.stage.name,
                            name, self.start_wait_s, "GEOAGENT_UPSTREAM_WAIT_S")
            self._taken_up.add(name)
            return True
        return False

    def _say_waiting(self, stage: str | Sequence[str], edge: str, not_started: int = 0) -> None:
        """A warning line saying this runner waits (with ``--no-live`` nothing else shows that the process is alive
        and why it goes on), once its input has stayed drained for :data:`WAIT_SAID_AFTER_S` s on end: once per
        runner while ``stage`` (a name), a stage upstream that another process runs, still works (tasks of its
        input ``edge`` leased or queued); or (``not_started``: the ready tasks on ``edge``, the input of the first
        of ``stage``, names) while the stages ``stage`` wait for a process to take them up (fixstages43), once per
        stage: the line names them all in one ``--stages a,b`` command (review43e #2: it named the first only, and
        a process of that one left the next stage's work to a downstream process that waited on silently), and a
        stage waited for later, once those before it were taken up, gets its own line :data:`WAIT_SAID_AFTER_S` s
        after that."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        if not not_started:
            if self._wait_said or now - self._waiting_since < WAIT_SAID_AFTER_S:
                return
            self._wait_said = True
            log.warning("stage %s: its input is drained; waiting for stage %s, which another process of the campaign "
                        "runs (tasks of its input, edge %s, are in flight or queued there): this process ends when "
                        "that work has come through; Ctrl-C stops it, nothing is lost", self.stage.name, stage, edge)
            return
        names = [stage] if isinstance(stage, str) else list(stage)
        for n in names:
            self._start_waited_at.setdefault(n, now)
        new = [n for n in names if n not in self._start_wait_said]
        if not new or now - max(self._waiting_since, min(self._start_waited_at[n] for n in new)) < WAIT_SAID_AFTER_S:
            return
        self._start_wait_said.update(names)
        src = getattr(self.ctx.services.get("config"), "source", None)  # the campaign's file, as given
        config = src if isinstance(src, str) and src and not src.startswith("<") else "CONFIG"
        where = "its input" if len(names) == 1 else f"the input of stage {names[0]}"
        log.warning("stage %s: its input is drained; waiting for a process that runs %s %s to start (%d tasks "
                    "ready on %s, edge %s, and no process of the campaign has taken any since this one started): "
                    "`run.py run %s --stages %s` (or `run.py run %s`, every stage) takes them; this process ends "
                    "once that work has come through; Ctrl-C stops it, nothing is lost",
                    self.stage.name, "stage" if len(names) == 1 else "stages", ", ".join(names), not_started,
                    where, edge, config, ",".join(names), config)

    async def _elsewhere(self) -> Collection[str]:
        """The stages other live processes of the campaign run (``stages_elsewhere``; :meth:`_views`)."""
        return (await self._views())[1]

    async def _views(self, *, fresh: bool = False) -> tuple[Collection[str], Collection[str]]:
        """``(stages_started(), stages_elsewhere())``: the stages another process has run since this one started,
        and those other live processes run now (each () when not given), read together at most once a second
        (``fresh``: now).

        fixstages45: one snapshot, the started view read first. Each had a cache of its own, refreshed at its own
        moment, and a process whose manifest entry came between the two reads was in the started view (its stage
        taken up, :meth:`_upstream_taken_up`) and not in the live one (its ready tasks then no work on its way):
        for up to a second a downstream runner ended beside an upstream process that had not leased yet (walk45,
        2 runs in 5 under load). Read in that order, a process the started view names is in the live view too,
        unless it ended or stopped that stage in between.

        The reads run in a worker thread: they read files and, on Redis, the server (owner records) with the
        blocking client, which held the event loop for as long as a hung server took to answer (review44e #3:
        20-60 s, the model calls, Ctrl-C and the live display of the process frozen meanwhile)."""
        if self._stages_started is None and self._stages_elsewhere is None:
            return (), ()
        now = time.monotonic()
        cached = self._views_cache
        if fresh or cached is None or now - cached[0] >= 1.0:
            cached = (now, *await anyio.to_thread.run_sync(self._read_views))
            self._views_cache = cached
        return cached[1], cached[2]

    def _read_views(self) -> tuple[Collection[str], Collection[str]]:
        """:meth:`_views`' read (a worker thread): the started view, then the live one."""
        started = self._stages_started() if self._stages_started is not None else ()
        return started, self._stages_elsewhere() if self._stages_elsewhere is not None else ()

    async def _sleep_or_stop(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._stop.wait()

    # -- workers --------------------------------------------------------------------------------
    async def _worker(self, recv: Any) -> None:
        """One slot: handle leased tasks one at a time until the stream is closed and drained."""
        async with recv:
            async for task in recv:
                await self._process(task)

    async def _batch_worker(self, recv: Any) -> None:
        """For ``batched`` stages: take every waiting task (up to ``lease_batch``) and handle them at once."""
        async with recv:
            async for task in recv:
                tasks = [task]
                while len(tasks) < self.stage.lease_batch:
                    try:
                        tasks.append(recv.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                await self._process_batch(tasks)

    async def _process(self, task: Task) -> None:
        committed = False
        try:
            if self._stop.is_set() or self._budget.is_set() or (self.stats.unreachable and task is not self._probe):
                # leased ahead but not started before the stop: give it back untouched
                await self._safe(self.inq.release(task))
                self.stats.released += 1
                committed = True
                return
            # One cancel scope: the task's ceiling, which the breaker opening also cancels in watch mode
            # (_breaker_open marks it in _cut_scopes), so the cause of a cancellation is told apart below.
            try:
                with self._ceiling([task]) as ceiling:
                    self._cuttable.add(ceiling)
                    try:
                        outputs = self._checked(await self.stage.handle(task, self.ctx))
                    finally:
                        self._cuttable.discard(ceiling)
                        cut = ceiling in self._cut_scopes
                        self._cut_scopes.discard(ceiling)
                if ceiling.cancelled_caught and not cut:  # hung past its ceiling (module docstring, "Task ceiling")
                    raise self._timeout(task)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # noqa: BLE001 - its class decides the task's fate
                if self._probe_outcome(task, exc):  # a failed half-open probe: back untouched
                    await self._safe(self.inq.release(task))
                    self.stats.released += 1
                else:
                    await self._fail(task, exc)
                committed = True
                return
            if cut and ceiling.cancelled_caught:  # cut by the breaker opening: back untouched
                await self._safe(self.inq.release(task))
                self.stats.released += 1
                committed = True
                return
            self._probe_outcome(task, None)
            if self._lanes is not None:
                lane = self.stage.lane_of(task)
                if lane in self.stats.lane_done:
                    self.stats.lane_done[lane] += 1
                    self._lane_dead_run[lane] = 0  # answered: a failing lane paces again (review44a #5)
            self._pending.append((task, outputs))
            committed = True
        finally:
            if self._probe is task:  # cancelled (stop): no verdict
                self._probe = None
            if self._lanes is not None:
                self._lane_done(task)
            self.stats.in_flight -= 1
            self._leases.drop((task,))
            if not committed:
                # cancelled mid-flight (shutdown after grace): give the task back untouched
                with anyio.CancelScope(shield=True):
                    await self._safe(self.inq.release(task))
                    self.stats.released += 1
        await self._maybe_commit()

    async def _process_batch(self, tasks: list[Task]) -> None:
        done = 0  # tasks whose fate is settled (from the front of ``tasks``)
        try:
            if self._stop.is_set() or self._budget.is_set() or (
                    self.stats.unreachable and not any(t is self._probe for t in tasks)):
                for task in tasks:
                    await self._safe(self.inq.release(task))
                    self.stats.released += 1
                    done += 1
                return
            try:
                with self._ceiling(tasks) as ceiling:
                    results = list(await self.stage.handle_batch(tasks, self.ctx))
                if ceiling.cancelled_caught:  # hung past its ceiling (module docstring, "Task ceiling")
                    results = [self._timeout(t) for t in tasks]
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # noqa: BLE001 - the whole batch shares the failure
                results = [exc] * len(tasks)
            if len(results) != len(tasks):
                err = RuntimeError(f"stage {self.stage.name}: handle_batch returned {len(results)} results for {len(tasks)} tasks")
                results = [err] * len(tasks)
            for task, res in zip(tasks, results):
                if self._probe_outcome(task, res if isinstance(res, BaseException) else None):
                    await self._safe(self.inq.release(task))  # a failed half-open probe: back untouched
                    self.stats.released += 1
                elif isinstance(res, BaseException):
                    await self._fail(task, res if isinstance(res, Exception) else RuntimeError(_short(res)))
                else:
                    try:
                        outputs = self._checked(res)
                    except PermanentFailure as exc:
                        await self._fail(task, exc)
                    else:
                        self._pending.append((task, outputs))
                done += 1
        finally:
            if any(t is self._probe for t in tasks):  # cancelled (stop): no verdict
                self._probe = None
            self.stats.in_flight -= len(tasks)
            self._leases.drop(tasks)
            if done < len(tasks):
                with anyio.CancelScope(shield=True):
                    for task in tasks[done:]:
                        await self._safe(self.inq.release(task))
                        self.stats.released += 1
        await self._maybe_commit()

    def _checked(self, outputs: Any) -> list[Message]:
        """The task's output messages as a list of ``(key, payload)``; a malformed result fails the task.

        Raises
        ------
        PermanentFailure
            ``outputs`` is not a list of ``(non-empty str key, dict payload)`` pairs (a stage bug, or text
            from a model that a stage passed on unchecked): that task is dead-lettered, not its commit group.
        """
        if not outputs:
            return []
        if not isinstance(outputs, (list, tuple)):
            raise PermanentFailure(f"stage {self.stage.name} returned {type(outputs).__name__}, not a list of messages")
        for m in outputs:
            if not (isinstance(m, (tuple, list)) and len(m) == 2 and isinstance(m[0], str) and m[0]
                    and isinstance(m[1], dict)):
                raise PermanentFailure(f"stage {self.stage.name} returned an invalid message {_short(m)}: "
                                       "expected a (non-empty str key, dict payload) pair")
        return [(m[0], m[1]) for m in outputs]

    async def _fail(self, task: Task, exc: BaseException) -> None:
        """Decide a failed task's fate from its exception (see :mod:`geoagent.runtime.stage`).

        Raises
        ------
        redis.RedisError
            ``exc`` itself when it is the Redis server's refusal (:func:`refused_by_server`): it ends the run, the
            task goes back untouched (the caller's clean-up) instead of being retried into a dead letter.
        """
        if refused_by_server(exc):
            raise exc
        if isinstance(exc, Held):
            if task.key not in self._held:
                reason = _reason(exc)
                self.stats.note_error(reason, error_host(exc, reason), dedupe=True)
            # a re-leased held task (its old lease expired) replaces the stale lease
            self._held[task.key] = Task(task.key, {}, task.attempts, task.lease_id)
            self.stats.held = len(self._held)
            tripped = getattr(exc, "tripped_streak", None)  # the model caller's host breaker opened on it
            if tripped is not None and self._trip(tripped):
                await self._flush_refunds()
        elif isinstance(exc, Deferred):
            # nothing sent, nothing paid, and it cannot go before a pause ends (a host's long Retry-After): back to
            # the queue for after it, no attempt counted; it holds no lease (nor reservation) meanwhile
            await self._safe(self.inq.release(task, delay_s=max(0.0, float(getattr(exc, "delay_s", 0.0) or 0.0))))
            self.stats.released += 1
        elif isinstance(exc, Abandoned):
            # given up unstarted after a stop request: back to the queue untouched (no attempt counted)
            await self._safe(self.inq.release(task))
            self.stats.released += 1
        elif isinstance(exc, BudgetStop):
            self._budget.set()
            # not among the stage's real errors (StageStats.budget_refusals)
            self.stats.note_refusal(_reason(exc), getattr(exc, "fix", None))
            await self._safe(self.inq.release(task))
            self.stats.released += 1
        elif isinstance(exc, (PermanentFailure, PermanentHTTPError)):
            reason = dead_reason(exc, task)  # its own reason (and a pause of the delivery before, if any)
            await self._safe(self.inq.dead_letter(task, reason))
            self.stats.dead += 1
            self._lane_dead(task)
            if isinstance(exc, Missing):
                self.stats.missing += 1
            self._note_error(reason, exc, dead=True)
        elif (hx := _unreachable_error(exc)) is not None and self._breaker_open(hx):
            # the host cannot be reached: back to the queue untouched, the stage stops (module docstring)
            await self._safe(self.inq.release(task))
            self.stats.released += 1
            if self._trip(_charged_streak(hx)):  # the attempts its streak charged are given back
                await self._flush_refunds()
        else:  # any other failure is retried
            # its last delivery ([queue] max_attempts): the reason is the dead letter's (a pause reads as the failure
            # it is, dead_reason); the queue decides, this only words it
            reason = dead_reason(exc, task) if self._last_delivery(task) else _reason(exc)
            streak = _charged_streak(exc)
            charge = None
            if streak is not None and self._by_charge:  # an unreachable failure: its charge id, for the refund
                self._charge_seq += 1
                charge = f"{self._charge_token}.{self._charge_seq}"
            # a failure that says when to come back (a host's long Retry-After): redelivered after that delay
            delay = getattr(exc, "retry_after_s", None) if getattr(exc, "paused", False) else None
            backoff = {"backoff_s": float(delay)} if isinstance(delay, (int, float)) and delay >= 0 else {}
            state = await self._safe(self.inq.nack(task, reason, **backoff) if charge is None
                                     else self.inq.nack(task, reason, charge=charge, **backoff))
            self.stats.failed += 1
            if state == "dead":
                self.stats.dead += 1
                self._lane_dead(task)
            elif self._lanes is not None:  # taken, coming back after its backoff: counts as taken in the pacing
                lane = self.stage.lane_of(task)
                if lane in self._lane_retrying:
                    self._lane_retrying[lane] += 1
                    self._lane_retry_due[lane] = max(self._lane_retry_due.get(lane, -math.inf),
                                                     time.monotonic() + self._retry_delay_bound(task, backoff))
            self._note_error(reason, exc, dead=state == "dead")
            log.debug("stage %s: task %s failed: %s", self.stage.name, task.key, reason)
            if streak is not None and state is not None and self._charge(streak, task, reason, state == "dead",
                                                                          charge):
                await self._flush_refunds()  # its streak already opened a breaker: refunded at once

    def _last_delivery(self, task: Task) -> bool:
        """Whether a nack of ``task`` now dead-letters it: its failed attempts so far plus this one reach the input
        queue's ``max_attempts`` (a queue without that attribute: never known, False)."""
        limit = getattr(self.inq, "max_attempts", None)
        return isinstance(limit, int) and not isinstance(limit, bool) and int(task.attempts) + 1 >= limit

    def _breaker_open(self, hx: Any) -> bool:
        """Whether ``hx`` (an unreachable ``RetriesExhausted``) finds its host's breaker open, opening it when
        the host's streak reached ``unreachable_after`` (logged once, as a warning)."""
        host = str(hx.host)
        if host in self.stats.unreachable:
            return True
        streak = int(getattr(hx, "streak", 0) or 0)
        last = str(getattr(hx, "last", "") or "")
        if streak < self.unreachable_after:
            if host not in self._unreachable_seen:
                self._unreachable_seen.add(host)
                log.warning("stage %s: host %s unreachable (%s); the task will be retried, and the stage stops if "
                            "%d requests in a row cannot reach the host.", self.stage.name, host,
                            unreachable_cause(last), self.unreachable_after)
            return False
        self.stats.unreachable[host] = (streak, last)
        self.stats.unreachable_since.setdefault(host, time.time())
        self.stats.blocked = True
        if getattr(self.stage, "cancel_on_stop", False):
            # free lookups: stop the ones in flight now (released untouched); in watch mode one by one, the
            # stage itself goes on (half-open)
            if self.burst:
                self._cut.set()
            else:
                for scope in list(self._cuttable):
                    self._cut_scopes.add(scope)
                    scope.cancel()
        if not self.burst:  # watch mode: half-open after a cool-down (module docstring)
            self._cooldown_s = self.probe_after_s
            self.stats.next_probe_at = time.monotonic() + self._cooldown_s
            self.stats.note_error(f"host {host} unreachable ({unreachable_cause(last)} {_in_a_row(streak)}): "
                                  f"stage waiting for it, probing again in {self._cooldown_s:g} s", host)
            log.warning("stage %s: host %s unreachable (%s %s; last: %s): the stage waits for it, next probe in "
                        "%g s", self.stage.name, host, unreachable_cause(last), _in_a_row(streak), last[:200],
                        self._cooldown_s)
            return True
        self.stats.note_error(f"host {host} unreachable ({unreachable_cause(last)} {_in_a_row(streak)}): "
                              "stage stopped, its tasks left queued", host)
        log.warning("stage %s: host %s unreachable (%s %s; last: %s): the stage stops, its queued tasks stay for a "
                    "re-run", self.stage.name, host, unreachable_cause(last), _in_a_row(streak), last[:200])
        return True

    # -- refunds (module docstring, "Refunds") ------------------------------------------------------
    def _charge(self, streak: tuple[str, int], task: Task, reason: str, dead: bool, charge: str | None = None) -> bool:
        """Record that the nack of ``task`` (an unreachable failure of ``streak`` = ``(host, streak id)``) charged
        it one attempt (``dead``: and dead-lettered it with ``reason``), under the charge id ``charge`` when the
        queue records them (else the refund is by expected count). Only each host's latest streak is kept (a
        newer one means the host answered in between: the older one never opened the breaker). Returns True when
        the streak already opened a breaker, so the refund is due at once."""
        host, sid = streak
        cur = self._charged.get(host)
        if cur is None or cur[0] < sid:
            cur = self._charged[host] = (sid, {})
        elif cur[0] > sid:  # a late failure of an older streak
            if streak not in self._tripped:
                return False
            cur = (sid, {})
        prev = cur[1].get(task.key)
        if charge is not None:
            cur[1][task.key] = Refund.of_charges(task.key, (*(prev.charges if prev is not None else ()), charge),
                                                 reason if dead else (prev.dead_reason if prev is not None else None))
        else:
            cur[1][task.key] = Refund(task.key, (prev.attempts if prev is not None else 0) + 1, task.attempts + 1,
                                      reason if dead else None)
        if streak in self._tripped:
            self._due(host, cur[1])
            return True
        return False

    def _trip(self, streak: tuple[str, int] | None) -> bool:
        """``streak`` opened a breaker: the attempts its nacks charged become due for a refund. Returns True when
        there is something to refund."""
        if streak is None:
            return False
        self._tripped.add(streak)
        host, sid = streak
        cur = self._charged.get(host)
        if cur is not None and cur[0] == sid:
            self._due(host, cur[1])
        return bool(self._refunds_due)

    def _due(self, host: str, charged: dict[str, Refund]) -> None:
        """Move ``charged`` (emptied) to the refunds due; a key already due (another streak) adds up."""
        for key, r in charged.items():
            old = self._refunds_due.get(key)
            if old is not None and (old[1].charges or r.charges):
                r = Refund.of_charges(key, dict.fromkeys((*old[1].charges, *r.charges)),
                                      r.dead_reason or old[1].dead_reason)
            elif old is not None:
                r = Refund(key, old[1].attempts + r.attempts, max(old[1].expected, r.expected),
                           r.dead_reason or old[1].dead_reason)
            self._refunds_due[key] = (host, r)
        charged.clear()

    async def _flush_refunds(self, final: bool = False) -> None:
        """Apply the refunds due (:meth:`~geoagent.runtime.queue.WorkQueue.refund_attempts`): tasks still
        leased (by this runner, e.g. held or in flight, or by another worker) wait for the next flush; ``final``
        (the stage ends, everything of ours released): tried once more, then dropped. Logged as a warning per
        host: attempts refunded, dead-lettered tasks revived."""
        if not self._refunds_due:
            return
        due = dict(self._refunds_due)
        try:
            result = await self.inq.refund_attempts([r for _, r in due.values()])
        except Exception:  # noqa: BLE001 - a refund must never break the stage; the attempts stay charged
            log.exception("stage %s: refunding attempts failed", self.stage.name)
            result = None
        if result is None:  # the backend cannot refund (or failed): nothing to wait for
            self._refunds_due.clear()
            return
        keep = set() if final else set(result.leased)
        per_host: dict[str, list[int]] = {}
        for key in [*result.refunded, *result.revived]:
            host, r = due[key]
            # what the queue says it gave back (else, by expected count, what the compare-and-set left off)
            n = result.given.get(key, r.attempts if r.expected is None else min(r.attempts, r.expected))
            got = per_host.setdefault(host, [0, 0, 0])
            got[0] += n
            got[1] += 1
            self.stats.refunded_attempts += n
        for key in result.revived:
            per_host[due[key][0]][2] += 1
            self.stats.revived += 1
        # keep what waits for a lease, and what was added or merged meanwhile (another flush's late charges)
        self._refunds_due = {k: v for k, v in self._refunds_due.items() if k in keep or due.get(k) is not v}
        for host, (n, tasks, revived) in per_host.items():
            log.warning("stage %s: host %s was down: refunded %s that its unreachable failures had charged to %s "
                        "before the breaker opened%s", self.stage.name, host, _count(n, "queue attempt"),
                        _count(tasks, "task"),
                        f"; revived {_count(revived, 'dead-lettered task')} (ready again)" if revived else "")

    def unreachable_lines(self, left: int | None = None) -> list[str]:
        """One line per host whose unreachable breaker opened (empty if none): which host, why, what to check
        (:meth:`Stage.unreachable_hint`), how many tasks of the input edge are left queued (``left``, when
        known) and that a re-run resumes."""
        lines = []
        for host, (n, last) in self.stats.unreachable.items():
            hint = ""
            hint_of = getattr(self.stage, "unreachable_hint", None)
            if hint_of is not None:
                try:
                    hint = hint_of(host) or ""
                except Exception:  # noqa: BLE001 - a hint must not break the report
                    hint = ""
            queued = f"{left} {self.stage.input_edge} left queued; " if left is not None else ""
            lines.append(f"{self.stage.name}: host {host} unreachable ({unreachable_cause(last)} {_in_a_row(n)}); check {hint or 'the URL configured for it'} / the network; {queued}"
                         "re-run the same command to resume")
        return lines

    async def _release_resumed(self) -> None:
        """Release the held tasks the stage says may run now (:meth:`Stage.resumed_holds`), untouched, so they
        are leased again (module docstring, "Held tasks")."""
        keys = getattr(self.stage, "resumed_holds", None)
        try:
            keys = keys() if keys is not None else None
        except Exception:  # noqa: BLE001 - a stage's hook must not break the lease loop
            log.exception("stage %s: resumed_holds failed", self.stage.name)
            return
        tasks = [self._held.pop(k) for k in (keys or ()) if k in self._held]
        if not tasks:
            return
        self.stats.held = len(self._held)
        stale: list[str] = []
        try:
            await self.inq.release(tasks)
        except StaleLease as exc:  # expired meanwhile: leased again (here or elsewhere), nothing to give back
            stale = list(getattr(exc, "stale_keys", None) or [])
        self.stats.released += len(tasks) - len(stale)
        await self._flush_refunds()  # refunds that waited for these leases to end

    async def _release_held(self) -> None:
        """Release every held task untouched (a lease that expired meanwhile is someone else's now)."""
        if not self._held:
            return
        held, self._held = list(self._held.values()), {}
        stale: list[str] = []
        try:
            await self.inq.release(held)
        except StaleLease as exc:
            stale = list(getattr(exc, "stale_keys", None) or [])
        self.stats.released += len(held) - len(stale)

    def _note_error(self, reason: str, exc: BaseException | None = None, *, dead: bool = False) -> None:
        self.stats.note_error(reason, error_host(exc, reason), dead=dead)
        self.stats.error_reasons[reason.split(":", 1)[0]] += 1

    async def _safe(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except StaleLease:
            # our lease expired and the task went to someone else; they own it now
            log.warning("stage %s: stale lease ignored", self.stage.name)
            return None

    # -- commits --------------------------------------------------------------------------------
    async def _maybe_commit(self) -> None:
        if len(self._pending) >= self.commit_every or (
            self._pending and time.monotonic() - self._last_commit >= self.commit_interval_s
        ):
            await self._commit()

    async def _commit_ticker(self) -> None:
        while True:
            await anyio.sleep(self.commit_interval_s)
            await self._maybe_commit()
            if time.monotonic() - self._pace_at >= 1.0:
                self._note_pace()

    async def _drop_unencodable(self, batch: list[tuple[Task, list[Message]]]) -> list[tuple[Task, list[Message]]]:
        """Fail (dead-letter) the tasks whose outputs cannot be encoded as JSON; return the others."""
        keep: list[tuple[Task, list[Message]]] = []
        for task, outs in batch:
            try:
                for _, payload in outs:
                    orjson.dumps(payload)
            except (TypeError, ValueError) as exc:
                await self._fail(task, PermanentFailure(f"stage {self.stage.name} output cannot be stored: {exc}"))
            else:
                keep.append((task, outs))
        return keep

    async def _commit(self) -> None:
        """Put the outputs of finished tasks, then ack those tasks (outputs first: crash-safe order)."""
        async with self._commit_lock:
            if not self._pending:
                return
            batch, self._pending = self._pending, []
            with anyio.CancelScope(shield=True):
                messages = [m for _, outs in batch for m in outs]
                if messages:
                    if self.outq is None:
                        raise RuntimeError(f"stage {self.stage.name} produced output but has no output edge")
                    try:
                        await self.outq.put_many(messages)
                    except (TypeError, ValueError):
                        # a payload the queue cannot encode (e.g. a lone surrogate from model text): fail
                        # only the tasks that produced one, commit the rest of the group
                        batch = await self._drop_unencodable(batch)
                        messages = [m for _, outs in batch for m in outs]
                        if messages:
                            await self.outq.put_many(messages)
                tasks = [t for t, _ in batch]
                if not tasks:
                    return
                try:
                    await self.inq.ack(tasks)
                except StaleLease as exc:
                    # the still-valid leases were acked; the stale ones expired and now belong to another
                    # worker, whose keyed outputs make the duplicate harmless
                    stale = getattr(exc, "stale_keys", None)
                    log.warning("stage %s: %s stale lease(s) at ack", self.stage.name, len(stale) if stale else "some")
                self.stats.record_done(len(tasks))
                self._last_commit = time.monotonic()
            # the stage's own periodic work (aggregators rewrite their live report; they rate-limit it too)
            if time.monotonic() - self._last_flush >= self.flush_interval_s:
                self._last_flush = time.monotonic()
                await self.stage.flush(self.ctx)


class _CurrentLeases:
    """A stage runner's input queue whose ``ack``, ``nack``, ``release`` and ``dead_letter`` settle each task under its
    newest lease (module docstring, "Leases taken again"); everything else is the queue's own.

    ``current`` maps a task key to the lease id the runner took again for the worker still on that task
    (:meth:`StageRunner._relet`); a task named with its older lease id is sent with that one, and the entry goes
    once the task is settled. Empty (the usual case), every call goes straight to the queue.
    """

    def __init__(self, queue: WorkQueue) -> None:
        self._queue = queue
        self.current: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)

    def _newest(self, task: Task) -> Task:
        lease_id = self.current.pop(task.key, None)
        return task if lease_id is None or lease_id == task.lease_id else dataclasses.replace(task, lease_id=lease_id)

    def _all_newest(self, tasks: Task | Any) -> Any:
        if not self.current:
            return tasks
        return self._newest(tasks) if isinstance(tasks, Task) else [self._newest(t) for t in tasks]

    async def ack(self, tasks: Any) -> None:
        await self._queue.ack(self._all_newest(tasks))

    async def release(self, tasks: Any, **kwargs: Any) -> None:
        await self._queue.release(self._all_newest(tasks), **kwargs)

    async def nack(self, task: Task, reason: str, **kwargs: Any) -> Any:
        return await self._queue.nack(self._all_newest(task), reason, **kwargs)

    async def dead_letter(self, task: Task, reason: str) -> None:
        await self._queue.dead_letter(self._all_newest(task), reason)


def _short(obj: Any, limit: int = 80) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_HOST_IN_TEXT = re.compile(r"\bhost (\[[0-9A-Fa-f:.]+\](?::\d+)?|[A-Za-z0-9_.-]+(?::\d+)?)")
_URL_IN_TEXT = re.compile(r"\bhttps?://[^\s/?#'\"]+")


#: a refused credential (HTTP 401/403, "authentication failed"): about the key, not the host's health
_AUTH_IN_TEXT = re.compile(r"\b(?:HTTP|http) 40[13]\b|authentication failed|token refused", re.IGNORECASE)


def error_host(exc: BaseException | None, reason: str = "") -> str | None:
    """The host (:func:`geoagent.runtime.http.host_key`) whose trouble a task's failure reports, or None, so
    that the host answering later resolves it (:func:`split_resolved_errors`): the ``host`` or ``url`` of the
    exception or of one it was raised from (``raise ... from None`` hides its context, as in a traceback), the
    host of its ``unreachable_streak``, else the first ``host H`` or URL in ``reason`` (the stored text, e.g.
    ``"CallFailed: host 127.0.0.1:8001 unreachable ..."``, ``"... 3 attempts to https://h/x failed"``).
    None for a refused credential (HTTP 401/403, a model's authentication breaker, the crawl's Mapillary token:
    the host answering other calls says nothing about that key) and for a held task (:class:`Held`) that names
    no host (only the model caller's unreachable-host hold, ``HostStop``, does)."""
    from geoagent.runtime.http import host_key

    if _AUTH_IN_TEXT.search(reason or "") or (isinstance(exc, Held) and not getattr(exc, "host", None)):
        return None
    seen: set[int] = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if int(getattr(e, "status", 0) or 0) in (401, 403):
            return None
        host = getattr(e, "host", None)
        if isinstance(host, str) and host:
            return host
        streak = getattr(e, "unreachable_streak", None)
        if isinstance(streak, tuple) and streak and isinstance(streak[0], str) and streak[0]:
            return streak[0]
        url = getattr(e, "url", None)
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return host_key(url) or None
        e = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
    m = _HOST_IN_TEXT.search(reason or "")
    if m:
        return m.group(1)
    m = _URL_IN_TEXT.search(reason or "")
    return (host_key(m.group(0)) or None) if m else None


def split_resolved_errors(stats: StageStats, answered_at: dict[str, float]) -> tuple[list[str], list[dict[str, Any]]]:
    """``(still open, resolved)``: the stage's ``last_errors`` split by whether the host each concerns answered a
    request after it (``answered_at``: host -> latest successful answer, Unix time s: the HTTP client's
    ``last_ok_at``; merged with the hosts whose breaker closed, ``stats.host_ok_at``). A resolved error is
    ``{"error": reason, "host": H, "answered_at": T}``. Errors of no host, and errors that dead-lettered a task
    (it stays missing whatever its host does since), stay open."""
    open_: list[str] = []
    resolved: list[dict[str, Any]] = []
    for reason in stats.last_errors:
        at, host, dead = stats.error_info.get(reason, (None, None, False))
        ok = max(answered_at.get(host, 0.0) or 0.0, stats.host_ok_at.get(host, 0.0)) if host else 0.0
        if host and at is not None and not dead and ok > at:
            resolved.append({"error": reason, "host": host, "answered_at": round(ok, 3)})
        else:
            open_.append(reason)
    return open_, resolved


def eta_s(pending: int, rate_per_s: float) -> float | None:
    """Seconds left at the current rate, or None when the rate is zero (shape: scalar, seconds)."""
    if pending <= 0:
        return 0.0
    if rate_per_s <= 0 or math.isnan(rate_per_s):
        return None
    return pending / rate_per_s
