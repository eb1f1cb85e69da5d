"""Streaming progress: a JSONL stream in ``state/<campaign>/progress.jsonl`` and a live terminal display.

Each tick appends one JSON object per line (another process can ``tail -f`` it)::

    {"t": 1764500000.1, "campaign": "demo", "elapsed_s": 12.3, "started": 1764499987.8,
     "stages": [{"stage": "model_caller", "done": 120, "rate_per_s": 9.8, ...}, ...],
     "queues": {"requests": {"ready": 80, "leased": 8, "done": 120, "dead": 0}, ...},
     "spend": {"spent_usd": 0.12, "cap_usd": 5.0, ...}, "eta_s": 8.2, "eta_stage": "geocoder"}

Rates: each stage record has two (:class:`geoagent.runtime.worker.StageStats`). ``rate_per_s``, the display
throughput, counts the tasks of the stage's last ~64 commits over the time from the first of them up to the
record (``rate_window_s``), so it falls while the stage completes nothing; ``status`` carries a running
process's record on to the moment it reads it (:func:`record_as_of`). A finished stage's (``finished``) window
ends at its last commit and is never carried on: its rate is that of its working span, not diluted by the time
its process ran on after it (the report, or other stages of a ``--stages`` process). ``capacity_per_s``, the ETA's, is the same
window's rate up to its last commit: a stage waiting for upstream work is starved, not slower, and its capacity
stays. ``idle_s`` (since its last commit) and ``stall_after_s`` tell a stalled stage: one with work ready that
has completed nothing for that long (:func:`stalled_stages`); while any is, the ETA is unknown (``eta_s`` null,
``eta_stalled`` lists them) rather than timed by a rate it no longer has. Right after a start or resume a stage's
capacity times the ETA only once it is measured over :data:`geoagent.runtime.worker.ETA_MIN_COMPLETIONS` tasks after
its first commit and :data:`~geoagent.runtime.worker.ETA_MIN_WINDOW_S` seconds (``eta_ready``; the start-up before the
first commit never counts); while no stage with work ahead is, ``eta_s`` is null and ``eta_estimating`` lists the
stages with what they have measured (``status``: "ETA estimating ...").

Rotation: the stream grows by about 1-4 KB a second per running process, idle or not (a ``--watch`` daemon:
roughly 300 MB a day). Every :data:`ROTATE_CHECK_TICKS` records a writer looks at its size; from
:data:`ROTATE_BYTES` on it renames it to ``progress.jsonl.1`` (replacing the one before: :func:`geoagent.files.
rotate_jsonl`, safe with several writers) and the next record starts a new file, so a campaign keeps at most about
twice that. The readers here (``status``) read back across both files, the last :data:`READ_WINDOW_BYTES` of them, and
further back only for the processes the caller names (:func:`read_processes` ``known``); ``tail -F`` follows the new file. Older
records are gone after two rotations: ``status`` after a re-run that did nothing names the last run that worked only
while its records are still there.

Each record names the process that wrote it (``pid``, and ``run_id``: the run manifest's id), so that ``status``
can merge the records of the processes of a scaled-out run (:func:`read_runs`, :func:`merge_records`).

The ETA covers the stages this process runs, over the whole pipeline's remaining work
(:func:`pipeline_eta`): each of them has ahead of it what is queued on its input edge plus what every stage
upstream (in this process or another) will still put there, and the slowest of them bounds the end. With
``--stages`` scale-out, a process running a downstream stage thus counts the requests still planned
upstream, not only what is queued for it now; the stages of other processes are timed by those processes
(each writes its own records to the stream; ``eta_scope`` lists the stages a record's ETA covers, or is
null when it covers the whole pipeline).

Each stage record also names its ``input_edge``, and, while a stage waits for something in watch mode, says
so: the stage runner's own unreachable-host breaker gives each waiting host's ``since`` and ``next_probe_at``
(Unix time, s) under ``unreachable`` (:class:`geoagent.runtime.worker.StageStats`), and a stage with a
``host_waits()`` hook (the model caller: each model whose host it waits for,
:meth:`geoagent.workers.model_caller.HostBreaker.waiting`) adds its list as ``host_waits``; the final record
(``finished``) has none. ``status`` (:func:`geoagent.status.stop_reason`) and the live display word them as
``waiting for host H (next probe in N s, at ...; unreachable since T: ...; K task(s) held / queued on E)``. They
are read once per tick, never on a task's path. While anything waits so, the record's ETA is unknown
(``eta_s`` null) and ``eta_waiting`` lists the hosts (:func:`eta_waits`). A run without watch mode holds such a
model's tasks for the rest of the run instead: a stage with a ``host_holds()`` hook (the model caller,
:meth:`geoagent.workers.model_caller.HostBreaker.holding`) adds those models as ``host_holds`` (``model``,
``host``, ``since``, ``held``, ``cause``), the final record included, so ``status`` names them from data
(:func:`geoagent.status.held_host_models`); likewise ``cut_off``: the models the model caller stopped because their
answers kept coming back empty at the output-token limit (:meth:`geoagent.workers.cutoff_breaker.CutOffBreaker.stops`),
and ``not_found``: those it stopped because their host answered that their path or model id does not exist
(:meth:`geoagent.workers.model_caller.AuthBreaker.not_found_stops`; walk39 #6).

A stage record's ``last_errors`` holds only the errors still open: an error of a host that answered a request
after it (the HTTP client's ``last_ok_at``, or the stage's breaker closed) moves to ``resolved_errors``
(``{"error", "host", "answered_at"}``, :func:`geoagent.runtime.worker.split_resolved_errors`), so ``status``
calls it resolved while the run goes on, not only once the campaign is complete.

The terminal display (rich ``Live``) shows per-stage rates, spend vs cap and the ETA; it is off when stdout
is not a TTY, so logs and CI output stay clean.

Pauses on the console: while a host or model key is paused by a ``Retry-After`` (up to the host's
``max_retry_after_s``, :data:`geoagent.runtime.http.DEFAULT_MAX_RETRY_AFTER_S` by default), each tick asks the HTTP client which pauses are in
force (:meth:`geoagent.runtime.http.HttpClient.pauses_in_force`) and :class:`PauseNotices` logs one warning line
per paused key once the pause has been in force for :data:`PAUSE_NOTICE_S` (60 s), then at most once per
:data:`PAUSE_NOTICE_S` while it lasts: the key (and its readable name), the time it still lasts, when it ends and
how many of this process's calls wait for it. A pause shorter than that prints nothing more than before (the
warning, if any, of the ``Retry-After`` itself). Warnings reach the console without a TTY too (``run``'s log
level), and rich's live display prints them above its table.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.files import append_jsonl, rotate_jsonl, rotated_jsonl_path
from geoagent.runtime.daemon import PipelineRun, elapsed_clock
from geoagent.runtime.queue import QueueCounts
from geoagent.runtime.worker import STALL_MIN_S, eta_s, split_resolved_errors

SpendFn = Callable[[], dict[str, Any]]
#: ``() -> [(key, seconds left, calls waiting), ...]``: the pauses in force (HttpClient.pauses_in_force)
PausesFn = Callable[[], Sequence[tuple[str, float, int]]]

log = logging.getLogger(__name__)

#: a pause in force this long (s) gets its first console line, then one per this many seconds while it lasts;
#: a shorter pause none (module docstring, "Pauses on the console")
PAUSE_NOTICE_S = 60.0

#: rotation (module docstring): the stream is renamed to ``progress.jsonl.1`` once it reaches this size, bytes; a
#: writer checks the size every :data:`ROTATE_CHECK_TICKS` records
ROTATE_BYTES = 64 * 1024 * 1024
ROTATE_CHECK_TICKS = 60


class PauseNotices:
    """Console lines for long ``Retry-After`` pauses (module docstring, "Pauses on the console").

    Call :meth:`tick` often (each progress tick, about once a second); it returns the lines it logged (as
    warnings, logger ``geoagent.runtime.progress``). A key gets a line when its pause has been in force for at
    least ``interval_s`` seconds (as this object saw it: from the first tick that found it paused) and its last
    line is at least ``interval_s`` old; a key whose pause ended is forgotten (a new pause starts over), so a
    pause shorter than ``interval_s`` never gets one.

    Parameters
    ----------
    pauses : callable
        ``() -> [(key, seconds_left, waiting)]``: :meth:`geoagent.runtime.http.HttpClient.pauses_in_force`.
    labels : callable or None
        ``() -> {host: readable name}`` (model or API name), for the line's ``(name)``.
    interval_s : float or None
        Seconds between lines for one key, and before its first (default: :data:`PAUSE_NOTICE_S` as it is when
        the object is made).
    """

    def __init__(self, pauses: PausesFn, labels: Callable[[], Mapping[str, str]] | None = None,
                 interval_s: float | None = None) -> None:
        self.pauses = pauses
        self.labels = labels
        self.interval_s = float(PAUSE_NOTICE_S if interval_s is None else interval_s)
        self._since: dict[str, float] = {}  # key -> monotonic time first seen paused
        self._said: dict[str, float] = {}  # key -> monotonic time of its last line

    def tick(self, now: float | None = None) -> list[str]:
        """Log (and return) the lines due now (``now``: ``time.monotonic()``, default the clock). A failing
        ``pauses`` or ``labels`` is logged, never raised (a display must not stop a run)."""
        now = time.monotonic() if now is None else float(now)
        try:
            current = list(self.pauses() or [])
        except Exception:  # noqa: BLE001 - the run goes on without the notice
            log.exception("pause notices: reading the pauses failed")
            return []
        keys = {str(k) for k, _, _ in current}
        for gone in set(self._since) - keys:
            self._since.pop(gone, None)
            self._said.pop(gone, None)
        lines = []
        for key, left, waiting in current:
            key = str(key)
            since = self._since.setdefault(key, now)
            last = self._said.get(key)
            if now - since < self.interval_s or (last is not None and now - last < self.interval_s):
                continue
            self._said[key] = now
            lines.append(self._line(key, float(left), int(waiting)))
        for line in lines:
            log.warning("%s", line)
        return lines

    def _line(self, key: str, left: float, waiting: int) -> str:
        from geoagent.status import _duration, _utc  # status imports this module
        from geoagent.textfmt import count_text

        labels: Mapping[str, str] = {}
        if self.labels is not None:
            try:
                labels = self.labels() or {}
            except Exception:  # noqa: BLE001 - the line goes without the name
                labels = {}
        host = key.split("/", 1)[0]
        name = f"{key} ({labels[host]})" if labels.get(host) else key
        what = "model" if "/" in key else "host"
        left = math.ceil(left)  # never "0 s" while it is in force
        return (f"paused: {what} {name} for another {_duration(left)} (until {_utc(time.time() + left)}; a "
                f"Retry-After, at most the host's max_retry_after_s): {count_text(waiting, 'call')} of this process waiting for it")


class Progress:
    """Tick callback for :func:`geoagent.runtime.daemon.run_pipeline`.

    Parameters
    ----------
    path : Path
        The JSONL stream file (appended; created with its folder).
    spend : callable or None
        Returns the ledger summary dict (``spent_usd``, ``cap_usd``, ...), or None for no ledger.
    live : bool or None
        Force the rich display on/off; default: on when stdout is a TTY.
    pipeline : sequence of (name, input_edge, output_edge or None), optional
        The campaign's whole pipeline in data-flow order (every stage, also those other processes run), so
        the ETA counts the work still upstream of this process's stages; default: this process's stages.
    http : callable or None
        Returns per-host HTTP counters (requests, retries, errors by reason): the API error rates.
    host_labels : dict or None
        ``{host: readable name}`` (model or API name) recorded with the HTTP counters, so ``status`` can
        name hosts the config does not show as they were (local fakes on ``127.0.0.1:<port>``). Each
        record adds the labels the running stages give for hosts found during the run (a stage's optional
        ``host_labels()`` method, e.g. the crawl's Mapillary thumbnail CDN hosts); for a host named both
        ways, this mapping's label wins.
    planned_by_model : dict or None
        ``{model name: model calls in the plan}``, recorded so ``status`` can say per model how many planned
        calls have a stored answer (as the run's summary does), also after a budget stop.
    lane_work : mapping or None
        ``{stage name: {lane: tasks}}``: per lane of a stage with lanes (the model caller: per model), its tasks
        left on the stage's input edge when the run started (the engine counts them once, from the recorded plan:
        :func:`geoagent.runtime.scope.left_in_plan`). Each record then gives each lane's ``left`` (those less
        the lane's done and dead-lettered since) and the stage's ETA times each lane's left by that lane's own
        rate (:func:`lanes_eta`), with the stage's rate as the floor: a finished fast model's rate no longer
        times a slow model's work. Default: none (the stage's rate alone).
    run_id : str or None
        Names the process's run in each record (``run_id``, with the writing process's ``pid``), so that
        ``status`` can tell apart the records of several processes of one campaign (``--stages`` scale-out)
        appending to the same stream (:func:`read_processes`); default: ``"<pid>-<6 hex digits>"``. The
        engine passes the run manifest's run id.
    pauses : callable or None
        ``() -> [(key, seconds_left, waiting)]``, the HTTP client's pauses in force
        (:meth:`geoagent.runtime.http.HttpClient.pauses_in_force`): each tick of a run still going logs the
        :class:`PauseNotices` lines due (module docstring, "Pauses on the console"); None: no such lines.
    """

    def __init__(
        self,
        path: Path,
        spend: SpendFn | None = None,
        live: bool | None = None,
        pipeline: Sequence[tuple[str, str, str | None]] | None = None,
        http: Callable[[], dict[str, Any]] | None = None,
        host_labels: dict[str, str] | None = None,
        planned_by_model: dict[str, int] | None = None,
        run_id: str | None = None,
        lane_work: Mapping[str, Mapping[str, int]] | None = None,
        pauses: PausesFn | None = None,
    ):
        self.path = Path(path)
        self._run: PipelineRun | None = None
        # long Retry-After pauses on the console (module docstring); none without the client's pauses
        self.pause_notices = (PauseNotices(pauses, labels=lambda: self.labels(self._run) if self._run else
                                           self.host_labels) if pauses is not None else None)
        self.lane_work = {str(k): dict(v) for k, v in (lane_work or {}).items()}
        self.run_id = run_id or f"{os.getpid()}-{secrets.token_hex(3)}"
        self.planned_by_model = dict(planned_by_model or {})
        self.http = http
        self.host_labels = dict(host_labels or {})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.spend = spend
        self.pipeline = list(pipeline) if pipeline is not None else None
        self.live_enabled = sys.stdout.isatty() if live is None else live
        self._live: Any = None
        self._t0 = time.time()
        self._ticks = 0
        #: the stream is rotated at this size (:data:`ROTATE_BYTES`; module docstring, "Rotation")
        self.rotate_bytes = ROTATE_BYTES

    async def __call__(self, run: PipelineRun) -> None:
        record = await self.snapshot(run)
        append_jsonl(self.path, [record], fsync=False)  # a torn line from a crash never swallows this one
        self._ticks += 1
        if self._ticks % ROTATE_CHECK_TICKS == 0:  # a stat every minute or so, not every tick
            try:
                rotate_jsonl(self.path, self.rotate_bytes)
            except OSError as exc:  # the stream is a display aid: a refused rename must not stop the run
                log.warning("progress stream %s not rotated: %s", self.path, exc)
        if self.pause_notices is not None and run.finished_at is None:
            self._run = run
            self.pause_notices.tick()
        if self.live_enabled:
            self._render(record, final=run.finished_at is not None)

    async def snapshot(self, run: PipelineRun) -> dict[str, Any]:
        counts = await run.counts()
        finished = run.finished_at is not None
        http = self.http() if self.http else None
        answered_at = {h: float(st.get("last_ok_at") or 0.0) for h, st in (http or {}).items() if isinstance(st, dict)}
        stages = []
        now = time.monotonic()
        for r in run.runners:
            sd = r.stats.as_dict(now)
            # errors of a host that answered since are resolved, also while the run goes on (status, live display)
            sd["last_errors"], sd["resolved_errors"] = split_resolved_errors(r.stats, answered_at)
            sd["input_edge"] = r.stage.input_edge  # status: how many tasks wait queued for a waiting stage
            waits = stage_host_waits(r.stage) if not finished else []
            if waits:
                sd["host_waits"] = waits
            holds = _stage_hook(r.stage, "host_holds")  # the final record too: they are left queued at the run's end
            if holds:
                sd["host_holds"] = holds
            cut = _stage_hook(r.stage, "cut_off_holds")  # models stopped for empty answers at their output limit
            if cut:
                sd["cut_off"] = cut
            nf = _stage_hook(r.stage, "not_found_holds")  # models whose host does not serve their path or id
            if nf:
                sd["not_found"] = nf
            ceiling = _rate_ceiling(r.stage)
            if ceiling is not None:  # status caps a scale-out run's merged capacities by it (merge_records)
                sd["rate_ceiling_per_s"] = round(ceiling, 6)
            stages.append(sd)
        # the ETA times each stage by its capacity (its rate while working), not by the display rate, which falls
        # while a stage waits for upstream work: a starved stage is not slower (module docstring, "Rates")
        # a stage not yet measured well enough (right after a start or resume: StageStats.eta_ready) has no rate
        # for it: its work ahead is not timed, and while no stage is, the ETA says "estimating" (eta_estimating)
        rates = {r.stage.name: r.stats.capacity_per_s() if r.stats.eta_ready() else 0.0 for r in run.runners}
        for sd in stages:  # never faster than a stage's configured limits allow (the model caller's rate limits)
            ceiling = sd.get("rate_ceiling_per_s")
            if ceiling is not None and rates.get(sd["stage"], 0.0) > ceiling:
                rates[sd["stage"]] = ceiling
        estimating = [] if finished else [
            {"stage": sd["stage"], "done": sd["eta_measured_done"], "over_s": sd["eta_measured_s"]}
            for r, sd in zip(run.runners, stages) if not r.stats.eta_ready() and not r.stats.finished]
        # a stage with lanes (the model caller, per model): each lane's tasks left timed by its own rate, the floor
        # of the stage's own time (its rate is mostly a fast lane's once that lane is done)
        floors: dict[str, float] = {}
        for r, sd in zip(run.runners, stages):
            start = self.lane_work.get(r.stage.name)
            if start and isinstance(sd.get("lanes"), dict):
                c = counts.get(r.stage.input_edge, QueueCounts())
                t = lanes_eta(start, sd["lanes"], pending=c.ready + c.leased, ceilings=_lane_ceilings(r.stage))
                if t is not None:
                    floors[r.stage.name] = t
        topology = self.pipeline or [(r.stage.name, r.stage.input_edge, r.stage.output_edge) for r in run.runners]
        eta, eta_stage = pipeline_eta([(n, i, o, rates.get(n)) for n, i, o in topology], counts, floors=floors)
        waiting = [] if finished else eta_waits(stages)
        stalled = [] if finished or waiting else stalled_stages(stages, counts)
        if waiting or stalled:  # work is held for a host that is down, or a stage with work ready completes
            eta, eta_stage = None, None  # nothing: no measured rate says when it ends (not "0 s", not a stale rate)
        if any(sd.get("budget_stopped") and sd.get("input_edge") == C.EDGE_REQUESTS for sd in stages):
            # the model calls left wait for a higher cap: no time says when they end (progress37 #3: "ETA 23 s" above
            # "BUDGET EXHAUSTED - draining", 22.5 s in the final record). Another stage's own cap (the geocoder's
            # Nominatim request cap) leaves the model calls going: their ETA stays (review37b #4)
            eta, eta_stage = None, None
        if eta is not None or waiting or stalled:
            estimating = []
        return {
            "t": round(time.time(), 3),
            "campaign": run.campaign,
            # live42 #4: the monotonic clock's seconds since the pipeline started, and that start on the wall clock
            # as read then: a step of the wall clock (NTP, by hand) changes neither, so a record's span stays its
            # process's (record_span; t - elapsed_s went before the start after a step back); a clock that counts
            # a suspend of the machine too (review42b #3: elapsed_clock)
            "elapsed_s": round(elapsed_clock() - run.started_mono, 3),
            "started": round(run.started_at, 3),
            "stages": stages,
            "queues": {k: asdict(v) for k, v in counts.items()},
            "spend": self.spend() if self.spend else None,
            "eta_s": None if eta is None else round(eta, 1),
            "eta_stage": eta_stage,
            # watch mode: the hosts whose outage holds work back, so the ETA is unknown (format_eta words it)
            **({"eta_waiting": waiting} if waiting else {}),
            # a stage with work ready that has completed nothing for long: the ETA is unknown (format_eta says so)
            **({"eta_stalled": stalled} if stalled else {}),
            # no time yet: the stages whose rate is not measured well enough yet (format_eta: "estimating")
            **({"eta_estimating": estimating} if estimating else {}),
            # None: the ETA covers the whole pipeline; else the stages it covers (this process's, --stages)
            "eta_scope": None if {n for n, _, _ in topology} <= set(rates) else list(rates),
            "http": http,
            "host_labels": self.labels(run) or None,
            "budget_stopped": run.budget_stopped,
            # the run took a stop signal and is finishing its in-flight work (status: "stopping", not "running")
            **({"stopping": run.stop_signal or "signal"} if run.stopped_by_signal and not finished else {}),
            "finished": finished,
            "pid": os.getpid(),  # which process wrote it (status: is it still alive?)
            "run_id": self.run_id,
            **({"planned_by_model": self.planned_by_model} if self.planned_by_model else {}),
        }

    def labels(self, run: PipelineRun) -> dict[str, str]:
        """The given host labels, plus those the running stages give (``stage.host_labels()``, when a stage
        has it) for hosts the given ones do not name (see the class docstring)."""
        out = dict(self.host_labels)
        for r in run.runners:
            found = getattr(r.stage, "host_labels", None)
            if not callable(found):
                continue
            try:
                extra = found()
            except Exception:  # noqa: BLE001 - a stage's label hook must not break the progress stream
                continue
            for host, label in (extra or {}).items():
                out.setdefault(str(host), str(label))
        return out

    def _render(self, record: dict[str, Any], final: bool) -> None:
        from rich.live import Live

        table = live_table(record, final)
        if self._live is None:
            self._live = Live(table, refresh_per_second=4, transient=False)
            self._live.start()
        else:
            self._live.update(table)
        if final:
            self._live.stop()
            self._live = None


#: the live display table's least width (columns; the terminal's width where narrower): its caption lines (spend,
#: ETA, the legend) are wrapped at the table's width, so a narrower table wrapped them on an 80-column terminal
LIVE_MIN_WIDTH = 80


def live_table(record: dict[str, Any], final: bool):
    """The live display's table (a ``rich.table.Table``) of one progress record (:meth:`Progress.snapshot`).

    Title: the campaign and ``this run: elapsed N s`` (every count in it is this run's; ``status`` gives the
    campaign's totals over every run). Columns per stage: ``done``, ``leased`` (tasks the stage has taken from
    its queue: being sent, or waiting for a model's concurrency or rate slot, so more than the models'
    ``concurrency`` added up; it read ``in flight`` and looked like a broken limit), ``retried``, ``dead``,
    ``rate/s`` and ``idle`` (s without a commit past the stall threshold). Caption, one line each: spend / cap,
    ETA (not when ``final``; :func:`geoagent.status.format_eta` in its compact form), a stop reason, and what
    ``leased`` means; the table is at least 80 columns wide (:data:`LIVE_MIN_WIDTH`, or the terminal's width if
    narrower) so that each caption line fits on one line of an 80-column terminal."""
    from rich.table import Table

    from geoagent.status import format_eta, stop_reason  # status imports this module

    table = Table(title=f"campaign {record['campaign']}  this run: elapsed {record['elapsed_s']:.0f} s", expand=False,
                  min_width=LIVE_MIN_WIDTH)
    for col in ("stage", "done", "leased", "retried", "dead", "rate/s", "idle"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    for s in record["stages"]:
        # "idle": nothing completed for longer than the stage's stall threshold (the rate/s falls meanwhile)
        idle = s.get("idle_s")
        idle_text = (f"{idle:.0f} s" if idle is not None and not s.get("finished")
                     and idle >= float(s.get("stall_after_s") or STALL_MIN_S) else "")
        table.add_row(s["stage"], str(s["done"]), str(s["in_flight"]), str(s["failed"]), str(s["dead"]),
                      f"{s['rate_per_s']:.2f}", idle_text)
    spend = record.get("spend") or {}
    caption = []
    if spend:
        caption.append(spend_caption(spend))
    if not final and not (record.get("budget_stopped") and record.get("eta_s") is None):
        # after the cost cap stopped the model calls only the calls in flight drain: no time to give
        caption.append(f"ETA {format_eta(record, compact=True)}")
    reason = stop_reason(record)
    if reason:
        caption.append(reason.upper() + (" - draining" if record.get("budget_stopped") and not final else ""))
    caption.append("leased: being sent, or waiting for a model's concurrency or rate slot")
    table.caption = "\n".join(caption)
    return table


def _hook_value(stage: Any, name: str) -> Any:
    """What a stage's optional no-argument hook ``name`` returns, or None when it has none or the hook fails (a
    progress tick never breaks on it)."""
    hook = getattr(stage, name, None)
    if not callable(hook):
        return None
    try:
        return hook()
    except Exception:  # noqa: BLE001 - the progress stream must go on
        return None


def _lane_ceilings(stage: Any) -> dict[str, float] | None:
    """A stage's ``lane_ceilings()`` (per lane, tasks/s; the model caller's per-model rate limits), or None."""
    found = _hook_value(stage, "lane_ceilings")
    if not isinstance(found, dict):
        return None
    return {str(k): float(v) for k, v in found.items() if isinstance(v, (int, float)) and v > 0} or None


def _rate_ceiling(stage: Any) -> float | None:
    """A stage's ``rate_ceiling_per_s()`` (tasks/s its configured limits allow: the model caller's rate limits,
    :meth:`geoagent.workers.model_caller.ModelCaller.rate_ceiling_per_s`), or None."""
    value = _hook_value(stage, "rate_ceiling_per_s")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def spend_caption(spend: dict[str, Any]) -> str:
    """The live display's spend line: everything that counts against the cap, settled spend first, then the
    unknown-outcome spend and the reservations of calls in flight when there are any (together
    :attr:`geoagent.runtime.ledger.LedgerSummary.committed_usd`), over the cap: ``"spend $0.0084 settled + $0.0116
    unknown-outcome / cap $0.0200"`` (progress37 #2: it showed the settled $0.0084 alone beside "BUDGET EXHAUSTED",
    as if 42 % of the cap were used). ``spend``: a progress record's ``spend``
    (:meth:`~geoagent.runtime.ledger.LedgerSummary.to_json`); USD."""
    from geoagent.status import format_usd  # status imports this module

    line = f"spend {format_usd(spend.get('spent_usd'))} settled"  # as the run summary and status word it
    for key, what in (("unknown_usd", "unknown-outcome"), ("reserved_usd", "reserved")):
        value = spend.get(key)
        if isinstance(value, (int, float)) and value > 0:
            line += f" + {format_usd(value)} {what}"
    return line + f" / cap {format_usd(spend.get('cap_usd'))}"


def stage_host_waits(stage: Any) -> list[dict[str, Any]]:
    """What a stage waits for, from its optional ``host_waits()`` hook (the model caller in watch mode: each
    model whose host is unreachable, :meth:`geoagent.workers.model_caller.HostBreaker.waiting`); ``[]`` for a
    stage without one, or when the hook fails (logged: a display must never stop a run)."""
    return _stage_hook(stage, "host_waits")


def _stage_hook(stage: Any, name: str) -> list[dict[str, Any]]:
    """The records of a stage's optional hook ``name`` (``host_waits``, ``host_holds``, ``cut_off_holds``,
    ``not_found_holds``: the model caller's), dicts only; ``[]`` for a stage without it, or when it fails (logged: a display must never
    stop a run)."""
    hook = getattr(stage, name, None)
    if not callable(hook):
        return []
    try:
        return [w for w in hook() or [] if isinstance(w, dict)]
    except Exception:  # noqa: BLE001 - the progress stream goes on without it
        log.exception("stage %s: %s failed", getattr(stage, "name", "?"), name)
        return []


def eta_waits(stages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What a watch-mode run waits for, from its stage records (:meth:`Progress.snapshot`): one
    ``{"host": H, "stage": S, "model": M or None}`` per model whose host the model caller waits for (the
    record's ``host_waits``) and per host a stage runner's breaker waits for (``unreachable`` entries with a
    next probe); ``[]`` when nothing waits. While anything waits the ETA is unknown: the work held for such a
    host is done only after the host answers again, which no measured rate foretells (an ETA computed from the
    stage's rate read "0 s" while every task of a model was held)."""
    out: list[dict[str, Any]] = []
    for sd in stages:
        for w in sd.get("host_waits") or []:
            if isinstance(w, dict) and w.get("host"):
                out.append({"host": str(w["host"]), "stage": sd.get("stage"), "model": w.get("model")})
        for host, info in (sd.get("unreachable") or {}).items():
            if isinstance(info, dict) and info.get("next_probe_in_s") is not None:
                out.append({"host": str(host), "stage": sd.get("stage"), "model": None})
    return out


