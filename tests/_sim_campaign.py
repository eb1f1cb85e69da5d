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
    (``concurrency`` parallel calls), ``n_requests`` generic requests; returns its path."""
    cfg = tmp / f"{name}.toml"
    cfg.write_text(f"""
[campaign]
name = "{name}"
kind = "generic"
seed = 1

[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"

[budget]
cap_usd = 1.0

[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 50
concurrency = {concurrency}

[generic]
n_requests = {n_requests}
""")
    return cfg


def run_cli(*args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """``run.py ARGS`` in the repository (optionally behind ``prefix``, e.g. an ``unshare`` command), 240 s."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*(prefix or []), sys.executable, "run.py", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
