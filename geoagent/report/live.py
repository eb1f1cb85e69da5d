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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio

log = logging.getLogger(__name__)

REWRITE_BACKOFF = 4.0
"""The next live rewrite waits at least this many times the previous background rewrite's duration
(dimensionless; see :meth:`LiveReport.gap_s`): it bounds the rewrites' share of wall time at 1 / (1 + 4)."""


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
    from geoagent import constants as C
    from geoagent import paths

    d = ctx.services.get("report_dir")
    if d:
        return Path(d)
    state_dir = ctx.services.get("state_dir")
    if state_dir:
        return Path(state_dir) / C.REPORT_DIR
    return paths.state_root() / paths.safe_name(ctx.campaign, what="campaign") / C.REPORT_DIR


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
        except Exception:  # noqa: BLE001
            self.failed += 1
            log.exception("%s live report failed; the aggregated counts are kept", self.what)
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


__all__ = ["LiveReport", "live_report_dir"]
