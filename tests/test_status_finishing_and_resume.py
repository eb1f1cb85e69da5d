"""``status`` while a run of a drained campaign is still going says it is finishing, not "campaign complete",
and after an interrupted run it says how to resume (walkthrough 19, finding 8).

The walkthrough's ``status`` in a replay's last seconds said "campaign complete: every queue drained" next to
"last progress (running)", while the report and export were still being written; after a Ctrl-C it said "run
ended: interrupted" with no "re-run the same command to resume". Real ``run.py`` subprocesses against the local
OpenAI-compatible fake that holds each answer (so a SIGINT finds calls in flight and work queued); the live
process that still holds the campaign is a real ``flock`` holding its ``run.lock``, as a run does until it has
written its end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import anyio
import pytest

from geoagent.engine import run_lock_held
from geoagent.sandbox.server import serve
from test_adversarial_runtime import KEY, REPO, _config
from test_repeat_signal_debounce import _slow_app

ENV = {"ADV_RT_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}


def _status(cfgp) -> str:
    out = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], env={**ENV, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
    return out.stdout


async def _start_run(cfgp, seen: list, ready=lambda: True):
    """``run.py run cfgp`` started against the holding fake; returned once it has sent a call and ``ready()``, plus
    0.3 s (calls in flight, work still queued)."""
    proc = await anyio.open_process([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], env=ENV)
    with anyio.fail_after(60):
        while not (seen and ready()):
            await anyio.sleep(0.05)
    await anyio.sleep(0.3)
    return proc


def test_interrupted_run_says_resume_and_a_held_campaign_is_finishing(tmp_path):
    if not shutil.which("flock"):
        pytest.skip("no flock(1) to hold the run lock")
    seen: list = []

    async def go():
        async with serve(_slow_app(seen)) as base:
            cfgp = _config(tmp_path, base_url=base, n=16, cap=5.0, name="fin")
            proc = await _start_run(cfgp, seen)
            proc.send_signal(signal.SIGINT)  # 8 calls in flight finish in the grace period, 8 stay queued
            with anyio.fail_after(90):
                await proc.wait()
            code = proc.returncode
            await proc.aclose()
            interrupted = _status(cfgp)
            done = await anyio.run_process([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"],
                                           env=ENV, check=False)
            return cfgp, code, interrupted, done.returncode

    cfgp, code, interrupted, rerun = anyio.run(go)
    assert code == 130
    assert "run ended: interrupted, as manifest.json recorded" in interrupted, interrupted
    assert "re-run the same command to resume" in interrupted, interrupted
    assert rerun == 0
    after = _status(cfgp)
    assert "campaign complete: every queue drained" in after and "re-run the same command" not in after, after
    state = tmp_path / "state" / "fin"
    holder = subprocess.Popen(["flock", str(state / "run.lock"), "sleep", "60"])  # a live process holding it
    try:
        deadline = time.monotonic() + 10
        while not run_lock_held(state) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run_lock_held(state)
        held = _status(cfgp)
    finally:
        os.kill(holder.pid, signal.SIGTERM)
        holder.wait()
    assert "campaign complete" not in held, held
    assert "a run of it is still going: it is finishing (writing the report and export)" in held, held


@pytest.mark.parametrize("when", ["before its first progress record", "after a progress record"])
def test_a_hard_stopped_run_says_resume_and_dates_its_stage_figures(tmp_path, when):
    # walkthrough 20, findings 2-3: after a SIGKILL (or a double Ctrl-C, an OOM kill) the run writes no final
    # record; status gave no resume hint, and its per-stage "done" figures (as of the last progress record) read as
    # what the run did, beside larger queue counts
    seen: list = []
    progress = tmp_path / "state" / "hard" / "progress.jsonl"

    async def go():
        async with serve(_slow_app(seen)) as base:
            cfgp = _config(tmp_path, base_url=base, n=16, cap=5.0, name="hard")
            proc = await _start_run(cfgp, seen, lambda: when.startswith("before") or (
                progress.is_file() and bool(progress.read_text().strip())))
            proc.kill()
            await proc.wait()
            await proc.aclose()
            return cfgp

    cfgp = anyio.run(go)
    out = _status(cfgp)
    assert "re-run the same command to resume" in out, out
    if when.startswith("after"):
        assert "the last run stopped without its final record" in out, out
        assert "stages, last run only, as of its last progress record" in out, out
