"""A run whose stdout pipe closes goes on to its end and records how it ended (walkthrough 23, item 7).

The walkthrough reported a run piped into a command that was not there (``run.py run CONFIG | ts``) recorded as
``failed`` in manifest.json though all its calls were made. Not reproduced: with the reader gone before the first
line, and unbuffered output (``PYTHONUNBUFFERED=1``, usual in containers, so the first line printed meets the closed
pipe), the run finishes, records ``complete`` and exits 1 (``output pipe closed early``, as documented), and a re-run
finds nothing left to do. This test keeps it so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]


def test_a_run_whose_stdout_pipe_closed_finishes_and_records_its_real_outcome(tmp_path):
    cfg = generic_campaign(tmp_path, name="pipe", n=300, models=model_table("sim", concurrency=4))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "-v", "run", str(cfg), "--no-live"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    proc.stdout.close()  # the reader is gone before the run prints anything
    assert proc.wait(timeout=300) == 1
    runs = json.loads((tmp_path / "state" / "pipe" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert runs[-1]["status"] == "complete", runs[-1]
    again = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--no-live"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "0 new model calls" in again.stdout, again.stdout  # nothing was left to do
