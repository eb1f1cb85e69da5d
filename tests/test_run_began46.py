"""When "this run" began for the processes of a campaign on one state folder (``geoagent.engine.run_began``; the crawl's
re-ask limits read it, fixreask46), and that a dry run leaves ``run.lock`` as it is.

review46b #1: a process that started after the run's first process had ended, while another process of that run went
on, read the ended process's start as its run's, so its failures counted as "this run" and were not re-asked. Now it
reads the earliest start among the processes alive now. review46b #4: a dry run (``--simulate``) rewrote ``run.lock``.
All with real processes holding the run lock as ``run.py`` does (``owner=True``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geoagent.engine import run_began, run_lock
from geoagent.runtime.procs import process_started_unix

REPO = Path(__file__).resolve().parents[1]

#: a process of the campaign: holds the run lock (as a run does) until the file named by argv[2] appears, writing
#: {"alone", "began"} (what it read) to argv[3] once it holds it
HOLDER = r"""
import json, sys, time
from pathlib import Path
from geoagent.engine import run_began, run_lock
state, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
with run_lock(state, owner=True) as alone:
    out.write_text(json.dumps({"alone": alone, "began": run_began(state)}))
    while not stop.exists():
        time.sleep(0.02)
"""


def _start(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, Path]:
    stop, out = tmp_path / f"{name}.stop", tmp_path / f"{name}.json"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "state"), str(stop), str(out)],
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while not out.exists():
        assert proc.poll() is None and time.monotonic() < deadline, f"holder {name} did not take the run lock"
        time.sleep(0.02)
    return proc, stop, out


def _end(proc: subprocess.Popen, stop: Path) -> None:
    stop.touch()
    assert proc.wait(timeout=60) == 0


@pytest.mark.skipif(process_started_unix(os.getpid()) is None, reason="no /proc here: process starts unreadable")
def test_a_process_joining_after_the_first_ended_counts_from_the_oldest_live_process(tmp_path):
    a, a_stop, a_out = _start(tmp_path, "a")
    time.sleep(2.5)  # B starts well after A (a start is read to 1/100 s over a boot time in whole s: up to 1 s early)
    b, b_stop, b_out = _start(tmp_path, "b")
    try:
        ra, rb = json.loads(a_out.read_text()), json.loads(b_out.read_text())
        assert ra["alone"] is True and rb["alone"] is False
        assert rb["began"] == ra["began"]  # B joined A's run: one time for both
        _end(a, a_stop)
        time.sleep(1.2)
        c, c_stop, c_out = _start(tmp_path, "c")  # started after A ended, while B goes on
        try:
            rc = json.loads(c_out.read_text())
            assert rc["alone"] is False
            b_started = process_started_unix(b.pid)
            assert b_started is not None and rc["began"] == pytest.approx(b_started, abs=0.01)
            assert rc["began"] > ra["began"] + 1.0  # not the ended process's start (before: equal to it)
        finally:
            _end(c, c_stop)
    finally:
        _end(b, b_stop)


def test_a_dry_runs_lock_leaves_run_lock_as_it_is(tmp_path):
    state = tmp_path / "state"
    with run_lock(state):
        pass
    before = (state / "run.lock").read_bytes()
    assert json.loads(before)["pid"] == os.getpid()
    time.sleep(0.01)
    with run_lock(state, read_only_ok=True) as alone:  # what a dry run takes (campaign_run_lock(simulate=True))
        assert alone is True
    assert (state / "run.lock").read_bytes() == before
    assert run_began(state) == json.loads(before)["began"]  # this process, alive, began it