def stage_stalled(sd: Mapping[str, Any], counts: Mapping[str, QueueCounts], age_s: float = 0.0) -> bool:
    """Whether a stage record (:meth:`geoagent.runtime.worker.StageStats.as_dict`) read ``age_s`` seconds after it
    was written shows a stalled stage: not finished nor budget-stopped, it has completed something (``idle_s``
    not None), work is ready for it (tasks ready on its ``input_edge`` in ``counts``, or in flight in it) and
    it has completed nothing for at least its ``stall_after_s``. A stage with nothing ready is starved, not
    stalled; a record of an older version (no ``idle_s``) is never stalled."""
    idle = sd.get("idle_s")
    if idle is None or sd.get("finished") or sd.get("budget_stopped"):
        return False
    c = counts.get(str(sd.get("input_edge")), QueueCounts())
    if not (c.ready > 0 or int(sd.get("in_flight") or 0) > 0):
        return False
    return float(idle) + age_s >= float(sd.get("stall_after_s") or STALL_MIN_S)


def stalled_stages(stages: Sequence[Mapping[str, Any]], counts: Mapping[str, QueueCounts],
                   age_s: float = 0.0) -> list[dict[str, Any]]:
    """The stalled stages of a record's stage list (:func:`stage_stalled`), read ``age_s`` seconds after it was
    written: one ``{"stage": S, "idle_s": N, "ready": R, "in_flight": F, "input_edge": E}`` each (``idle_s``:
    seconds since its last commit as of the reading; ``ready``: tasks ready on its input edge). While any is,
    the ETA is unknown (``eta_stalled``; :func:`geoagent.status.format_eta` words it): its capacity was measured
    before it stopped completing, and no rate says when it resumes."""
    out = []
    for sd in stages:
        if stage_stalled(sd, counts, age_s):
            edge = str(sd.get("input_edge"))
            out.append({"stage": sd.get("stage"), "idle_s": round(float(sd["idle_s"]) + age_s, 1),
                        "ready": counts.get(edge, QueueCounts()).ready, "in_flight": int(sd.get("in_flight") or 0),
                        "input_edge": edge})
    return out


