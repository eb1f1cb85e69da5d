"""Adversarial review of commit 38bdb89: the same race as the one it fixed, with a stop signal in the window.

A ``--stages collector`` run whose stage drained its input ends by itself; a SIGINT/SIGTERM that lands after
that (while the runner winds down) cut nothing short (engine docstring: "A process stopped by SIGINT/SIGTERM when
its own stages are drained ... ends like a finished run"). When another process's answers reach the collector's
input in the same window, the engine's ``stages_drained`` (a count taken after the runners ended) sees them and
calls the run ``interrupted`` (130): the exit code again depends on a few milliseconds."""

from __future__ import annotations

import os
import signal


from _late_arrival import arrive_after_drain, hold_ready
from _model_harness import generic_campaign, model_table
from geoagent import constants as C
from geoagent.cli import main
from geoagent.runtime.queue import open_queue

COLLECTOR = "collector"


def test_signal_after_the_collector_drained_with_answers_arriving_is_not_interrupted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = "late-signal"
    cfg = generic_campaign(tmp_path, name=name, n=10, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--no-live"]) == 0
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("n_requests = 10", "n_requests = 14"), encoding="utf-8")
    assert main(["run", str(cfg), "--stages", "model_caller", "--no-live"]) == 0
    capsys.readouterr()

    assert len(hold_ready(lambda: open_queue(tmp_path / "queues", name, C.EDGE_RESPONSES))) == 4
    # another process's answers, just after the drain, and a stop request (CI tearing the run down) with them
    arrived = arrive_after_drain(monkeypatch, then=lambda: os.kill(os.getpid(), signal.SIGTERM))
    rc = main(["run", str(cfg), "--stages", COLLECTOR, "--no-live"])
    out = capsys.readouterr()
    assert arrived == [4]
    assert rc == 0, out.out + out.err  # current: 130, "interrupted"
    assert "interrupted" not in out.out, out.out
    assert f"stage {COLLECTOR} finished; campaign not complete" in out.out, out.out
    assert "4 tasks on responses queued by another process after stage collector had finished here" in out.out, out.out
