"""Task ceiling (geoagent.runtime.worker "Task ceiling", geoagent.runtime.leases): a task whose ``handle()`` never
returns is cancelled when its stage's ceiling (``task_timeout_s``) passes and nacked with a reason that says so
(retried, dead-lettered after ``max_attempts``), instead of keeping its renewed lease for the life of the process;
a handler that ignores the cancellation loses its lease one visibility timeout after the ceiling. End to end: a
model server that never answers (within the model's own 30 s timeout) meets the campaign's ``[queue]
task_timeout_s``.

Real queues (SQLite), runner, engine, HTTP client and the local OpenAI-compatible fake; no mocks.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import anyio
import pytest

from _model_harness import generic_campaign, ledger_figures, model_table
from geoagent.config import ConfigError, load_config
from geoagent.engine import EXIT_INCOMPLETE, run_campaign
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner, default_task_timeout_s
from geoagent.sandbox import llm_openai
from _made_up_keys import made_up_key

VT_S = 0.3  # visibility timeout: renewed every 0.1 s


class Hangs(Stage):
    """Task ``hang`` never returns (until cancelled); every other task returns at once."""

    name = "hangs"
    input_edge = "a"
    output_edge = None
    concurrency = 2

    def __init__(self) -> None:
        self.started: Counter[str] = Counter()
        self.cancelled: Counter[str] = Counter()

    async def handle(self, task, ctx):
        self.started[task.key] += 1
        if task.key == "hang":
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.cancelled[task.key] += 1
                raise
        return []


def test_a_handler_that_never_returns_is_cancelled_at_the_ceiling_and_nacked_with_its_reason(tmp_path, caplog):
    stage = Hangs()
    ceiling_s = 0.5

    async def main():
        q = open_queue(tmp_path / "q", "c", "a", max_attempts=2, backoff_base_s=0.0, backoff_max_s=0.0)
        try:
            await q.put_many([("hang", {}), ("ok1", {}), ("ok2", {})])
            runner = StageRunner(stage, q, None, StageContext("c"), visibility_timeout_s=VT_S,
                                 task_timeout_s=ceiling_s)
            t0 = time.monotonic()
            with anyio.fail_after(30):  # before: the run never ended (the task held its renewed lease for ever)
                await runner.run()
            return runner, await q.counts(), await q.dead_letters(10), time.monotonic() - t0
        finally:
            await q.close()

    with caplog.at_level(logging.WARNING, logger="geoagent.runtime.worker"):
        runner, counts, dead, elapsed = anyio.run(main)
    # two deliveries (max_attempts 2), each cancelled at its ceiling, then dead-lettered with the reason
    assert stage.started["hang"] == 2 and stage.cancelled["hang"] == 2
    assert (counts.done, counts.dead, counts.ready, counts.leased) == (2, 1, 0, 0)
    assert len(dead) == 1 and dead[0].key == "hang" and dead[0].attempts == 2
    assert dead[0].reason == ("TaskTimeout: stage hangs: task hang still running after 0.5 s, its ceiling "
                              "([queue] task_timeout_s): cancelled")
    assert runner.stats.failed == 2 and runner.stats.dead == 1
    assert elapsed >= 2 * ceiling_s  # each delivery ran its full ceiling
    # its lease was renewed while it was handled (0.5 s > 0.3 s visibility timeout), and no lease went stale
    assert runner._leases.renewals >= 2
    assert "stale lease" not in caplog.text
    assert sum("task hang still running after 0.5 s" in r.getMessage() for r in caplog.records) == 2


class IgnoresCancel(Stage):
    """Shields itself from cancellation for ``hold_s`` (a blocking wait the runner cannot cut)."""

    name = "stubborn"
    input_edge = "a"
    output_edge = None
    concurrency = 1

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.started_at: float | None = None

    async def handle(self, task, ctx):
        self.started_at = time.monotonic()
        with anyio.CancelScope(shield=True):
            await anyio.sleep(self.hold_s)
        return []


def test_a_lease_is_renewed_no_longer_than_the_ceiling_even_when_the_handler_ignores_cancellation(tmp_path, caplog):
    ceiling_s, hold_s = 0.4, 3.0
    seen: dict[str, float] = {}

    async def main():
        q1 = open_queue(tmp_path / "q", "c", "a")
        q2 = open_queue(tmp_path / "q", "c", "a")  # another process's connection
        try:
            await q1.put_many([("k", {})])
            stage = IgnoresCancel(hold_s)
            runner = StageRunner(stage, q1, None, StageContext("c"), visibility_timeout_s=VT_S,
                                 task_timeout_s=ceiling_s)
            async with anyio.create_task_group() as tg:
                tg.start_soon(runner.run)
                with anyio.fail_after(10):
                    while stage.started_at is None:
                        await anyio.sleep(0.005)
                with anyio.fail_after(hold_s - 0.5):  # well before the stubborn handler lets go
                    while not (taken := await q2.lease(1, 30.0)):
                        await anyio.sleep(0.02)
                seen["taken_after_s"] = time.monotonic() - stage.started_at
                await q2.ack(taken)  # the other worker did it
            return runner, await q1.counts()
        finally:
            await q1.close()
            await q2.close()

    with caplog.at_level(logging.WARNING):
        runner, counts = anyio.run(main)
    # not renewed past the ceiling: free at the latest one visibility timeout (+ a renewal beat) after it
    assert ceiling_s <= seen["taken_after_s"] < hold_s - 0.5
    assert runner._leases.given_up == 1
    assert (counts.done, counts.dead, counts.ready, counts.leased) == (1, 0, 0, 0)
    # the stubborn handler returned late (its cancellation never reached it): its ack met the other worker's
    # lease and was ignored, nothing undone
    assert "1 stale lease(s) at ack" in caplog.text
    assert "its lease is renewed no more" in caplog.text


def test_default_ceiling_is_derived_from_the_http_policies_and_the_stage_and_config_override_it(tmp_path):
    # hand-computed: attempts x timeout + (attempts - 1) x longest backoff, times 4, at least 1800 s
    d = HostPolicy()  # the HTTP layer's default: 5 x 120 s, backoff up to 30 s: 720 s
    assert (d.max_attempts, d.timeout_s, d.backoff_max_s) == (5, 120.0, 30.0)
    assert default_task_timeout_s() == 4 * (5 * 120 + 4 * 30) == 2880
    overpass = HostPolicy(rate=1.0, period_s=10.0, concurrency=2, max_attempts=4, backoff_max_s=120.0,
                          timeout_s=60.0)
    assert default_task_timeout_s([overpass]) == 2880  # the default policy is slower still
    slow = HostPolicy(max_attempts=3, timeout_s=600.0, backoff_max_s=60.0)
    assert default_task_timeout_s([slow]) == 4 * (3 * 600 + 2 * 60) == 7680
    assert default_task_timeout_s([HostPolicy(max_attempts=1, timeout_s=1.0)]) == 2880

    class Own(Hangs):
        task_timeout_s = 12.0

    async def ceilings():
        q = open_queue(tmp_path / "q", "c", "a")
        try:
            async with HttpClient(policies={"slow.example": slow}) as http:
                ctx = StageContext("c", {"http": http})
                out = []
                for stage, option in [(Hangs(), None), (Own(), None), (Own(), 3.0)]:
                    r = StageRunner(stage, q, None, ctx, task_timeout_s=option)
                    await r.run()  # empty queue, burst: resolves the ceiling and ends
                    out.append(r.task_timeout_s)
                return out
        finally:
            await q.close()

    # derived from the client's policies / the stage's own / the campaign's option over both
    assert anyio.run(ceilings) == [7680.0, 12.0, 3.0]
    with pytest.raises(ValueError, match="task_timeout_s must be > 0"):
        StageRunner(Hangs(), None, None, StageContext("c"), task_timeout_s=0)
    p = generic_campaign(tmp_path, name="cfg", n=1, models=model_table("m"), queue={"task_timeout_s": 0})
    with pytest.raises(ConfigError, match="task_timeout_s"):
        load_config(p)
    p = generic_campaign(tmp_path, name="cfg2", n=1, models=model_table("m"), queue={"task_timeout_s": 90.5})
    assert load_config(p).queue.task_timeout_s == 90.5
    assert load_config(generic_campaign(tmp_path, name="cfg3", n=1, models=model_table("m"))).queue.task_timeout_s is None


def test_campaign_task_timeout_cancels_a_model_call_that_never_answers(tmp_path, monkeypatch):
    """The model's own timeout (30 s) is far above the campaign's ceiling (1 s): the ceiling cuts the call; the
    request was sent, so its worst case is booked as unknown-outcome spend (never lost, never paid twice)."""
    from geoagent.sandbox.server import serve

    key = made_up_key("sk-", 38, seed="sandbox-ceiling-n22")
    monkeypatch.setenv("GA_TEST_CEILING_KEY", key)
    app = llm_openai.make_app(api_keys=[key], faults={"rate": 1.0, "kinds": ["timeout"], "timeout_delay_s": 60.0})

    async def main():
        async with serve(app) as base:
            cfg = load_config(generic_campaign(
                tmp_path, name="ceiling", n=2, cap_usd=5.0,
                models=model_table("m", base_url=base, key_var="GA_TEST_CEILING_KEY", timeout_s=30.0)
                + "max_attempts = 1\n",
                queue={"max_attempts": 1, "task_timeout_s": 1.0}))
            t0 = time.monotonic()
            with anyio.fail_after(25):  # before: each call waited out the model's 30 s timeout
                outcome = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg, outcome, time.monotonic() - t0

    cfg, outcome, elapsed = anyio.run(main)
    assert outcome.status == "incomplete" and outcome.exit_code == EXIT_INCOMPLETE, outcome.summary()
    c = outcome.counts["requests"]
    assert (c.done, c.dead, c.ready, c.leased) == (0, 2, 0, 0)
    reasons = [d.reason for d in outcome.dead["requests"]]
    assert len(reasons) == 2 and all(r.startswith("TaskTimeout: stage model_caller: task ") and
                                     r.endswith(" still running after 1 s, its ceiling ([queue] task_timeout_s): "
                                                "cancelled") for r in reasons), reasons
    assert elapsed < 20
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals["reserved_nusd"] == 0 and totals["results"] == 0
    assert totals["unknown_nusd"] > 0  # both requests were sent: their worst case is kept as unknown outcome
