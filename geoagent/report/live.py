"""Live report rewrites off the event loop.

The aggregator stages rewrite their report while a campaign runs (on :meth:`Stage.flush`). Building a
report (permutation tests, bootstrap, matplotlib figures) takes up to seconds of CPU, and the event loop
that would run it also runs every HTTP request of the process, so the rewrite runs in a worker thread
instead. :class:`LiveReport` keeps at most one rewrite in flight; the stage keeps its aggregator unchanged
while one is (it holds newly handled rows back and adds them when the rewrite is done), so the thread
always reads one consistent state.

Cadence: a rewrite costs CPU that the campaign (on a small machine, the same cores) wants too, and a fixed
interval lets that share grow with the report (a profiled 109-site GeoHint run on 2 cores spent ~12 % of its
samples rewriting it every 5 s). So the next live rewrite waits at least
``max(interval_s, REWRITE_BACKOFF * d)`` after the previous one ended, ``d`` the wall seconds that previous
background rewrite took (:meth:`LiveReport.gap_s`). With ``REWRITE_BACKOFF = 4`` the rewrites take at most
``d / (d + 4 d) = 20 %`` of the wall time however slow the report gets, and a fast report keeps the configured
interval. Only the live cadence adapts: the final report at stop is written to completion as before, with the
statistics' full draws.

:class:`LiveAggregatorStage` is what GeoHint's and GeoVerify's aggregator stages share around it: the rebuild from
the store under the plan's scope, following a re-plan, holding rows back while a rewrite reads the aggregator, the
rate-limited live rewrite and the final report at stop; each kind fills in a few hooks (its scope, how rows reach
its aggregator, its report writer and service names).

Several live aggregators (live42 #1): two ``run`` processes of one campaign, or ``--stages aggregator`` beside a
full run, each lease part of the scored rows, and each rewrote the same report folder from what the store held
when it started plus the rows it leased itself, so the live report alternated between two partial sums (445
answers, then 170, with 568 stored). Where the engine says another live process of the campaign may run the
aggregator stage (ctx service :data:`geoagent.constants.SERVICE_AGGREGATED_ELSEWHERE`), each live rewrite first
rebuilds the sums from the store, in the report thread, so it covers every row stored by then, whoever leased it.
Cost: the rebuild reads the kind's whole results table, in the report thread (measured on 2 cores: the demo's 690
GeoVerify rows 0.02 s, 50,000 such rows 0.6 s beside the 2.1 s their report takes to write; the demo's 880 GeoHint
rows 0.08 s). It runs inside the timed rewrite, so :data:`REWRITE_BACKOFF` stretches the cadence by it too and the
rewrites' share of wall time stays at most 20 %; a process alone in its campaign never rebuilds.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import anyio

from geoagent import constants as C
from geoagent.runtime.queue import Task
from geoagent.runtime.scope import ScoredScope, counted_anew, live_missing_kw
from geoagent.runtime.stage import Message, Stage, StageContext

log = logging.getLogger(__name__)

REWRITE_BACKOFF = 4.0
"""The next live rewrite waits at least this many times the previous background rewrite's duration
(dimensionless; see :meth:`LiveReport.gap_s`): it bounds the rewrites' share of wall time at 1 / (1 + 4)."""


