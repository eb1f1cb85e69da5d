"""A task whose lease expired while a worker of the runner was still on it is not handed to a second worker.

Lease deadlines are wall-clock times (several processes compare them). When the wall clock steps forward past the
visibility timeout (a suspend and resume, an NTP step), or the process is stopped that long, every lease the runner
holds has expired at its next lease call, and the queue hands those tasks out again: before, to this runner itself,
which gave each to a second worker while the first was still on it (every task done twice at once; the model
caller's per-key turn and the crawl's kept that from paying twice, other stages did their work twice) and then met
a stale lease at the first worker's ack. Now the runner keeps the new lease for the worker already on the task
(:meth:`geoagent.runtime.leases.LeaseKeeper.relet`) and settles the task under it (ack, or a nack that counts).
The wall clock is the queue's injectable ``clock``."""

from __future__ import annotations

import time

import anyio

from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner


class _Slow(Stage):
    """Holds each task 0.8 s; the key ``fail`` fails its first delivery (a retryable error: nacked)."""

    name = "slow"
    input_edge = "a"
    output_edge = "b"
    concurrency = 4

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.active: dict[str, int] = {}
        self.most_at_once = 0

    async def handle(self, task, ctx):
        self.calls[task.key] = self.calls.get(task.key, 0) + 1
        self.active[task.key] = self.active.get(task.key, 0) + 1
        self.most_at_once = max(self.most_at_once, self.active[task.key])
        try:
            await anyio.sleep(0.8)
        finally:
            self.active[task.key] -= 1
        if task.key == "fail" and self.calls[task.key] == 1:
            raise RuntimeError("first delivery fails")
        return [(task.key, {"v": 1})]


def test_a_wall_clock_step_past_the_visibility_timeout_does_not_hand_a_task_to_a_second_worker(tmp_path):
    step = [0.0]

    def clock() -> float:
        return time.time() + step[0]

    async def main():
        opts = dict(clock=clock, backoff_base_s=0.01, backoff_max_s=0.02, max_attempts=3)
        a, b = SQLiteQueue(tmp_path / "a.sqlite", **opts), SQLiteQueue(tmp_path / "b.sqlite", **opts)
        await a.put_many([("k0", {}), ("k1", {}), ("fail", {})])
        stage = _Slow()
        runner = StageRunner(stage, a, b, StageContext("t"), grace_s=0.5, visibility_timeout_s=60.0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run)
            await anyio.sleep(0.3)  # every task is with a worker
            step[0] = 3600.0  # the wall clock steps forward an hour: every lease has expired
            with anyio.fail_after(15):
                await runner.finished.wait()
        counts_a, counts_b = await a.counts(), await b.counts()
        await a.close()
        await b.close()
        return stage, counts_a, counts_b

    stage, ca, cb = anyio.run(main)
    assert stage.most_at_once == 1, f"a task was with two workers at once: {stage.calls}"
    assert stage.calls == {"k0": 1, "k1": 1, "fail": 2}  # the failed delivery was nacked (under the new lease)
    assert (ca.done, ca.leased, ca.ready, ca.dead) == (3, 0, 0, 0) and cb.total == 3
