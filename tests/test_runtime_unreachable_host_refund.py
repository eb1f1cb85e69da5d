"""Refunds (geoagent.runtime.worker, "Refunds"): when a host's unreachable streak opens the stage runner's breaker,
the queue attempts that the streak's nacks charged are given back, and tasks the streak dead-lettered are ready
again, so re-running while the host is still down keeps every task queued with its attempts intact, and the run
with the host back completes each task once. A task whose own requests fail while the host answers other tasks
in between never forms a streak long enough to open the breaker: it still dead-letters after ``max_attempts``.

Real HTTP client, real SQLite queues, a closed loopback port; expectations are hand-counted from the delivery
order (concurrency 1, FIFO by ``not_before``)."""

from __future__ import annotations

import logging

import anyio
from aiohttp import web

from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner
from geoagent.sandbox.server import free_port, serve
from test_runtime_unreachable_host import FAST, _app, _pipeline


async def _attempts(root, campaign: str, edge: str) -> dict[str, int]:
    """Attempt count of every ready task of ``edge`` (leased for a moment, released untouched)."""
    q = open_queue(root, campaign, edge)
    try:
        tasks = await q.lease(10_000, 30)
        if tasks:
            await q.release(tasks)
        return {t.key: t.attempts for t in tasks}
    finally:
        await q.close()


def test_streak_dead_letters_are_revived_and_queued_attempts_refunded(tmp_path, caplog):
    """``max_attempts = 1``, threshold 3, four tasks: k0 and k1 fail (streak 1, 2) and are dead-lettered by their
    single attempt, k2 opens the breaker (streak 3) and is released. The streak proved the host down: k0 and k1
    are revived (ready, attempts 0), nothing is dead, and a warning says so."""
    port = free_port()
    url, host = f"http://127.0.0.1:{port}/x", f"127.0.0.1:{port}"
    items = [(f"k{i}", {"i": i}) for i in range(4)]

    async def main():
        _, runner, counts, dead = await _pipeline(tmp_path, url, items, max_attempts=1, unreachable_after=3)
        return runner, counts, dead, await _attempts(tmp_path / "q", "u", "a")

    with caplog.at_level(logging.WARNING, logger="geoagent.runtime.worker"):
        runner, counts, dead, attempts = anyio.run(main)
    st = runner.stats
    assert st.unreachable and (st.failed, st.released) == (2, 1)
    assert (st.refunded_attempts, st.revived) == (2, 2)
    assert (counts["a"].ready, counts["a"].dead, counts["a"].done) == (4, 0, 0) and dead == []
    assert attempts == {"k0": 0, "k1": 0, "k2": 0, "k3": 0}
    line = next(r.getMessage() for r in caplog.records if "refunded" in r.getMessage())
    assert line == (f"stage fetch: host {host} was down: refunded 2 queue attempts that its unreachable failures had "
                    "charged to 2 tasks before the breaker opened; revived 2 dead-lettered tasks (ready again)")


def test_two_runs_with_the_host_down_then_one_with_it_up_completes_every_task_once(tmp_path):
    """Six tasks, ``max_attempts = 3``, threshold 3. Each run with the host down: k0, k1 nacked (one attempt
    each), k2 opens the breaker; the refund puts every count back to 0, so the second run does exactly the same
    (without refunds k0 and k1 would be at 2 after it and dead at their next failure). The third run, host up:
    all six done, once each, none dead."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"
    items = [(f"k{i}", {"i": i}) for i in range(6)]

    async def main():
        out = []
        for batch in (items, []):
            stage, runner, counts, dead = await _pipeline(tmp_path, url, batch, max_attempts=3, unreachable_after=3)
            out.append((stage.calls, runner.stats, counts["a"], dead, await _attempts(tmp_path / "q", "u", "a")))
        async with serve(_app(), "127.0.0.1", port):
            stage, runner, counts, dead = await _pipeline(tmp_path, url, [], max_attempts=3, unreachable_after=3)
        return out, (stage.calls, runner.stats, counts, dead)

    downs, (calls3, st3, counts3, dead3) = anyio.run(main)
    for calls, st, c, dead, attempts in downs:
        assert calls == 3 and (st.failed, st.released, st.refunded_attempts, st.revived) == (2, 1, 2, 0)
        assert (c.ready, c.dead, c.done, c.leased) == (6, 0, 0, 0) and dead == []
        assert attempts == {f"k{i}": 0 for i in range(6)}
    assert calls3 == 6 and st3.done == 6 and st3.failed == 0 and not st3.unreachable
    assert (counts3["a"].done, counts3["a"].ready, counts3["a"].dead, counts3["b"].done) == (6, 0, 0, 6)
    assert dead3 == []


class _Flip:
    """The test's host on one fixed port, started and stopped on demand (the same host key either way)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.runner: web.AppRunner | None = None

    async def up(self) -> None:
        if self.runner is None:
            self.runner = web.AppRunner(_app(), access_log=None)
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def down(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


class OwnUrlDead(Stage):
    """Task ``bad`` finds the host refusing its request every time; every other task finds it answering. After
    each failure of ``bad`` one new task arrives (put by the test), so the host answers in between."""

    name = "fetch"
    input_edge = "a"
    output_edge = None
    concurrency = 1
    lease_batch = 1

    def __init__(self, url: str, flip: _Flip) -> None:
        self.url, self.flip = url, flip
        self.failed = anyio.create_memory_object_stream[int](100)
        self.bad_calls = self.good_calls = 0

    async def handle(self, task, ctx):
        if task.key == "bad":
            self.bad_calls += 1
            await self.flip.down()
            try:
                await ctx.get("http").request("GET", self.url)
            finally:
                self.failed[0].send_nowait(self.bad_calls)
        await self.flip.up()
        self.good_calls += 1
        await ctx.get("http").request("GET", self.url)
        return []


def test_a_task_whose_own_requests_fail_while_the_host_answers_others_still_dead_letters(tmp_path):
    """``bad`` fails 3 times (``max_attempts = 3``; its backoff 0.5-1 s lets the task put after each failure run
    first). Each of its failures is streak 1 (the answers in between reset it), below the threshold 2: no breaker,
    no refund, and ``bad`` is dead-lettered with its unreachable reason; the three other tasks are done."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"
    flip = _Flip(port)
    stage = OwnUrlDead(url, flip)

    async def main():
        q = open_queue(tmp_path / "q", "own", "a", max_attempts=3, backoff_base_s=1.0, backoff_max_s=1.0)
        upstream = anyio.Event()
        try:
            await q.put("bad", {})
            async with HttpClient(default_policy=FAST) as http:
                runner = StageRunner(stage, q, None, StageContext("own", {"http": http}), upstream_done=upstream,
                                     unreachable_after=2)

                async def producer():
                    async with stage.failed[1]:
                        async for n in stage.failed[1]:
                            await q.put(f"good{n}", {})
                            if n == 3:
                                upstream.set()
                                return

                async with anyio.create_task_group() as tg:
                    tg.start_soon(producer)
                    with anyio.fail_after(60):
                        stats = await runner.run()
            return stats, await q.counts(), await q.dead_letters(10)
        finally:
            await q.close()
            await flip.down()

    stats, counts, dead = anyio.run(main)
    assert stage.bad_calls == 3 and stage.good_calls == 3
    assert not stats.unreachable and not stats.blocked and (stats.refunded_attempts, stats.revived) == (0, 0)
    assert (counts.done, counts.dead, counts.ready, counts.leased) == (3, 1, 0, 0)
    (d,) = dead
    assert d.key == "bad" and d.attempts == 3 and "RetriesExhausted" in d.reason and "Connect call failed" in d.reason
