"""Lease renewal (geoagent.runtime.leases, geoagent.runtime.worker): a task handled for longer than the visibility
timeout (slow or retried requests) keeps its lease while a live runner works on it, so a second runner on the
same queue (another process of the campaign) never takes it meanwhile: every task is handled exactly once and no
lease goes stale. A lease that is no longer held is not renewed (extend reports it), and a crashed runner (here:
one that leased and never renews) still loses its tasks after one visibility timeout."""

from __future__ import annotations

import logging
import time
from collections import Counter

import anyio
import pytest

from geoagent.runtime.leases import LeaseKeeper
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner

VT_S = 1.0  # visibility timeout (0.4 s failed once in a crowded CI run: a renewal came too late, a task ran twice)
SLOW_S = 3.2  # each task takes over three visibility timeouts


class Slow(Stage):
    name = "slow"
    input_edge = "a"
    output_edge = None
    concurrency = 2

    def __init__(self, calls: Counter) -> None:
        self.calls = calls

    async def handle(self, task, ctx):
        self.calls[task.key] += 1
        await anyio.sleep(SLOW_S)
        return []


@pytest.mark.wallclock  # renewals must come within a visibility timeout: run in the uncrowded phase
def test_two_runners_never_handle_a_slow_task_twice(tmp_path, caplog):
    calls: Counter = Counter()

    async def main():
        q1 = open_queue(tmp_path / "q", "c", "a")
        q2 = open_queue(tmp_path / "q", "c", "a")  # the other process's connection
        try:
            await q1.put_many([(f"k{i}", {}) for i in range(6)])
            runners = [StageRunner(Slow(calls), q, None, StageContext("c"), visibility_timeout_s=VT_S, lease_ahead=True)
                       for q in (q1, q2)]
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for r in runners:
                        tg.start_soon(r.run)
            return await q1.counts(), runners
        finally:
            await q1.close()
            await q2.close()

    with caplog.at_level(logging.WARNING):
        counts, runners = anyio.run(main)
    assert counts.done == 6 and counts.ready == counts.leased == counts.dead == 0
    assert calls == Counter({f"k{i}": 1 for i in range(6)})  # before: leases expired mid-task, tasks done twice
    assert "stale lease" not in caplog.text
    assert sum(r._leases.renewals for r in runners) >= 6  # each task's lease was renewed at least once


def test_extend_renews_held_leases_only_and_an_unrenewed_lease_still_expires(tmp_path):
    async def main():
        q = open_queue(tmp_path / "q", "c", "a")
        try:
            await q.put_many([("a", {}), ("b", {})])
            ta, tb = await q.lease(2, 0.3)
            keeper = LeaseKeeper(q, 0.3)
            keeper.add([ta])  # b's runner "crashed": nobody renews it
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.9:
                await anyio.sleep(0.1)
                assert await keeper.renew()
            again = await q.lease(2, 0.3)  # only b's lease expired
            assert [t.key for t in again] == ["b"]
            # a's old lease is still held and renewable; b's old lease id is stale now
            assert await q.extend([ta, tb], 0.3) == ["b"]
            await q.ack([ta])
            assert await q.extend([ta], 0.3) == ["a"]  # finished: nothing to renew
            keeper.add([tb])
            assert await keeper.renew() and keeper._live == {}  # a stale lease is dropped, not renewed again
        finally:
            await q.close()

    anyio.run(main)
