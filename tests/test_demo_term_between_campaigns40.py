"""A SIGTERM between the demo's campaigns stops it (review40b #1).

The flag that lets a SIGTERM after a run's recorded end pass (the loop's teardown) stayed set after the crawl's
campaign returned, so a SIGTERM in the demo's hand-off was dropped and the demo ran GeoVerify and GeoHint to the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_sigterm_in_the_demos_hand_off_stops_it(tmp_path):
    script = tmp_path / "term.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys
        import geoagent.demo as demo
        from geoagent import cli
        orig = demo.write_demo_config
        def patched(name, *a, **k):
            if name == "demo_geoverify":  # after the crawl's campaign returned, before GeoVerify starts
                os.kill(os.getpid(), signal.SIGTERM)
            return orig(name, *a, **k)
        demo.write_demo_config = patched
        sys.argv = ["run.py", "demo", "--workdir", sys.argv[1]]
        cli.entry()
    """), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GEOAGENT_RELEASE", None)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "work")], capture_output=True, text=True,
                          timeout=300, env=env, cwd=str(tmp_path))
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
    assert "between the demo's campaigns" in proc.stderr
    assert "[2/3] GeoVerify" not in proc.stdout + proc.stderr
