"""A downstream ``--stages`` runner does not end beside an upstream process that has just started (fixstages45).

walk45: the two-process ``--stages`` example of docs/scale-out.md ended 2 runs in 5 (under load) with both processes
exiting 0 and ``campaign not complete``: the downstream process's geocoder ended 1 s after the model caller's
process wrote its manifest entry, while all 1874 requests were still ready (that process had not leased yet).
:class:`geoagent.runtime.worker.StageRunner` read the view of the stages taken up since it started
(``stages_started``) and the view of the stages live processes run (``stages_elsewhere``) each from a cache of its
own, refreshed at its own moment: a process whose entry came between the two reads made the upstream stage "taken
up" while the live view, up to 1 s old, did not name it, so its ready tasks were no work on its way and the runner
ended. A live view older than the counts that said the stage was taken up (its done count grown) did the same.

Now the two views are one snapshot, the started one read first, and a runner about to end while an upstream stage
has ready tasks reads the live view again, then all the counts, before it ends. Still bounded: once the upstream
process is gone, the runner ends at once, its work left for a process that runs that stage.

Real runner over real SQLite queues and a real manifest.json read by the engine's views
(:func:`geoagent.runtime.manifest.stages_run_since`, :func:`~geoagent.runtime.manifest.stages_run_elsewhere`); the
upstream process is a real child process (its pid alive), and this test writes its manifest entry, and leases and
acks its tasks, as that process would. The moment its entry appears is pinned to a view read (the hooks below), so
the race the real processes ran into by chance happens at every run.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.from_thread

from geoagent import constants as C
from geoagent.runtime.manifest import stages_run_elsewhere, stages_run_since
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture
from test_stages_upstream_taken_up import drive  # runs the runner beside a body (duplicates D1, session 45)

ALL = ["A", "c"]  # the pipeline: foreign upstream stage A (input edge a), then this process's stage c


class Sink(Stage):
    name = "c"
    input_edge = "c"
    output_edge = None
    sends_http = False

    async def handle(self, task, ctx):
        return []


class Upstream:
    """The upstream process: a live child process, and the manifest entry it writes when it starts (``run``,
    ``running``, stages ``["A"]``, this host); :meth:`register` writes it, once."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        self.registered = False

    def register(self) -> None:
        if self.registered:
            return
        self.registered = True
        entry = {"run_id": "up", "command": "run", "started_unix": time.time(), "status": "running",
                 "pid": self.proc.pid, "host": socket.gethostname(), "stages": ["A"]}
        (self.state / C.MANIFEST_FILE).write_text(json.dumps({"runs": [entry]}), encoding="utf-8")

    def stop(self) -> None:
        """The process ends (killed and reaped: its pid free)."""
        self.proc.kill()
        self.proc.wait()


def _views(state: Path, since: float, *, on_started=None, on_elsewhere=None):
    """The engine's two views over ``state`` (``since``: this process's start); ``on_started`` is called at each read
    of the started view before it reads, ``on_elsewhere`` after each read of the live view (``(n)``: the read's
    number, from 1): where the upstream process's entry appears."""
    n = {"started": 0, "elsewhere": 0}

    def started():
        n["started"] += 1
        if on_started is not None:
            on_started(n["started"])
        return stages_run_since(state, ALL, since)

    def elsewhere():
        n["elsewhere"] += 1
        out = stages_run_elsewhere(state, ALL)
        if on_elsewhere is not None:
            on_elsewhere(n["elsewhere"])
        return out

    return started, elsewhere


def _run(tmp_path, body, *, on_started=None, on_elsewhere=None) -> tuple[float, dict]:
    """Run the runner (4 tasks ready on a, its upstream input; its own input c empty) beside ``body(queues, up,
    runner, ended)``; returns (the runner's s from its start to its end, each queue's counts at its end)."""
    state = tmp_path / "state"
    state.mkdir()
    up = Upstream(state)

    async def main():
        queues = {e: open_queue(tmp_path / "q", "camp", e) for e in "ac"}
        try:
            await queues["a"].put_many([(f"t{i}", {}) for i in range(4)])
            started, elsewhere = _views(state, time.time() - 0.5,
                                        on_started=on_started and (lambda n: on_started(n, up, queues)),
                                        on_elsewhere=on_elsewhere and (lambda n: on_elsewhere(n, up, queues)))
            runner = StageRunner(Sink(), queues["c"], None, StageContext("camp"), burst=True,
                                 foreign_upstream=[("A", queues["a"])], stages_elsewhere=elsewhere,
                                 stages_started=started, start_wait_s=60.0, poll_s=0.05)
            took = await drive(runner, lambda ended: body(queues, up, runner, ended))
            return took, {e: await q.counts() for e, q in queues.items()}
        finally:
            for q in queues.values():
                await q.close()

    try:
        return anyio.run(main)
    finally:
        up.stop()


async def _work_all(queues) -> None:
    """What the upstream process does with A's tasks: lease them, put each one's output on c, ack."""
    tasks = await queues["a"].lease(100, 30.0)
    await queues["c"].put_many([(t.key, {}) for t in tasks])
    await queues["a"].ack(tasks)


