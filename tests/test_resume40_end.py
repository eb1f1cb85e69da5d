"""The end of a run and of an export, cut short or signalled (resume40).

#4 A SIGTERM just after a complete run printed its summary ended it with exit 143 (asyncio's signal receiver had
   reset SIGTERM to its default), not 0.

Real ``run.py`` processes over a generic campaign of the simulated provider (and, for #3, a three-site GeoHint
campaign over the sandbox fakes). To stop a run deterministically inside the end it writes, its ``export_note.txt``
is replaced by a named pipe: the export blocks reading it (after the run recorded that it writes its end) until
the test kills the process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from _model_harness import SANDBOX_GPT_TOML, generic_campaign, geohint_three_sites_toml, model_table

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def _env(**more: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **more}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(REPO / "run.py"), *args], env=env or _env(), capture_output=True, text=True,
                          timeout=300)


def _manifest_runs(state: Path) -> list[dict]:
    return json.loads((state / "manifest.json").read_text(encoding="utf-8"))["runs"]


def _wait_for(cond, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _run_blocked_at_its_end(cfgp: Path, state: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A re-run of a complete campaign started with ``export_note.txt`` replaced by a named pipe: returned once its
    manifest entry records that it writes its end (the export then waits on the pipe)."""
    note = state / "export_note.txt"
    note.unlink(missing_ok=True)
    os.mkfifo(note)
    n_runs = len(_manifest_runs(state))
    proc = subprocess.Popen([PY, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], env=env or _env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(runs := _manifest_runs(state)) > n_runs and runs[-1].get("writing_end_since"),
              "the run's writing_end_since mark")
    return proc


def _unblock(state: Path) -> None:
    (state / "export_note.txt").unlink()


def test_a_sigterm_after_a_complete_run_printed_its_summary_exits_0(tmp_path):
    """#4: the run's signal receiver put SIGTERM back to SIG_DFL when it closed (asyncio's remove_signal_handler),
    so the CLI's end-of-command "ignore a late SIGTERM" did not recognise its handler: exit 143. Each try sends the
    signal as soon as the summary's export line is out."""
    cfgp = generic_campaign(tmp_path, name="term40", n=3, models=model_table())
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    for _ in range(3):
        proc = subprocess.Popen([PY, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if "export:" in line:
                proc.send_signal(signal.SIGTERM)
                break
        rest = proc.stdout.read()
        assert proc.wait(timeout=60) == 0, rest