def live_interim_note(now: float | None = None) -> str:
    """The interim line of a live rewrite (shown as ``Interim report: ...`` above its tables): written while the
    campaign runs, at ``now`` (seconds since the epoch; None: the current time), covering the answers scored by
    then; the final report replaces it when the run ends, so a report still carrying it after the run stopped was
    left by a run that did not end (killed, or forced out by a second signal)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() if now is None else now))
    return (f"live report written at {stamp} while the campaign runs: the tables cover only the answers scored by "
            "then, and the run rewrites them as answers come in; the final report replaces this one when the run "
            "ends. If the run is no longer going, it did not end (killed or forced out): re-run the same command "
            "to finish and write the final report")


#: seconds between two readings of which models are simulated by :class:`LiveBanners` (each reads every stored
#: answer's request settings)
SIMULATED_REFRESH_S = 60.0


class LiveBanners:
    """The header lines of a campaign's live report rewrites (ctx service :data:`geoagent.constants.SERVICE_LIVE_BANNERS`,
    set by the kind's plan): before, a live rewrite (and the report a killed run left) had no interim line and no
    simulator warning, so it read as a final report of a real model (walkthrough 28).

    Parameters
    ----------
    simulated : callable
        Returns the names of the models whose answers come from the simulator (the kind's ``_simulated``); called
        at the first rewrite and again at a rewrite :data:`SIMULATED_REFRESH_S` after the last call (it reads every
        stored answer's request settings), in the report thread. A name once found stays: a fake started by hand
        is known as one only by the answers it marked, which the first rewrite may precede (walk28 review #5).
    replay_note : str
        The replay header line (:func:`geoagent.providers.replay.replay_note`, "" for none), read at plan time.
    image_note : callable, optional
        Returns the placeholder-image warning as the kind's plan left it (None for none), read at each rewrite.
    """

    def __init__(self, simulated: Callable[[], list[str]], replay_note: str = "",
                 image_note: Callable[[], str | None] | None = None) -> None:
        self._simulated_of = simulated
        self._simulated: list[str] | None = None
        self._simulated_at = 0.0
        self.replay_note = replay_note
        self._image_note = image_note

    def __call__(self) -> dict[str, Any]:
        """Keyword arguments of the kind's ``write_report``: ``interim`` (:func:`live_interim_note`), ``simulated``,
        and ``replay_note`` / ``image_note`` when there is one."""
        now = time.monotonic()
        if self._simulated is None or now - self._simulated_at >= SIMULATED_REFRESH_S:
            found = list(self._simulated_of())
            self._simulated = list(dict.fromkeys((self._simulated or []) + found))
            self._simulated_at = now
        kw: dict[str, Any] = {"interim": live_interim_note(), "simulated": self._simulated}
        if self.replay_note:
            kw["replay_note"] = self.replay_note
        image = self._image_note() if self._image_note is not None else None
        if image:
            kw["image_note"] = image
        return kw


def live_report_dir(ctx: Any) -> Path:
    """The folder an aggregator stage's live rewrite writes (a :class:`~pathlib.Path`): the stage context's
    ``report_dir`` service when set (tests), else ``<state_dir>/report`` of the run (the engine's ``state_dir``
    service: ``[paths] state`` or ``$GEOAGENT_STATE``, then the campaign's name), else ``report`` under the
    campaign's folder of :func:`geoagent.paths.state_root` (a stage run without the engine). Both GeoVerify's and
    GeoHint's aggregators use it, so the live and the final report share one folder (before session 18 GeoHint's
    ignored ``[paths] state`` and wrote ``state/<campaign>/report`` of the working directory).

    Raises
    ------
    ValueError
        Only in the last case, for a campaign name that cannot be a folder name
        (:func:`geoagent.paths.safe_name`).
    """
    from geoagent import paths

    d = ctx.services.get("report_dir")
    if d:
        return Path(d)
    state_dir = ctx.services.get("state_dir")
    if state_dir:
        return Path(state_dir) / C.REPORT_DIR
    return paths.state_root() / paths.safe_name(ctx.campaign, what="campaign") / C.REPORT_DIR


def _report_written(out_dir: Path) -> bool:
    """Whether the report folder ``out_dir`` holds a file already (a report an earlier run wrote); False when it does
    not exist or cannot be read."""
    try:
        return any(p.is_file() for p in out_dir.iterdir())
    except OSError:
        return False


class LiveReport:
    """At most one background report rewrite at a time, in a worker thread of its own.

    Parameters
    ----------
    what : str
        Name used in log lines and the thread name (e.g. ``"GeoHint"``).

    Attributes
    ----------
    started, skipped, failed : int
        Rewrites started in the background, requests skipped because one was still running, and
        background rewrites that raised (logged, never re-raised).
    last_duration_s : float
        Wall seconds the last finished background rewrite (:meth:`start`) took, raised or not; 0.0 before one.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future[Any] | None = None
        self.started = 0
        self.skipped = 0
        self.failed = 0
        self.last_duration_s = 0.0

    def gap_s(self, interval_s: float | None) -> float:
        """Seconds the next live rewrite should wait after the previous one ended.

        ``max(interval_s, REWRITE_BACKOFF * last_duration_s)`` (seconds; ``None`` counts as 0): the
        configured interval, stretched when the report got slow to build (module docstring).
        """
        return max(float(interval_s or 0.0), REWRITE_BACKOFF * self.last_duration_s)

    def _timed(self, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            return self._guarded(fn)
        finally:
            self.last_duration_s = time.monotonic() - t0

    @property
    def busy(self) -> bool:
        """True while a background rewrite is running."""
        return self._future is not None and not self._future.done()

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        # a failing live report must not stop the campaign: log it, the aggregated counts are kept
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            self.failed += 1
            # one line; the traceback only under -v (debug logging), like the CLI's other errors
            log.error("%s live report failed; the aggregated counts are kept: %s", self.what, exc,
                      exc_info=log.isEnabledFor(logging.DEBUG))
            return None

    def start(self, fn: Callable[[], Any]) -> bool:
        """Run ``fn()`` in the background thread unless a rewrite is still running.

        Returns
        -------
        bool
            True when started, False when skipped (one is in flight). An exception from ``fn`` is logged.
        """
        if self.busy:
            self.skipped += 1
            return False
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.what}-report")
        self._future = self._pool.submit(self._timed, fn)
        self.started += 1
        return True

    async def wait(self) -> None:
        """Wait (without blocking the event loop) until the rewrite in flight, if any, has finished."""
        fut = self._future
        if fut is not None and not fut.done():
            await anyio.to_thread.run_sync(fut.exception)
        self._future = None

    async def run(self, fn: Callable[[], Any], *, guarded: bool = False) -> Any:
        """Wait for the rewrite in flight, then run ``fn()`` in a worker thread and return its result.

        For the final report: awaited to completion (a cancellation waits for the thread too).
        ``guarded=True`` logs an exception and returns None instead of raising it.
        """
        await self.wait()
        if guarded:
            return await anyio.to_thread.run_sync(self._guarded, fn)
        return await anyio.to_thread.run_sync(fn)

    def close(self) -> None:
        """Let the worker thread go (call after :meth:`wait`; a rewrite still running finishes first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


class LiveAggregatorStage(Stage):
    """``scored`` -> (none): an aggregator stage with a live report, the machinery GeoHint's
    (:class:`geoagent.geohint.stages.GeoHintAggregatorStage`) and GeoVerify's
    (:class:`geoagent.geoverify.stages.GeoVerifyAggregatorStage`) share.

    * :meth:`start` rebuilds the aggregator from the kind's results table in the store (if a store exists) under
      the scope of the campaign's current plan (ctx service :attr:`plan_keys_service`), so a restart loses nothing.
    * :meth:`handle` drops a task outside that scope, marks the sums stale when a counted row comes back scored
      anew with another content (:func:`geoagent.runtime.scope.counted_anew`) and queues the row in
      ``_pending``; :meth:`_drain` adds the queued rows to the aggregator once :attr:`drain_at` of them wait,
      never while a live rewrite runs (:attr:`live` busy: the task is held whole, ``_held``, and checked against
      the scope and queued once it is done, since that rewrite may rebuild the scope from the store).
    * :meth:`_follow_plan` rebuilds from the store when the campaign planned anew (a ``--watch`` re-plan,
      :class:`geoagent.engine.WatchReplanTick`, sets the plan keys service anew) or a row went stale.
    * :meth:`flush` starts a live rewrite in a worker thread (:class:`LiveReport`) when something changed and
      ``max(report_interval_s, REWRITE_BACKOFF x the previous rewrite's duration)`` seconds passed since the
      previous one ended; where another live process of the campaign may run the aggregator stage (ctx service
      :data:`geoagent.constants.SERVICE_AGGREGATED_ELSEWHERE`) that rewrite first rebuilds the sums from the store
      (:meth:`_live_write`; live42 #1); :meth:`stop` waits for it and writes the final report to completion,
      unless the campaign engine writes the campaign's report right after (ctx service
      ``campaign_writes_report``).

    A kind sets the class attributes below and implements :meth:`_new_aggregator`, :meth:`_scope`,
    :meth:`_rebuild`, :meth:`_add_rows` and :meth:`_write_report` (and :meth:`_row`, :meth:`_reportable` where
    its default does not fit). The differences the kinds keep on purpose are flags: :attr:`drain_at`,
    :attr:`keep_rejected_batch`, :attr:`final_guarded` and :meth:`_reportable`.

    Parameters
    ----------
    report_interval_s : float or None
        Minimum seconds from the end of one live rewrite to the next; None: the ctx service
        :attr:`interval_service` at :meth:`start`, else 5.

    Attributes
    ----------
    agg
        The kind's aggregator (rebuilt by :meth:`_load`).
    live : LiveReport
        The background rewrite.
    """

    name = C.STAGE_AGGREGATOR
    sends_http = False  # no request of its own: a slow model upstream is no pace of its (pace_keys)
    input_edge = C.EDGE_SCORED
    output_edge = None
    concurrency = 1
    lease_batch = 256

    #: the kind's name in log lines and the report thread's name ("GeoHint", "GeoVerify")
    what: ClassVar[str] = "aggregator"
    #: ctx service: the message keys of the campaign's current plan (None or absent: every stored row counts)
    plan_keys_service: ClassVar[str] = ""
    #: ctx service: a callable returning the missing work as keyword arguments of the kind's report writer, read
    #: anew at each rewrite (in its worker thread; :func:`geoagent.runtime.scope.live_missing_kw`)
    live_missing_service: ClassVar[str] = ""
    #: ctx service: the live rewrite's interval (seconds) when the stage was given none
    interval_service: ClassVar[str] = ""
    #: the missing-work file the report writes (named in the warning when the missing work cannot be read)
    missing_csv = "missing.csv"
    #: the logger the warnings go to (the kind's module logger)
    _log: ClassVar[logging.Logger] = log
    #: rows queued before :meth:`handle` adds them to the aggregator (GeoHint 1: each row at once; GeoVerify 256: a
    #: polars batch per update). Flush, stop and :meth:`write_report` add whatever waits.
    drain_at: ClassVar[int] = 1
    #: when :meth:`_add_rows` raises, keep the rejected rows queued (True: GeoVerify, whose ``update`` takes a batch
    #: whole or not at all, so nothing of it is lost; the error comes back at each later drain) or drop them
    #: (False: GeoHint, whose rows before the rejected one are already in; kept, it would raise at every drain)
    keep_rejected_batch: ClassVar[bool] = False
    #: the final report at :meth:`stop`: True logs an error of the report writer and returns (GeoHint, whose first
    #: version already kept a failing report from stopping the campaign), False raises it (GeoVerify)
    final_guarded: ClassVar[bool] = False

    def __init__(self, *, report_interval_s: float | None = None) -> None:
        self.report_interval_s = report_interval_s
        self._last_write = -math.inf
        #: something the report on disk does not show yet (rows added, a rebuild); :meth:`start` sets it only where
        #: no report was written yet (resume40 #3)
        self._dirty = True
        self._pending: list[Any] = []  # rows handled, not yet in the aggregator (always so while a rewrite runs)
        self.live = LiveReport(self.what)
        #: the ctx service :attr:`live_missing_service`, taken when a rewrite starts (None: missing work not listed)
        self._live_missing: Callable[[], Mapping[str, Any]] | None = None
        #: the ctx service :data:`geoagent.constants.SERVICE_LIVE_BANNERS`, taken when a live rewrite starts (None: no
        #: header lines; the final rewrite at :meth:`stop`, which no campaign report follows, takes none)
        self._live_banners: Callable[[], Mapping[str, Any]] | None = None
        #: tasks handled while a rewrite runs in the report thread, as ``(key, payload, row)``: a live rewrite may
        #: rebuild the scope, the digests and the sums there (live42 #1), so they are checked against the scope and
        #: queued only once it is done (:meth:`_admit_held`)
        self._held: list[tuple[str, Any, Any]] = []
        #: live rewrites that rebuilt the sums from the store first (another process aggregates too; live42 #1)
        self.store_rebuilds = 0
        #: the last live rewrite rebuilt from the store because another process aggregated (review42b #2): the first
        #: rewrite after that process is gone rebuilds once more, for the rows it handled since that rebuild
        self._shared_last = False

    # --- the kind's hooks ---------------------------------------------------------------------------
    def _new_aggregator(self) -> Any:
        """A fresh, empty aggregator (with the current one's settings)."""
        raise NotImplementedError

    def _scope(self, plan_keys: Any) -> ScoredScope:
        """The scope of the plan whose message keys are ``plan_keys`` (None: every stored row)."""
        raise NotImplementedError

    def _rebuild(self, rows: Iterator[tuple[str, dict[str, Any]]]) -> None:
        """Add the store's scored rows in scope (``(key, row)`` pairs, :meth:`ScoredScope.items`) to the fresh
        :attr:`agg`."""
        raise NotImplementedError

    def _row(self, task: Task) -> Any:
        """What :meth:`handle` queues for a task in scope (default: its payload).

        Raises
        ------
        PermanentFailure
            The payload is no scored row of the kind.
        """
        return task.payload

    def _add_rows(self, rows: list[Any]) -> int:
        """Add queued rows (:meth:`_row`) to :attr:`agg`; returns how many were new."""
        raise NotImplementedError

    def _write_report(self, out_dir: Path, missing_kw: dict[str, Any]) -> Any:
        """Write the kind's report of :attr:`agg` into ``out_dir`` with the missing work's keyword arguments
        ``missing_kw``; returns what the report writer returns (run in the report thread)."""
        raise NotImplementedError

    def _reportable(self) -> bool:
        """Whether a report is written now (live and final): default always, even of an empty aggregator."""
        return True

    # --- the shared machinery -----------------------------------------------------------------------
    def _report_dir(self, ctx: StageContext) -> Path:
        return live_report_dir(ctx)

    async def start(self, ctx: StageContext) -> None:
        self._load(ctx)
        # resume40 #3: the sums just loaded are those of the stored rows, which the report on disk (the last run's
        # final one) already shows: rewriting it at the first flush replaced a final report by an "Interim report"
        # of the same rows, which a kill then left. Only a campaign with no report yet gets one at once (a live
        # report of 0 rows, session 21); rows added or a rebuild (_drain, _follow_plan) mark it dirty
        self._dirty = not _report_written(self._report_dir(ctx))
        if self.report_interval_s is None:
            self.report_interval_s = float(ctx.services.get(self.interval_service, 5.0))

    def _load(self, ctx: StageContext) -> None:
        """Scope of the campaign's current plan (ctx service :attr:`plan_keys_service`) and a fresh aggregator
        rebuilt from the store's scored rows in it. All or nothing: a rebuild that raises (a stored row damaged
        outside geoagent, :class:`geoagent.runtime.store.StoredRowError`) leaves the plan, scope, sums and digests
        as they were, so the next task tries the rebuild again (and fails the same way) instead of taking the rows
        read before the damaged one for the new plan's sums."""
        store = ctx.services.get("store")
        before = (getattr(self, "_plan_keys", None), getattr(self, "scope", None), getattr(self, "agg", None),
                  getattr(self, "_digests", {}), getattr(self, "_stale", False))
        self._plan_keys = ctx.services.get(self.plan_keys_service)
        self.scope = self._scope(self._plan_keys)
        self.agg = self._new_aggregator()
        self._digests: dict[str, bytes] = {}
        self._stale = False
        if store is not None and hasattr(store, "iter_results"):
            try:
                self._rebuild(self.scope.items(store, digests=self._digests))
            except BaseException:
                if before[2] is not None:  # a rebuild at start keeps its empty aggregator (the stage's stop reads it)
                    self._plan_keys, self.scope, self.agg, self._digests, self._stale = before
                raise

    def _follow_plan(self, ctx: StageContext) -> None:
        """When the campaign planned again since :meth:`start` (a ``--watch`` run over a crawl's folder that a
        hand-off changed: :class:`geoagent.engine.WatchReplanTick` sets :attr:`plan_keys_service` anew), rebuild
        the sums from the store under the new plan, as the campaign's report does: the first plan's scope dropped
        every new answer and kept counting answers the new plan no longer holds. The rows queued go with the old
        sums (the scorer stores each row before it sends it). Not while a live rewrite reads the aggregator (the
        next call does it), nor without a store (then only the scope follows). The same rebuild follows a counted
        row scored anew with another content (:meth:`handle` marks it stale: an answer parsed again after the queues
        were rebuilt; the aggregator would take the new row for a redelivery and keep the old outcome, which the
        store no longer holds)."""
        changed = ctx.services.get(self.plan_keys_service) is not getattr(self, "_plan_keys", None)
        if not (changed or getattr(self, "_stale", False)) or self.live.busy:
            return
        if not hasattr(ctx.services.get("store"), "iter_results"):
            self._plan_keys = ctx.services.get(self.plan_keys_service)
            self.scope = self._scope(self._plan_keys)
            return
        self._load(ctx)
        self._pending = []
        self._dirty = True

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        self._follow_plan(ctx)
        if self.live.busy:
            # the report thread reads the sums and may rebuild the scope and digests from the store (live42 #1):
            # held whole, checked once it is done; the row is made now so a malformed one fails its own task
            self._held.append((task.key, task.payload, self._row(task)))
            return []
        self._admit_held()
        if self._admit(task.key, task.payload):
            self._pending.append(self._row(task))
        if len(self._pending) >= self.drain_at:
            self._drain()
        return []

    def _admit(self, key: str, payload: Any) -> bool:
        """Whether the scored row ``payload`` under ``key`` is counted under the current scope (a task of an earlier
        plan, or an answer already counted, is stored, not scored); marks the sums stale when a counted key comes
        back with another content (:func:`geoagent.runtime.scope.counted_anew`). Only while no rewrite runs."""
        scope = getattr(self, "scope", None)
        if scope is not None and not scope.keep(key, payload):
            return False
        digests = getattr(self, "_digests", None)
        if digests is not None and counted_anew(digests, key, payload):
            self._stale = True  # scored anew with another outcome: rebuilt from the store (_follow_plan)
        return True

    def _admit_held(self) -> None:
        """Queue the rows :meth:`handle` held while a rewrite ran (:attr:`_held`) that the scope counts; the caller
        makes sure none runs now."""
        held, self._held = self._held, []
        for key, payload, row in held:
            if self._admit(key, payload):
                self._pending.append(row)

    def _drain(self) -> None:
        """Add the queued rows to the aggregator (marks the report dirty when one was new); the caller makes sure
        no rewrite reads the aggregator. Raises what :meth:`_add_rows` raises (:attr:`keep_rejected_batch`)."""
        if self._pending:
            rows, self._pending = self._pending, []
            try:
                added = self._add_rows(rows)
            except BaseException:
                self._dirty = True  # some rows may be in (GeoHint adds them one by one)
                if self.keep_rejected_batch:
                    self._pending = rows + self._pending
                raise
            if added:
                self._dirty = True

    def write_report(self, ctx: StageContext) -> Any:
        """Write the report now from the current sums; returns what :meth:`_write_report` returns (synchronous:
        the caller makes sure nothing changes the aggregator meanwhile)."""
        self._follow_plan(ctx)
        self._admit_held()
        self._drain()
        self._dirty = False
        self._live_missing = ctx.services.get(self.live_missing_service)
        self._live_banners = ctx.services.get(C.SERVICE_LIVE_BANNERS)
        return self._write(self._report_dir(ctx))

    def _missing_kw(self, live_missing: Callable[[], Mapping[str, Any]] | None) -> dict[str, Any]:
        """The missing work's keyword arguments of the report writer from ``live_missing`` (the ctx service
        :attr:`live_missing_service`; :func:`geoagent.runtime.scope.live_missing_kw`)."""
        return live_missing_kw(live_missing, self._log, self.what, self.missing_csv)

    def _banner_kw(self) -> dict[str, Any]:
        """The live rewrite's header lines (:class:`LiveBanners`) as keyword arguments of the report writer; ``{}``
        without the service, or when it raises (logged: the tables still go out)."""
        if self._live_banners is None:
            return {}
        try:
            return dict(self._live_banners())
        except Exception as exc:  # noqa: BLE001 - the tables still go out, without the header lines
            self._log.warning("%s live report: could not build its header lines (%s)", self.what, exc)
            return {}

    def _write(self, out_dir: Path) -> Any:
        try:
            return self._write_report(out_dir, {**self._banner_kw(), **self._missing_kw(self._live_missing)})
        except BaseException:
            self._dirty = True  # try again at the next flush after the interval
            raise
        finally:
            self._last_write = time.monotonic()

    async def flush(self, ctx: StageContext) -> None:
        if self.live.busy:
            self.live.skipped += 1
            return
        self._follow_plan(ctx)
        self._admit_held()
        self._drain()
        since = time.monotonic() - self._last_write
        if self._dirty and self._reportable() and since >= self.live.gap_s(self.report_interval_s):
            self._dirty = False
            out_dir = self._report_dir(ctx)
            self._live_missing = ctx.services.get(self.live_missing_service)  # read by _write in the report thread
            self._live_banners = ctx.services.get(C.SERVICE_LIVE_BANNERS)
            elsewhere = ctx.services.get(C.SERVICE_AGGREGATED_ELSEWHERE)
            if not callable(elsewhere) or not hasattr(ctx.services.get("store"), "iter_results"):
                elsewhere = None
            self.live.start(lambda: self._live_write(ctx, out_dir, elsewhere))

    def _live_write(self, ctx: StageContext, out_dir: Path, elsewhere: Callable[[], bool] | None) -> Any:
        """A live rewrite (in the report thread): when ``elsewhere()`` (ctx service
        :data:`geoagent.constants.SERVICE_AGGREGATED_ELSEWHERE`) says another live process of the campaign may run the
        aggregator stage, the sums are first rebuilt from the store (:meth:`_load`), so the report covers every
        stored row, not this process's share of them (live42 #1; module docstring); then :meth:`_write`. Raises
        what those raise (logged by :class:`LiveReport`; the next flush tries again). Once the other process is gone
        (``elsewhere()`` turns false), the first rewrite after rebuilds once more (review42b #2): the sums of the last
        rebuild plus this process's own rows since would miss the rows the other one handled in between; after that
        one, this process alone counts every row itself."""
        try:
            shared = elsewhere is not None and elsewhere()
            if shared or self._shared_last:
                self._load(ctx)
                self.store_rebuilds += 1
            self._shared_last = shared  # only once the rebuild succeeded: a failed one is tried again
        except BaseException:
            self._dirty = True
            raise
        return self._write(out_dir)

    async def stop(self, ctx: StageContext) -> None:
        await self.live.wait()
        try:
            self._follow_plan(ctx)
            self._admit_held()
            self._drain()
            # under the campaign engine the campaign's report (rebuilt from the store, with the missing work)
            # follows at once and replaces this one: do not write it twice
            if self._reportable() and not ctx.services.get(C.SERVICE_CAMPAIGN_WRITES_REPORT):
                out_dir = self._report_dir(ctx)
                self._live_missing = ctx.services.get(self.live_missing_service)
                self._live_banners = None  # the final report of a stage run without the campaign engine
                # from the store where another process aggregates or did at the last rewrite (review42b #2): its own
                # sums would overwrite the live report with this process's share
                elsewhere = ctx.services.get(C.SERVICE_AGGREGATED_ELSEWHERE)
                if not callable(elsewhere) or not hasattr(ctx.services.get("store"), "iter_results"):
                    elsewhere = None
                await self.live.run(lambda: self._live_write(ctx, out_dir, elsewhere), guarded=self.final_guarded)
        finally:
            self.live.close()


__all__ = ["LiveAggregatorStage", "LiveBanners", "LiveReport", "live_interim_note", "live_report_dir"]
