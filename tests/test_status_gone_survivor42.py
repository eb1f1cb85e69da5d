"""``status`` beside a surviving process (live42 #3).

A process of a campaign killed with calls in flight leaves their reservations open; ``status`` said "the next run of
the campaign books them as unknown-outcome spend" while another process of the campaign was still running, whose
model caller books them itself (the ledger's recovery, every 5 s while one of their requests, handed back to the
queue, waits on the gone process's reservation, or while it waits for budget room). Now it names that process.

Real processes, as ``tests/test_status_scaleout.py`` does: the killed process holds a real reservation in the
campaign's ledger (opened through the engine's own ``open_state``); the surviving one is a live child whose progress
record the test writes, and this process holds ``run.lock`` for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_lock, spend_detail_lines
from geoagent.files import append_jsonl
from geoagent.status import campaign_status, format_status
from tests._model_harness import generic_campaign, model_table, progress_record as _record

REPO = Path(__file__).resolve().parents[1]

#: the killed process: reserves one call in the campaign's ledger, says so, then waits to be killed
RESERVER = """
import sys, time
from geoagent.config import load_config
from geoagent.runtime.backend import open_state
cfg = load_config(sys.argv[1])
state = open_state(cfg, cap_usd=cfg.budget.cap_usd).__enter__()
state.ledger.reserve("req-1", 0.25, model="m")
print("reserved", flush=True)
time.sleep(120)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_status_names_the_surviving_process_that_books_a_killed_ones_reservations(tmp_path):
    cfgp = generic_campaign(tmp_path, name="c", n=10, models=model_table())
    cfg = load_config(cfgp)
    state = Path(cfg.state_dir())
    killed = subprocess.Popen([sys.executable, "-c", RESERVER, str(cfgp)], stdout=subprocess.PIPE, text=True,
                              env=_env())
    assert killed.stdout.readline().strip() == "reserved"
    killed.kill()
    killed.wait(10)
    survivor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        now = time.time()
        append_jsonl(state / C.PROGRESS_FILE, [
            _record(killed.pid, "run-a", now - 5.0, 10.0, started=now - 15.0),
            _record(survivor.pid, "run-b", now - 0.3, 8.0, started=now - 8.3)], fsync=False)
        with run_lock(state):
            text = format_status(campaign_status(cfg))
    finally:
        survivor.kill()
        survivor.wait(10)
    line = next(ln for ln in text.splitlines() if "reserved by a process that is gone" in ln)
    assert f"process {survivor.pid} of the campaign, still running, books them as unknown-outcome spend" in line, text
    assert "the next run of the campaign does at its start" in line
    # nothing running any more: the next run books them, as before
    text = format_status(campaign_status(cfg))
    line = next(ln for ln in text.splitlines() if "reserved by a process that is gone" in ln)
    assert "the next run of the campaign books them as unknown-outcome spend" in line and "still running" not in line


def test_the_gone_line_names_every_surviving_model_caller():
    spend = {"gone_usd": 0.5, "gone_calls": 2, "open_reservations": 2, "reserved_usd": 0.5,
             "gone_booked_by": [11, 22]}
    line = spend_detail_lines(spend)[-1]
    assert "processes 11 and 22 of the campaign, still running, book them" in line
    assert "once a model caller of theirs takes up one of their requests again" in line
