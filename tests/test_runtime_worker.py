"""Stage runner and pipeline: burst completion, error routing, budget stop, graceful stop."""

from __future__ import annotations

import anyio

from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.stage import BudgetStop, Missing, PermanentFailure, Stage, StageContext


class Double(Stage):
    name = "double"
    input_edge = "a"
    output_edge = "b"
    concurrency = 4

    def __init__(self, fail_keys=(), perm_keys=(), missing_keys=(), budget_after=None):
        self.fail_keys = set(fail_keys)
        self.perm_keys = set(perm_keys)
        self.missing_keys = set(missing_keys)
        self.budget_after = budget_after
        self.calls: dict[str, int] = {}

    async def handle(self, task, ctx):
        n = self.calls[task.key] = self.calls.get(task.key, 0) + 1
        if self.budget_after is not None and sum(self.calls.values()) > self.budget_after:
            raise BudgetStop("cap")
        if task.key in self.perm_keys:
            raise PermanentFailure("HTTP 400: bad request")
        if task.key in self.missing_keys:
            raise Missing("retries exhausted")
        if task.key in self.fail_keys and n == 1:
            raise RuntimeError("transient")
        await anyio.sleep(0)
        return [(task.key, {"x": task.payload["x"] * 2})]


class Collect(Stage):
    name = "collect"
    input_edge = "b"
    output_edge = None
    concurrency = 2

    def __init__(self):
        self.seen: dict[str, int] = {}
        self.flushes = 0

    async def handle(self, task, ctx):
        self.seen[task.key] = task.payload["x"]
        return []

    async def flush(self, ctx):
        self.flushes += 1


def _run(stages, tmp_path, items, **kw):
    async def main():
        queues = open_edge_queues(tmp_path / "q", "t", stages, backoff_base_s=0.01, backoff_max_s=0.02, max_attempts=3)
        await queues["a"].put_many(items)
        run = await run_pipeline("t", stages, queues, StageContext("t"), handle_signals=False, **kw)
        counts = await run.counts()
        dead = await queues["a"].dead_letters()
        for q in queues.values():
            await q.close()
        return run, counts, dead

    return anyio.run(main)


def test_burst_pipeline_moves_every_task_once(tmp_path):
    d, c = Double(fail_keys={"k3"}), Collect()
    items = [(f"k{i}", {"x": i}) for i in range(200)]
    run, counts, dead = _run([d, c], tmp_path, items)
    assert c.seen == {f"k{i}": 2 * i for i in range(200)}
    assert counts["a"].done == 200 and counts["b"].done == 200
    assert counts["a"].ready == counts["a"].leased == 0
    assert d.calls["k3"] == 2  # nacked once, retried once
    assert c.flushes >= 1 and not run.budget_stopped


def test_permanent_and_missing_go_to_dead_letter_with_reason(tmp_path):
    d, c = Double(perm_keys={"k1"}, missing_keys={"k2"}), Collect()
    run, counts, dead = _run([d, c], tmp_path, [(f"k{i}", {"x": i}) for i in range(5)])
    assert counts["a"].dead == 2 and counts["a"].done == 3
    reasons = {x.key: x.reason for x in dead}
    assert "HTTP 400" in reasons["k1"] and "Missing" in reasons["k2"]
    stats = {s.name: s for s in run.stats()}
    assert stats["double"].missing == 1 and stats["double"].dead == 2
    assert set(c.seen) == {"k0", "k3", "k4"}


def test_budget_stop_releases_task_and_drains(tmp_path):
    d, c = Double(budget_after=10), Collect()
    d.concurrency = 1
    run, counts, dead = _run([d, c], tmp_path, [(f"k{i}", {"x": i}) for i in range(50)])
    assert run.budget_stopped
    assert counts["a"].done == 10 and counts["a"].ready == 40 and counts["a"].dead == 0
    assert counts["b"].done == 10  # downstream drained what was produced
    assert len(c.seen) == 10


def test_stop_request_releases_in_flight_work(tmp_path):
    class Slow(Double):
        async def handle(self, task, ctx):
            await anyio.sleep(30)
            return []

    s = Slow()
    s.output_edge = None

    async def main():
        queues = open_edge_queues(tmp_path / "q", "t", [s])
        await queues["a"].put_many([(f"k{i}", {"x": i}) for i in range(10)])

        async def stopper(run_holder):
            await anyio.sleep(0.5)
            for r in run_holder:
                r.request_stop()

        holder = []

        async def tick(view):
            if not holder:
                holder.extend(view.runners)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stopper, holder)
            run = await run_pipeline("t", [s], queues, StageContext("t"), handle_signals=False, tick=tick,
                                     tick_interval_s=0.1, grace_s=0.2)
        counts = await queues["a"].counts()
        return run, counts

    run, counts = anyio.run(main)
    assert counts.leased == 0 and counts.ready == 10 and counts.done == 0
    assert run.stats()[0].released == 4