def test_a_process_started_between_the_two_views_keeps_the_runner_waiting(tmp_path):
    """The upstream process's entry appears just as the started view is read (the runner waiting for A to be taken
    up, 1 s in): before, that view made A taken up while the live view, read just before it, did not name A, and the
    runner ended with A's 4 tasks ready (walk45); now it waits while that process lives, and takes A's work."""

    def on_started(n, up, queues):
        if n == 2:  # the second read, a second into the wait
            up.register()

    async def body(queues, up, runner, ended):
        with anyio.fail_after(20):
            while not up.registered:
                await anyio.sleep(0.02)
        await anyio.sleep(1.5)  # A's process has not leased yet (its start): its 4 tasks ready
        assert not ended.is_set(), "the runner ended beside a live process of A with A's tasks ready"
        await _work_all(queues)

    took, counts = _run(tmp_path, body, on_started=on_started)
    assert counts["c"].done == 4 and counts["a"].ready == 0, counts


def test_a_live_view_older_than_the_counts_is_read_again_before_ending(tmp_path):
    """The entry appears just after a read of the live view, and the process at once finishes one of A's tasks (its
    input's done count grows: A taken up) and has none leased (3 ready): before, the live view of that earlier read
    decided, and the runner ended; now it reads the view again before ending, and waits."""

    def on_elsewhere(n, up, queues):
        if n == 2:
            up.register()

            async def one() -> None:
                (t,) = await queues["a"].lease(1, 30.0)
                await queues["c"].put_many([(t.key, {})])
                await queues["a"].ack([t])

            anyio.from_thread.run(one)

    async def body(queues, up, runner, ended):
        with anyio.fail_after(20):
            while not up.registered:
                await anyio.sleep(0.02)
        await anyio.sleep(1.5)
        assert not ended.is_set(), "the runner ended beside a live process of A with A's tasks ready"
        await _work_all(queues)

    took, counts = _run(tmp_path, body, on_elsewhere=on_elsewhere)
    assert counts["c"].done == 4 and counts["a"].ready == 0, counts


def test_the_runner_still_ends_once_the_upstream_process_is_gone(tmp_path):
    """Bounded: the upstream process took A up, then ended with A's tasks left ready (killed): the runner ends within
    a view's age or two (not the 60 s bound), its own work done, A's 3 tasks left for a process that runs A."""
    gone_at: list[float] = []

    def on_started(n, up, queues):
        if n == 2:
            up.register()

    async def body(queues, up, runner, ended):
        with anyio.fail_after(20):
            while not up.registered:
                await anyio.sleep(0.02)
        (t,) = await queues["a"].lease(1, 30.0)
        await queues["c"].put_many([(t.key, {})])
        await queues["a"].ack([t])
        await anyio.sleep(1.5)
        assert not ended.is_set()
        up.stop()
        gone_at.append(time.monotonic())
        with anyio.fail_after(10):
            await ended.wait()
        assert time.monotonic() - gone_at[0] < 5.0

    took, counts = _run(tmp_path, body, on_started=on_started)
    assert counts["c"].done == 1 and counts["a"].ready == 3, counts


def test_on_redis_a_process_on_another_machine_started_after_the_view_is_seen(redis_url, tmp_path):  # noqa: F811
    """The Redis counterpart: a process on another machine is in no manifest here; its owner record on the server
    names its stages from its ledger's opening (:meth:`geoagent.runtime.redis_state.RedisLedger.note_stages`), and
    only counts say it took its stage up. It starts just after a read of the owner records and at once finishes one
    of the stage's tasks (done grows, none leased, 3 ready): before, the records of that earlier read decided and the
    runner ended; now it reads them again before ending, and waits while that process lives."""
    import functools
    import uuid

    from geoagent.engine import stages_elsewhere_now
    from geoagent.runtime.redis_queue import open_redis_queue
    from geoagent.runtime.redis_state import open_redis_campaign_state

    campaign = "t" + uuid.uuid4().hex[:10]
    down = open_redis_campaign_state(redis_url, campaign, tmp_path / "machine-b", host="machine-b",
                                     heartbeat_ttl_s=1.0)
    machines: list = []
    n = {"reads": 0}

    async def main():
        queues = {e: open_redis_queue(redis_url, campaign, e) for e in "ac"}
        try:
            await queues["a"].put_many([(f"t{i}", {}) for i in range(4)])
            read = functools.partial(stages_elsewhere_now, tmp_path / "machine-b", ALL, down.ledger)

            def elsewhere():
                out = read()
                n["reads"] += 1
                if n["reads"] == 2:  # machine-a's process starts, and finishes one task of A at once
                    up = open_redis_campaign_state(redis_url, campaign, tmp_path / "machine-a", host="machine-a",
                                                   heartbeat_ttl_s=1.0)
                    machines.append(up)
                    up.ledger.note_stages(["A"])

                    async def one() -> None:
                        (t,) = await queues["a"].lease(1, 30.0)
                        await queues["c"].put_many([(t.key, {})])
                        await queues["a"].ack([t])

                    anyio.from_thread.run(one)
                return out

            runner = StageRunner(Sink(), queues["c"], None, StageContext(campaign), burst=True,
                                 foreign_upstream=[("A", queues["a"])], stages_elsewhere=elsewhere,
                                 stages_started=lambda: (), start_wait_s=60.0, poll_s=0.05)
            ended = anyio.Event()

            async def run() -> None:
                await runner.run()
                ended.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                with anyio.fail_after(20):
                    while not machines:
                        await anyio.sleep(0.02)
                await anyio.sleep(1.5)
                assert not ended.is_set(), "the runner ended beside a live process of A with A's tasks ready"
                await _work_all(queues)
                with anyio.fail_after(30):
                    await ended.wait()
            return {e: await q.counts() for e, q in queues.items()}
        finally:
            for q in queues.values():
                await q.close()

    try:
        counts = anyio.run(main)
    finally:
        for st in (down, *machines):
            st.close()
    assert counts["c"].done == 4 and counts["a"].ready == 0, counts
