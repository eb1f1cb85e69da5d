"""Config warnings print as ``warning: FILE: ...`` lines like the rest of the CLI (walkthrough 9, item H).

Before, they came out as raw Python warnings: ``/path/geoagent/config.py:1129: ConfigWarning: FILE: ...``
followed by a source line (``return config_from_dict(data, source=label)``). Run as a user runs it: a
subprocess of run.py, a config with a [hosts] entry no model calls.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = """[campaign]
name = "warn-lines"
kind = "generic"
seed = 2
[paths]
queues = "{tmp}/queues"
state = "{tmp}/state"
[budget]
cap_usd = 1.0
[hosts."nominatim.openstreetmap.org"]
rate = 1
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[generic]
n_requests = 3
"""


def test_config_warning_is_one_warning_line_naming_the_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(tmp=tmp_path), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--simulate", "--no-live"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "nominatim.openstreetmap.org" in ln]
    assert lines and all(ln.startswith(f"warning: {cfg}: hosts.") for ln in lines), proc.stderr
    assert "ConfigWarning" not in proc.stderr and "config.py:" not in proc.stderr
    assert "return config_from_dict" not in proc.stderr
