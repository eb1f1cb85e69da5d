"""A stage paced by a slow configured rate is not reported as stalled; a real stall still is.

Walkthrough: a model limited to 1 request per 120 s (``[[models]] rate = 1, period_s = 120``) answers its first
request at once, then waits ~132 s (the window and its 10 % margin) before the second is even sent. Before its
second answer the stall threshold was max(60 s, 10 x the time to the first answer) = 60 s, so ``status`` read
``idle: nothing completed for 90 s although 3 task(s) are ready on requests`` (and the ETA "unknown") between
about 61 and 133 s, for a campaign doing exactly what it was configured to do. Now the threshold is at least the
slowest configured rate window of the process's HTTP keys (hosts and models, as this process's share sets it)
plus the usual 60 s, so the configured pace never reads as a stall, and a stage silent past that still does.

Commit times are fed explicitly (``record_done(n, now=...)`` on the monotonic clock): nothing sleeps for minutes.
"""

from __future__ import annotations

import anyio
import pytest

from geoagent.config import http_limits
from geoagent.runtime.daemon import open_edge_queues
from geoagent.runtime.http import HostPolicy, HttpClient, limit_key
from geoagent.runtime.progress import stage_stalled
from geoagent.runtime.queue import QueueCounts
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import STALL_MIN_S, StageRunner
from geoagent.status import idle_note
from geoagent.workers.model_caller import ModelCaller
from tests._model_harness import CallerRig, write_model_config

class _Caller(Stage):
    name = "model_caller"
    input_edge = "requests"

    async def handle(self, task, ctx):
        return []

class _Parser(Stage):
    name = "parser"
    input_edge = "requests"
    sends_http = False

    async def handle(self, task, ctx):
        return []


def _runner_stats(tmp_path, http: HttpClient, stage: Stage | None = None, ctx: StageContext | None = None):
    """The counters of a stage (default: a model-caller-like one whose keys are unknown, so all count) run (burst,
    on an empty queue) in a process whose shared HTTP client is ``http``: what the progress stream reads from."""
    stage = stage or _Caller()

    async def main():
        queues = open_edge_queues(tmp_path / "q", "c", [stage])
        runner = StageRunner(stage, queues[stage.input_edge], None, ctx or StageContext("c", {"http": http}))
        stats = await runner.run()
        await queues[stage.input_edge].close()
        return stats

    return anyio.run(main)

def _record(stats, now: float) -> dict:
    return {**stats.as_dict(now=now), "input_edge": "requests", "finished": False}

def test_a_model_at_one_request_per_120_s_does_not_read_as_stalled_before_its_second_answer(tmp_path):
    slow = limit_key("api.example.invalid:443", "slow-model")
    http = HttpClient(model_policies={slow: HostPolicy(rate=1, period_s=120.0, concurrency=1)})
    stats = _runner_stats(tmp_path, http)
    t0 = stats.started_at
    stats.record_done(1, now=t0 + 1.0)  # the first answer, 1 s after the start
    counts = {"requests": QueueCounts(ready=3)}
    # 90 s after the first answer the second request has not even been sent (its rate window: 132 s): paced,
    # not stalled (before: threshold 60 s, "idle: nothing completed for 90 s although 3 task(s) are ready")
    rec = _record(stats, t0 + 91.0)
    assert rec["stall_after_s"] >= 132.0 + STALL_MIN_S - 0.1
    assert idle_note(rec, counts) == ""
    assert not stage_stalled(rec, counts)
    # nothing 130 s after it either (the request went out at ~132 s and takes its time)
    assert idle_note(_record(stats, t0 + 131.0), counts) == ""
    # a real stall (nothing for 200 s with work ready) is still reported
    late = _record(stats, t0 + 201.0)
    assert idle_note(late, counts).startswith("idle: nothing completed for 200 s although 3 task(s) are ready")
    assert stage_stalled(late, counts)

def test_without_a_slow_limit_the_threshold_is_unchanged(tmp_path):
    # default policies (10 requests/s): max(60 s, 10 x 1 s to the first answer), as before
    stats = _runner_stats(tmp_path, HttpClient())
    t0 = stats.started_at
    stats.record_done(1, now=t0 + 1.0)
    assert stats.stall_after_s() < STALL_MIN_S + 2.0
    counts = {"requests": QueueCounts(ready=3)}
    assert idle_note(_record(stats, t0 + 91.0), counts).startswith("idle: nothing completed for 90 s")

def test_pace_counts_the_slowest_host_and_model_key():
    # a host's own policy (Overpass-like: 2 per 60 s) and a model key (1 per 120 s): the slowest window counts
    http = HttpClient(policies={"overpass.example.invalid": HostPolicy(rate=2, period_s=60.0)},
                      model_policies={limit_key("h.invalid:443", "m"): HostPolicy(rate=1, period_s=120.0)})
    assert http.pace_s() == pytest.approx(132.0)
    assert HttpClient(policies={"overpass.example.invalid": HostPolicy(rate=2, period_s=60.0)}).pace_s() == pytest.approx(66.0)
    # a fractional rate (0.5 per 60 s) is one request per 120 s
    assert HttpClient(policies={"x.invalid": HostPolicy(rate=0.5, period_s=60.0)}).pace_s() == pytest.approx(132.0)


def test_the_model_caller_counts_its_own_models_limits_and_a_stage_without_requests_none(tmp_path, monkeypatch):
    # the real model caller of a campaign whose model is limited to 1 request per 120 s, with the engine's
    # HTTP client (geoagent.config.http_limits): its threshold counts the model's 132 s window
    monkeypatch.setenv("RT_PACE_KEY", "test-not-a-key")
    cfg = write_model_config(tmp_path / "c.toml", "http://127.0.0.1:9", name="pace", key_var="RT_PACE_KEY",
                             rate_requests=1, rate_period_s=120.0, concurrency=1)
    http = HttpClient(**http_limits(cfg))
    rig = CallerRig(tmp_path, cfg, http)
    stats = _runner_stats(tmp_path, http, ModelCaller(), rig.ctx)
    assert stats.pace_s == pytest.approx(132.0)
    assert stats.stall_after_s() == pytest.approx(192.0)
    rig.state.close()
    # a parser in the same process sends nothing: the model's pace is not its own (work ready on its edge and
    # nothing done for 90 s is a stall)
    parser = _runner_stats(tmp_path / "p", http, _Parser())
    assert parser.pace_s == 0.0 and parser.stall_after_s() == STALL_MIN_S
    # the keys of one stage only: a fast host next to the slow model's key does not count
    fast = HttpClient(policies={"fast.invalid": HostPolicy(rate=50, period_s=1.0)},
                      model_policies={limit_key("slow.invalid:443", "m"): HostPolicy(rate=1, period_s=120.0)})
    assert fast.pace_s(["fast.invalid"]) == pytest.approx(1.1)
    assert fast.pace_s([limit_key("slow.invalid:443", "m")]) == pytest.approx(132.0)
    assert fast.pace_s([]) == 0.0
