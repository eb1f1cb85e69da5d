"""A stored row whose JSON is damaged is one error naming the file, the table and the row's key, and the run that
met it is recorded ``failed`` (session 20).

Before: a ``results`` row of campaign.sqlite edited or damaged outside geoagent (here its JSON cut short) stopped
the next run with ``error: unexpected end of data: line 1 column 14 (char 13)``, naming no file, table or row,
and manifest.json recorded that run ``interrupted`` (and ``status`` said to re-run to resume, which fails the same
way). Real ``run.py`` subprocesses on the release replay (skipped without the release data)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "geocontext_replay.toml"


def _cli(cwd: Path, release: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_RELEASE": str(release)}
    for k in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        env.pop(k, None)
    return subprocess.run([sys.executable, str(REPO / "run.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240)


def test_a_damaged_results_row_is_named_and_the_run_recorded_failed(release_dir, tmp_path):
    first = _cli(tmp_path, release_dir, "run", str(CONFIG), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    state = tmp_path / "state" / "geocontext-replay"
    db = state / "campaign.sqlite"
    with sqlite3.connect(db) as c:
        tbl, key = c.execute("SELECT tbl, key FROM results ORDER BY tbl, key LIMIT 1").fetchone()
        c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", ('{"garbage": 1', tbl, key))
    out = _cli(tmp_path, release_dir, "run", str(CONFIG), "--no-live")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    err = out.stderr
    assert str(db) in err or "campaign.sqlite" in err, err
    assert repr(tbl) in err and repr(key) in err, err
    runs = json.loads((state / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["complete", "failed"], runs
    st = _cli(tmp_path, release_dir, "status", str(CONFIG))
    assert "the last run ended in an error" in st.stdout, st.stdout
    assert "re-run the same command to resume" not in st.stdout
    # the failed run wrote no progress record: the figures shown are the first run's, and say so (session 21
    # walkthrough #7: "last progress (run ended: complete, as manifest.json recorded)" under the error line)
    assert "last progress (run ended: complete" not in st.stdout, st.stdout
    assert "last progress (of an earlier run, which ended: complete" in st.stdout, st.stdout
