"""Review of 59471ac (``--stages``: a downstream stage waits while its foreign upstream input is leased); both
findings fixed in the same session: a stage waits for every earlier stage of its own process, and for a ready
task of a stage another live process runs (``stages_elsewhere``: a retry backoff, a lane deferral).

Two ``--stages`` processes of one pipeline ``slow -> mid -> sink`` (edges a -> b -> c), modelled as two
:func:`run_pipeline` calls at once over the same SQLite queue files (each its own handles), as
``run --stages slow,sink`` and ``run --stages mid`` would run them: process A holds the slow (paid, model-caller
like) first stage *and* the last one; process B the fast middle one (a parser).
"""

from __future__ import annotations

import anyio

from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.stage import Stage, StageContext

N = 12


class Slow(Stage):
    name = "slow"
    input_edge = "a"
    output_edge = "b"
    concurrency = 1
    lease_batch = 1
    sends_http = False

    async def handle(self, task, ctx):
        await anyio.sleep(0.15)
        return [(task.key, {})]


class Mid(Stage):
    name = "mid"
    input_edge = "b"
    output_edge = "c"
    concurrency = 1
    sends_http = False

    async def handle(self, task, ctx):
        return [(task.key, {})]


class Sink(Stage):
    name = "sink"
    input_edge = "c"
    output_edge = None
    concurrency = 1
    sends_http = False

    async def handle(self, task, ctx):
        return []


def _run_split(tmp_path, own_a, own_b):
    pipeline = [Slow(), Mid(), Sink()]
    by = {s.name: s for s in pipeline}
    results = {}

    async def main():
        qa = open_edge_queues(tmp_path / "q", "split", pipeline)
        qb = open_edge_queues(tmp_path / "q", "split", pipeline)
        await qa["a"].put_many([(f"k{i}", {}) for i in range(N)])

        async def proc(tag, names, queues, delay):
            await anyio.sleep(delay)
            stages = [by[n] for n in names]
            elsewhere = set(by) - set(names)  # the other process's stages, as the engine reads them (manifest.json)
            results[tag] = await run_pipeline("split", stages, queues, StageContext("split", {}),
                                              handle_signals=False, pipeline=pipeline,
                                              stages_elsewhere=lambda: elsewhere)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(proc, "A", own_a, qa, 0.0)
                tg.start_soon(proc, "B", own_b, qb, 0.3)  # B starts once A is at work
        counts = {e: await q.counts() for e, q in qa.items()}
        for q in (*qa.values(), *qb.values()):
            await q.close()
        return counts

    return anyio.run(main), results


def test_the_last_stage_waits_for_its_own_process_first_stage_when_the_middle_one_runs_elsewhere(tmp_path):
    """``--stages slow,sink`` beside ``--stages mid``: the sink's direct producer (mid) runs in the other process,
    so it has no upstream_done; its foreign upstream is mid's input only; the slow stage of its own process is
    not looked at. mid (fast) is idle between the slow answers, so the sink ends at the first empty moment while
    its own process's slow stage still has most of the plan to do: the rest stays on edge c, unconsumed."""
    counts, runs = _run_split(tmp_path, ["slow", "sink"], ["mid"])
    assert counts["a"].done == N
    assert counts["c"].done == N, f"sink ended early: edge c {counts['c']}"


class Flaky(Slow):
    """The slow stage whose last task fails once (a transient error: the queue retries it after its backoff)."""

    failed = False

    async def handle(self, task, ctx):
        await anyio.sleep(0.05)
        if task.key == f"k{N - 1}" and not Flaky.failed:
            Flaky.failed = True
            raise RuntimeError("transient: 503 from the model host")
        return [(task.key, {})]


def test_a_downstream_process_waits_while_its_upstream_task_waits_out_a_retry_backoff(tmp_path):
    """``--stages slow`` beside ``--stages mid,sink``: the upstream's last task fails once and waits out its
    backoff (ready, not leased) while the upstream process still runs to retry it. The downstream sees its input
    empty and nothing leased upstream and ends; the retried answer then arrives on edge b for nobody (the
    walkthrough's 'ended with answers still to come', at the tail of every run where a last call is retried)."""
    pipeline = [Flaky(), Mid(), Sink()]
    by = {s.name: s for s in pipeline}
    Flaky.failed = False

    async def main():
        opts = {"backoff_base_s": 1.0, "backoff_max_s": 1.0}
        qa = open_edge_queues(tmp_path / "q", "retry", pipeline, **opts)
        qb = open_edge_queues(tmp_path / "q", "retry", pipeline, **opts)
        await qa["a"].put_many([(f"k{i}", {}) for i in range(N)])

        async def proc(names, queues, delay):
            await anyio.sleep(delay)
            # the other process's stages, as the engine reads them from manifest.json (stages_run_elsewhere)
            elsewhere = {"slow", "mid", "sink"} - set(names)
            await run_pipeline("retry", [by[n] for n in names], queues, StageContext("retry", {}),
                               handle_signals=False, pipeline=pipeline, stages_elsewhere=lambda: elsewhere)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(proc, ["slow"], qa, 0.0)
                tg.start_soon(proc, ["mid", "sink"], qb, 0.1)
        counts = {e: await q.counts() for e, q in qa.items()}
        for q in (*qa.values(), *qb.values()):
            await q.close()
        return counts

    counts = anyio.run(main)
    assert Flaky.failed and counts["a"].done == N
    assert counts["b"].done == N and counts["c"].done == N, f"downstream ended early: {counts}"


def test_stages_run_elsewhere_reads_the_live_processes_of_manifest_json(tmp_path):
    """What the engine passes as ``stages_elsewhere``: the stages of the runs ``manifest.json`` records as running on
    this machine whose process lives (another process: a sleeping child here), not this process's own, not an
    ended run's, not a dead process's; a run recording no stages runs them all."""
    import json
    import os
    import socket
    import subprocess
    import sys
    import time

    from geoagent.runtime.manifest import stages_run_elsewhere

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        now = time.time()
        here = socket.gethostname()
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        runs = [
            {"run_id": "a", "status": "running", "host": here, "pid": child.pid, "started_unix": now,
             "stages": ["model_caller"]},
            {"run_id": "b", "status": "running", "host": here, "pid": os.getpid(), "started_unix": now,
             "stages": ["collector"]},                                                   # this process
            {"run_id": "c", "status": "complete", "host": here, "pid": child.pid, "started_unix": now,
             "stages": ["parser"]},                                                      # ended
            {"run_id": "d", "status": "running", "host": here, "pid": int(dead.stdout), "started_unix": now,
             "stages": ["scorer"]},                                                      # its process is gone
            {"run_id": "e", "status": "running", "host": "another-machine", "pid": child.pid, "started_unix": now,
             "stages": ["geocoder"]},                                                    # not this machine
        ]
        (tmp_path / "manifest.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
        names = ["model_caller", "parser", "scorer", "collector"]
        assert stages_run_elsewhere(tmp_path, names) == {"model_caller"}
        runs[0].pop("stages")  # a run recording no stages runs every one
        (tmp_path / "manifest.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
        assert stages_run_elsewhere(tmp_path, names) == set(names)
        assert stages_run_elsewhere(tmp_path / "none", names) == set()
    finally:
        child.kill()
        child.wait()
