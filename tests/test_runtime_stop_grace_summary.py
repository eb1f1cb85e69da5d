"""The end-of-run summary of a stop whose grace period ran out counts the calls cut off at its end.

Walkthrough: fake model with ``--latency-ms 45000``, SIGTERM 5 s into the run, exit 130 after about 31 s; the
summary said "$0.0000 unknown-outcome" while ``status`` right after said "$0.0040 unknown-outcome". The calls
still on the wire when the 30 s grace period ended are cancelled, and their reservations become
unknown-outcome spend through a write handed to the database thread without awaiting it; the summary read
the ledger before that write. Everything is real: ``run.py`` in its own process, the OpenAI-compatible fake
in another, SIGTERM; the figures are checked against the campaign database read here with ``sqlite3``.

Takes about 35-40 s (the runtime's 30 s grace period, which is what this is about).
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geoagent import constants as C
from geoagent.sandbox.server import free_port, wait_ready
from tests._model_harness import generic_campaign, model_table

KEY = "sk-grace-summary"
IN_FLIGHT = 4  # the model's concurrency: calls on the wire when the stop comes
SPEND = re.compile(r"spend:? \$([0-9.]+) settled \+ \$([0-9.]+) unknown-outcome")


def _open_reservations(db: Path) -> int:
    if not db.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM reservations WHERE state = 'open'").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.timeout(180)
def test_summary_after_grace_timeout_counts_the_calls_cut_off(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "45000", "--api-key", KEY], cwd=repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="grace", n=12, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="GRACE_KEY", concurrency=IN_FLIGHT,
                                                   timeout_s=120.0))
        db = tmp_path / "state" / "grace" / C.CAMPAIGN_DB
        env = {"GRACE_KEY": KEY, "PATH": "/usr/bin:/bin"}
        proc = subprocess.Popen([sys.executable, str(repo / "run.py"), "run", str(cfgp), "--no-live"], cwd=repo,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while _open_reservations(db) < IN_FLIGHT:  # every slot's call is on the wire (45 s each)
                assert proc.poll() is None and time.monotonic() < deadline, "calls not sent in time"
                time.sleep(0.1)
            time.sleep(1.0)
            t_sig = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
            waited = time.monotonic() - t_sig
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err[-2000:]
        assert 25.0 < waited < 44.0  # the grace period ran out (the answers were 45 s away)

        with sqlite3.connect(db) as conn:
            spent, unknown, reserved, unknown_calls = conn.execute(
                "SELECT spent_nusd, unknown_nusd, reserved_nusd, unknown_calls FROM ledger_totals WHERE id = 1"
            ).fetchone()
            by_state = dict(conn.execute("SELECT state, COUNT(*) FROM reservations GROUP BY state").fetchall())
        # the cut-off calls are unknown-outcome spend, closed by the process itself (none left open for a
        # later recovery to convert)
        assert reserved == 0 and by_state.get("open", 0) == 0
        assert unknown_calls == IN_FLIGHT and by_state.get("unknown") == IN_FLIGHT and spent == 0
        assert unknown > 0

        m = SPEND.search(out)
        assert m, out
        assert float(m.group(2)) == pytest.approx(unknown / 1e9, abs=5e-5)  # the summary shows it
        assert float(m.group(2)) > 0

        st = subprocess.run([sys.executable, str(repo / "run.py"), "status", str(cfgp)], cwd=repo, env=env,
                            capture_output=True, text=True, timeout=60)
        m2 = SPEND.search(st.stdout)
        assert m2, st.stdout
        assert m2.group(2) == m.group(2)  # `status` right after says the same
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
