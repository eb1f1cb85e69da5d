"""A stop in the middle of a site sampling, then a resume: each WDQS split is in the decision log once.

The site sampler makes only free requests, so a stop cancels its task at once and the next run samples the
city again, repeating the WDQS query and its spatial split. The split had already been logged to
``crawl_decisions.jsonl`` by the stopped run; the resumed run must not log it a second time.

Everything is real: the crawl stages and runner, SQLite queues, the HTTP client and the sandbox fakes. The
fake WDQS times out on every area over 20 km^2 (``test_crawl_wdqs_split``), so the 3 km candidate circle
(28 km^2) is split once into four 9 km^2 boxes. A second front of the same fake (same state) requests the
stop when the first box query of the sampler arrives, i.e. after the split was logged and before the
sampling could finish.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from geoagent import constants as C
from geoagent.crawl.settings import load_crawl_settings
from geoagent.crawl.stages import run_crawl
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.sandbox import wdqs as wd
from geoagent.sandbox.city import build_world, serve_world
from geoagent.sandbox.server import serve
from geoagent.sandbox.wdqs import WDQS_STATE

FAST = {"rate": 500.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 2, "backoff_base_s": 0.01,
        "backoff_max_s": 0.05, "timeout_s": 10.0}


def _settings(world, endpoints):
    return load_crawl_settings({
        "contact": "mailto:crawl-test@example.org", "seed": 7, "cities": world.cities[:1], "endpoints": endpoints,
        "policies": {k: FAST for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")},
        "referenceability": {"pageviews": False, "batch_size": 25},
    })


def _stop_at_first_sampler_box(state: dict) -> web.Application:
    """A front of the fake WDQS (its state in ``state["wdqs"]``) that requests the run's stop when the first
    ``wikibase:box`` query for site candidates arrives (waiting, if need be, for the run's view), then answers it."""

    @web.middleware
    async def stop_first(request: web.Request, handler):
        query = request.query.get("query") or str((await request.post()).get("query", ""))
        if "wikibase:box" in query and "VALUES ?type" in query and "stopped" not in state:
            for _ in range(200):  # the first progress tick hands over the view (1 s period)
                if "view" in state:
                    break
                await asyncio.sleep(0.05)
            state["stopped"] = len(state["wdqs"].queries)
            for r in state["view"].runners:
                r.request_stop()
        return await handler(request)

    app = wd.make_app(state=state["wdqs"])
    app.middlewares.append(stop_first)
    return app


def _log(tmp) -> list[dict]:
    return [json.loads(x) for x in (tmp / "state" / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]


def test_a_resumed_sampling_logs_its_wdqs_split_once(tmp_path):
    world = build_world(0)
    state: dict = {}

    async def tick(view) -> None:
        state.setdefault("view", view)

    async def stopped_run():
        async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**FAST)) as http:
            state["wdqs"] = sb["apps"]["wdqs"][WDQS_STATE]
            state["wdqs"].timeout_above_km2 = 20.0
            async with serve(_stop_at_first_sampler_box(state)) as front:
                settings = _settings(world, {**sb["endpoints"], "wdqs": front + "/sparql"})
                await run_crawl(settings, campaign="splitresume", queues_root=tmp_path / "queues",
                                state_dir=tmp_path / "state", images_root=tmp_path / "images", http=http,
                                mapillary_token="MLY|sandbox|token", tick=tick)
        q = open_queue(tmp_path / "queues", "splitresume", C.EDGE_ADMITTED)
        try:
            counts, leased = await q.counts(), await q.lease(5, 60.0)
            await q.release(leased)  # looked at, handed back for the resumed run
            return counts, leased
        finally:
            await q.close()

    counts, leased = asyncio.run(stopped_run())
    assert "stopped" in state  # the stop came in the middle of the sampling ...
    assert [(t.key, t.attempts) for t in leased] == [("city:sandboxcity", 0)]  # ... released untouched
    assert counts.done == 0 and not (tmp_path / "state" / "sampling" / "sandboxcity.json").exists()
    first = [r for r in _log(tmp_path) if r["event"] == "wdqs_split"]
    # the split of the whole 3 km circle was logged before the stop (and nothing else: no site yet)
    assert [(r["stage"], r["city"], r["depth"], r["query"]) for r in first] == [
        (C.STAGE_SAMPLER, "Sandbox City", 0, "site_candidates")]

    async def resumed_run():
        async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**FAST)) as http:
            sb["apps"]["wdqs"][WDQS_STATE].timeout_above_km2 = 20.0
            await run_crawl(_settings(world, sb["endpoints"]), campaign="splitresume", queues_root=tmp_path / "queues",
                            state_dir=tmp_path / "state", images_root=tmp_path / "images", http=http,
                            mapillary_token="MLY|sandbox|token")
            return sb["apps"]["wdqs"][WDQS_STATE].area_timeouts

    timeouts = asyncio.run(resumed_run())
    assert (tmp_path / "state" / "sampling" / "sandboxcity.json").exists()  # the resumed run sampled the city
    splits = [r for r in _log(tmp_path) if r["event"] == "wdqs_split"]
    sampler = [r for r in splits if r["stage"] == C.STAGE_SAMPLER]
    assert len(sampler) == 1 and sampler[0] == first[0]  # the first run's record, not a second copy
    # the resumed run really repeated the split (its fake saw the whole circle time out again): one timeout for
    # the sampler's circle, and per site one for the 6 km circle and four for its 36 km^2 quadrants
    sites = sorted(p.stem for p in (tmp_path / "state" / "rated").glob("*.json"))
    assert len(sites) == 3 and timeouts == 1 + 5 * len(sites)
    refs = [r for r in splits if r["stage"] == C.STAGE_REF_AUDITOR]
    assert sorted((r["site"], r["depth"]) for r in refs) == sorted((s, d) for s in sites for d in (0, 1, 1, 1, 1))
    ident = [json.dumps([r.get(k) for k in ("stage", "city", "site", "query", "depth", "box")]) for r in splits]
    assert len(set(ident)) == len(ident)
