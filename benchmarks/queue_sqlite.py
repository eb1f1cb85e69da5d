"""Micro-benchmark of the SQLite WAL queue: put_many / lease / ack in batches, three ways of calling it.

Usage::

    python benchmarks/queue_sqlite.py                 # 100,000 tasks, batch 32
    python benchmarks/queue_sqlite.py -n 1000000 --batch 32 --payload-bytes 300

Prints tasks per second for each phase and mode, the queue file size and the peak RSS. Modes: "sync" calls
the ``*_sync`` methods directly (the floor: pure SQLite + encoding cost); "async" is the async API as
shipped (inline first, worker thread when the write lock is busy); "thread" is the async API with
``inline=False`` (every call hops to the queue's worker thread).

``--procs P`` runs the contention benchmark instead: P processes share two queue files and each moves
tasks from the first to the second (lease 32, put 32, ack 32) while a ticker coroutine measures how late
the event loop wakes up (loop lag: what every HTTP request of that process would suffer). Modes here:
"async" (shipped), "thread" (``inline=False``) and "sync" (``*_sync`` called on the loop: pure inline,
which waits for other processes' write locks on the loop thread)::

    python benchmarks/queue_sqlite.py --procs 4 -n 200000
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geoagent.runtime.sqlite_queue import SQLiteQueue  # noqa: E402


def _items(n: int, start: int, payload_bytes: int):
    pad = "x" * payload_bytes
    return [(f"task-{i:09d}", {"i": i, "pad": pad}) for i in range(start, start + n)]


def _report(label: str, n: int, seconds: float) -> None:
    print(f"  {label:<28} {n / seconds:>12,.0f} tasks/s  ({seconds:.2f} s for {n:,})")


def run_sync(path: Path, n: int, batch: int, payload_bytes: int) -> None:
    queue = SQLiteQueue(path)
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        queue.put_many_sync(_items(min(batch, n - start), start, payload_bytes))
    _report(f"put_many({batch}) sync", n, time.perf_counter() - t0)
    leased, t0 = [], time.perf_counter()
    lease_s = ack_s = 0.0
    while True:
        t = time.perf_counter()
        tasks = queue.lease_sync(batch, 300.0)
        lease_s += time.perf_counter() - t
        if not tasks:
            break
        t = time.perf_counter()
        queue.ack_sync(tasks)
        ack_s += time.perf_counter() - t
    _report(f"lease({batch}) sync", n, lease_s)
    _report(f"ack({batch}) sync", n, ack_s)
    assert queue.counts_sync().done == n, queue.counts_sync()
    queue.close_sync()


async def run_async(path: Path, n: int, batch: int, payload_bytes: int, inline: bool) -> None:
    mode = "async" if inline else "thread"
    async with SQLiteQueue(path, inline=inline) as queue:
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            await queue.put_many(_items(min(batch, n - start), start, payload_bytes))
        _report(f"put_many({batch}) {mode}", n, time.perf_counter() - t0)
        lease_s = ack_s = 0.0
        while True:
            t = time.perf_counter()
            tasks = await queue.lease(batch, 300.0)
            lease_s += time.perf_counter() - t
            if not tasks:
                break
            t = time.perf_counter()
            await queue.ack(tasks)
            ack_s += time.perf_counter() - t
        _report(f"lease({batch}) {mode}", n, lease_s)
        _report(f"ack({batch}) {mode}", n, ack_s)
        t = time.perf_counter()
        for _ in range(100):
            counts = await queue.counts()
        print(f"  counts() {(time.perf_counter() - t) * 10:.3f} ms per call with {counts.total:,} rows")
        assert counts.done == n, counts


def _contention_worker(root: str, mode: str, batch: int, out: "multiprocessing.Queue") -> None:
    async def run() -> dict:
        lags: list[float] = []

        async def ticker() -> None:
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append(time.perf_counter() - t - 0.005)

        tick = asyncio.create_task(ticker())
        inline = mode != "thread"
        q1 = SQLiteQueue(Path(root) / "q1.sqlite", inline=inline)
        q2 = SQLiteQueue(Path(root) / "q2.sqlite", inline=inline)
        moved, t0 = 0, time.perf_counter()
        while True:
            if mode == "sync":
                tasks = q1.lease_sync(batch, 300.0)
                if not tasks:
                    break
                q2.put_many_sync([(t.key, t.payload) for t in tasks])
                q1.ack_sync(tasks)
            else:
                tasks = await q1.lease(batch, 300.0)
                if not tasks:
                    break
                await q2.put_many([(t.key, t.payload) for t in tasks])
                await q1.ack(tasks)
            moved += len(tasks)
            await asyncio.sleep(0)  # let the ticker run, as a real worker's HTTP tasks would
        elapsed = time.perf_counter() - t0
        tick.cancel()
        fallbacks = q1.busy_fallbacks + q2.busy_fallbacks
        await q1.close()
        await q2.close()
        lags.sort()
        return {
            "moved": moved, "elapsed": elapsed, "fallbacks": fallbacks,
            "lag_p99_ms": 1e3 * lags[int(0.99 * (len(lags) - 1))] if lags else 0.0,
            "lag_max_ms": 1e3 * lags[-1] if lags else 0.0,
        }

    out.put(asyncio.run(run()))


def run_contention(tmp: Path, n: int, batch: int, payload_bytes: int, procs: int, mode: str) -> None:
    root = tmp / mode
    root.mkdir()
    q1 = SQLiteQueue(root / "q1.sqlite")
    q1.put_many_sync(_items(n, 0, payload_bytes))
    q1.close_sync()
    SQLiteQueue(root / "q2.sqlite").close_sync()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    workers = [ctx.Process(target=_contention_worker, args=(str(root), mode, batch, out)) for _ in range(procs)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    results = [out.get() for _ in workers]
    for w in workers:
        w.join()
    moved = sum(r["moved"] for r in results)
    span = max(r["elapsed"] for r in results)
    print(
        f"  {mode:<7} {procs} procs: {moved / span:>10,.0f} tasks/s moved q1->q2 "
        f"(lease+put+ack, batch {batch}); loop lag p99 {max(r['lag_p99_ms'] for r in results):.1f} ms, "
        f"max {max(r['lag_max_ms'] for r in results):.1f} ms; busy fallbacks {sum(r['fallbacks'] for r in results)}"
        f"  [{time.perf_counter() - t0:.1f} s incl. start-up]"
    )
    assert moved == n, (moved, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="tasks per mode")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--payload-bytes", type=int, default=200)
    parser.add_argument("--mode", choices=["all", "sync", "async", "thread"], default="all")
    parser.add_argument("--procs", type=int, default=0, help="run the multi-process contention benchmark")
    args = parser.parse_args()
    if args.procs:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"contention: n={args.n:,} batch={args.batch} payload~{args.payload_bytes} B")
            for mode in ("async", "thread", "sync"):
                if args.mode in ("all", mode):
                    run_contention(Path(tmp), args.n, args.batch, args.payload_bytes, args.procs, mode)
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"n={args.n:,} batch={args.batch} payload~{args.payload_bytes} B")
        if args.mode in ("all", "sync"):
            run_sync(Path(tmp) / "sync.sqlite", args.n, args.batch, args.payload_bytes)
        for mode in ("async", "thread"):
            if args.mode in ("all", mode):
                path = Path(tmp) / f"{mode}.sqlite"
                asyncio.run(run_async(path, args.n, args.batch, args.payload_bytes, mode == "async"))
        for f in sorted(Path(tmp).glob("*.sqlite")):
            print(f"  {f.name}: {f.stat().st_size / 1e6:.1f} MB")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
