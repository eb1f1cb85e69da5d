"""Acceptance (issue 3): the documented GeoVerify replay command, interrupted and re-run, resumes without
repeating calls, through the daemon and its queues, and writes the report."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "geocontext_replay.toml"


def _run(env, timeout=240):
    return subprocess.run([sys.executable, "run.py", "run", str(CONFIG), "--no-live"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_replay_campaign_interrupted_then_resumed(tmp_path, release_dir):
    env = {**os.environ, "GEOAGENT_QUEUES": str(tmp_path / "q"), "GEOAGENT_STATE": str(tmp_path / "s"),
           "GEOAGENT_RELEASE": str(release_dir)}
    proc = subprocess.Popen([sys.executable, "run.py", "run", str(CONFIG), "--no-live"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / "s" / "geocontext-replay" / "campaign.sqlite"
    deadline = time.monotonic() + 120
    # interrupt once some responses are stored (SIGINT: graceful stop)
    import sqlite3

    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                n = sqlite3.connect(db).execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            except sqlite3.Error:
                n = 0
            if n >= 40:
                break
        time.sleep(0.05)
    interrupted = proc.poll() is None
    if interrupted:
        proc.send_signal(signal.SIGINT)
    rc1 = proc.wait(120)
    report = tmp_path / "s" / "geocontext-replay" / "report"
    if interrupted:
        assert rc1 == 130
        # the report written at the interruption says it is interim (work still pending)
        assert "Interim report: the run ended 'interrupted'" in (report / "geoverify_table.md").read_text()
    done = _run(env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "complete" in done.stdout
    with sqlite3.connect(db) as c:
        n_responses = c.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    assert n_responses == 336
    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state("geocontext-replay", root=tmp_path / "s", recover=False) as st:
        summary = st.ledger.summary()
    # one settled call per stored response: nothing was called twice
    assert summary.calls == 336
    assert (report / "geoverify_table.md").is_file() and (report / "geoverify_dprime.png").is_file()
    assert "Interim report" not in (report / "geoverify_table.md").read_text()  # the finished run's report
    # a third run makes no call at all
    again = _run(env)
    assert again.returncode == 0
    with open_campaign_state("geocontext-replay", root=tmp_path / "s", recover=False) as st:
        assert st.ledger.summary().calls == 336
