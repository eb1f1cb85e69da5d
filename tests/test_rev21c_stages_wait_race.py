"""Review of af96968 (``--stages``: a burst stage waits for its foreign upstream): the order of the checks.

``StageRunner._input_exhausted`` reads its own input's counts first, then each foreign upstream queue's. The
counts are separate reads at separate moments; work only moves downstream (an upstream process puts its output,
then acks its input). Read own input first and the upstream after, and an output that moves from the upstream
queue into the own input between the two reads is seen in neither place: the stage ends with it ready on its
input, for nobody (the very end of a split run, when the upstream process commits its last batch).
"""

from __future__ import annotations

import anyio

from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.stage import Stage, StageContext


class Up(Stage):
    name = "up"
    input_edge = "a"
    output_edge = "b"
    sends_http = False

    async def handle(self, task, ctx):
        return [(task.key, {})]


class Sink(Stage):
    name = "sink"
    input_edge = "b"
    output_edge = None
    concurrency = 1
    sends_http = False

    async def handle(self, task, ctx):
        return []


class _CommitsDuringRead:
    """A downstream process's handle on an edge: right after the downstream's first counts read of either
    edge (``trigger``, shared), the upstream process (other handles) commits its last task: output put on b,
    input acked on a. The next read, of the other edge, sees the queues after that commit."""

    def __init__(self, inner, trigger):
        self._inner, self._trigger = inner, trigger

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def counts(self):
        c = await self._inner.counts()
        if self._trigger:
            await self._trigger.pop()()
        return c


def test_an_output_committed_between_the_own_and_the_upstream_read_is_not_left_behind(tmp_path):
    pipeline = [Up(), Sink()]

    async def main():
        up_q = open_edge_queues(tmp_path / "q", "race", pipeline)  # the upstream process's handles
        down_q = open_edge_queues(tmp_path / "q", "race", pipeline)  # the downstream process's
        await up_q["a"].put_many([("k0", {})])
        (task,) = await up_q["a"].lease(1, 60.0)  # the upstream process is at work on its last task

        async def commit():
            await up_q["b"].put_many([(task.key, {})])
            await up_q["a"].ack(task)

        trigger = [commit]
        queues = {e: _CommitsDuringRead(q, trigger) for e, q in down_q.items()}
        with anyio.fail_after(30):
            await run_pipeline("race", [Sink()], queues, StageContext("race", {}), handle_signals=False,
                               pipeline=pipeline, stages_elsewhere=lambda: {"up"})
        counts = {e: await q.counts() for e, q in up_q.items()}
        for q in (*up_q.values(), *down_q.values()):
            await q.close()
        return counts

    counts = anyio.run(main)
    assert counts["a"].done == 1
    assert counts["b"].done == 1, f"the sink ended with the upstream's last output left on its input: {counts['b']}"
