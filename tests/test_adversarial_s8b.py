"""Adversarial checks of session 8's merges (helper adv2): each test failed on main before its fix."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import orjson

from geoagent.config import load_config
from geoagent.runtime.manifest import Manifest, _write
from tests._model_harness import generic_campaign, model_table


def _runs(state: Path) -> list[dict]:
    return orjson.loads((state / "manifest.json").read_bytes())["runs"]


def test_a_dead_runs_pid_reused_by_a_later_process_still_reads_killed(tmp_path):
    """The pid of a SIGKILLed run is taken by a process that started after the run began (pid reuse, common on a
    busy machine or in a container with few pids): that process is not the run's, so the run reads ``killed``
    (on main it kept ``running`` for as long as the unrelated process lived)."""
    cfg = load_config(generic_campaign(tmp_path, name="reuse", n=3, models=model_table()))
    manifest = Manifest(cfg)
    first = manifest.start_run(command="run")
    other = subprocess.Popen(["sleep", "30"])  # the later process that got the dead run's pid
    try:
        state = manifest.state_dir
        data = orjson.loads((state / "manifest.json").read_bytes())
        (entry,) = data["runs"]
        entry["pid"] = other.pid
        entry["started_unix"] = time.time() - 120.0  # the dead run began two minutes before `other` existed
        _write(manifest.path, data)
        second = manifest.start_run(command="run")
        runs = {r["run_id"]: r for r in _runs(state)}
        assert runs[first]["status"] == "killed" and runs[first]["killed_found_by"] == second
        assert runs[second]["status"] == "running"  # this process: alive, and older than its own run
    finally:
        other.kill()
        other.wait(timeout=10)
