"""Unreachable hosts in watch mode (runtime): the breaker goes half-open instead of ending the stage. After a
cool-down the stage leases ONE task as a probe; while the host is down each probe is released untouched and the
cool-down doubles (up to its cap); once a local server binds the port again the probe gets through, the breaker
closes and the stage finishes the queued work: nothing dead-lettered, no attempt burnt by the outage. A stop
request ends the cool-down at once. (geoagent.runtime.worker "Unreachable hosts")"""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HttpClient
from geoagent.runtime.stage import StageContext
from geoagent.runtime.worker import StageRunner
from geoagent.sandbox.server import free_port, serve
from geoagent.status import stop_reason
from test_runtime_unreachable_host import FAST, Fetch, Sink, _app


class TimedFetch(Fetch):
    """:class:`Fetch` that notes when each request starts (time.monotonic, s)."""

    def __init__(self, url: str, cancel_on_stop: bool = False) -> None:
        super().__init__(url)
        self.started: list[float] = []
        self.cancel_on_stop = cancel_on_stop

    async def handle(self, task, ctx):
        self.started.append(time.monotonic())
        return await super().handle(task, ctx)


def _run(coro_fn, limit_s):
    async def main():
        with anyio.fail_after(limit_s):
            return await coro_fn()

    return anyio.run(main)


@pytest.mark.parametrize("cancel_on_stop", [False, True])
def test_watch_stage_waits_probes_with_doubling_cooldown_and_resumes_when_the_host_is_back(tmp_path, caplog,
                                                                                           cancel_on_stop):
    port = free_port()
    host = f"127.0.0.1:{port}"
    fetch = TimedFetch(f"http://{host}/x", cancel_on_stop=cancel_on_stop)
    n_tasks, max_attempts, after = 6, 3, 2
    probe_after_s, probe_max_s = 0.2, 0.4
    seen: dict[str, object] = {}

    async def main():
        stages = [fetch, Sink()]
        # max_attempts 3: had the outage's probes counted attempts, tasks would dead-letter
        queues = open_edge_queues(tmp_path / "q", "w", stages, backoff_base_s=0.0, backoff_max_s=0.0,
                                  max_attempts=max_attempts)
        views = []

        async def tick(view):
            views.append(view)

        try:
            await queues["a"].put_many([(f"k{i}", {"i": i}) for i in range(n_tasks)])
            async with HttpClient(default_policy=FAST) as http, anyio.create_task_group() as tg:
                async def drive():
                    # the breaker opens after 2 requests in a row (1 nacked, the 2nd released); then let 3
                    # probes fail (requests 3, 4, 5: released untouched) while the host is still down
                    while not (views and views[-1].runners[0].stats.released >= 1 + 3):
                        await anyio.sleep(0.02)
                    runner = views[-1].runners[0]
                    info = runner.stats.as_dict()["unreachable"][host]
                    seen["info"] = info
                    seen["reason"] = stop_reason({"stages": [runner.stats.as_dict()]})
                    seen["blocked"] = runner.stats.blocked
                    seen["failed_during_outage"] = runner.stats.failed
                    async with serve(_app(), "127.0.0.1", port):
                        while (await queues["a"].counts()).done < n_tasks:
                            await anyio.sleep(0.05)
                        seen["unreachable_after"] = dict(runner.stats.unreachable)
                        seen["blocked_after"] = runner.stats.blocked
                        for r in views[-1].runners:
                            r.request_stop()

                tg.start_soon(drive)
                with caplog.at_level(logging.WARNING, logger="geoagent.runtime.worker"):
                    await run_pipeline("w", stages, queues, StageContext("w", {"http": http}), burst=False,
                                       tick=tick, tick_interval_s=0.02, handle_signals=False, grace_s=1.0,
                                       runner_options={"unreachable_after": after, "probe_after_s": probe_after_s,
                                                       "probe_max_s": probe_max_s})
            counts = await queues["a"].counts()
            dead = await queues["a"].dead_letters(100)
            return counts, dead
        finally:
            for q in queues.values():
                await q.close()

    counts, dead = _run(main, 60)
    assert (counts.done, counts.ready, counts.leased, counts.dead) == (n_tasks, 0, 0, 0)
    assert dead == []
    # only the first request (below the threshold) counted an attempt; the opening one and every probe did not
    assert seen["failed_during_outage"] == after - 1
    # while waiting: the stage is blocked and says which host it waits for and when it probes next
    assert seen["blocked"] is True
    assert 0.0 <= seen["info"]["next_probe_in_s"] <= probe_max_s
    assert seen["reason"].startswith(f"fetch: waiting for host {host} (next probe in ")
    assert "connection refused" in seen["reason"]
    # after the host came back: the breaker closed
    assert seen["unreachable_after"] == {} and seen["blocked_after"] is False
    # ONE request per probe, spaced by the cool-down: 0.2 s after the opening, then 0.4, 0.4 (doubled, capped);
    # lower bounds only (a loaded machine only adds delay)
    t = fetch.started
    gaps = [t[i + 1] - t[i] for i in range(after - 1, after + 2)]
    for gap, cooldown in zip(gaps, [0.2, 0.4, 0.4]):
        assert gap >= cooldown - 0.02, (gaps, cooldown)
    # requests: 2 before the opening, one per failed probe, then one per task once the host was back
    messages = [r.getMessage() for r in caplog.records]
    failed_probes = sum(f"host {host} still unreachable" in m for m in messages)
    assert failed_probes >= 3 and len(t) == after + failed_probes + n_tasks
    assert any(f"host {host} unreachable" in m and "the stage waits for it, next probe in" in m for m in messages)
    assert any(f"host {host} reachable again; stage fetch resumed" in m for m in messages)


