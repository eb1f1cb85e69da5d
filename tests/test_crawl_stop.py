"""A stop request (Ctrl-C / SIGTERM) during a crawl ends its HTTP retries: ``run_crawl`` gives its stages the
shared client as the ``http`` service (as the campaign engine does), so the stage runner's stop reaches
:meth:`~geoagent.runtime.http.HttpClient.stop_retries`; a request backing off after a 503 raises
``RetriesStopped`` (an ``Abandoned``) and its city goes back to the queue untouched, instead of the retries
going on through the 30 s grace period. Everything is real: the crawl stages, runners, SQLite queues, the
HTTP client and loopback fakes (the Overpass fake here answers 503 to everything and counts arrivals, in
this process, so the count at the stop is exact)."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from geoagent import constants as C
from geoagent.crawl.settings import load_crawl_settings
from geoagent.crawl.stages import run_crawl
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.sandbox.city import build_world, serve_world
from geoagent.sandbox.server import serve
from test_crawl_pipeline import FAST

#: many attempts, backoff up to 1 s: without the stop reaching the client, a request would retry through
#: the whole 30 s grace period
PATIENT = {**FAST, "max_attempts": 100, "backoff_base_s": 0.5, "backoff_max_s": 1.0}


def _always_503(seen: dict, on_arrival) -> web.Application:
    async def h(request: web.Request) -> web.Response:
        seen["n"] += 1
        on_arrival()
        return web.Response(status=503, text="Service Unavailable")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", h)
    return app


def test_stop_ends_the_crawls_retries_and_keeps_the_city_queued(tmp_path):
    world = build_world(0)
    seen = {"n": 0}
    state: dict = {}

    def on_arrival() -> None:
        # the first request that arrives once the run's view is known stops the run, before it is answered:
        # it is then the only request in flight, so any later arrival would be a retry after the stop
        view = state.get("view")
        if view is not None and "stop_at" not in state:
            state["stop_at"], state["t_stop"] = seen["n"], time.monotonic()
            for r in view.runners:
                r.request_stop()

    async def tick(view) -> None:
        state.setdefault("view", view)

    async def main():
        async with serve_world(world) as sb, serve(_always_503(seen, on_arrival)) as dead_base, \
                HttpClient(default_policy=HostPolicy(**FAST)) as http:
            settings = load_crawl_settings({
                "contact": "mailto:crawl-test@example.org", "seed": 7, "cities": world.cities[:1],
                "endpoints": {**sb["endpoints"], "overpass": dead_base + "/api"},
                "policies": {k: PATIENT if k == "overpass" else FAST
                             for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")},
            })
            run = await run_crawl(settings, campaign="crawlstop", queues_root=tmp_path / "q", state_dir=tmp_path / "s",
                                  images_root=tmp_path / "i", http=http, mapillary_token="MLY|sandbox|token", tick=tick)
            took = time.monotonic() - state["t_stop"]
            await asyncio.sleep(1.5)  # longer than any backoff: a retry that was still due would arrive now
            q = open_queue(tmp_path / "q", "crawlstop", C.EDGE_CITIES)
            try:
                counts, dead = await q.counts(), await q.dead_letters(10)
                leased = await q.lease(5, 60.0)
            finally:
                await q.close()
            return run, took, counts, dead, leased, http

    run, took, counts, dead, leased, http = asyncio.run(main())
    assert all(r.ctx.services.get("http") is http for r in run.runners)  # the stop reaches the shared client
    assert http.stopping
    assert took < 10.0, took  # not the 30 s grace period (generous margin for a loaded machine)
    assert seen["n"] == state["stop_at"] >= 1  # no request reached the fake after the stop
    screener = next(r for r in run.runners if r.stage.name == C.STAGE_SCREENER)
    assert screener.stats.released == 1 and screener.stats.failed == 0 and screener.stats.dead == 0
    assert (counts.ready, counts.leased, counts.done, counts.dead) == (1, 0, 0, 0) and dead == []
    assert [(t.key, t.attempts) for t in leased] == [("city:sandboxcity", 0)]  # released untouched
    assert not (tmp_path / "s" / "screening" / "sandboxcity.json").exists()


def test_crawl_stages_with_free_requests_cancel_at_a_stop_paid_ones_keep_the_grace():
    from geoagent.crawl import stages as st

    # Overpass, WDQS, Mapillary and thumbnail requests are free and every file these stages write is
    # written atomically (temp + rename), so cancelling them leaves nothing half done
    assert st.CityScreenerStage.cancel_on_stop and st.SiteSamplerStage.cancel_on_stop
    assert st.ImageryFetcherStage.cancel_on_stop
    # the auditors make paid model calls: a call already sent may be billed, so they keep the grace period
    assert not st.ImageAuditorStage.cancel_on_stop and not st.ReferenceabilityAuditorStage.cancel_on_stop


def test_stop_during_a_stalled_overpass_request_cancels_it_and_releases_the_city(tmp_path):
    world = build_world(0)
    seen = {"n": 0}
    state: dict = {}

    async def main():
        done = asyncio.Event()

        async def stall(request: web.Request) -> web.Response:
            seen["n"] += 1
            try:
                await asyncio.wait_for(done.wait(), 120)  # no answer until the test is over
            except asyncio.TimeoutError:
                pass
            return web.Response(status=503)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", stall)

        async def tick(view) -> None:
            if seen["n"] and "t_stop" not in state:  # the request reached the host, which stalls
                state["t_stop"] = time.monotonic()
                for r in view.runners:
                    r.request_stop()

        async with serve_world(world) as sb, serve(app) as stalled_base, \
                HttpClient(default_policy=HostPolicy(**FAST)) as http:
            settings = load_crawl_settings({
                "contact": "mailto:crawl-test@example.org", "seed": 7, "cities": world.cities[:1],
                "endpoints": {**sb["endpoints"], "overpass": stalled_base + "/api"},
                "policies": {k: {**FAST, "timeout_s": 120.0} for k in ("overpass", "wdqs", "pageviews", "mapillary",
                                                                       "thumbnails")},
            })
            run = await run_crawl(settings, campaign="crawlstall", queues_root=tmp_path / "q", state_dir=tmp_path / "s",
                                  images_root=tmp_path / "i", http=http, mapillary_token="MLY|sandbox|token", tick=tick)
            took = time.monotonic() - state["t_stop"]
            done.set()
            q = open_queue(tmp_path / "q", "crawlstall", C.EDGE_CITIES)
            try:
                counts, leased = await q.counts(), await q.lease(5, 60.0)
            finally:
                await q.close()
            return run, took, counts, leased

    run, took, counts, leased = asyncio.run(main())
    assert took < 10.0, took  # cancelled at once, not after the 30 s grace period (margin for a loaded machine)
    assert seen["n"] == 1
    screener = next(r for r in run.runners if r.stage.name == C.STAGE_SCREENER)
    assert screener.stats.released == 1 and screener.stats.failed == 0 and screener.stats.dead == 0
    assert (counts.ready, counts.leased, counts.done, counts.dead) == (1, 0, 0, 0)
    assert [(t.key, t.attempts) for t in leased] == [("city:sandboxcity", 0)]  # released untouched
    assert not (tmp_path / "s" / "screening").exists() or not any((tmp_path / "s" / "screening").iterdir())