class BatchCollect(Stage):
    """A ``batched`` sink: one ``handle_batch`` call per group of waiting tasks; per-task fates by key."""

    name = "collect"
    input_edge = "b"
    output_edge = None
    concurrency = 8
    lease_batch = 16
    batched = True

    def __init__(self, perm_keys=(), fail_once_keys=(), raise_whole_batch_once=False, budget_key=None):
        self.perm_keys, self.fail_once_keys = set(perm_keys), set(fail_once_keys)
        self.raise_whole_batch_once = raise_whole_batch_once
        self.budget_key = budget_key
        self.batches: list[int] = []
        self.seen: dict[str, int] = {}
        self.failed: set[str] = set()

    async def handle(self, task, ctx):  # pragma: no cover - the runner calls handle_batch
        raise AssertionError("batched stage got a single task")

    async def handle_batch(self, tasks, ctx):
        self.batches.append(len(tasks))
        if self.raise_whole_batch_once:
            self.raise_whole_batch_once = False
            raise RuntimeError("database hiccup")
        out = []
        for t in tasks:
            if t.key in self.perm_keys:
                out.append(PermanentFailure("bad row"))
            elif t.key in self.fail_once_keys and t.key not in self.failed:
                self.failed.add(t.key)
                out.append(RuntimeError("transient"))
            elif t.key == self.budget_key:
                out.append(BudgetStop("cap"))
            else:
                self.seen[t.key] = t.payload["x"]
                out.append([])
        await anyio.sleep(0)
        return out


def test_batched_stage_gets_groups_and_per_task_fates(tmp_path):
    d, c = Double(), BatchCollect(perm_keys={"k5"}, fail_once_keys={"k7", "k8"})
    run, counts, _ = _run([d, c], tmp_path, [(f"k{i}", {"x": i}) for i in range(100)])
    assert counts["b"].done == 99 and counts["b"].dead == 1 and counts["b"].ready == counts["b"].leased == 0
    assert c.seen == {f"k{i}": 2 * i for i in range(100) if i != 5}
    assert max(c.batches) > 1 and max(c.batches) <= c.lease_batch  # grouped, never beyond a lease batch
    assert sum(c.batches) == 100 + 2  # every task once, plus the two nacked ones again
    stats = {s.name: s for s in run.stats()}
    assert stats["collect"].failed == 2 and stats["collect"].dead == 1


def test_batched_stage_whole_batch_failure_is_retried(tmp_path):
    d, c = Double(), BatchCollect(raise_whole_batch_once=True)
    run, counts, _ = _run([d, c], tmp_path, [(f"k{i}", {"x": i}) for i in range(40)])
    assert counts["b"].done == 40 and counts["b"].dead == 0
    assert c.seen == {f"k{i}": 2 * i for i in range(40)}
    assert {s.name: s for s in run.stats()}["collect"].failed == c.batches[0]  # the first batch was nacked


def test_batched_stage_budget_stop_releases_task(tmp_path):
    d, c = Double(), BatchCollect(budget_key="k3")
    run, counts, _ = _run([d, c], tmp_path, [(f"k{i}", {"x": i}) for i in range(30)])
    assert run.budget_stopped
    assert counts["b"].dead == 0 and counts["b"].leased == 0
    assert counts["b"].ready >= 1  # k3 (and whatever was leased ahead) went back untouched
    assert "k3" not in c.seen and counts["b"].done == len(c.seen)


