"""Run a pipeline of stages in one process: queues wired by edge name, signals, progress ticks.

Every stage gets its own :class:`~geoagent.runtime.worker.StageRunner`; all run concurrently in one anyio
task group. A stage's *upstream* is every stage in this process whose output edge is its input edge; in burst
mode it finishes once those have finished and its input is drained. Stages whose upstream runs in another
process (scale-out with ``--stages``) should run with ``burst=False`` (daemon mode) or treat the upstream as
finished.

Signals: the first SIGINT/SIGTERM asks every runner to stop (stop leasing, finish or release in-flight work,
commit, flush); a second one exits at once with status 130. That loses nothing acknowledged: every ack and
every stored response is an already-committed SQLite transaction.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from geoagent.runtime.queue import QueueCounts, WorkQueue, open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner, StageStats, UpstreamWait

log = logging.getLogger(__name__)


def elapsed_clock() -> float:
    """Seconds on a clock that a wall-clock step never moves and that keeps counting while the machine is suspended
    (review42b #3): ``CLOCK_BOOTTIME`` where the platform has it (Linux); :func:`time.monotonic` elsewhere (on Linux
    ``CLOCK_MONOTONIC`` stops across a suspend, so a progress record's span, ``started + elapsed_s``, ended that many
    seconds early and ``status`` could split one process's records in two runs). Only differences of two readings in
    one process mean anything."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)

Tick = Callable[["PipelineRun"], Awaitable[None]]


@dataclass(slots=True)
class PipelineRun:
    """Live view of a running pipeline, passed to tick callbacks and returned at the end."""

    campaign: str
    runners: list[StageRunner]
    queues: dict[str, WorkQueue]
    #: when the pipeline started: wall clock (Unix time, s; read once: the progress records' ``started``) and
    #: :func:`elapsed_clock` (their ``elapsed_s``), so a step of the wall clock while it runs moves neither (live42 #4)
    started_at: float = field(default_factory=time.time)
    started_mono: float = field(default_factory=lambda: elapsed_clock())
    stopped_by_signal: bool = False
    finished_at: float | None = None
    #: name of the signal that asked the pipeline to stop (``"SIGINT"``, ``"SIGTERM"``), or None
    stop_signal: str | None = None

    @property
    def budget_stopped(self) -> bool:
        return any(r.budget_stopped for r in self.runners)

    def stats(self) -> list[StageStats]:
        return [r.stats for r in self.runners]

    async def counts(self) -> dict[str, QueueCounts]:
        return {name: await q.counts() for name, q in self.queues.items()}


#: a repeat of the signal that asked to stop, arriving within this many seconds of it, is the same request
#: delivered twice (GNU ``timeout`` signals the process and its process group), not a second press: ignored, once
#: (a third signal exits at once, however soon)
REPEAT_SIGNAL_S = 0.5


def repeat_ignored_message(signum: int) -> str:
    """The line printed when a repeat of the stop signal within :data:`REPEAT_SIGNAL_S` is ignored (taken for
    the same request delivered twice, as GNU ``timeout`` does): a quick double press is not silently lost."""
    name = "Ctrl-C" if signum == signal.SIGINT else _signal_name(signum)
    return (f"second {name} within {REPEAT_SIGNAL_S:g} s ignored (taken for a repeat of the first); "
            f"{'press it' if signum == signal.SIGINT else 'send it'} again to exit at once")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def call_before_exit(hook: Callable[[], Any] | None) -> None:
    """Call ``hook()`` (None: nothing) on the way out of a forced exit; whatever it raises is swallowed: the exit
    must happen."""
    if hook is None:
        return
    try:
        hook()
    except BaseException:  # noqa: BLE001 - nothing may stop the exit
        pass


@contextlib.contextmanager
def _handlers_kept(*signums: int) -> Iterator[None]:
    """The Python-level handlers of ``signums`` as they were on entry, put back on exit (main thread only;
    elsewhere nothing is done). asyncio's ``remove_signal_handler``, which closing :func:`anyio.open_signal_receiver`
    calls, resets SIGTERM to ``SIG_DFL`` (SIGINT to ``default_int_handler``) rather than to what was there: the CLI's
    own SIGTERM handler (:func:`geoagent.cli.entry`) was lost, so a SIGTERM just after a complete run printed its
    summary killed it with exit 143 instead of being ignored (resume40 #4)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in signums}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(signum, handler)


class LateSignals:
    """SIGINT / SIGTERM handling for the end of a run, after :func:`run_pipeline` returned: every task has ended
    (done, dead-lettered, or left queued by a stop already decided), and the report, export and summary are
    being written. A first signal then cuts nothing short: it is recorded (:attr:`received`, the signal's name)
    and said on stderr, and the run ends as its work did (``complete`` stays ``complete``, exit 0, as `status`
    shows it) instead of a ``KeyboardInterrupt`` ("forced exit", exit 130) over a run the manifest records as
    complete. A second signal (the first one repeated within :data:`REPEAT_SIGNAL_S` by GNU ``timeout`` aside), or
    any signal when ``stopped`` (the pipeline was already stopped by one), exits at once with 130, as a second
    signal during the run does. Main thread only (elsewhere :meth:`install` does nothing); :meth:`restore` puts
    back the handlers it replaced."""

    def __init__(self) -> None:
        #: name of the first signal received after the pipeline ended (``"SIGINT"``), or None
        self.received: str | None = None
        self._at = 0.0
        self._signum = 0
        self._stopped = False
        self._said_repeat = False
        self._before: dict[int, Any] = {}
        #: ``()``, called just before a second signal's ``os._exit(130)`` (the engine: the manifest records the run
        #: as ``forced exit``); must not block; a failure is ignored
        self.on_forced_exit: Callable[[], Any] | None = None

    def install(self, *, stopped: bool = False) -> None:
        """Catch SIGINT and SIGTERM from now on (``stopped``: the run was already stopped by a signal)."""
        import threading

        self._stopped = stopped
        if threading.current_thread() is not threading.main_thread() or self._before:
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._before[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if (self.received is not None and signum == self._signum and time.monotonic() - self._at < REPEAT_SIGNAL_S
                and not self._said_repeat):
            # the first request delivered twice (GNU timeout: process and group), not a 2nd press: said once; a
            # third signal is a press whatever its timing (runtime38 #3: the first one's time is taken when its
            # handler runs, late while a long C call holds the main thread, so two quick presses after it both
            # looked like repeats)
            self._said_repeat = True
            os.write(2, (repeat_ignored_message(signum) + "\n").encode())
            return
        if self._stopped or self.received is not None:
            # worded as the pipeline's (a warning line), and what a stop at this point leaves: the report and export
            os.write(2, b"warning: second signal: exiting at once; acknowledged work is kept, the report and export "
                        b"may be left unwritten: re-run the same command to write them\n")
            call_before_exit(self.on_forced_exit)
            os._exit(130)
        self.received, self._signum, self._at = signal.Signals(signum).name, signum, time.monotonic()
        os.write(2, f"{self.received} after every task had ended: finishing the report and export (it cuts "
                    f"nothing short; press again (after {REPEAT_SIGNAL_S:g} s) to exit at once)\n".encode())

    def restore(self) -> None:
        """Put back the handlers :meth:`install` replaced (main thread only)."""
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        self._before.clear()


#: seconds tasks in flight may run on after a stop request (SIGINT/SIGTERM) before they are released
STOP_GRACE_S = 30.0
#: environment variable that sets another grace period (s): a longer one for slow models, a shorter one for tests
#: that wait it out (tests/test_runtime_stop_grace_summary.py)
STOP_GRACE_ENV = "GEOAGENT_STOP_GRACE_S"
#: the longest grace period the variable may set (s)
MAX_STOP_GRACE_S = 3600.0
#: fixstages43: environment variable bounding how long (s) a ``--stages`` process waits for an upstream stage that
#: no process has taken up yet (its upstream process not started) before it ends as before, the work left for a
#: process that runs that stage; unset: :data:`DEFAULT_UPSTREAM_WAIT_S`, ``0``: no such wait at all
UPSTREAM_WAIT_ENV = "GEOAGENT_UPSTREAM_WAIT_S"
#: how long (s) that wait lasts when the variable is unset: 10 minutes, long enough for a scheduler to start the
#: upstream machine, short enough that a downstream-only run started after its upstream stopped with work left (its
#: host down, interrupted) ends by itself as it did before fixstages43 (review43e #1: it waited for ever, and a
#: script or cron job running only the downstream stages hung)
DEFAULT_UPSTREAM_WAIT_S = 600.0


def upstream_wait_s() -> float:
    """Seconds a ``--stages`` process waits for an upstream stage no process has taken up yet: :data:`UPSTREAM_WAIT_ENV`
    when set (non-empty), else :data:`DEFAULT_UPSTREAM_WAIT_S` (a stop signal ends it earlier).

    Raises
    ------
    ValueError
        The variable is not a finite number of seconds >= 0 (``inf``, ``1e400``: fixstages44 #4, it would be no
        bound). ``run.py run --stages`` reads it before anything is loaded or written
        (:func:`geoagent.cli._check_upstream_wait`: exit 2); :func:`run_pipeline` reads it before any work starts.
    """
    raw = os.environ.get(UPSTREAM_WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_UPSTREAM_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and math.isfinite(value)):  # fixstages44 #4: inf / 1e400 is no bound (a wait for ever)
        raise ValueError(f"{UPSTREAM_WAIT_ENV} must be a finite number of seconds >= 0, got {raw!r}")
    return value


#: set once the command's one run has ended (``run`` / ``crawl``: :func:`geoagent.cli._then_ended`), cleared when a run
#: starts: a SIGTERM the command's own handler gets after it changes nothing (:func:`geoagent.cli._interrupt_on_term`)
_END_RECORDED = False


def mark_end_recorded(recorded: bool = True) -> None:
    """Note that the command's run has ended (``True``), or that a run starts (``False``). A SIGTERM between the
    end and the command's exit (the loop's teardown) used to read as an interrupt before the workers started, exit
    130 over a complete run (review40a #6)."""
    global _END_RECORDED
    _END_RECORDED = recorded


def end_recorded() -> bool:
    """Whether the command's run has ended and no run started since (:func:`mark_end_recorded`)."""
    return _END_RECORDED


def stop_grace_s() -> float:
    """The grace period in s: :data:`STOP_GRACE_ENV` when set (non-empty), else :data:`STOP_GRACE_S`.

    Raises
    ------
    ValueError
        The variable is not a number of seconds in [0, :data:`MAX_STOP_GRACE_S`] (the command exits 2 before
        any work starts: :func:`run_pipeline` reads it first).
    """
    raw = os.environ.get(STOP_GRACE_ENV, "").strip()
    if not raw:
        return STOP_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= MAX_STOP_GRACE_S:
        raise ValueError(f"{STOP_GRACE_ENV} must be a number of seconds in [0, {MAX_STOP_GRACE_S:g}], got {raw!r}")
    return value


def stop_message(signum: int, grace_s: float) -> str:
    """The line logged at the first SIGINT/SIGTERM: what stopping does, and what a second signal does
    (:func:`run_pipeline` exits at once with status 130 via ``os._exit``: acknowledged work is kept, tasks in
    flight are leased again when the same command is re-run)."""
    if signum == signal.SIGINT:
        name, again = "SIGINT (Ctrl-C)", "press Ctrl-C again"
    else:
        name = _signal_name(signum)
        again = f"send {name} again"
    wait = "half a second" if REPEAT_SIGNAL_S == 0.5 else f"{REPEAT_SIGNAL_S:g} s"
    return (f"stopping on {name}: finishing in-flight work (up to {grace_s:.0f} s), then saving; "
            f"{again} to exit at once (work in flight is redone on resume; a repeat within {wait} of the first "
            "counts as the same stop)")


def upstream_map(stages: Sequence[Stage]) -> dict[str, list[str]]:
    """For each stage name, the names of stages in ``stages`` that feed its input edge."""
    producers: dict[str, list[str]] = {}
    for s in stages:
        if s.output_edge:
            producers.setdefault(s.output_edge, []).append(s.name)
    return {s.name: producers.get(s.input_edge, []) for s in stages}


def open_edge_queues(
    queues_root: str | Path, campaign: str, stages: Sequence[Stage], *, redis_url: str | None = None,
    **queue_options: Any
) -> dict[str, WorkQueue]:
    """Open (creating if needed) the queue of every edge any stage reads or writes: SQLite files under
    ``queues_root``, or Redis Streams queues on the server at ``redis_url`` (a secret; ``[backend] kind =
    "redis"``, :func:`geoagent.runtime.redis_queue.open_redis_queue`; call inside the running event loop)."""
    edges: list[str] = []
    for s in stages:
        for e in (s.input_edge, s.output_edge):
            if e and e not in edges:
                edges.append(e)
    if redis_url is not None:
        from geoagent.runtime.redis_queue import open_redis_queue

        return {e: open_redis_queue(redis_url, campaign, e, **queue_options) for e in edges}
    return {e: open_queue(queues_root, campaign, e, **queue_options) for e in edges}


async def run_pipeline(
    campaign: str,
    stages: Sequence[Stage],
    queues: dict[str, WorkQueue],
    ctx: StageContext,
    *,
    burst: bool = True,
    tick: Tick | None = None,
    tick_interval_s: float = 1.0,
    handle_signals: bool = True,
    grace_s: float | None = None,
    runner_options: dict[str, Any] | None = None,
    pipeline: Sequence[Stage] | None = None,
    stages_elsewhere: Callable[[], Collection[str]] | None = None,
    stages_started: Callable[[], Collection[str]] | None = None,
    upstream_stop: Callable[[str], Awaitable[str | None]] | None = None,
    stage_ended: Callable[[str], Any] | None = None,
    forced_exit: Callable[[], Any] | None = None,
) -> PipelineRun:
    """Run ``stages`` until they finish (burst) or a signal stops them; returns the run's final view.

    Parameters
    ----------
    campaign : str
        Campaign name (for logs and the returned view).
    stages : sequence of Stage
        Stages in data-flow order; edges connect them by name.
    queues : dict
        Edge name -> open queue (see :func:`open_edge_queues`).
    ctx : StageContext
        Shared services for the stages.
    burst : bool
        Finish when all input is drained (campaigns) or keep polling (daemon, ``--watch``).
    tick : async callable or None
        Called every ``tick_interval_s`` seconds and once at the end (progress display, JSONL stream).
    handle_signals : bool
        Install SIGINT/SIGTERM handling (main thread only).
    grace_s : float or None
        Seconds in-flight tasks may run after a stop request before they are released; None: :func:`stop_grace_s`
        (30 s, or ``GEOAGENT_STOP_GRACE_S``).
    pipeline : sequence of Stage or None
        The campaign's whole pipeline in data-flow order when ``stages`` is part of it (``--stages``): each runner
        waits for every runner of this process whose stage comes before its own in the pipeline (not only its
        direct producer: ``--stages model_caller,scorer`` beside ``--stages parser``), and, in a burst run, is
        given the input queues of the stages before its own that this process does not run
        (``StageRunner(foreign_upstream=...)``): it waits while a task of theirs is leased, or ready for a stage
        ``stages_elsewhere`` names.
    stages_elsewhere : callable or None
        ``() -> names`` of the stages other live processes of the campaign run (``StageRunner``).
    stages_started : callable or None
        ``() -> names`` of the stages another process of the campaign has run since this one started
        (``StageRunner``, fixstages43): a burst runner waits for a stage before its own that none has taken up yet
        while that stage's input holds ready tasks, at most :func:`upstream_wait_s` (``GEOAGENT_UPSTREAM_WAIT_S``)
        counted once for the process (fixstages44 #2: the runners share one
        :class:`~geoagent.runtime.worker.UpstreamWait`, so a runner that starts asking once the one before it ended
        does not wait the bound again). None: it does not.
    upstream_stop : async callable or None
        ``(stage) -> reason or None`` (:class:`StageRunner` ``upstream_stop``, fixstagesbudget43): a foreign upstream
        stage the cost cap stopped, with no room under the cap for its next call, is not waited for as one no process
        has taken up yet. Only with ``stages_started``.
    stage_ended : callable or None
        ``(name)``, called when a stage's runner has ended while the run goes on (the engine records it in
        manifest.json, so the stages other processes wait for are the ones still at work here: a stage that
        stopped leasing, its input left ready, keeps no other process waiting); a failure is logged.
    forced_exit : callable or None
        ``()``, called when a second signal ends the process at once, just before ``os._exit(130)`` (the engine
        records the run as ``forced exit`` in manifest.json, :meth:`geoagent.runtime.manifest.Manifest.mark_forced_exit`);
        it must not block; a failure is ignored.

    Raises
    ------
    ValueError
        ``grace_s`` is None and ``GEOAGENT_STOP_GRACE_S`` is not a valid number of seconds (before anything runs).
    """
    if grace_s is None:
        grace_s = stop_grace_s()
    start_wait_s = upstream_wait_s() if stages_started is not None and burst else math.inf
    # fixstages44 #2: one wait per process for the upstream stages no process has taken up: each runner's own clock
    # started when the runners before it had ended (scorer, then aggregator: twice the bound, a line each)
    upstream_wait = UpstreamWait()
    ups = upstream_map(stages)
    runners: list[StageRunner] = []
    by_name: dict[str, StageRunner] = {}
    own = {s.name for s in stages}
    order = [p.name for p in pipeline] if pipeline is not None else []
    for s in stages:
        if pipeline is not None and s.name in order:  # every own stage before it (it may feed it through another's)
            upstream_runners = [by_name[p.name] for p in pipeline[: order.index(s.name)] if p.name in by_name]
        else:
            upstream_runners = [by_name[u] for u in ups[s.name] if u in by_name]
        upstream_done: anyio.Event | None = None
        if upstream_runners:
            upstream_done = anyio.Event()
        # the stages before this one that other processes run (--stages): their leased tasks are work on its way
        foreign = ([(p.name, queues[p.input_edge]) for p in pipeline[: order.index(s.name)]
                    if p.name not in own and p.input_edge in queues]
                   if pipeline is not None and burst and s.name in order else [])
        runner = StageRunner(
            s,
            queues[s.input_edge],
            queues[s.output_edge] if s.output_edge else None,
            ctx,
            burst=burst,
            upstream_done=upstream_done,
            foreign_upstream=foreign,
            stages_elsewhere=stages_elsewhere,
            stages_started=stages_started if foreign else None,
            start_wait_s=start_wait_s,
            upstream_wait=upstream_wait,
            upstream_stop=upstream_stop if foreign else None,
            grace_s=grace_s,
            **(runner_options or {}),
        )
        runner._upstream_runners = upstream_runners  # type: ignore[attr-defined]
        runners.append(runner)
        by_name[s.name] = runner
    view = PipelineRun(campaign, runners, queues)

    async def watch_upstream(r: StageRunner) -> None:
        for u in r._upstream_runners:  # type: ignore[attr-defined]
            await u.finished.wait()
        assert r.upstream_done is not None
        r.upstream_done.set()

    async def signal_watcher(scope: anyio.CancelScope) -> None:
        with _handlers_kept(signal.SIGINT, signal.SIGTERM), \
                anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            count, first, first_at, said_repeat = 0, None, 0.0, False
            async for signum in signals:
                if count and signum == first and time.monotonic() - first_at < REPEAT_SIGNAL_S and not said_repeat:
                    # the first request delivered twice (GNU timeout: process and group), not a 2nd press: a
                    # quick double press is told so; one repeat only, a third signal exits (runtime38 #3)
                    said_repeat = True
                    log.warning("%s", repeat_ignored_message(signum))
                    continue
                count += 1
                if count == 1:
                    first, first_at = signum, time.monotonic()
                    log.warning("%s", stop_message(signum, grace_s))
                    view.stopped_by_signal = True
                    view.stop_signal = signal.Signals(signum).name
                    for r in runners:
                        r.request_stop()
                else:
                    log.warning("second signal: exiting at once; acknowledged work is kept, work in flight is "
                                "redone when the same command is re-run")
                    call_before_exit(forced_exit)
                    os._exit(130)

    async def run_one(r: StageRunner) -> None:
        await r.run()
        if stage_ended is not None:
            try:
                stage_ended(r.stage.name)
            except Exception as exc:  # noqa: BLE001 - a record for other processes; the run goes on
                log.warning("campaign %s: stage %s ended; recording it failed: %s", campaign, r.stage.name, exc)

    async def ticker() -> None:
        while True:
            await anyio.sleep(tick_interval_s)
            if tick is not None:
                await tick(view)

    async with anyio.create_task_group() as outer:
        if handle_signals:
            outer.start_soon(signal_watcher, outer.cancel_scope)
        outer.start_soon(ticker)
        async with anyio.create_task_group() as tg:
            for r in runners:
                if r.upstream_done is not None:
                    tg.start_soon(watch_upstream, r)
                tg.start_soon(run_one, r)
        outer.cancel_scope.cancel()
    view.finished_at = time.time()
    if tick is not None:
        await tick(view)
    return view
