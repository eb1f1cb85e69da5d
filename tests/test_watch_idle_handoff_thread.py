"""A ``--watch`` run's idle hand-off (a crawl's export of its tables) runs off the progress loop.

Gap (session 8): the hand-off ran inside the tick callback, on the event loop, so a very large crawl's
export froze the live display (and every worker) while it wrote. Now
:func:`geoagent.engine.idle_handoff_tick` starts it in a worker thread and returns at once; the ticks go on
meanwhile, a second hand-off never starts while one runs (a change seen meanwhile is handed off after it),
its lines are printed from the loop, and ``wait()`` (which the engine awaits before the end of the run writes
the tables itself) returns only once the hand-off in progress has finished, so a stop never races a
half-written hand-off. The tables themselves are written atomically, each to a temporary file of its own.

Real SQLite queues and a real :class:`~geoagent.runtime.daemon.PipelineRun`; the hand-off is a plain callable
(the kind's ``idle_handoff``) that takes a while, as a large export does.
"""

from __future__ import annotations

import contextlib
import threading
import time

import anyio
import polars as pl

from geoagent.engine import idle_handoff_tick
from geoagent.runtime.daemon import PipelineRun
from geoagent.runtime.export import write_frame
from geoagent.runtime.queue import open_queue


async def _finish_one(q, key: str) -> None:
    await q.put(key, {"k": key})
    tasks = await q.lease(1, 60.0)
    await q.ack(tasks)


async def _noop_progress(view) -> None:
    return None


@contextlib.asynccontextmanager
async def _watched_queue(tmp_path, handoff, progress=_noop_progress):
    """``(queue, run view, idle-hand-off tick)`` over one real SQLite queue ``a`` of campaign ``h``."""
    q = open_queue(tmp_path / "q", "h", "a")
    try:
        view = PipelineRun("h", [], {"a": q})
        yield q, view, idle_handoff_tick(progress, handoff)
    finally:
        await q.close()


def test_idle_handoff_runs_in_a_thread_one_at_a_time_and_wait_joins_it(tmp_path, capsys):
    calls: list[tuple[float, float, bool, int]] = []  # (start, end, complete, thread id)
    running = threading.Semaphore(1)
    overlap: list[bool] = []
    slow_s = 0.8

    def handoff(complete: bool) -> list[str]:
        if not running.acquire(blocking=False):
            overlap.append(True)
        try:
            t0 = time.monotonic()
            time.sleep(slow_s)  # a large export
            calls.append((t0, time.monotonic(), complete, threading.get_ident()))
            return [f"hand-off {len(calls)} written"]
        finally:
            running.release()

    ticks: list[float] = []

    async def progress(view) -> None:
        ticks.append(time.monotonic())

    async def main():
        async with _watched_queue(tmp_path, handoff, progress) as (q, view, on_tick):
            await _finish_one(q, "k1")
            durations = []
            t_start = time.monotonic()
            while time.monotonic() - t_start < slow_s / 2:  # the first hand-off is running
                t = time.monotonic()
                await on_tick(view)
                durations.append(time.monotonic() - t)
                await anyio.sleep(0.05)
            assert len(calls) == 0  # still writing...
            await _finish_one(q, "k2")  # ...when new work is done: no second hand-off now
            for _ in range(3):
                t = time.monotonic()
                await on_tick(view)
                durations.append(time.monotonic() - t)
                await anyio.sleep(0.05)
            # the first one ends; the next idle tick starts the second (the counts changed), and wait() joins it
            with anyio.fail_after(10):
                while not (len(calls) == 2 or (len(calls) == 1 and on_tick.busy())):
                    await on_tick(view)
                    await anyio.sleep(0.05)
            await on_tick.wait()
            assert len(calls) == 2 and not on_tick.busy()
            return durations

    durations = anyio.run(main)
    # every tick returned at once while a hand-off was writing: the display was never frozen
    assert max(durations) < 0.3, durations
    assert len(ticks) >= 8
    assert not overlap
    # one after the other, each in a worker thread, never on the loop's thread
    (s1, e1, c1, th1), (s2, e2, c2, th2) = calls
    assert e1 <= s2 and c1 is True and c2 is True
    assert threading.get_ident() not in (th1, th2)
    out = capsys.readouterr().out
    assert out.count("hand-off 1 written") == 1 and out.count("hand-off 2 written") == 1, out


def test_wait_returns_only_after_the_handoff_in_progress_finished(tmp_path):
    done = threading.Event()

    def handoff(complete: bool) -> list[str]:
        time.sleep(0.5)
        done.set()
        return []

    async def main():
        async with _watched_queue(tmp_path, handoff) as (q, view, on_tick):
            await _finish_one(q, "k1")
            await on_tick(view)
            assert on_tick.busy() and not done.is_set()
            view.stopped_by_signal = True  # a stop now: the end of the run awaits the hand-off first
            await on_tick(view)
            await on_tick.wait()
            assert done.is_set() and not on_tick.busy()

    anyio.run(main)


def test_write_frame_temporary_files_are_unique_per_writer(tmp_path):
    """Two writers of one table at once (a hand-off thread and another process) never share a temporary
    file: each renames a complete file of its own over the target."""
    df = pl.DataFrame({"a": list(range(20000))})
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(5):
                write_frame(df, tmp_path / "t.parquet", tmp_path / "t.csv")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pl.read_parquet(tmp_path / "t.parquet").height == 20000
    assert pl.read_csv(tmp_path / "t.csv").height == 20000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.parquet"]  # no temporary file left


def test_a_failed_handoff_is_logged_once_and_retried_at_the_next_change(tmp_path, caplog):
    import logging

    attempts: list[bool] = []

    def handoff(complete: bool) -> list[str]:
        attempts.append(complete)
        raise OSError("disk full")

    async def main():
        async with _watched_queue(tmp_path, handoff) as (q, view, on_tick):
            await _finish_one(q, "k1")
            for _ in range(10):  # idle ticks with nothing new after the failure: no retry, one warning
                await on_tick(view)
                await anyio.sleep(0.03)
            await on_tick.wait()
            assert len(attempts) == 1
            await _finish_one(q, "k2")  # new work: tried again
            await on_tick(view)
            await on_tick.wait()
            assert len(attempts) == 2

    with caplog.at_level(logging.WARNING, logger="geoagent.engine"):
        anyio.run(main)
    warnings = [r.getMessage() for r in caplog.records if "idle hand-off failed" in r.getMessage()]
    assert len(warnings) == 2 and all("disk full" in w for w in warnings), warnings
