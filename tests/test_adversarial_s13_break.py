"""Adversarial review of the runtime, session 13 (s13-break): each test failed on main before its fix.

Real processes only: ``run.py`` in a subprocess against the local fakes of :mod:`geoagent.sandbox`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _model_harness import generic_campaign, model_table

from geoagent.sandbox.server import spawn, wait_ready

REPO = Path(__file__).resolve().parents[1]


def _run_py(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` from the repository (this checkout's package first on the path)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=full, capture_output=True, text=True,
                          timeout=timeout)


def _files_holding(folder: Path, needle: bytes) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_key_echoed_json_escaped_by_a_401_never_reaches_state_queues_or_status(tmp_path):
    """A proxy that repeats the refused key in its 401 body, in JSON that writes "/" as "\\/" (PHP's json_encode
    does), put the key, so escaped, in the queue database (the task's last error), progress.jsonl and the
    output of ``status``: the scrubbing matched the key's plain spelling only. A key with "/" and "+" is the
    base64 alphabet some gateways issue."""
    key = "AbCd/EfGh" + "+IjKl/MnOpQrStUv"  # split: no key-shaped literal in the sources
    proc, base = spawn("geoagent.sandbox.llm_openai:make_app", api_keys=["accepted-" + "key-0123456789"],
                       echo_key=True)
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="echo", n=3,
                                models=model_table(base_url=base, key_var="S13_ECHO_KEY", concurrency=2))
        env = {"S13_ECHO_KEY": key}
        run = _run_py("run", str(cfgp), env=env)
        status = _run_py("status", str(cfgp), env=env)
        dead = _run_py("dead", str(cfgp), env=env)
    finally:
        proc.terminate()
        proc.join(10)
    assert "authentication failed" in run.stdout + run.stderr, run.stdout + run.stderr
    assert "401" in status.stdout  # the error is still shown, without the key
    for out in (run.stdout, run.stderr, status.stdout, status.stderr, dead.stdout, dead.stderr):
        assert "EfGh" not in out, out
    assert _files_holding(tmp_path, b"EfGh") == []


def test_status_after_a_run_stopped_by_a_cap_lowered_below_the_spend_is_no_finished_campaign(tmp_path):
    """A campaign resumed with more requests and a cap lowered below what it already spent stops at once
    ("budget exhausted", nothing dispatched, half the plan still queued). ``status`` took that run, which
    finished no task, for a no-op re-run of a done campaign: "last run: no work left to do", the earlier run's
    figures "run ended: complete" and "m 20/20 (100%)" answered, hiding both the cap and the 20 queued requests."""
    cfgp = generic_campaign(tmp_path, name="lowcap", n=6, models=model_table(), cap_usd=1.0)
    first = _run_py("run", str(cfgp))
    assert first.returncode == 0 and "complete" in first.stdout, first.stdout + first.stderr
    text = cfgp.read_text(encoding="utf-8").replace("n_requests = 6", "n_requests = 12")
    cfgp.write_text(text.replace("cap_usd = 1.0", "cap_usd = 1e-07"), encoding="utf-8")
    second = _run_py("run", str(cfgp))
    assert "budget exhausted" in second.stdout, second.stdout + second.stderr
    status = _run_py("status", str(cfgp)).stdout
    assert "ready       6" in status, status
    assert "no work left to do" not in status, status
    assert "run ended: complete" not in status, status
    assert "budget exhausted" in status, status
    assert "6/12 (50%)" in status, status