def test_stop_releases_tasks_leased_ahead_and_never_started(tmp_path):
    """With lease-ahead, tasks beyond the concurrency wait in memory; on stop they go back (no attempt)."""
    started: list[str] = []

    class Slow(Double):
        concurrency = 2
        lease_batch = 8

        async def handle(self, task, ctx):
            started.append(task.key)
            await anyio.sleep(30)
            return []

    s = Slow()
    s.output_edge = None

    async def main():
        queues = open_edge_queues(tmp_path / "q", "t", [s])
        await queues["a"].put_many([(f"k{i}", {"x": i}) for i in range(20)])
        holder = []

        async def tick(view):
            holder.extend(r for r in view.runners if r not in holder)
            if view.runners[0].stats.in_flight >= 4:
                for r in holder:
                    r.request_stop()

        run = await run_pipeline("t", [s], queues, StageContext("t"), handle_signals=False, tick=tick,
                                 tick_interval_s=0.1, grace_s=0.2, runner_options={"lease_ahead": True})
        counts = await queues["a"].counts()
        tasks = await queues["a"].lease(100, 60)
        for q in queues.values():
            await q.close()
        return run, counts, tasks

    run, counts, tasks = anyio.run(main)
    assert len(started) == 2  # only the two slots ever started work
    assert counts.leased == 0 and counts.ready == 20 and counts.done == 0
    assert run.stats()[0].released >= 4  # the started ones after the grace period, plus those leased ahead
    assert all(t.attempts == 0 for t in tasks)  # released, not nacked


class HoldOdd(Stage):
    """Holds (stage.Held) every task with an odd x, e.g. a model whose API key was refused; doubles the rest."""

    name = "double"
    input_edge = "a"
    output_edge = "b"
    concurrency = 4

    def __init__(self):
        self.calls: dict[str, int] = {}

    async def handle(self, task, ctx):
        from geoagent.runtime.stage import Held

        self.calls[task.key] = self.calls.get(task.key, 0) + 1
        if task.payload["x"] % 2:
            raise Held("model m: authentication failed")
        await anyio.sleep(0.01)
        return [(task.key, {"x": task.payload["x"] * 2})]


def test_held_tasks_stay_leased_untouched_the_rest_completes_and_they_are_released_at_the_end(tmp_path):
    """Burst mode ends once only held tasks remain; each held task was handed to the stage once per lease
    (no re-delivery loop: 200 tasks, a 30 s visibility timeout), no attempt was counted, and at the end
    they are all ready again, none dead."""
    d, c = HoldOdd(), Collect()
    items = [(f"k{i}", {"x": i}) for i in range(200)]
    run, counts, dead = _run([d, c], tmp_path, items, runner_options={"visibility_timeout_s": 30.0})
    assert c.seen == {f"k{i}": 2 * i for i in range(0, 200, 2)}
    assert counts["a"].done == 100 and counts["a"].ready == 100 and counts["a"].leased == 0 and counts["a"].dead == 0
    assert dead == []
    assert all(d.calls[f"k{i}"] == 1 for i in range(1, 200, 2))  # held once, never handed out again
    stats = {s.name: s for s in run.stats()}["double"]
    assert stats.held == 100 and stats.failed == 0 and not run.budget_stopped

    # the released tasks are ready with no attempt counted: a stage that can run them now completes them
    async def again():
        from geoagent.runtime.sqlite_queue import SQLiteQueue

        q = SQLiteQueue.open(tmp_path / "q", "t", "a")
        try:
            tasks = await q.lease(200, 30.0)
            await q.release(tasks)
            return {t.key: t.attempts for t in tasks}
        finally:
            await q.close()

    attempts = anyio.run(again)
    assert set(attempts) == {f"k{i}" for i in range(1, 200, 2)} and set(attempts.values()) == {0}


def test_a_held_task_whose_lease_expires_is_held_again_and_the_run_still_ends(tmp_path):
    """A short visibility timeout: held leases expire while the other tasks are slow, come back as ready,
    are leased and held again (the stage sees them a few times, not in a busy loop), and the run ends with
    them released."""

    class SlowEven(HoldOdd):
        async def handle(self, task, ctx):
            if task.payload["x"] % 2 == 0:
                await anyio.sleep(0.05)
            return await super().handle(task, ctx)

    d, c = SlowEven(), Collect()
    d.concurrency = 2
    items = [(f"k{i}", {"x": i}) for i in range(40)]
    run, counts, dead = _run([d, c], tmp_path, items, runner_options={"visibility_timeout_s": 0.2})
    assert counts["a"].done == 20 and counts["a"].ready == 20 and counts["a"].leased == 0 and dead == []
    held_calls = [d.calls[f"k{i}"] for i in range(1, 40, 2)]
    # 20 even tasks x 0.05 s on 2 slots >= 0.5 s: a task held at the start is leased again at least once
    # (its lease expired at 0.2 s), and about once per 0.2 s, not in a loop
    assert min(held_calls) >= 1 and 2 <= max(held_calls) <= 20, held_calls
