"""A model whose every call fails paces no other model (review44a #5).

Pacing (:mod:`geoagent.runtime.worker`, "Lanes") keeps each model's share of its work in step, so that a stop holds
about the same items of every model. A model whose host answers 500 to every call still advances its share, but
only as fast as its calls fail (retried, then dead-lettered), and the other models waited for it: a run took about
100 times longer, for answers the failing model never gives. Now a lane whose last
:data:`~geoagent.runtime.worker.FAILING_LANE_DEAD_RUN` tasks were all dead-lettered paces nobody until one of its
tasks is answered.

Real processes: ``run.py run`` of a generic campaign of three models, a and b on the sandbox's OpenAI-compatible fake,
c on a second fake injecting HTTP 500 into every request (``--fault-rate 1 --fault-kinds 500``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from geoagent.config import load_config
from geoagent.status import campaign_status
from tests._model_harness import generic_campaign
from tests.test_pacing_dry_lane_pace42 import _model  # one [[models]] table on a fake (key DRY_KEY)

REPO = Path(__file__).resolve().parents[1]
N = 40


def _records(log: Path) -> list[dict]:
    if not log.exists():
        return []
    out = []
    for line in log.read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:  # a line being written
            continue
    return out


def _fake(port: int, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                             "--api-key", "sk-" "fail-lane-e2e", "--log", str(log), *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_model_whose_every_call_fails_does_not_hold_the_others_to_its_pace(tmp_path):
    from geoagent.sandbox.server import free_port, wait_ready

    good_log, bad_log = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good_port, bad_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    servers = [_fake(good_port, good_log),
               _fake(bad_port, bad_log, "--fault-rate", "1", "--fault-kinds", "500", "--latency-ms", "200")]
    run = None
    try:
        good, bad = f"http://127.0.0.1:{good_port}", f"http://127.0.0.1:{bad_port}"
        wait_ready(good)
        wait_ready(bad)
        cfgp = generic_campaign(
            tmp_path, name="failing", n=N, cap_usd=5.0,
            models=_model("a", good, "gpt-a", rate=200, concurrency=4)
            + _model("b", good, "gpt-b", rate=200, concurrency=4)
            + _model("c", bad, "gpt-c", rate=200, concurrency=1) + "max_attempts = 2\n")
        env = {"DRY_KEY": "sk-" "fail-lane-e2e", "PATH": "/usr/bin:/bin",
               "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}
        run = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], cwd=REPO,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while True:  # until a's and b's work is all answered
            answered = [r.get("model") for r in _records(good_log) if r.get("status") == 200]
            if answered.count("gpt-a") >= N and answered.count("gpt-b") >= N:
                break
            assert time.monotonic() < deadline and run.poll() is None, "a's and b's calls did not end"
            time.sleep(0.05)
        c_calls = len(_records(bad_log))  # two attempts per task of c (max_attempts = 2), both 500
        # paced by c, a and b ended about when c's 40 tasks had failed (64 calls measured); now c stops pacing them after
        # its first FAILING_LANE_DEAD_RUN (10) dead letters in a row (~20 calls)
        assert c_calls < 40, f"c had {c_calls} calls when a and b were done: a failing model still paced the others"
        out, err = run.communicate(timeout=240)
        cfg = load_config(cfgp)
        req = campaign_status(cfg)["queues"]["requests"]
        assert (req.done, req.dead, req.ready, req.leased) == (2 * N, N, 0, 0), (req, err[-2000:])
        assert "pacing by each model's share of its work is off" not in err, err[-2000:]  # not the safety net
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait(10)
        for s in servers:
            s.kill()
            s.wait(10)
