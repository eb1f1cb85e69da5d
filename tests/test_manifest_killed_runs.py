"""A run whose process was killed is marked ``killed`` in ``manifest.json`` by the next run on the machine.

Walkthrough finding (session 8): after a SIGKILL the run's entry kept ``"status": "running"`` for good, so the
manifest (the record that traces a result to what produced it) said a run was still going that had died.
A real daemon process is SIGKILLed mid-run here; a run in a process that is still alive (a ``--stages``
scale-out) must keep its ``running`` entry.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from geoagent.cli import main
from geoagent.runtime.manifest import Manifest
from geoagent.sandbox.server import free_port, wait_ready
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]


def _runs(state: Path) -> list[dict]:
    return orjson.loads((state / "manifest.json").read_bytes())["runs"]


def test_a_sigkilled_run_reads_killed_after_the_next_run_and_a_live_one_stays_running(tmp_path, monkeypatch):
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "100", "--no-auth"], cwd=REPO)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        _kill_and_rerun(tmp_path, base, monkeypatch)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _kill_and_rerun(tmp_path: Path, base: str, monkeypatch) -> None:
    monkeypatch.setenv("KILL_KEY", "local-key")
    cfgp = generic_campaign(tmp_path, name="killme", n=60, cap_usd=10.0,
                            models=model_table(base_url=base, key_var="KILL_KEY", concurrency=2))
    env = {**os.environ, "KILL_KEY": "local-key"}
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "state" / "killme"
    deadline = time.monotonic() + 60
    while not ((state / "manifest.json").is_file() and _runs(state)):
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    (first,) = _runs(state)
    assert first["status"] == "running" and first["pid"] == proc.pid  # nothing could record the kill

    # a run entry of a process that is alive (this one: as a --stages process running next to the re-run)
    from geoagent.config import load_config

    live_id = Manifest(load_config(cfgp)).start_run(command="run")

    assert main(["run", str(cfgp), "--no-live"]) == 0
    runs = {r["run_id"]: r for r in _runs(state)}
    rerun = [r for r in runs.values() if r["run_id"] not in (first["run_id"], live_id)]
    assert len(rerun) == 1 and rerun[0]["status"] == "complete"
    killed = runs[first["run_id"]]
    assert killed["status"] == "killed" and killed["stopped_at"] is None
    assert killed["killed_found_by"] == live_id  # the first run started after the kill found it
    assert runs[live_id]["status"] == "running"  # its process (this one) is alive
