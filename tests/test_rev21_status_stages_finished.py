"""Adversarial review of commit 38bdb89: ``status`` after a ``--stages`` process ended ``stages finished`` with
work another process queued on its input after its stage drained, and no process running the campaign any more.

The run's own summary says what to do (``run --stages collector again``); ``status`` said only ``run ended:
stages finished`` beside ``responses: ready 4``: no process will ever take them, no report or export was
written, and nothing told the reader so (an ``interrupted`` run gets the resume hint)."""

from __future__ import annotations


from _late_arrival import arrive_after_drain, hold_ready
from _model_harness import generic_campaign, model_table
from geoagent import constants as C
from geoagent.cli import main
from geoagent.runtime import worker as worker_mod
from geoagent.runtime.queue import open_queue


def test_status_of_a_campaign_left_stages_finished_with_work_and_no_process_says_how_to_finish(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = "left-after-drain"
    cfg = generic_campaign(tmp_path, name=name, n=10, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--no-live"]) == 0
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("n_requests = 10", "n_requests = 14"), encoding="utf-8")
    assert main(["run", str(cfg), "--stages", "model_caller", "--no-live"]) == 0

    assert len(hold_ready(lambda: open_queue(tmp_path / "queues", name, C.EDGE_RESPONSES))) == 4
    original = worker_mod.StageRunner._input_exhausted
    arrive_after_drain(monkeypatch)
    assert main(["run", str(cfg), "--stages", "collector", "--no-live"]) == 0
    monkeypatch.setattr(worker_mod.StageRunner, "_input_exhausted", original)
    capsys.readouterr()
    main(["status", str(cfg)])
    out = capsys.readouterr().out
    assert "run ended: stages finished" in out, out
    assert "no process runs the campaign" in out, out  # before: nothing said the 4 answers wait for nobody
