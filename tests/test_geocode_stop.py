"""Ctrl-C with a geocoder lookup stalled on a host that does not answer: the geocoder stage
(``cancel_on_stop``) cancels it at once and releases the task untouched (no attempt counted), instead of
waiting out the runner's grace period; a stage without it still gets the grace period (paid model calls keep
theirs). (geoagent.runtime.worker "Stopping")"""

from __future__ import annotations

import time

import anyio
from aiohttp import web

from geoagent import constants as C
from geoagent.geohint.geocode_stage import GeocodeStage, GeocoderSettings, build_geocoder
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner
from geoagent.sandbox.server import serve

GRACE_S = 30.0


def _stalled_app(arrived: list[float], done: anyio.Event) -> web.Application:
    async def h(request: web.Request) -> web.Response:
        arrived.append(time.monotonic())
        with anyio.move_on_after(120):
            await done.wait()  # stalls until the test is over (so the server's shutdown does not wait)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/w/api.php", h)
    return app


ANSWER = {"model": "sim", "request_key": "rk", "image_id": "1",
          "meta": {"site": "s", "site_lat": 48.86, "site_lon": 2.36, "condition": "baseline"},
          "parsed": {"ok": True, "city": "Paris", "area": "Le Marais", "building": None}}


async def _stop_while_stalled(tmp_path, stage_of, grace_s: float):
    arrived: list[float] = []
    done = anyio.Event()
    async with serve(_stalled_app(arrived, done)) as base, HttpClient() as http:
        stage = stage_of(http, base)
        inq = open_queue(tmp_path, "stop", stage.input_edge)
        outq = open_queue(tmp_path, "stop", stage.output_edge)
        await inq.put_many([("a1", dict(ANSWER))])
        runner = StageRunner(stage, inq, outq, StageContext("stop", {"http": http}), burst=True, grace_s=grace_s)
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run)
            with anyio.fail_after(20):
                while not arrived:  # the lookup reached the host, which now stalls
                    await anyio.sleep(0.01)
            t0 = time.monotonic()
            runner.request_stop()
            with anyio.fail_after(GRACE_S + 20):
                await runner.finished.wait()
            took = time.monotonic() - t0
        counts = await inq.counts()
        leased = await inq.lease(5, 60.0)
        await inq.close()
        await outq.close()
        done.set()
        return runner, took, counts, leased


def test_stop_cancels_a_stalled_geocoder_lookup_at_once(tmp_path):
    def geocode_stage(http, base):
        settings = GeocoderSettings(contact="ops@example.org", wikidata_url=base + "/w/api.php", nominatim_url=None)
        return GeocodeStage(build_geocoder(http, settings), settings)

    runner, took, counts, leased = anyio.run(_stop_while_stalled, tmp_path, geocode_stage, GRACE_S)
    assert GeocodeStage.cancel_on_stop is True
    assert took < GRACE_S / 3, took  # not the 30 s grace (margin for a loaded machine)
    assert (counts.ready, counts.leased, counts.done, counts.dead) == (1, 0, 0, 0)
    assert runner.stats.released == 1 and runner.stats.failed == 0
    assert [(t.key, t.attempts) for t in leased] == [("a1", 0)]  # released untouched: no attempt counted


class PlainFetch(Stage):
    """A stage without ``cancel_on_stop`` (the default, as the model caller): its request keeps the grace."""

    name = "plain"
    input_edge = C.EDGE_ANSWERS
    output_edge = C.EDGE_LOCATED
    concurrency = 1

    def __init__(self, url):
        self.url = url

    async def handle(self, task, ctx):
        await ctx.get("http").request("GET", self.url)
        return [(task.key, {})]


def test_a_stage_without_cancel_on_stop_keeps_its_grace_period(tmp_path):
    grace = 1.5
    runner, took, counts, leased = anyio.run(
        _stop_while_stalled, tmp_path, lambda http, base: PlainFetch(base + "/w/api.php"), grace)
    assert PlainFetch.cancel_on_stop is False
    assert took >= grace - 0.05, took  # it waited the grace period out, then was cancelled
    assert (counts.ready, counts.done, counts.dead) == (1, 0, 0)
    assert [(t.key, t.attempts) for t in leased] == [("a1", 0)]


def test_unreachable_breaker_cancels_the_geocoder_lookups_still_backing_off(tmp_path, refused_port):
    # 4 answers in flight at once against a closed port; each lookup's first attempt is refused at once, then
    # backs off U(0, 8) s before its second. The first lookup to exhaust its 2 attempts opens the breaker
    # (unreachable_after=1): the 3 others are cancelled in their backoff (no second attempt: 2 + 3 requests
    # in all, not 8) and every task is released untouched
    from geoagent.runtime.http import HostPolicy

    host = f"127.0.0.1:{refused_port}"
    slow = HostPolicy(rate=1000.0, concurrency=4, max_attempts=2, backoff_base_s=8.0, backoff_max_s=8.0, timeout_s=10.0)

    async def main():
        async with HttpClient(policies={host: slow}) as http:
            settings = GeocoderSettings(contact="ops@example.org", wikidata_url=f"http://{host}/w/api.php",
                                        nominatim_url=None)
            stage = GeocodeStage(build_geocoder(http, settings, configured_hosts=[host]), settings)
            inq = open_queue(tmp_path, "cut", stage.input_edge)
            outq = open_queue(tmp_path, "cut", stage.output_edge)
            await inq.put_many([(f"a{i}", dict(ANSWER)) for i in range(4)])
            runner = StageRunner(stage, inq, outq, StageContext("cut", {"http": http}), burst=True,
                                 unreachable_after=1)
            with anyio.fail_after(60):
                await runner.run()
            counts = await inq.counts()
            leased = await inq.lease(10, 60.0)
            await inq.close()
            await outq.close()
            return runner, counts, leased, http.stats()[host].requests

    runner, counts, leased, requests = anyio.run(main)
    assert set(runner.stats.unreachable) == {host}
    assert requests == 2 + 3
    assert (runner.stats.failed, runner.stats.dead, runner.stats.released) == (0, 0, 4)
    assert (counts.ready, counts.done, counts.dead) == (4, 0, 0)
    assert sorted((t.key, t.attempts) for t in leased) == [(f"a{i}", 0) for i in range(4)]
