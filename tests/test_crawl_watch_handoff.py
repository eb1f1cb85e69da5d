"""``run.py crawl CONFIG --watch`` writes its hand-off tables each time it goes idle, not only at Ctrl-C.

Walkthrough (fresh user, MEDIUM): under ``crawl --watch``, ``run.py status`` from another shell said
"campaign complete" while ``verify_trials.csv`` and ``export/`` appeared only after Ctrl-C, so a GeoVerify
campaign pointed at the folder failed with "no verify_trials.csv". Real process (``run.py crawl``, its fakes
in-process on ``*.sandbox.invalid``), one city, ``status`` run as a second process while the crawl watches.
Takes about 10-20 s.
"""

from __future__ import annotations

import csv
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from geoagent.engine import WATCH_BANNER
from geoagent.integrate import write_verify_trials
from tests.test_crawl_watch_new_city import CONFIG, REPO, _lines_until, _start_watch, _watch_env, _without_city


def test_watching_crawl_writes_trials_and_export_when_idle(tmp_path):
    cfgp = tmp_path / "crawl.toml"
    cfgp.write_text(_without_city(_without_city(CONFIG.read_text(encoding="utf-8"), "Mirror Bay"), "Sprawl Town"),
                    encoding="utf-8")
    state = tmp_path / "state" / "crawl-sandbox"
    trials, export = state / "verify_trials.csv", state / "export"
    proc, sel = _start_watch(tmp_path, cfgp)
    seen: list[str] = []
    try:
        _lines_until(proc, sel, re.escape(WATCH_BANNER), seen, 60)
        line = _lines_until(proc, sel, r"crawl --watch: idle", seen, 90)
        # the process is still watching, and the hand-off is on disk
        assert proc.poll() is None
        assert "hand-off tables written" in line and "GeoVerify trials" in line and "export:" in line, line
        assert trials.is_file() and (export / "sites.parquet").is_file(), sorted(p.name for p in state.iterdir())
        assert (export / "spend.parquet").is_file(), sorted(p.name for p in export.iterdir())  # rev24 (5)
        status = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], cwd=REPO, env=_watch_env(tmp_path),
                                capture_output=True, text=True, timeout=60)
        assert "campaign complete" in status.stdout, status.stdout + status.stderr
        # idle ticks with nothing new write nothing: the file keeps its time stamp
        stamp = trials.stat().st_mtime_ns
        time.sleep(3.0)
        assert trials.stat().st_mtime_ns == stamp and proc.poll() is None
        idle_rows = trials.read_bytes()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(seen) + out
    assert proc.returncode == 0, out + err
    assert out.count("crawl --watch: idle") == 1, out
    # the end of the run writes the same trials again (idempotent); and they are what the integration
    # function builds from the crawl's folder with the run's arguments (seed of [campaign], 2 per band/arm)
    assert trials.read_bytes() == idle_rows
    seed = int(re.search(r"(?m)^\s*seed\s*=\s*(\d+)", cfgp.read_text(encoding="utf-8")).group(1))
    again, _ = write_verify_trials(state, _images_root(out), seed=seed, n_per_band=2, n_control=2,
                                   out_dir=tmp_path / "again")
    assert again.read_bytes() == idle_rows
    with open(trials, newline="", encoding="utf-8") as f:
        assert len(list(csv.DictReader(f))) > 0


def _images_root(out: str) -> Path:
    m = re.search(r'image_root = "([^"]+)"', out)
    assert m, out
    return Path(m.group(1))
