"""What a downstream ``--stages`` runner waiting for its upstream stages to be taken up says, and what counts as
taken up (review43e #2, #3; fixstages43: :meth:`geoagent.runtime.worker.StageRunner._upstream_taken_up`).

#2 Before: with two upstream stages no process had started (GeoHint: ``--stages geocoder,scorer,aggregator``
started alone waits for model_caller and parser), the waiting line named the first only (``--stages
model_caller``); a process started with exactly that left its answers for parser, and the downstream process waited
on without a word (one "said" flag per runner). Now the line names every such stage in one ``--stages a,b``
command, and a stage waited for later, not named before, gets its own line.

#3 Before: the upstream input's dead count growing (another process's plan setting tasks aside, SET_ASIDE_ELSEWHERE)
or leases outstanding at the runner's start (a crashed upstream process's, not yet expired) counted as a process
having taken the stage up, so the downstream process ended as soon as they expired instead of waiting. Now only
done growth and leases above the fewest seen since the start count.

Real runner over real SQLite queues: the "other processes" are this test leasing, moving and acking upstream tasks
as a process of that stage would; the stage runs nothing itself (its input stays empty).
"""

from __future__ import annotations

import logging
import time

import anyio

from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner


class Sink(Stage):
    name = "c"
    input_edge = "c"
    output_edge = None

    async def handle(self, task, ctx):
        return []


def _runner(queues, *, start_wait_s: float = 60.0) -> StageRunner:
    return StageRunner(Sink(), queues["c"], None, StageContext("camp"), burst=True,
                       foreign_upstream=[("A", queues["a"]), ("B", queues["b"])],
                       stages_elsewhere=lambda: (), stages_started=lambda: (), start_wait_s=start_wait_s,
                       poll_s=0.05)


async def _until(cond, timeout_s: float = 20.0) -> None:
    with anyio.fail_after(timeout_s):
        while not cond():
            await anyio.sleep(0.02)


def _lines(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def drive(runner, body) -> float:
    """Run ``runner`` beside ``body(ended)`` (``ended``: an event set when the runner's ``run`` returned), then wait
    30 s at most for it to end; the runner's elapsed time, s. Shared with test_stages_upstream_view45."""
    ended = anyio.Event()
    took: list[float] = []

    async def run() -> None:
        t0 = time.monotonic()
        await runner.run()
        took.append(time.monotonic() - t0)
        ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await body(ended)
        with anyio.fail_after(30):
            await ended.wait()
    return took[0]


def _run(tmp_path, monkeypatch, caplog, body, *, start_wait_s: float = 60.0, before=None):
    """Run the runner beside ``body(queues, runner, ended)``; returns (runner's elapsed s, whether it ended)."""
    monkeypatch.setattr("geoagent.runtime.worker.WAIT_SAID_AFTER_S", 0.3)

    async def main():
        queues = {e: open_queue(tmp_path / "q", "camp", e) for e in "abc"}
        try:
            await queues["a"].put_many([(f"t{i}", {}) for i in range(4)])
            if before is not None:
                await before(queues)
            runner = _runner(queues, start_wait_s=start_wait_s)
            return await drive(runner, lambda ended: body(queues, runner, ended))
        finally:
            for q in queues.values():
                await q.close()

    with caplog.at_level(logging.WARNING, logger="geoagent.runtime.worker"):
        return anyio.run(main)


async def _work_stage(src, dst) -> None:
    """What a process of the stage reading ``src`` does: lease its tasks, put each one's output on ``dst``, ack."""
    tasks = await src.lease(100, 30.0)
    if dst is not None:
        await dst.put_many([(t.key, {}) for t in tasks])
    await src.ack(tasks)


def test_the_line_names_every_upstream_stage_not_taken_up_in_one_command(tmp_path, monkeypatch, caplog):
    both = "waiting for a process that runs stages A, B to start (4 tasks ready on the input of stage A, edge a"

    async def body(queues, runner, ended):
        await _until(lambda: _lines(caplog, both))
        line = _lines(caplog, both)[0]
        assert "`run.py run CONFIG --stages A,B` (or `run.py run CONFIG`, every stage) takes them" in line, line
        await _work_stage(queues["a"], queues["b"])  # a process of A alone: B's work waits for a process of B
        await anyio.sleep(1.0)
        assert not ended.is_set()  # still waiting, for B (named already: no second line)
        await _work_stage(queues["b"], None)

    _run(tmp_path, monkeypatch, caplog, body)
    assert len(_lines(caplog, "to start")) == 1, caplog.text


def test_a_stage_waited_for_later_gets_its_own_line(tmp_path, monkeypatch, caplog):
    """A taken up (its tasks leased by a process that started after this runner), its work then queued for B, which
    no process has taken up: a line for B alone (the line said once per stage, not once per runner: the test
    above; the one saying the runner waits for A at work elsewhere is another)."""
    line_b = "waiting for a process that runs stage B to start (2 tasks ready on its input, edge b"

    async def body(queues, runner, ended):
        a = queues["a"]
        first = await a.lease(2, 30.0)  # a process of A at work: A taken up (a lease above those at the start)
        await _until(lambda: _lines(caplog, "waiting for stage A, which another process of the campaign runs"))
        await queues["b"].put_many([(t.key, {}) for t in first])
        await a.ack(first)
        await _work_stage(a, None)  # its other two: set aside by it (no output), A done
        await _until(lambda: _lines(caplog, line_b))
        assert "`run.py run CONFIG --stages B` (or" in _lines(caplog, line_b)[0]
        assert not ended.is_set()
        await _work_stage(queues["b"], None)

    _run(tmp_path, monkeypatch, caplog, body)
    assert not _lines(caplog, "stages A, B"), caplog.text
    assert len(_lines(caplog, "to start")) == 1, caplog.text


def test_tasks_set_aside_upstream_do_not_count_as_taken_up(tmp_path, monkeypatch, caplog):
    """Another process's plan sets two of A's ready tasks aside (dead): before, its dead count's growth counted as
    a process of A at work and the runner ended at once; now it waits on for A, to its bound."""

    async def body(queues, runner, ended):
        await _until(lambda: _lines(caplog, "runs stages A, B to start"))
        assert await queues["a"].dead_letter_ready(["t0", "t1"], "set aside by another process") == ["t0", "t1"]
        await anyio.sleep(0.5)
        assert not ended.is_set()

    took = _run(tmp_path, monkeypatch, caplog, body, start_wait_s=2.0)
    assert took >= 2.0
    assert _lines(caplog, "no process took up stage A within 2 s"), caplog.text


def test_leases_outstanding_at_the_start_do_not_count_as_taken_up(tmp_path, monkeypatch, caplog):
    """Two of A's tasks leased by a process that crashed before this runner started: before, those leases counted as
    A taken up, and once they expired the runner ended at once; now it waits for a process of A, to its bound."""

    async def crashed(queues):
        assert len(await queues["a"].lease(2, 0.5)) == 2

    async def body(queues, runner, ended):
        await _until(lambda: _lines(caplog, "runs stages A, B to start"))  # the leases expired: 4 ready
        assert "4 tasks ready on the input of stage A" in _lines(caplog, "runs stages A, B to start")[0]

    took = _run(tmp_path, monkeypatch, caplog, body, start_wait_s=2.0, before=crashed)
    assert took >= 2.0
    assert _lines(caplog, "no process took up stage A within 2 s"), caplog.text
