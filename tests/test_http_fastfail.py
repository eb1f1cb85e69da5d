"""Fail fast on a host known to be unreachable (geoagent.runtime.http module docstring, "fail fast"): once a
request exhausted its retries without reaching a host, further requests to it make one attempt each (no backoff
sequence) until one gets through, and an attempt that cannot reach the host takes no rate slot, so the stage runner's
unreachable-host breaker opens about one retry cycle after the host went away instead of one cycle per request,
and no lease outlives its visibility timeout meanwhile. The policy is the public Overpass default
(geoagent.crawl.settings.DEFAULT_POLICIES["overpass"]: 1 request per 10 s, 2 in flight, 4 attempts, backoff
5 s .. 120 s) with every time scaled by 1/10; the host is a closed loopback port (connection refused)."""

from __future__ import annotations

import logging
import time

import anyio
from aiohttp import web

from geoagent.crawl.settings import DEFAULT_POLICIES
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import (RATE_MARGIN_FRACTION, RATE_MARGIN_MIN_S, HostPolicy, HttpClient, RetriesExhausted,
                                   host_key)
from geoagent.runtime.stage import StageContext
from geoagent.sandbox.server import free_port, serve
from test_runtime_unreachable_host import Fetch as OneAtATimeFetch
from test_runtime_unreachable_host import Sink

SCALE = 0.1
_TIMES = ("period_s", "backoff_base_s", "backoff_max_s", "timeout_s")
OVERPASS = HostPolicy(**{k: (v * SCALE if k in _TIMES else v) for k, v in DEFAULT_POLICIES["overpass"].items()})
#: one rate window (period plus the limiter's safety margin), s
WINDOW_S = OVERPASS.period_s + max(RATE_MARGIN_FRACTION * OVERPASS.period_s, RATE_MARGIN_MIN_S)
#: longest possible backoff of one request's retry sequence (full jitter: U(0, min(max, base * 2**k)), k = 0..)
BACKOFF_S = sum(min(OVERPASS.backoff_max_s, OVERPASS.backoff_base_s * 2 ** k) for k in range(OVERPASS.max_attempts - 1))
#: one retry cycle of an unreachable host at the worst: its full backoffs (its attempts take no rate slot)
CYCLE_S = BACKOFF_S