def rate_as_of(sd: Mapping[str, Any], age_s: float) -> float:
    """A stage record's display rate carried on ``age_s`` seconds after it was written, tasks/s: the tasks it
    counted over its ``rate_window_s`` over that window plus ``age_s`` (the process completed nothing since,
    as far as the reader knows); the rate as written for a finished stage (``finished``: its rate is over its
    working span, which ended at its last commit) and for a record of an older version (no ``rate_window_s``)."""
    rate = float(sd.get("rate_per_s") or 0.0)
    window = sd.get("rate_window_s")
    if sd.get("finished"):
        return rate
    if window is None or age_s <= 0:
        return rate
    window = float(window)
    return rate * window / (window + age_s) if window + age_s > 0 else 0.0


def record_as_of(record: Mapping[str, Any], now: float, counts: Mapping[str, QueueCounts] | None = None) -> dict[str, Any]:
    """A running process's progress record as it reads at ``now`` (Unix time, s), for ``status``: its stages'
    display rates carried on to ``now`` (:func:`rate_as_of`: a process that stopped writing records shows them
    falling, not the rate it last had) and ``idle_s`` counted up to ``now``; when a stage has become stalled so
    (:func:`stalled_stages`, against ``counts``, default the record's own queue counts) and no host wait already
    makes the ETA unknown, ``eta_s`` is None and ``eta_stalled`` says which. A finished record is returned as it
    is (a copy)."""
    rec = dict(record)
    if rec.get("finished"):
        return rec
    age = max(0.0, float(now) - float(rec.get("t") or now))
    if counts is None:
        counts = record_counts(rec)
    stages = []
    for sd in rec.get("stages", []):
        sd = dict(sd)
        sd["rate_per_s"] = rate_as_of(sd, age)
        if sd.get("rate_window_s") is not None and not sd.get("finished"):  # a finished stage's window ended
            sd["rate_window_s"] = round(float(sd["rate_window_s"]) + age, 3)
        if sd.get("idle_s") is not None:
            sd["idle_s"] = round(float(sd["idle_s"]) + age, 1)
        stages.append(sd)
    rec["stages"] = stages
    if not rec.get("eta_waiting"):
        stalled = stalled_stages(stages, counts)
        if stalled:
            rec.update(eta_s=None, eta_stage=None, eta_stalled=stalled)
    return rec


