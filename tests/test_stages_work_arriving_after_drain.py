"""A ``--stages`` process whose stages drained, while another process's output reached their input just after.

A process without ``--watch`` ends when its own stages' input queues are empty and nothing in them is leased
(docs/scale-out.md, "Scale-out on one machine"). Work another process queues there after that moment is not
work this process left: before (session 21's CI), the engine counted the queues after its runners had ended
and called such work its own ("incomplete", exit 3: "left queued untouched because a stage stopped early"),
so the same split run ended 0 or 3 by a few milliseconds. In CI: ``run --stages collector`` beside a
``--stages model_caller --watch`` process found its input empty while the model caller had 4 calls in flight;
their 4 answers landed before the count. Now the process ends ``stages collector finished`` (exit 0) and
says how many arrived after its stages finished and how to take them.

The arrival is made deterministic: the 4 answers a real ``--stages model_caller`` run queued are held as dead
letters while the collector starts, and put back to ready the moment its runner finds the input exhausted
(the queue's own ``requeue_dead``), i.e. between the runner's end and the engine's count.
"""

from __future__ import annotations

import pytest

from _model_harness import generic_campaign, model_table
from geoagent import constants as C
from geoagent.cli import main
from geoagent.runtime import worker as worker_mod
from geoagent.runtime.queue import open_queue
from _late_arrival import COLLECTOR, arrive_after_drain, hold_ready



def _responses_queue(tmp_path, name):
    return open_queue(tmp_path / "queues", name, C.EDGE_RESPONSES)


def test_answers_arriving_after_a_stages_process_drained_are_not_its_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = "late-answers"
    cfg = generic_campaign(tmp_path, name=name, n=10, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--no-live"]) == 0
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("n_requests = 10", "n_requests = 14"), encoding="utf-8")
    assert main(["run", str(cfg), "--stages", "model_caller", "--no-live"]) == 0
    capsys.readouterr()

    # the 4 new answers: out of sight while the collector starts, back the moment it drained
    assert len(hold_ready(lambda: _responses_queue(tmp_path, name))) == 4
    original = worker_mod.StageRunner._input_exhausted
    arrived = arrive_after_drain(monkeypatch)
    rc = main(["run", str(cfg), "--stages", COLLECTOR, "--no-live"])
    out = capsys.readouterr()
    assert arrived == [4]
    assert rc == 0, out.out + out.err  # before: 3, "incomplete"
    assert f"stage {COLLECTOR} finished; campaign not complete" in out.out, out.out
    assert "incomplete" not in out.out, out.out
    assert ("4 tasks on responses queued by another process after stage collector had finished here; run `--stages "
            "collector` again (or with --watch) to take them") in out.out, out.out

    # nothing was lost: the next run of the stage takes them and the campaign completes
    monkeypatch.setattr(worker_mod.StageRunner, "_input_exhausted", original)
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert "complete" in capsys.readouterr().out


@pytest.mark.parametrize("stage", [COLLECTOR])
def test_work_left_in_its_own_input_by_a_stop_is_still_incomplete(stage, tmp_path, monkeypatch, capsys):
    """The other side: a stages process that stops early with its own input still ready (here the stage is
    not runnable from the start: the collector never drains) is still ``incomplete``, not "finished"."""
    monkeypatch.chdir(tmp_path)
    name = "left-answers"
    cfg = generic_campaign(tmp_path, name=name, n=6, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--stages", "model_caller", "--no-live"]) == 0
    capsys.readouterr()
    from geoagent.runtime import stage as stage_mod

    monkeypatch.setattr(stage_mod.Stage, "runnable", lambda self: self.name != stage)
    rc = main(["run", str(cfg), "--stages", stage, "--no-live"])
    out = capsys.readouterr().out
    assert rc == 3 and "incomplete" in out, out
    assert "queued by another process after" not in out, out
