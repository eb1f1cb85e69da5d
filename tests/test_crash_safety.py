"""Acceptance (issue 2): crash safety of the campaign daemon under repeated SIGKILL.

A generic campaign of 2,000 model calls runs as a separate process (``python run.py run``) against the local
OpenAI-compatible fake in another process. The daemon is SIGKILLed at least 3 times at random moments and
restarted each time; the last run completes. Then:

* every request has exactly one stored result (store and results table hold 2,000 distinct keys);
* the server saw no second request for any key whose response had already been stored (compares the
  server's per-call wall time with the store's ``created_at``);
* the ledger's settled usage equals the sum of the usage the server returned for the stored responses, and
  every call the server billed but the daemon never stored (killed in flight) is covered by
  unknown-outcome spend counted at its reservation (which is >= the actual cost).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from geoagent.sandbox.llm_common import CallLog
from geoagent.sandbox.server import free_port, wait_ready
from tests._crash_harness import CallLogTail

REPO = Path(__file__).resolve().parents[1]
N_CALLS = 2000
PRICE_IN, PRICE_OUT = 0.15, 0.60


def _config(tmp: Path, base_url: str) -> Path:
    cfg = tmp / "crash.toml"
    cfg.write_text(
        f"""
[campaign]
name = "crash"
kind = "generic"
seed = 3

[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"

[budget]
cap_usd = 100.0

[queue]
max_attempts = 10
visibility_timeout_s = 5.0
backoff_base_s = 0.05
backoff_max_s = 0.5

[[models]]
name = "sandbox-gpt"
provider = "openai"
model = "sim-gpt"
base_url = "{base_url}/v1"
api_key_env = "GEOAGENT_CRASH_TEST_KEY"
price_input_usd_per_mtok = {PRICE_IN}
price_output_usd_per_mtok = {PRICE_OUT}
max_output_tokens = 200
concurrency = 32
rate = {{ requests = 5000, period_s = 1.0 }}
timeout_s = 10.0

[generic]
n_requests = {N_CALLS}
"""
    )
    return cfg


@pytest.mark.slow
def test_sigkill_three_times_then_complete_exactly_once(tmp_path):
    port = free_port()
    log_path = tmp_path / "server_calls.jsonl"
    server = subprocess.Popen(
        [sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port), "--log", str(log_path),
         "--api-key", "sk-sandbox-crash-test"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_ready(base_url)
        cfg = _config(tmp_path, base_url)
        env = {**os.environ, "GEOAGENT_CRASH_TEST_KEY": "sk-sandbox-crash-test", "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "run.py", "run", str(cfg), "--no-live"]
        rng = random.Random(20261130)
        kills = 0
        for attempt in range(8):
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if kills < 3:
                # kill at a random moment once the daemon has started making calls
                deadline = time.monotonic() + 60
                tail = CallLogTail(log_path)  # reads only what the server appended since the last poll
                start_lines = tail.count()
                target = rng.randint(150, 450)
                while time.monotonic() < deadline and proc.poll() is None:
                    n = tail.count()
                    if n - start_lines >= target:
                        break
                    time.sleep(0.05)
                time.sleep(rng.uniform(0.0, 0.3))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(30)
                    kills += 1
                    continue
            out, _ = proc.communicate(timeout=300)
            if kills >= 3:
                assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
                break
        assert kills >= 3, "the daemon finished before it could be killed three times"

        # --- every request has exactly one stored result -------------------------------------------
        from geoagent.config import load_config
        from geoagent.runtime.store import open_campaign_state

        c = load_config(cfg)
        with open_campaign_state(c.name, root=c.state_root(), recover=False) as st:
            stored = {r["key"]: r for r in st.store.iter_responses()}
            results = dict(st.store.iter_results("results"))
            summary = st.ledger.summary()
        assert len(stored) == N_CALLS
        assert len(results) == N_CALLS

        # --- the server never answered a key again after its response was stored -------------------
        calls = [r for r in CallLog.read(log_path) if r.get("status") == 200]
        by_key: dict[str, list[dict]] = defaultdict(list)
        for r in calls:
            by_key[r["key"]].append(r)
        assert set(by_key) == set(stored)
        for key, rs in by_key.items():
            created = stored[key]["created_at"]
            late = [r for r in rs if r["t_wall"] > created + 1e-3]
            assert not late, f"key {key[:12]} requested again after its response was stored"

        # --- ledger equals the usage the server returned --------------------------------------------
        stored_in = sum(stored[k]["input_tokens"] for k in stored)
        stored_out = sum(stored[k]["output_tokens"] for k in stored)
        server_in = sum(rs[-1]["input_tokens"] for rs in by_key.values())
        server_out = sum(rs[-1]["output_tokens"] for rs in by_key.values())
        assert (stored_in, stored_out) == (server_in, server_out)
        assert summary.input_tokens == server_in and summary.output_tokens == server_out
        expected_settled = sum(
            (rs[-1]["input_tokens"] * PRICE_IN + rs[-1]["output_tokens"] * PRICE_OUT) / 1e6 for rs in by_key.values()
        )
        assert summary.spent_usd == pytest.approx(expected_settled, rel=1e-6, abs=1e-9)
        # calls billed by the server but never stored (killed in flight) are covered by unknown-outcome spend
        extra_calls = [r for rs in by_key.values() for r in rs[:-1]]
        extra_cost = sum((r["input_tokens"] * PRICE_IN + r["output_tokens"] * PRICE_OUT) / 1e6 for r in extra_calls)
        assert summary.unknown_usd + 1e-12 >= extra_cost
        assert summary.reserved_usd == pytest.approx(0.0, abs=1e-12)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
