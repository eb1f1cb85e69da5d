"""A config change's verdict per model does not count tasks the run sets aside as that model's work left.

Session 31 left this open: a model whose setting changed, with every planned task done, still had tasks an
earlier plan queued that the current plan no longer holds. Those were counted as its unfinished work, so the
run warned "results would mix both versions", then set the tasks aside unsent. The totals' verdict already
left them out (``left_out``); the per-model one now does too
(:meth:`geoagent.runtime.sqlite_queue.SQLiteQueue.tasks_by_model` ``not_counting``).
"""

from __future__ import annotations

import sqlite3
import time

import anyio

from _model_harness import generic_campaign, run_cli
from geoagent.runtime.manifest import read_manifest
from geoagent.runtime.queue import SUPERSEDED, open_queue
from geoagent.runtime.sqlite_queue import SQLiteQueue


def _model(name: str, tokens: int, model: str = "sim-1") -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "simulated"\nmodel = "{model}"\nmax_output_tokens = {tokens}\n'
            f'concurrency = 4\nrate = {{ requests = 500, period_s = 1.0 }}\n')


def test_tasks_about_to_be_set_aside_are_no_work_left_of_a_changed_model(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="aside", n=4, models=_model("a", 400))
    assert run_cli(p, capsys)[0] == 0

    async def queue_a_task_no_plan_holds() -> None:
        q = open_queue(tmp_path / "queues", "aside", "requests")
        try:
            await q.put_many([("a|77", {"model": "a"})])
        finally:
            await q.close()

    anyio.run(queue_a_task_no_plan_holds)
    # a's limit lowered (its 4 planned tasks are done) and model b added (another model id): 4 new calls
    p.write_text(p.read_text().replace("max_output_tokens = 400", "max_output_tokens = 300") + _model("b", 400, "sim-2"))
    rc, dry, _ = run_cli(p, capsys, "--simulate")
    assert rc == 0
    assert "would mix" not in dry and "every task of model a is done" in dry, dry
    rc, summary, err = run_cli(p, capsys)
    assert rc == 0, err
    assert "would mix" not in err and "warning" not in err, err
    assert ("every task of model a is done, so the change reaches none of its stored answers" in err
            and "no model's results mix two settings" in err), err
    assert "set aside 1 queued task of edge requests" in err, err
    man = read_manifest(tmp_path / "state" / "aside")
    assert "config_mix" not in man
    assert man["runs"][-1]["config_drift"]["not_applied_to"] == ["a"]


def test_tasks_by_model_leaves_out_the_keys_not_counted(tmp_path):
    async def main_() -> tuple[dict, dict, dict]:
        q = SQLiteQueue(tmp_path / "requests.sqlite")
        try:
            await q.put_many([(f"a{i}", {"model": "a"}) for i in range(4)] + [(f"b{i}", {"model": "b"}) for i in range(3)])
            tasks = {t.key: t for t in await q.lease(10, 60.0)}
            await q.ack([tasks["a0"], tasks["b0"]])
            await q.dead_letter(tasks["a1"], SUPERSEDED + " no longer planned")
            await q.release([tasks[k] for k in ("a2", "a3", "b1", "b2")])
            # a done key, a set-aside key and an unknown key among those not counted change nothing
            left_out = ["a2", "b1", "b2", "a0", "a1", "zz"]
            first = await q.tasks_by_model(not_counting=left_out, chunk=2)  # several chunks
            with sqlite3.connect(tmp_path / "requests.sqlite") as raw:  # SQLite's JSON functions cannot read it
                raw.execute("INSERT INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, 0, ?, ?)",
                            ("bad", b"{not json", time.time(), time.time()))
            again = await q.tasks_by_model(not_counting=left_out + ["bad"])
            return first, again, await q.tasks_by_model()
        finally:
            await q.close()

    first, again, whole = anyio.run(main_)
    assert first == {"a": (1, 1), "b": (1, 0)}  # (done, unfinished)
    assert again == {"a": (1, 1), "b": (1, 0), None: (0, 0)}  # counted in Python, the same
    assert whole == {"a": (1, 2), "b": (1, 2), None: (0, 1)}