def _app() -> web.Application:
    async def h(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", h)
    return app


async def _fail(http: HttpClient, url: str) -> tuple[RetriesExhausted, float]:
    t0 = time.monotonic()
    try:
        await http.request("GET", url)
    except RetriesExhausted as exc:
        return exc, time.monotonic() - t0
    raise AssertionError("the request did not fail")


def test_the_policy_is_the_scaled_public_overpass_one():
    assert (OVERPASS.rate, OVERPASS.concurrency, OVERPASS.max_attempts) == (1.0, 2, 4)
    assert (OVERPASS.period_s, OVERPASS.backoff_base_s, OVERPASS.backoff_max_s) == (1.0, 0.5, 12.0)
    assert BACKOFF_S == 0.5 + 1.0 + 2.0 and abs(WINDOW_S - 1.1) < 1e-9


def test_after_one_exhausted_request_the_next_ones_make_one_attempt_until_one_gets_through():
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"

    async def main():
        async with HttpClient(policies={f"127.0.0.1:{port}": OVERPASS}) as http:
            first, first_s = await _fail(http, url)
            assert (first.unreachable, first.attempts, first.streak) == (True, OVERPASS.max_attempts, 1)
            assert first_s < CYCLE_S + 1.0  # one retry cycle: its backoffs
            probes = [await _fail(http, url) for _ in range(4)]
            assert [(e.unreachable, e.attempts, e.streak) for e, _ in probes] == [(True, 1, n) for n in (2, 3, 4, 5)]
            # no failed attempt held a rate slot: 4 probes at the host's 1 per 1.1 s would need over 3.3 s
            assert sum(s for _, s in probes) < 1.0
            assert http.stats()[host_key(url)].requests == OVERPASS.max_attempts + 4
            # the host comes back: the first request gets through, and the full retry policy applies again
            async with serve(_app(), "127.0.0.1", port):
                t0 = time.monotonic()
                assert (await http.request("GET", url)).status == 200
                assert time.monotonic() - t0 < 0.5 * WINDOW_S  # no rate slot was taken by the failed attempts
            assert http.unreachable_streak(host_key(url))[0] == 0
            again, _ = await _fail(http, url)
            assert (again.attempts, again.streak) == (OVERPASS.max_attempts, 1)
            # after stop_retries a probe is still a first attempt (its caller decides whether it may start): one
            # attempt, an unreachable RetriesExhausted, never a backoff
            http.stop_retries()
            after_stop, _ = await _fail(http, url)
            assert (after_stop.attempts, after_stop.streak) == (1, 2)

    anyio.run(main)


def test_a_request_between_retries_stops_at_its_next_failure_once_another_exhausted():
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"

    async def main():
        async with HttpClient(policies={f"127.0.0.1:{port}": OVERPASS}) as http:
            t0 = time.monotonic()
            with anyio.fail_after(CYCLE_S + 10):
                results: list[RetriesExhausted] = []

                async def one():
                    results.append((await _fail(http, url))[0])

                async with anyio.create_task_group() as tg:
                    for _ in range(OVERPASS.concurrency):
                        tg.start_soon(one)
            elapsed = time.monotonic() - t0
            # both unreachable, counted in a row; the second stopped before its own full cycle
            assert sorted(e.streak for e in results) == [1, 2] and all(e.unreachable for e in results)
            assert sum(e.attempts for e in results) < OVERPASS.concurrency * OVERPASS.max_attempts
            assert elapsed < CYCLE_S + 1.0

    anyio.run(main)


class Fetch(OneAtATimeFetch):
    """One GET per task through the shared client, as many in flight as the host allows."""

    concurrency = OVERPASS.concurrency


def test_the_breaker_opens_within_one_retry_cycle_and_no_lease_goes_stale(tmp_path, caplog):
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"
    host = f"127.0.0.1:{port}"
    items = [(f"city{i:02d}", {"i": i}) for i in range(10)]

    async def main():
        stages = [Fetch(url), Sink()]
        queues = open_edge_queues(tmp_path / "q", "u", stages, backoff_base_s=0.0, backoff_max_s=0.0, max_attempts=5)
        try:
            await queues["a"].put_many(items)
            async with HttpClient(policies={host: OVERPASS}) as http:
                t0 = time.monotonic()
                # as the campaign engine runs it: lease-ahead on, the sandbox crawl's 120 s visibility timeout (scaled)
                run = await run_pipeline("u", stages, queues, StageContext("u", {"http": http}), handle_signals=False,
                                         runner_options={"visibility_timeout_s": 120.0 * SCALE, "lease_ahead": True})
                elapsed = time.monotonic() - t0
            counts = await queues["a"].counts()
            dead = await queues["a"].dead_letters(100)
        finally:
            for q in queues.values():
                await q.close()
        return stages[0], run.runners[0], counts, dead, elapsed

    with caplog.at_level(logging.WARNING):
        stage, runner, counts, dead, elapsed = anyio.run(main)
    # before: one full retry cycle per request, 5 in a row, spaced by the rate limit (here 25 s); now one cycle
    assert elapsed < CYCLE_S + 2.0, elapsed
    assert runner.stats.blocked and runner.stats.unreachable[host][0] == 5
    assert (counts.ready, counts.leased, counts.dead, counts.done) == (10, 0, 0, 0) and dead == []
    text = caplog.text
    assert "stale lease" not in text
    # the first warning is one complete sentence
    assert (f"stage fetch: host {host} unreachable (connection refused); the task will be retried, and the stage "
            f"stops if 5 requests in a row cannot reach the host." in text)