def test_watch_stop_during_the_cooldown_ends_at_once_and_leaves_tasks_ready(tmp_path):
    port = free_port()
    fetch = TimedFetch(f"http://127.0.0.1:{port}/x")
    seen: dict[str, float] = {}

    async def main():
        stages = [fetch, Sink()]
        queues = open_edge_queues(tmp_path / "q", "w", stages, backoff_base_s=0.0, backoff_max_s=0.0, max_attempts=5)
        views = []

        async def tick(view):
            views.append(view)

        try:
            await queues["a"].put_many([(f"k{i}", {"i": i}) for i in range(4)])
            async with HttpClient(default_policy=FAST) as http, anyio.create_task_group() as tg:
                async def drive():
                    while not (views and views[-1].runners[0].stats.unreachable):
                        await anyio.sleep(0.02)
                    await anyio.sleep(0.1)  # well inside the 10-minute cool-down
                    seen["stop_at"] = time.monotonic()
                    for r in views[-1].runners:
                        r.request_stop()

                tg.start_soon(drive)
                await run_pipeline("w", stages, queues, StageContext("w", {"http": http}), burst=False, tick=tick,
                                   tick_interval_s=0.02, handle_signals=False, grace_s=30.0,
                                   runner_options={"unreachable_after": 2, "probe_after_s": 600.0,
                                                   "probe_max_s": 600.0})
                seen["ended_at"] = time.monotonic()
            return await queues["a"].counts(), await queues["a"].dead_letters(10)

        finally:
            for q in queues.values():
                await q.close()

    counts, dead = _run(main, 60)
    assert seen["ended_at"] - seen["stop_at"] < 5.0  # not the 600 s cool-down, nor the 30 s grace
    assert (counts.ready, counts.leased, counts.done, counts.dead) == (4, 0, 0, 0) and dead == []
    assert len(fetch.started) == 2  # no probe was sent


def test_probe_settings_are_checked():
    with pytest.raises(ValueError, match="probe_after_s"):
        StageRunner(Sink(), None, None, StageContext("c", {}), probe_after_s=60.0, probe_max_s=30.0)
    with pytest.raises(ValueError, match="probe_after_s"):
        StageRunner(Sink(), None, None, StageContext("c", {}), probe_after_s=-1.0)


class StallOnce(Fetch):
    """A free lookup (``cancel_on_stop``) with 3 slots: task ``k0``'s first delivery stalls (a request on a host
    that never answers) until cancelled; every other request goes to ``url``."""

    concurrency = 3
    cancel_on_stop = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.stalled = 0
        self.cut = 0

    async def handle(self, task, ctx):
        if task.key == "k0" and not self.stalled:
            self.stalled += 1
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.cut += 1
                raise
        return await super().handle(task, ctx)


def test_watch_breaker_cuts_stalled_free_lookups_and_the_stage_goes_on(tmp_path):
    """In a ``cancel_on_stop`` stage the breaker's opening cancels the tasks in flight one by one (released
    untouched) instead of ending the stage: without that the probe would wait for the stalled task forever."""
    port = free_port()
    stage = StallOnce(f"http://127.0.0.1:{port}/x")

    async def main():
        stages = [stage, Sink()]
        queues = open_edge_queues(tmp_path / "q", "w", stages, backoff_base_s=0.0, backoff_max_s=0.0, max_attempts=5)
        views = []

        async def tick(view):
            views.append(view)

        try:
            await queues["a"].put_many([(f"k{i}", {"i": i}) for i in range(5)])
            async with HttpClient(default_policy=FAST) as http, anyio.create_task_group() as tg:
                async def drive():
                    while not (views and views[-1].runners[0].stats.unreachable):
                        await anyio.sleep(0.02)
                    async with serve(_app(), "127.0.0.1", port):
                        while (await queues["a"].counts()).done < 5:
                            await anyio.sleep(0.05)
                        for r in views[-1].runners:
                            r.request_stop()

                tg.start_soon(drive)
                await run_pipeline("w", stages, queues, StageContext("w", {"http": http}), burst=False, tick=tick,
                                   tick_interval_s=0.02, handle_signals=False, grace_s=1.0,
                                   runner_options={"unreachable_after": 2, "probe_after_s": 0.2})
            return await queues["a"].counts(), await queues["a"].dead_letters(10)
        finally:
            for q in queues.values():
                await q.close()

    counts, dead = _run(main, 60)
    assert stage.cut == 1  # the stalled lookup was cancelled when the breaker opened
    assert (counts.done, counts.ready, counts.leased, counts.dead) == (5, 0, 0, 0) and dead == []


def test_queue_section_sets_the_watch_probe_cooldown(tmp_path):
    from geoagent import constants as C
    from geoagent.config import ConfigError, load_config
    from test_adversarial_config import _write

    cfg = load_config(_write(tmp_path))
    assert (cfg.queue.watch_probe_after_s, cfg.queue.watch_probe_max_s) == (C.DEFAULT_WATCH_PROBE_AFTER_S,
                                                                            C.DEFAULT_WATCH_PROBE_MAX_S) == (30.0, 600.0)
    cfg = load_config(_write(tmp_path, extra="\n[queue]\nwatch_probe_after_s = 5\nwatch_probe_max_s = 120\n"))
    assert (cfg.queue.watch_probe_after_s, cfg.queue.watch_probe_max_s) == (5.0, 120.0)
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, extra="\n[queue]\nwatch_probe_after_s = 60\nwatch_probe_max_s = 30\n"))
    assert "campaign.toml" in str(ei.value) and "watch_probe_max_s" in str(ei.value)
