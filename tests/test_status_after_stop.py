"""``status`` after a hard kill (no process alive, leases left) and after a no-op re-run of a finished
campaign (walkthrough defects). Real ``run.py`` runs against the simulated provider or the OpenAI fake."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import run_lock_held
from geoagent.sandbox.server import spawn, wait_ready
from geoagent.status import campaign_status, format_status
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-status"


def _progress_records(cfg) -> int:
    f = Path(cfg.state_dir()) / "progress.jsonl"
    return len(f.read_bytes().splitlines()) if f.is_file() else 0


def test_status_after_a_hard_kill_says_not_running_with_the_leases_and_no_eta(tmp_path):
    server, base = spawn("geoagent.sandbox.llm_openai:make_app", api_keys=[KEY])
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="killed", n=150, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="ST_KEY", rate_requests=15))  # ~10 s
        cfg = load_config(cfgp)
        proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], cwd=REPO,
                                env={"ST_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while _progress_records(cfg) < 2 and proc.poll() is None:
                assert time.monotonic() < deadline, "no progress record within 60 s"
                time.sleep(0.1)
            assert proc.poll() is None, "the run ended before it could be killed"
            live = campaign_status(cfg)
            assert live["running"] is True
            assert "last progress (running)" in format_status(live) and "ETA" in format_status(live)
            proc.send_signal(signal.SIGKILL)  # what a second Ctrl-C does (os._exit): no final record
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        server.terminate()
        server.join(10)

    st = campaign_status(cfg)
    assert st["running"] is False and run_lock_held(Path(cfg.state_dir())) is False
    leased = sum(c.leased for c in st["queues"].values())
    assert leased > 0  # the killed run's leases wait for their visibility timeout (or the next run)
    text = format_status(st)
    plural = "tasks are" if leased != 1 else "task is"
    assert (f"last progress (not running (the last run stopped without its final record; {leased} leased {plural} "
            "redelivered on the next run, which passes on any whose answer was stored before the stop without "
            "calling again, so calls can exceed done requests until then))") in text, text  # walk24 #7
    assert "ETA" not in text and "running, or killed" not in text


def test_status_after_a_noop_rerun_keeps_the_figures_of_the_run_that_worked(tmp_path, capsys):
    cfgp = generic_campaign(tmp_path, name="noop", n=40, cap_usd=1.0, models=model_table())
    cfg = load_config(cfgp)
    assert main(["run", str(cfgp), "--no-live"]) == 0
    assert main(["run", str(cfgp), "--no-live"]) == 0  # nothing left: a no-op re-run
    capsys.readouterr()
    assert campaign_status(cfg)["running"] is False
    assert main(["status", str(cfgp)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"last run \(ended \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\): no work left to do; the figures below "
                     r"are of the last run that did work, last recorded \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text
    # the stage lines are those of the run that answered the 40 requests, not the no-op run's zeros
    assert re.search(r"model_caller: \d+\.\d\d/s  done 40 ", text), text
    assert re.search(r"collector: \d+\.\d\d/s  done 40 ", text), text
    assert "done 0 " not in text
    assert "requests: ready       0  leased     0  done       40" in text


def test_read_last_with_work_finds_a_record_far_back_across_chunks_and_skips_torn_lines(tmp_path):
    import orjson

    from geoagent.runtime.progress import did_work, read_last_with_work

    f = tmp_path / "progress.jsonl"
    worked = {"t": 1.0, "stages": [{"stage": "s", "done": 7, "failed": 0, "dead": 0}], "pad": "x" * 300}
    idle = {"t": 2.0, "stages": [{"stage": "s", "done": 0, "failed": 0, "dead": 0}], "pad": "y" * 300}
    lines = [orjson.dumps(worked)] + [orjson.dumps(idle)] * 2000  # ~700 KB of no-op records after it
    f.write_bytes(b"\n".join(lines) + b"\n" + b'{"t": 3.0, "stages": [{"done": 5')  # a torn last line
    assert not did_work(idle) and did_work(worked)
    assert read_last_with_work(f) == worked
    assert read_last_with_work(f, max_bytes=100_000) is None  # searches back no further than asked
    assert read_last_with_work(tmp_path / "absent.jsonl") is None
