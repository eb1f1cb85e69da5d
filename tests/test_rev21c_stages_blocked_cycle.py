"""Review of af96968: a burst ``--stages`` stage waits while a ready task sits on the input of an upstream stage
that "a live process of the campaign runs" (manifest.json). The manifest names the stages a process was started
with, not the ones still at work in it: a stage that ended in a live process (stopped leasing: every model's key
refused, its host unreachable, the budget spent) leaves its input ready and is still counted as run there.

Two processes of a four-stage pipeline ``s1 -> s2 -> s3 -> s4`` (edges a -> b -> c -> d), split as
``--stages s1,s3`` and ``--stages s2,s4`` (non-contiguous splits are supported: ``model_caller,scorer`` beside
``parser``). s1 and s2 each stop leasing at once (``runnable()`` False: in GeoHint the model caller and the
geocoder, both unreachable in a network outage), leaving their inputs ready. s3 waits for s2 (ready, "run" by
the other process, alive) and s4 waits for s1 (ready, "run" by the first, alive): each process waits for the
other; neither ends. Now a stage that ended is recorded as such in the process's run entry (``stages_ended``)
and no longer counts as run there.
"""

from __future__ import annotations

import anyio

from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.stage import Stage, StageContext


class _Pass(Stage):
    concurrency = 1
    sends_http = False

    async def handle(self, task, ctx):
        return [(task.key, {})] if self.output_edge else []


class _Blocked(_Pass):
    def runnable(self):  # every task of its input would fail at once (keys refused, host down): lease none
        return False


class S1(_Blocked):
    name, input_edge, output_edge = "s1", "a", "b"


class S2(_Blocked):
    name, input_edge, output_edge = "s2", "b", "c"


class S3(_Pass):
    name, input_edge, output_edge = "s3", "c", "d"


class S4(_Pass):
    name, input_edge, output_edge = "s4", "d", None


def test_two_processes_whose_blocked_stages_each_feed_the_other_both_end(tmp_path):
    pipeline = [S1(), S2(), S3(), S4()]
    by = {s.name: s for s in pipeline}
    live: dict[str, set[str]] = {}  # what manifest.json says: each live process's run entry and its stages
    ended: list[str] = []

    async def main():
        qa = open_edge_queues(tmp_path / "q", "cycle", pipeline)
        qb = open_edge_queues(tmp_path / "q", "cycle", pipeline)
        await qa["a"].put_many([(f"a{i}", {}) for i in range(3)])
        await qa["b"].put_many([(f"b{i}", {}) for i in range(3)])

        async def proc(tag, names, queues):
            try:
                await run_pipeline("cycle", [by[n] for n in names], queues, StageContext("cycle", {}),
                                   handle_signals=False, pipeline=pipeline,
                                   stages_elsewhere=lambda: set().union(*(v for k, v in live.items() if k != tag)),
                                   # the engine records an ended stage in the run's entry (stages_ended)
                                   stage_ended=lambda name: live[tag].discard(name))
            finally:
                live.pop(tag, None)  # stop_run: the entry is no longer "running"
            ended.append(tag)

        live["A"], live["B"] = {"s1", "s3"}, {"s2", "s4"}
        with anyio.move_on_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(proc, "A", ["s1", "s3"], qa)
                tg.start_soon(proc, "B", ["s2", "s4"], qb)
        counts = {e: await q.counts() for e, q in qa.items()}
        for q in (*qa.values(), *qb.values()):
            await q.close()
        return counts

    counts = anyio.run(main)
    assert sorted(ended) == ["A", "B"], f"processes still waiting on each other after 10 s: ended {ended}"
    assert counts["a"].ready == 3 and counts["b"].ready == 3  # the blocked stages' work waits for a re-run


def test_stages_run_elsewhere_leaves_out_the_stages_a_live_run_records_as_ended(tmp_path):
    import os
    import socket
    import time

    from geoagent.runtime import manifest as m

    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    here = socket.gethostname()
    parent = os.getppid()  # alive, started before this entry
    entry = {"run_id": "r1", "status": "running", "host": here, "pid": parent, "started_unix": time.time(),
             "stages": ["s1", "s3"]}
    import json

    (tmp_path / "manifest.json").write_text(json.dumps({"runs": [entry]}), encoding="utf-8")
    names = ["s1", "s2", "s3", "s4"]
    assert m.stages_run_elsewhere(tmp_path, names) == {"s1", "s3"}

    class _Cfg:  # Manifest.record_stage_ended needs no config
        pass

    man = m.Manifest(_Cfg(), state_dir=tmp_path)
    man.record_stage_ended("r1", "s1")
    man.record_stage_ended("r1", "s1")
    assert json.loads((tmp_path / "manifest.json").read_text())["runs"][0]["stages_ended"] == ["s1"]
    assert m.stages_run_elsewhere(tmp_path, names) == {"s3"}
