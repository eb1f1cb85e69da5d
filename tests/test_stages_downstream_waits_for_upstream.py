"""A ``--stages`` process without ``--watch`` whose upstream stage another process is still working on waits for
that work instead of ending at the first moment its own input is empty (session 21 walkthrough, finding 3).

Before: ``run --stages model_caller`` (the local OpenAI fake at 10 requests/s) started first, then ``run --stages collector``:
the collector caught up with the answers so far, found its input empty and ended ("stages collector finished;
campaign not complete") while the model caller still had most of the plan to call; both exited 0, the rest of
the answers waited for a process nobody was running, and no report was written. The docs' advice ("start the
upstream stages first") was not enough. Now a stage whose upstream runs in another process ends only when its
input is empty and no task of an upstream edge is leased (in flight in another live process); the collector
takes every answer and, as the last process to end, finishes the campaign. A downstream process started with no
upstream process running used to end at once, saying what is left; it now waits for one to start (fixstages43:
tests/test_stages_downstream_started_first.py).

Real processes: the model caller's ``run.py`` subprocess and the collector's run through the CLI in-process,
over the local OpenAI-compatible fake (a generic campaign).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from _model_harness import generic_campaign, model_table
from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
#: the local OpenAI-compatible fake (started by the model caller's process), 10 requests/s: 40 calls take ~4 s
SLOW_FAKE = """
[[models]]
name = "m"
provider = "openai"
model = "sandbox-gpt"
base_url = "http://openai.sandbox.invalid/v1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 100
concurrency = 2
rate = { requests = 10, period_s = 1.0 }
"""


def _responses_done(tmp: Path, name: str) -> int:
    import sqlite3

    path = tmp / "queues" / name / "responses.sqlite"
    if not path.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
            return int(c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_a_downstream_stages_process_waits_for_the_upstream_process_at_work(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    name = "wait-up"
    cfg = generic_campaign(tmp_path, name=name, n=40, models=SLOW_FAKE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    up = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--stages", "model_caller",
                           "--no-live"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    try:
        deadline = time.monotonic() + 60
        while _responses_done(tmp_path, name) < 5:  # the model caller is at work
            assert up.poll() is None and time.monotonic() < deadline, up.communicate(timeout=10)
            time.sleep(0.05)
        monkeypatch.setattr("geoagent.runtime.worker.WAIT_SAID_AFTER_S", 0.0)  # its first wait (the unit test below: 5 s)
        rc = main(["run", str(cfg), "--stages", "collector", "--no-live"])
        out = capsys.readouterr().out
        err = caplog.text  # the CLI's warning lines (stderr outside pytest, which holds the logging handlers)
        up_out, up_err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, up_out[-2000:] + up_err[-2000:]
    # before: "stages collector finished; campaign not complete: other stages still have work", with most of the
    # 60 answers still to come
    assert rc == 0 and f"campaign {name}: complete" in out, out
    assert "responses: ready 0  leased 0  done 40" in out, out
    # with --no-live, one line says why the process goes on (before: nothing until it ended)
    said = "stage collector: its input is drained; waiting for stage model_caller, which another process"
    assert err.count(said) == 1 and "Ctrl-C stops it, nothing is lost" in err, err


def test_a_whole_campaign_run_records_its_ended_stages_too(tmp_path, monkeypatch, capsys):
    """Every run records each stage that ended (manifest.json ``stages_ended``), not only a ``--stages`` one: a
    whole-campaign ``--watch`` run whose model caller stopped (every key refused) goes on, and a plain ``--stages
    collector`` beside it waits for a model caller that no longer runs unless the record says so."""
    import json

    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="ended", n=4, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    run = json.loads((tmp_path / "state" / "ended" / "manifest.json").read_text(encoding="utf-8"))["runs"][-1]
    assert sorted(run["stages_ended"]) == sorted(run["stages"]) == ["collector", "model_caller"], run


def test_the_wait_line_needs_one_unbroken_wait(monkeypatch, caplog):
    """The line comes after WAIT_SAID_AFTER_S s of one unbroken wait, once: a drained moment at the start followed
    by minutes of steady work did not count as a wait (review rev22b: the line came at the next drained instant)."""
    import logging
    import types

    import geoagent.runtime.worker as w

    clock = [1000.0]
    monkeypatch.setattr(w.time, "monotonic", lambda: clock[0])
    runner = w.StageRunner.__new__(w.StageRunner)  # only the wait bookkeeping of a runner
    runner._waiting_since, runner._wait_said, runner.stage = None, False, types.SimpleNamespace(name="collector")
    said = "stage collector: its input is drained; waiting for stage model_caller"
    with caplog.at_level(logging.WARNING):
        runner._say_waiting("model_caller", "requests")  # drained a moment ...
        runner._waiting_since = None  # ... then work came (as _input_exhausted does when its input is not drained)
        clock[0] += 600.0
        runner._say_waiting("model_caller", "requests")  # drained again: a new wait
        clock[0] += w.WAIT_SAID_AFTER_S - 0.1
        runner._say_waiting("model_caller", "requests")
        assert said not in caplog.text
        clock[0] += 0.2
        runner._say_waiting("model_caller", "requests")
        runner._say_waiting("model_caller", "requests")
    assert caplog.text.count(said) == 1, caplog.text
