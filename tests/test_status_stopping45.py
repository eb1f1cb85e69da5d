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
