"""``status`` of a run that took SIGTERM (or Ctrl-C) and is finishing its calls in flight says "stopping", not
"running ... ETA" (walk45 #4: 1 s after the run printed ``stopping on SIGTERM``, ``status`` still read
``last progress (running) ... ETA estimating``). The run's progress record carries the signal once it took it.

Real processes: the OpenAI-compatible fake answering after 45 s, ``run.py run`` with four calls on the wire, SIGTERM,
then ``run.py status`` while the run waits out its 8 s grace period."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests._model_harness import run_with_calls_on_the_wire

REPO = Path(__file__).resolve().parents[1]


def _stopping_record(progress: Path) -> dict | None:
    try:
        lines = progress.read_bytes().splitlines()
    except OSError:
        return None
    for ln in reversed(lines):
        try:
            rec = orjson.loads(ln)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("stopping"):
            return rec
    return None


@pytest.mark.timeout(180)
def test_status_of_a_run_winding_down_after_sigterm_says_stopping(tmp_path):
    with run_with_calls_on_the_wire(tmp_path, name="winding", latency_ms=45000, key="sk-wind", key_var="WIND_KEY",
                                    in_flight=4, timeout_s=120.0,
                                    env_extra={"GEOAGENT_STOP_GRACE_S": "8"}) as (proc, cfgp, db, env, _cmd):
        progress = db.parent / "progress.jsonl"
        deadline = time.monotonic() + 30
        while not (progress.is_file() and progress.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.1)  # the run's first progress record (a tick a second)
        look = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=60)
        assert "last progress (running" in look.stdout and "stopping on" not in look.stdout, look.stdout
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 6
        while _stopping_record(progress) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        rec = _stopping_record(progress)
        assert rec is not None and rec["stopping"] == "SIGTERM" and not rec["finished"], rec
        look = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.poll() is None  # still winding down: the answers are 45 s away, the grace period 8 s
        assert "last progress (stopping on SIGTERM: finishing the calls in flight, then saving; re-run the same " \
               "command to resume once it has ended)" in look.stdout, look.stdout
        assert "ETA" not in look.stdout.split("last progress", 1)[1].splitlines()[0]
        proc.communicate(timeout=120)
        assert proc.returncode == 130
        final = [orjson.loads(ln) for ln in progress.read_bytes().splitlines() if ln.strip()][-1]
        assert final["finished"] and "stopping" not in final  # the run's last record: ended, no longer stopping
        look = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=60)
        assert "stopping on" not in look.stdout, look.stdout


def _stopping_pids(progress: Path) -> set[int]:
    out: set[int] = set()
    try:
        lines = progress.read_bytes().splitlines()
    except OSError:
        return out
    for ln in lines:
        try:
            rec = orjson.loads(ln)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("stopping") and not rec.get("finished"):
            out.add(int(rec["pid"]))
    return out


@pytest.mark.timeout(240)
def test_status_of_two_processes_winding_down_says_stopping_and_names_ctrl_c(tmp_path):
    """review45a #5, #9: two processes of one campaign, both stopped by Ctrl-C: ``status`` read "running: 2 of 2
    processes ... ETA" (the merged record carried no ``stopping``), and a single one read "stopping on SIGINT"
    where the console says Ctrl-C. A process of the two with no call in flight ends at once: it counts as ended."""
    with run_with_calls_on_the_wire(tmp_path, name="winding2", latency_ms=45000, key="sk-wind2", key_var="WIND2_KEY",
                                    in_flight=4, timeout_s=120.0, n=24,
                                    env_extra={"GEOAGENT_STOP_GRACE_S": "10"}) as (proc, cfgp, db, env, cmd):
        second = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            progress = db.parent / "progress.jsonl"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # both processes have written a record
                pids = {int(orjson.loads(ln)["pid"]) for ln in (progress.read_bytes().splitlines()
                                                                if progress.is_file() else []) if ln.strip()}
                if {proc.pid, second.pid} <= pids:
                    break
                time.sleep(0.1)
            for p in (proc, second):
                p.send_signal(signal.SIGINT)
            # the first process holds the model's 4 slots (answers 45 s away); the second, with none of its calls
            # on the wire, ends at once, unless it had some, then it winds down too
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (proc.pid in _stopping_pids(progress) and (
                    second.poll() is not None or second.pid in _stopping_pids(progress))):
                time.sleep(0.1)
            winding = 1 + (second.poll() is None)
            assert proc.pid in _stopping_pids(progress) and (winding == 1 or second.pid in _stopping_pids(progress))
            look = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=60)
            assert proc.poll() is None and 1 + (second.poll() is None) == winding
            assert f"last progress (stopping on Ctrl-C (SIGINT): {winding} of 2 processes finishing their calls in " \
                   "flight, then saving;" in look.stdout, look.stdout
            assert look.stdout.count("stopping on Ctrl-C (SIGINT), finishing its calls in flight") == winding, \
                look.stdout
            assert "ETA" not in look.stdout.split("last progress", 1)[1].splitlines()[0]
        finally:
            for p in (proc, second):
                if p.poll() is None:
                    p.communicate(timeout=120)
        assert proc.returncode == 130 and second.returncode == 130