def record_counts(record: Mapping[str, Any]) -> dict[str, QueueCounts]:
    """The queue counts a progress record holds (its ``queues``: edge -> counts dict), as edge ->
    :class:`QueueCounts`; ``{}`` for none."""
    return {e: QueueCounts(**{k: int(v.get(k, 0)) for k in ("ready", "leased", "done", "dead")})
            for e, v in (record.get("queues") or {}).items() if isinstance(v, dict)}


def lanes_eta(start: Mapping[str, int], lanes: Mapping[str, Any], *, pending: int | None = None,
              ceilings: Mapping[str, float] | None = None) -> float | None:
    """Seconds until every lane of a stage has finished its tasks, each at its own rate; None when unknown.

    ``start``: per lane, its tasks left on the stage's input edge when the run started; ``lanes``: the stage
    record's ``lanes`` (per lane ``done``, ``dead`` since the run started and ``rate_per_s``,
    :meth:`geoagent.runtime.worker.StageStats.as_dict`), each given ``left`` here: ``start - done - dead``, at
    least 0; 0 for a lane that ran dry (``dry``: no task of it left in the queue for this process, the rest done or
    leased by another process); and where these add up to more than ``pending`` (the input edge's ready + leased
    tasks now, when given: another process of the campaign did some of them, fixpace42 #2), each lane's share of
    ``pending`` (rounded up), so the lanes never have more left between them than the edge holds. The time is the
    largest ``left / rate_per_s`` over the lanes with tasks left (0.0 when none has any); None when such a lane has
    no rate yet (the caller falls back to the stage's rate). ``ceilings`` (per lane, tasks/s: its model's configured rate limit,
    :meth:`geoagent.workers.model_caller.ModelCaller.lane_ceilings`) caps each lane's measured rate (review37b #2: a
    lane limited to 10 per 5 s was timed at its burst's 2.85/s). Lanes ``start`` does not name are not counted (no
    figure for them). Source: the walkthrough's two-model run (ETA 4 s from the stage's rate while the slow model's
    180 tasks took 24 s)."""
    worst = 0.0
    unknown = False
    lefts: dict[str, int] = {}
    for lane, n0 in start.items():
        info = lanes.get(lane)
        if isinstance(info, dict):
            done = int(info.get("done") or 0) + int(info.get("dead") or 0)
            lefts[lane] = 0 if info.get("dry") else max(0, int(n0) - done)
    total = sum(lefts.values())
    if pending is not None and total > max(0, int(pending)):
        # each lane's share of the edge's tasks: with another model caller at work, those counted at the start that
        # it did are not left here (each lane clamped to the whole edge alone: N processes, N times the time)
        p = max(0, int(pending))
        lefts = {lane: -(-n * p // total) for lane, n in lefts.items()}
    for lane, left in lefts.items():
        info = lanes[lane]
        info["left"] = left
        if left <= 0:
            continue
        rate = float(info.get("rate_per_s") or 0.0)
        if rate <= 0:
            unknown = True
            continue
        rate = min(rate, float((ceilings or {}).get(lane) or math.inf))  # never faster than its rate limit
        worst = max(worst, left / rate)
    return None if unknown else worst


def pipeline_eta(
    stages: Sequence[tuple[str, str, str | None, float | None]], counts: Mapping[str, QueueCounts],
    floors: Mapping[str, float] | None = None,
) -> tuple[float | None, str | None]:
    """Seconds until the pipeline is drained, and the stage that bounds it.

    For each stage, the work still ahead of it is its input edge's ready + leased tasks plus what the
    stages upstream will still put on that edge: their own work still ahead times their observed yield
    (tasks on their output edge per task of their input edge done or dead-lettered so far; 1 before any is
    known, and 1 where several stages feed one edge). Its time left is that work over its recent rate
    (:func:`geoagent.runtime.worker.eta_s`); the slowest stage bounds the end, so the ETA is the largest. The
    stage named is the bottleneck: the one with that largest time, or, when that one only keeps pace with its
    input, the stage upstream that feeds it (:func:`_bottleneck`).
    Stages with work ahead but no measured rate yet are left out, unless every measured stage is done: then
    the ETA is unknown (None), not 0 s (work is left that no stage is measured to do). A stage whose rate is None runs in
    another process (``--stages`` scale-out): its work ahead still flows into the stages downstream of it,
    but its own time is not estimated here.

    Parameters
    ----------
    stages : sequence of (name, input_edge, output_edge or None, rate_per_s or None)
        The pipeline's stages in data-flow order (producers before consumers); rates in tasks/s, None for
        a stage this process does not run.
    counts : mapping of edge -> QueueCounts
        Current counts of every edge queue.
    floors : mapping of stage name -> seconds, optional
        A lower bound of a stage's own time (the model caller: its slowest model's tasks left at that model's
        rate, :func:`lanes_eta`); its time is the larger of the two.

    Returns
    -------
    (eta_s, stage) : (float or None, str or None)
        Seconds left (0.0 when nothing is left) and the bounding stage's name; ``(None, None)`` when some
        stage has work ahead but none has a measured rate yet.
    """
    producers: dict[str, list[tuple[str, str]]] = {}
    for name, in_edge, out_edge, _ in stages:
        if out_edge:
            producers.setdefault(out_edge, []).append((name, in_edge))
    ahead: dict[str, float] = {}  # edge -> tasks still to arrive on it or wait there

    def work_ahead(edge: str, seen: frozenset[str] = frozenset()) -> float:
        if edge in ahead:
            return ahead[edge]
        c = counts.get(edge, QueueCounts())
        total = float(c.ready + c.leased)
        for _, in_edge in producers.get(edge, []):
            if in_edge in seen or in_edge == edge:  # a cycle: count only what is queued
                continue
            up = counts.get(in_edge, QueueCounts())
            processed = up.done + up.dead
            made = c.ready + c.leased + c.done + c.dead
            ratio = made / processed if processed and made and len(producers[edge]) == 1 else 1.0
            total += ratio * work_ahead(in_edge, seen | {edge})
        ahead[edge] = total
        return total

    best: tuple[float, str] | None = None
    unknown = False
    times: dict[str, float] = {}
    for name, in_edge, _, rate in stages:
        if rate is None:  # another process's stage: its work counts downstream, its time is its own
            continue
        t = eta_s(round(work_ahead(in_edge)), rate)
        if t is None:
            unknown = True
            continue
        if floors and name in floors:
            t = max(t, float(floors[name]))
        times[name] = t
        if best is None or t > best[0]:
            best = (t, name)
    if best is None or (unknown and best[0] <= 0):
        # the measured stages are done but some stage with work ahead has no rate (e.g. a geocoder whose every
        # request fails): unknown, not 0 s
        return (None, None) if unknown else (0.0, None)
    if best[0] <= 0:
        return (0.0, None)
    return best[0], _bottleneck(best[1], stages, counts, times)


#: a stage "keeps up" with its input when what waits on its input edge would take it at most this long, s
KEEP_UP_S = 5.0
#: ... and its rate is at least this share of what its producer puts on that edge per second
KEEP_UP_RATE_SHARE = 0.8


def _bottleneck(name: str, stages: Sequence[tuple[str, str, str | None, float | None]],
                counts: Mapping[str, QueueCounts], times: Mapping[str, float]) -> str:
    """The stage to name as bounding the ETA, starting from ``name`` (the one whose own time is the largest).

    A stage downstream of a slower one is fed no faster than that one finishes work, so its measured rate is
    the arrival rate and its time left (all the work still to come, over that rate) is at least the upstream
    stage's: the largest time then falls on the last stage of the pipeline (the aggregator) although the model
    caller is the one draining slowest. So while the stage keeps up with its input (what waits on its input
    edge is at most :data:`KEEP_UP_S` seconds of its work) and runs at least :data:`KEEP_UP_RATE_SHARE` of its
    single producer's output rate (producer's rate times its observed yield), the producer is named instead
    (followed only to stages this process times, with work left). A stage genuinely slower than its producer,
    or with a backlog, stays named.
    """
    by_name = {n: (i, r) for n, i, _, r in stages}
    producers: dict[str, list[str]] = {}
    for n, _, o, _ in stages:
        if o:
            producers.setdefault(o, []).append(n)
    seen = {name}
    while True:
        in_edge, rate = by_name[name]
        prods = producers.get(in_edge, [])
        if len(prods) != 1 or rate is None or rate <= 0:
            return name
        p = prods[0]
        p_in, p_rate = by_name[p]
        if p in seen or p_rate is None or p_rate <= 0 or times.get(p, 0.0) <= 0:
            return name
        c, up = counts.get(in_edge, QueueCounts()), counts.get(p_in, QueueCounts())
        processed, made = up.done + up.dead, c.ready + c.leased + c.done + c.dead
        yield_ = made / processed if processed and made else 1.0
        keeping_up = c.ready <= max(1.0, rate * KEEP_UP_S)
        if not (keeping_up and rate >= KEEP_UP_RATE_SHARE * p_rate * yield_):
            return name
        name = p
        seen.add(p)


def did_work(record: dict[str, Any]) -> bool:
    """Whether a progress record's run finished, retried or dead-lettered any task (a no-op re-run did not)."""
    return any(sd.get("done") or sd.get("failed") or sd.get("dead") for sd in record.get("stages", []))


def _records_backwards(path: Path, max_bytes: int) -> Iterator[dict[str, Any]]:
    """The records of a progress stream from the last to the first, searching back at most ``max_bytes`` bytes
    from the end (torn or unparsable lines skipped), into the rotated file (``progress.jsonl.1``: module docstring,
    "Rotation") once the current one is read whole.

    Both files are opened before either is read, and each is judged by its open descriptor, so a rotation while the
    reader looks (review42c #2) neither hides the rotated file (its budget was spent on the name's size before the
    rename) nor reads one file twice (the file just read is now the rotated one: same inode, skipped)."""
    with _stream_files(Path(path)) as handles:
        budget = max_bytes
        for fh, st in handles:
            if budget <= 0:
                return
            yield from _file_records_backwards(fh, budget)
            budget -= st.st_size


@contextlib.contextmanager
def _stream_files(path: Path) -> Iterator[list[tuple[Any, os.stat_result]]]:
    """A progress stream's files, current then rotated (``progress.jsonl.1``), each opened (binary) before either is
    read, as ``(file, its fstat)``, closed on exit. A file rotated between the two opens (the same inode under both
    names) is opened once; a missing one (never rotated, or gone) is left out (review42c #2)."""
    handles: list[tuple[Any, os.stat_result]] = []
    try:
        for part in (path, rotated_jsonl_path(path)):
            try:
                fh = part.open("rb")
            except OSError:  # none (never rotated), or gone
                continue
            st = os.fstat(fh.fileno())
            if any((st.st_dev, st.st_ino) == (s.st_dev, s.st_ino) for _, s in handles):
                fh.close()  # rotated between the two opens: the file already opened under the current name
                continue
            handles.append((fh, st))
        yield handles
    finally:
        for fh, _ in handles:
            fh.close()


def _file_records_backwards(fh: Any, max_bytes: int) -> Iterator[dict[str, Any]]:
    """:func:`_records_backwards` of one open file (binary)."""
    chunk = 256 * 1024
    end = fh.seek(0, 2)
    pos, tail = end, b""
    while pos > 0 and end - pos < max_bytes:
        start = max(0, pos - chunk)
        fh.seek(start)
        data = fh.read(pos - start) + tail
        pos = start
        lines = data.split(b"\n")
        tail = lines.pop(0) if pos > 0 else b""  # maybe a partial line: completed by the next chunk
        for line in reversed(lines):
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec


#: how far back from the stream's end (across ``progress.jsonl.1`` too) the readers here look, bytes: a few thousand
#: records, so ``status`` never reads the whole 128 MiB a rotated stream may hold; processes known to be of the latest
#: run are looked for further back (:func:`read_processes` ``known``, fixstatus43 #3)
READ_WINDOW_BYTES = 8 * 1024 * 1024


def read_last_with_work(path: Path, max_bytes: int = READ_WINDOW_BYTES) -> dict[str, Any] | None:
    """The last record of a progress stream whose run did some work (:func:`did_work`), searching back at most
    ``max_bytes`` bytes from the end; None if there is none there (for ``status`` after a no-op re-run)."""
    return next((rec for rec in _records_backwards(path, max_bytes) if did_work(rec)), None)


#: records of several processes may land in the stream slightly out of time order; :func:`read_runs`
#: reads this many seconds further back than the start of the earliest process it has found, s
ORDER_SLACK_S = 30.0


def record_span(record: Mapping[str, Any]) -> tuple[float, float]:
    """``(started, last)``: when a record's process started its pipeline and when it wrote the record (Unix time,
    s): its ``started`` (the wall clock read once at the start) and ``started + elapsed_s`` (``elapsed_s`` from
    :func:`geoagent.runtime.daemon.elapsed_clock`, which counts a suspend of the machine too), so a step of the wall clock while the process runs moves neither and the span never ends
    before it starts (live42 #4: after a step back of an hour, ``t - elapsed_s`` put the start after ``t``).
    A record of an earlier version, without ``started``: ``t - elapsed_s`` and ``t``."""
    elapsed = float(record.get("elapsed_s") or 0.0)
    started = record.get("started")
    if isinstance(started, (int, float)) and not isinstance(started, bool):
        return float(started), float(started) + max(0.0, elapsed)
    t = float(record.get("t") or 0.0)
    return t - elapsed, t


def read_runs(path: Path, max_bytes: int = READ_WINDOW_BYTES, *, first_only: bool = False) -> list[list[dict[str, Any]]]:
    """The runs of a campaign in its progress stream, newest first: per run, the latest record of each of its
    processes, newest first; ``[]`` for no stream.

    Several processes of one campaign (``run --stages`` scale-out) append their records to the same stream,
    each naming itself (``run_id``, ``pid``; records of older versions, without ``run_id``, count as one
    process). A run is a set of processes whose spans (:func:`record_span`: from a process's start to its latest
    record) overlap, one with the next: processes that ran at the same time, whether they ended, were killed or
    still run. A process started after every other had ended starts a run of its own, so a campaign run by one
    process at a time has runs of one record each. Searches back at most ``max_bytes`` bytes from the end (a
    process whose last record lies further back is not found); ``first_only``: only the newest run, searching
    no further than :data:`ORDER_SLACK_S` before the start of its earliest process.
    """
    return _scan_runs(path, max_bytes, first_only)[0]


def _scan_runs(path: Path, max_bytes: int, first_only: bool) -> tuple[list[list[dict[str, Any]]], float | None]:
    """:func:`read_runs`, and the time (``t``) of the oldest record it read (None: it read none): every record
    written more than :data:`ORDER_SLACK_S` after that lies in what it read."""
    seen: set[Any] = set()
    runs: list[list[tuple[float, float, dict[str, Any]]]] = []
    oldest: float | None = None
    for rec in _records_backwards(path, max_bytes):
        started, t = record_span(rec)
        oldest = float(rec.get("t") or 0.0) if oldest is None else min(oldest, float(rec.get("t") or 0.0))
        if first_only and runs and t < min(s for s, _, _ in runs[0]) - ORDER_SLACK_S:
            break  # no process that ends this early overlaps one of the run
        key = rec.get("run_id") or None
        if key in seen:
            continue
        seen.add(key)
        # processes come in order of their latest record, newest first: one that overlaps no process of a run
        # found so far overlaps none found later either
        for run in runs:
            if any(started <= t1 and t >= s1 for s1, t1, _ in run):
                run.append((started, t, rec))
                break
        else:
            if not (first_only and runs):
                runs.append([(started, t, rec)])
    return [[rec for _, _, rec in run] for run in runs], oldest


def read_processes(path: Path, max_bytes: int = READ_WINDOW_BYTES, *,
                   known: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The latest record of each process of a campaign's latest run (:func:`read_runs`), newest first; ``[]``
    for no stream. A campaign run by one process at a time gives one record, the last (as :func:`read_last`).

    ``known``: the processes of the campaign the caller knows of from elsewhere (``status``: the run entries
    ``manifest.json`` records on this machine, :func:`geoagent.runtime.manifest.local_run_processes`), each
    ``{"run_id", "started": Unix s, "alive": bool, "ended": Unix s or None}``. The search back stops after
    ``max_bytes``, where the other processes' records can bury one that wrote nothing for a while (a stalled
    process beside a busy one, or one that ended long before them: fixstatus43 #3, which status then left out or
    showed as the whole run). So each known process that is alive now (so beside the run found, however long ago it
    last wrote), or that ended while a process of the run found ran (the entry's span overlapping theirs) with its
    last record past what was read, is looked for in the rest of the stream and its rotated file
    (:func:`latest_records_of`), and its latest record joins the run, after the others. Only one that started before the oldest record read is looked
    for (every record of one that started later lies in the window: none there, none at all), so a status call
    reads past the window only while such a process exists. One whose every record is gone with the rotations is
    still left out."""
    runs, oldest = _scan_runs(path, max_bytes, True)
    found = runs[0] if runs else []
    if not found or oldest is None:
        return found
    have = {r.get("run_id") for r in found}
    spans = [record_span(r) for r in found]
    first, last = min(s for s, _ in spans), max(t for _, t in spans)
    alive, ended_beside = [], []
    for proc in known:
        run_id, started, ended = proc.get("run_id"), proc.get("started"), proc.get("ended")
        if not isinstance(run_id, str) or not run_id or run_id in have or not isinstance(started, (int, float)):
            continue
        if started > oldest + ORDER_SLACK_S:
            continue  # all of its records would lie in the window read: it wrote none yet
        if proc.get("alive"):  # running now, so beside the run found, however long ago it last wrote
            alive.append(run_id)
        elif isinstance(ended, (int, float)) and ended > first and started < last:
            # its run entry's span overlaps the run's (a run before, ended before this one began, never does)
            ended_beside.append(run_id)
    more = latest_records_of(path, alive + ended_beside) if alive or ended_beside else {}
    # an ended one counts only when its last record lies past what was read: one read there was judged by its span
    extra = [r for rid, r in more.items() if rid in alive or float(r.get("t") or 0.0) < oldest]
    return found + sorted(extra, key=lambda r: -record_span(r)[1])


def latest_records_of(path: Path, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{run_id: its latest record}`` for the processes ``run_ids`` in a progress stream and its rotated file
    (searched back from the end, to the first record if need be, stopping once every one is found; one not found is
    left out). A chunk is parsed only where it holds one of their ``"run_id":"<id>"`` texts (a byte search, as
    orjson writes the records), so the whole 128 MiB of a rotated stream takes well under a second
    (fixstatus43 #3)."""
    needles = {rid: orjson.dumps({"run_id": rid})[1:-1] for rid in dict.fromkeys(run_ids)}
    out: dict[str, dict[str, Any]] = {}
    if not needles:
        return out
    for data in _chunks_backwards(path):
        hits = [rid for rid, n in needles.items() if rid not in out and n in data]
        if not hits:
            continue
        for line in reversed(data.split(b"\n")):
            for rid in hits:
                if rid in out or needles[rid] not in line:
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and rec.get("run_id") == rid:
                    out[rid] = rec
        if len(out) == len(needles):
            break
    return out


def _chunks_backwards(path: Path, chunk: int = 4 * 1024 * 1024) -> Iterator[bytes]:
    """Whole lines of a progress stream, then of its rotated file, in chunks of about ``chunk`` bytes from the end
    back to the start (each chunk's lines in file order; a line split across a chunk boundary comes whole with the
    earlier chunk). Files opened as :func:`_records_backwards` opens them (a rotation meanwhile: each file once)."""
    with _stream_files(Path(path)) as handles:
        for fh, _ in handles:
            pos, tail = fh.seek(0, 2), b""
            while pos > 0:
                start = max(0, pos - chunk)
                fh.seek(start)
                data = fh.read(pos - start) + tail
                pos = start
                if pos == 0:
                    yield data
                    break
                # the bytes before the first newline may be the end of a line that begins in the earlier chunk
                tail, sep, body = data.partition(b"\n")
                if not sep:
                    tail = data  # no line ends in this chunk: it joins the earlier one
                    continue
                yield body


def read_last(path: Path) -> dict[str, Any] | None:
    """The last complete record of a progress stream (in its last 64 KiB; in the rotated file when the current one
    holds none yet), or None if there is none (for ``status``)."""
    return next(_records_backwards(Path(path), 65536), None)


#: per-stage counters summed over every process of a run (each counts its own work since it started)
_SUMMED = ("done", "failed", "dead", "missing", "released")
#: per-stage figures of the moment, summed over the running processes only
_RUNNING_ONLY = ("in_flight", "held")


def merge_records(
    records: Sequence[Mapping[str, Any]],
    running: Sequence[bool],
    pipeline: Sequence[tuple[str, str, str | None]] | None = None,
    counts: Mapping[str, QueueCounts] | None = None,
    *,
    now: float | None = None,
    silent: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """One progress record for a run of several processes (``--stages`` scale-out), for ``status``.

    Parameters
    ----------
    records : sequence of dict
        The latest record of each process (:func:`read_processes`), at least one.
    running : sequence of bool, same length
        Whether each record's process is running now (``status`` decides: no final record, its pid alive,
        the record recent).
    pipeline : sequence of (name, input_edge, output_edge or None), optional
        The campaign's stages in data-flow order (stage order and the ETA's topology); default: the stages
        as the records name them.
    counts : mapping of edge -> QueueCounts, optional
        Queue counts to time the ETA against (``status`` reads them now); default: the newest record's.
    now : float, optional
        When the records are read (Unix time, s; default: the newest record's ``t``): a running process's
        display rates are carried on to it (:func:`rate_as_of`) and its stages' ``idle_s`` counted up to it.
    silent : sequence of bool, same length, optional
        Whether each record's process is silent (``status``: its pid exists but it has written no record for
        a while, :func:`geoagent.status.process_state`). While no process runs and one is silent, the run is
        not over, so no process's rates are summed as if live (``rate_per_s`` 0, ``rate_pids`` empty).

    Returns
    -------
    dict
        A record shaped as :meth:`Progress.snapshot` writes one, plus ``processes``: per record
        ``{"pid", "run_id", "stages", "figures", "running", "finished", "t", "started", "last"}`` (Unix times, s;
        ``figures``: the process's own ``stage``, ``rate_per_s`` and ``done`` per stage). Per stage:
        ``done``, ``failed``, ``dead``, ``missing``, ``released`` summed over every process (each counts its own
        work since it started); ``rate_per_s`` (each carried on to ``now``), ``capacity_per_s`` (of the
        running processes whose stage is not stalled, :func:`stage_stalled`), ``in_flight``, ``held`` summed
        over the running ones (over all when none runs and none is silent, i.e. the run is over: each as it
        left them, as a one-process run's last record shows them; over none when none runs but one is silent:
        an ended or silent process's rate is never summed as if live); ``idle_s`` the least and
        ``stall_after_s`` the largest of the running ones; ``pids`` says which
        processes ran the stage, ``rate_pids`` whose figures of the moment are summed; ``last_errors``,
        ``resolved_errors`` and ``budget_refusals`` of all (each distinct once), ``budget_refused`` summed. A model's ``host_waits`` and ``host_holds`` entries (one per model and host)
        and an ``unreachable`` host's entry come from those same processes (and, for ``unreachable``, from those
        that ended; a process not running has no next probe), with the ``pids`` that report it and ``held``
        summed. The ETA is :func:`pipeline_eta` over the running
        processes' summed capacities (a stage no running process runs is not timed; ``eta_scope`` lists those
        that are, None when every stage is, and ``eta_untimed`` the others), unknown while any running process
        waits for a host (``eta_waiting``) or while a stage is stalled in every running process of it
        (``eta_stalled``, :func:`stalled_stages`).
        ``http`` counters are summed per host; ``elapsed_s`` runs from the earliest process's start;
        ``finished`` is True when every process ended with its final record. A run over sums, per stage, the
        figures of the processes that ran alongside the last one to end that stage (a run chains processes
        overlapping one with the next: one that ended before that last one started is left out of its rate).
    """
    # the newest by its span's end (record_span), not by t: a record written before a step back of the wall clock
    # has a later t than one written after it (live42 #4)
    newest = max(records, key=lambda r: record_span(r)[1])
    now = float(newest.get("t") or 0.0) if now is None else float(now)
    if counts is None:
        counts = record_counts(newest)
    order = [n for n, _, _ in pipeline] if pipeline else []
    stages: dict[str, dict[str, Any]] = {}
    processes: list[dict[str, Any]] = []
    http: dict[str, dict[str, Any]] = {}
    labels: dict[str, str] = {}
    # no process running (the run ended, or was killed): each process's figures as it left them, as the record of
    # a run of one process shows them after its end; but while one is silent (it may still run, stalled) the run is
    # not over and none of them is live: no rate is summed (an ended or silent process's rate is not a rate now)
    if any(running):
        counted = list(running)
    elif silent is not None and any(silent):
        counted = [False] * len(records)
    else:
        counted = [True] * len(records)
    # the run over: per stage, the processes that ran it alongside the last one to end it (a run chains processes
    # that overlap one with the next: one that had ended before the last one started was not part of its rate)
    last_span: dict[str, tuple[float, float]] = {}
    if not any(running) and all(counted):
        for rec in records:
            span = record_span(rec)
            for sd in rec.get("stages", []):
                if span[1] >= last_span.get(sd.get("stage"), (0.0, -math.inf))[1]:
                    last_span[sd.get("stage")] = span
    for rec, live, figures_of_rec in zip(records, running, counted):
        age = max(0.0, now - float(rec.get("t") or now)) if any(running) else 0.0  # the run over: as left
        pid = rec.get("pid")
        started, t = record_span(rec)
        processes.append({"pid": pid, "run_id": rec.get("run_id"), "running": bool(live),
                          # "t": the record's wall time as written (the ages status counts to now); "last": its
                          # span's end (record_span), in the frame of its start
                          "finished": bool(rec.get("finished")), "t": float(rec.get("t") or t), "last": t,
                          "started": started,
                          # the signal a running process took, finishing its calls in flight (review45a #5)
                          **({"stopping": rec["stopping"]} if live and rec.get("stopping") else {}),
                          "stages": [sd.get("stage") for sd in rec.get("stages", [])],
                          "figures": [{"stage": sd.get("stage"), "done": sd.get("done"),
                                       "rate_per_s": round(rate_as_of(sd, age), 3) if live else sd.get("rate_per_s")}
                                      for sd in rec.get("stages", [])]})
        for sd in rec.get("stages", []):
            name = sd.get("stage")
            figures_now = figures_of_rec and (name not in last_span or (
                started <= last_span[name][1] and t >= last_span[name][0]))
            m = stages.setdefault(name, {
                "stage": name, **{k: 0 for k in _SUMMED + _RUNNING_ONLY}, "rate_per_s": 0.0, "capacity_per_s": 0.0,
                "idle_s": None, "stall_after_s": None, "finished": True,
                "budget_stopped": False, "last_errors": [], "resolved_errors": [], "unreachable": {},
                "budget_refusals": [], "budget_refused": 0,
                "input_edge": sd.get("input_edge"), "pids": [], "rate_pids": []})
            for k in _SUMMED:
                m[k] += int(sd.get(k) or 0)
            m["pids"].append(pid)
            m["budget_stopped"] = m["budget_stopped"] or bool(sd.get("budget_stopped"))
            ceiling = sd.get("rate_ceiling_per_s")
            if isinstance(ceiling, (int, float)) and ceiling > 0:  # the processes share the campaign's limits
                m["rate_ceiling_per_s"] = min(float(ceiling), m.get("rate_ceiling_per_s", math.inf))
            m["last_errors"] += [e for e in sd.get("last_errors", []) if e not in m["last_errors"]]
            m["budget_refusals"] += [e for e in sd.get("budget_refusals") or [] if e not in m["budget_refusals"]]
            m["budget_refused"] += int(sd.get("budget_refused") or 0)
            m["resolved_errors"] += [r for r in sd.get("resolved_errors") or [] if r not in m["resolved_errors"]]
            if not any(counted):
                m["finished"] = m["finished"] and bool(sd.get("finished"))
            if figures_now:
                m["rate_pids"].append(pid)
                m["finished"] = m["finished"] and bool(sd.get("finished"))
                m["rate_per_s"] = round(m["rate_per_s"] + rate_as_of(sd, age), 3)
                # a stalled process's old rate is no capacity now; nor is one not measured well enough yet
                # (eta_ready False: right after its start); older records (no eta_ready): the rate they had
                if sd.get("eta_ready", True) is False and not sd.get("finished"):
                    m.setdefault("eta_estimating", []).append(
                        {"pid": pid, "done": sd.get("eta_measured_done"), "over_s": sd.get("eta_measured_s")})
                elif not stage_stalled(sd, counts, age):
                    cap = sd.get("capacity_per_s", sd.get("rate_per_s"))  # older records: the rate they had
                    m["capacity_per_s"] = round(m["capacity_per_s"] + float(cap or 0.0), 3)
                    m["eta_measured"] = True
                if sd.get("idle_s") is not None:
                    idle = float(sd["idle_s"]) + age
                    m["idle_s"] = round(idle if m["idle_s"] is None else min(m["idle_s"], idle), 1)
                    after = float(sd.get("stall_after_s") or STALL_MIN_S)
                    m["stall_after_s"] = after if m["stall_after_s"] is None else max(m["stall_after_s"], after)
                for k in _RUNNING_ONLY:
                    m[k] += int(sd.get(k) or 0)
                for field_name in ("host_waits", "host_holds", "cut_off", "not_found"):
                    for w in sd.get(field_name) or []:
                        if not isinstance(w, dict):
                            continue
                        waits = m.setdefault(field_name, [])
                        same = next((x for x in waits
                                     if (x.get("model"), x.get("host")) == (w.get("model"), w.get("host"))), None)
                        if same is None:
                            waits.append({**w, "held": int(w.get("held") or 0), "pids": [pid]})
                        else:
                            same["held"] += int(w.get("held") or 0)
                            same["pids"].append(pid)
            if figures_now or rec.get("finished"):  # a killed process's wait is over (while others run)
                for host, info in (sd.get("unreachable") or {}).items():
                    info = dict(info) if isinstance(info, dict) else {}
                    if not live:
                        info.pop("next_probe_in_s", None)
                        info.pop("next_probe_at", None)
                    have = m["unreachable"].get(host)
                    m["unreachable"][host] = {**info, "pids": (have or {}).get("pids", []) + [pid]}
        for host, hs in (rec.get("http") or {}).items():
            if not isinstance(hs, dict):
                continue
            h = http.setdefault(host, {"requests": 0, "retries": 0, "errors": {}, "answers": {}, "answer_notes": {},
                                       "last_ok_at": None})
            h["requests"] += int(hs.get("requests") or 0)
            h["retries"] += int(hs.get("retries") or 0)
            for key in ("errors", "answers"):
                for reason, n in (hs.get(key) or {}).items():
                    h[key][reason] = h[key].get(reason, 0) + int(n)
            h["answer_notes"].update(hs.get("answer_notes") or {})
            if hs.get("last_ok_at") is not None:
                h["last_ok_at"] = max(float(hs["last_ok_at"]), float(h["last_ok_at"] or 0.0))
        labels.update({k: v for k, v in (rec.get("host_labels") or {}).items() if k not in labels})
    merged = sorted(stages.values(), key=lambda m: (order.index(m["stage"]) if m["stage"] in order else len(order)))
    # the ETA: the running processes' capacities (rates while working), as Progress.snapshot times them
    # capped by the limits the processes share (review37b #3: their summed capacities ran past the rate limit)
    rates = {m["stage"]: min(m["capacity_per_s"], m.get("rate_ceiling_per_s", math.inf))
             for m in merged if m["rate_pids"] and any(running)}
    topology = list(pipeline) if pipeline else [(m["stage"], m["input_edge"], None) for m in merged]
    eta, eta_stage = pipeline_eta([(n, i, o, rates.get(n)) for n, i, o in topology], counts)
    if any(m["budget_stopped"] and m.get("input_edge") == C.EDGE_REQUESTS for m in merged):
        eta, eta_stage = None, None  # the model calls wait for a higher cap, as Progress.snapshot says
    waiting = eta_waits([m for m in merged if m["rate_pids"]]) if any(running) else []
    stalled = stalled_stages([m for m in merged if m["rate_pids"]], counts) if any(running) and not waiting else []
    if waiting or stalled:
        eta, eta_stage = None, None
    # stages no running process has measured well enough yet (each process's eta_ready): "estimating"
    estimating = [] if eta is not None or waiting or stalled or not any(running) else [
        {"stage": m["stage"], "done": max(int(e.get("done") or 0) for e in m["eta_estimating"]),
         "over_s": max(float(e.get("over_s") or 0.0) for e in m["eta_estimating"])}
        for m in merged if m.get("eta_estimating") and not m.get("eta_measured")]
    planned = next((r["planned_by_model"] for r in sorted(records, key=lambda r: -float(r.get("t") or 0.0))
                    if r.get("planned_by_model")), None)
    return {
        "t": newest.get("t"),
        "campaign": newest.get("campaign"),
        "elapsed_s": round(max(p["last"] for p in processes) - min(p["started"] for p in processes), 3),
        "stages": merged,
        "queues": newest.get("queues"),
        "spend": newest.get("spend"),
        "eta_s": None if eta is None else round(eta, 1),
        "eta_stage": eta_stage,
        **({"eta_waiting": waiting} if waiting else {}),
        **({"eta_stalled": stalled} if stalled else {}),
        **({"eta_estimating": estimating} if estimating else {}),
        "eta_scope": None if {n for n, _, _ in topology} <= set(rates) else [n for n, _, _ in topology if n in rates],
        "eta_untimed": [n for n, _, _ in topology if n not in rates],
        "http": http or None,
        "host_labels": labels or None,
        "budget_stopped": any(r.get("budget_stopped") for r in records),
        # every running process took a stop signal and is winding down: the run is stopping (review45a #5)
        **({"stopping": next(p["stopping"] for p in processes if p.get("stopping"))}
           if any(running) and all(p.get("stopping") for p in processes if p["running"]) else {}),
        "finished": all(r.get("finished") for r in records),
        **({"planned_by_model": planned} if planned else {}),
        "processes": processes,
    }
