"""A small generic campaign on the simulated provider, run through ``run.py`` in a subprocess (shared set-up of
the state-file tests: damaged pages, a read-only folder)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sim_generic_config(tmp: Path, name: str, *, concurrency: int, n_requests: int) -> Path:
    """Write ``<tmp>/<name>.toml``: campaign ``name``, queues and state under ``tmp``, a $1 cap, one simulated model
    ``sim`` (``concurrency`` parallel calls), ``n_requests`` generic requests; returns its path
    (:func:`_model_harness.generic_campaign` with one :func:`_model_harness.model_table`)."""
    from _model_harness import generic_campaign, model_table

    return generic_campaign(tmp, name=name, n=n_requests,
                            models=model_table("sim", max_output_tokens=50, concurrency=concurrency))


def run_cli(*args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """``run.py ARGS`` in the repository (optionally behind ``prefix``, e.g. an ``unshare`` command), 240 s."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*(prefix or []), sys.executable, "run.py", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
