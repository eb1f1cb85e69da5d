"""The end-of-run summary of a stop whose grace period ran out counts the calls cut off at its end.

Walkthrough: fake model with ``--latency-ms 45000``, SIGTERM 5 s into the run, exit 130 after about 31 s; the
summary said "$0.0000 unknown-outcome" while ``status`` right after said "$0.0040 unknown-outcome". The calls
still on the wire when the 30 s grace period ended are cancelled, and their reservations become
unknown-outcome spend through a write handed to the database thread without awaiting it; the summary read
the ledger before that write. Everything is real: ``run.py`` in its own process, the OpenAI-compatible fake
in another, SIGTERM; the figures are checked against the campaign database read here with ``sqlite3``.

The run's grace period is set to 8 s (``GEOAGENT_STOP_GRACE_S``; 30 s by default, which is what the run waited
out before the variable existed: the test took 35-40 s); the checks are those of the 30 s run, the lower bound on
the wait taken from the grace period as before (grace - 5 s). The end-to-end run could not be made to show the
gap on this machine (summary and status agreed before the fix too: the race needs a busy database thread); the
second test shows the mechanism deterministically.
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

from tests._model_harness import run_with_calls_on_the_wire

KEY = "sk-grace-summary"
IN_FLIGHT = 4  # the model's concurrency: calls on the wire when the stop comes
#: the run's grace period (s), shorter than the default 30 s so the test does not wait that long; the answers are
#: 45 s away either way
GRACE_S = 8.0
SPEND = re.compile(r"spend:? \$([0-9.]+) settled \+ \$([0-9.]+) unknown-outcome")


@pytest.mark.timeout(180)
def test_summary_after_grace_timeout_counts_the_calls_cut_off(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    # every slot's call is on the wire (45 s each) when the stop comes
    with run_with_calls_on_the_wire(tmp_path, name="grace", latency_ms=45000, key=KEY, key_var="GRACE_KEY",
                                    in_flight=IN_FLIGHT, timeout_s=120.0,
                                    env_extra={"GEOAGENT_STOP_GRACE_S": f"{GRACE_S:g}"}) as (proc, cfgp, db, env, _cmd):
        time.sleep(1.0)
        t_sig = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        waited = time.monotonic() - t_sig
        assert proc.returncode == 130, err[-2000:]
        assert GRACE_S - 5.0 < waited < 44.0  # the grace period ran out (the answers were 45 s away)
        assert f"(up to {GRACE_S:.0f} s)" in err, err[-2000:]  # the stop line names the grace period it waits

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


def test_summary_waits_for_writes_still_queued_on_the_database_thread(tmp_path):
    """The mechanism, deterministically: a call cancelled in flight hands its unknown-outcome mark to the
    campaign database's thread without awaiting it (:func:`geoagent.workers.billing.close_failed_call`); while
    that thread is busy with an earlier job, a read of the ledger does not see the mark yet.
    :func:`geoagent.engine.settle_pending_ledger_writes` (awaited before the summary) waits for it."""
    import anyio

    from geoagent.engine import settle_pending_ledger_writes
    from geoagent.runtime.store import open_campaign_state

    async def go() -> tuple[float, float, float]:
        with open_campaign_state("mech", root=tmp_path, cap_usd=1.0) as st:
            res = st.ledger.reserve("k1", 0.004)
            st.ledger.db.submit(time.sleep, 0.5)  # the database thread is busy (e.g. a group commit)
            st.ledger.db.submit(st.ledger.mark_unknown, res)  # what a cancelled call does
            before = st.ledger.summary().unknown_usd
            await settle_pending_ledger_writes(st.ledger)
            after = st.ledger.summary()
            return before, after.unknown_usd, after.reserved_usd

    before, after, reserved = anyio.run(go)
    assert before == 0.0  # the read that raced the queued write
    assert after == pytest.approx(0.004) and reserved == 0.0


def test_summary_line_shows_money_still_reserved():
    """A summary read while reservations are still open (another --stages process's calls in flight) names
    that money instead of leaving it out; with none open the line is as before."""
    from geoagent.engine import Outcome

    spend = {"spent_usd": 0.01, "unknown_usd": 0.0, "reserved_usd": 0.004, "cap_usd": 1.0, "calls": 3}
    text = Outcome("c", "interrupted", 130, 5, {}, spend).summary()
    assert "spend $0.0100 settled + $0.0000 unknown-outcome + $0.0040 reserved by calls still open of cap $1.0000" in text
    text = Outcome("c", "complete", 0, 5, {}, {**spend, "reserved_usd": 0.0}).summary()
    assert "spend $0.0100 settled + $0.0000 unknown-outcome of cap $1.0000; calls 3" in text


def test_the_stop_grace_period_is_30_s_unless_the_environment_sets_another(monkeypatch):
    """``GEOAGENT_STOP_GRACE_S`` sets the grace period of a stop (s, 0 to 3600); unset or empty: 30 s; anything
    else is an error naming the variable (the run exits 2 before any work starts)."""
    from geoagent.runtime.daemon import STOP_GRACE_ENV, stop_grace_s

    assert STOP_GRACE_ENV == "GEOAGENT_STOP_GRACE_S"
    monkeypatch.delenv(STOP_GRACE_ENV, raising=False)
    assert stop_grace_s() == 30.0
    monkeypatch.setenv(STOP_GRACE_ENV, " ")
    assert stop_grace_s() == 30.0
    for raw, want in (("8", 8.0), ("0", 0.0), ("2.5", 2.5), ("3600", 3600.0)):
        monkeypatch.setenv(STOP_GRACE_ENV, raw)
        assert stop_grace_s() == want
    for bad in ("-1", "soon", "nan", "inf", "3601"):
        monkeypatch.setenv(STOP_GRACE_ENV, bad)
        with pytest.raises(ValueError, match=STOP_GRACE_ENV):
            stop_grace_s()


@pytest.mark.parametrize("command", ["run", "crawl"])
def test_a_bad_stop_grace_period_is_an_error_before_anything_is_written(command, isolated_roots, monkeypatch, capsys):
    from geoagent.cli import main

    config = "generic_demo" if command == "run" else str(Path(__file__).resolve().parents[1] / "geoagent" / "configs"
                                                           / "crawl_sandbox.toml")
    monkeypatch.setenv("GEOAGENT_STOP_GRACE_S", "soon")
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main([command, config, "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "GEOAGENT_STOP_GRACE_S must be a number of seconds" in err and "'soon'" in err, err
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()
