"""The crawl over an Overpass endpoint that cannot be reached (closed loopback port): the city screener stops
after 5 requests in a row could not reach the host (the runtime's unreachable-host breaker), the cities stay
queued untouched for a re-run, nothing is dead-lettered, no later stage runs (geoagent.runtime.worker)."""

from __future__ import annotations

import asyncio

from geoagent import constants as C
from geoagent.crawl.stages import run_crawl
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.sandbox.city import build_world, serve_world
from test_crawl_pipeline import FAST, _settings


def test_unreachable_overpass_stops_the_screener_and_keeps_the_cities_queued(tmp_path, refused_port):
    world = build_world(0)
    port = refused_port

    async def main():
        async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**FAST)) as http:
            endpoints = {**sb["endpoints"], "overpass": f"http://127.0.0.1:{port}/api"}
            run = await run_crawl(_settings(world, endpoints), campaign="crawlunreach", queues_root=tmp_path / "q",
                                  state_dir=tmp_path / "s", images_root=tmp_path / "i", http=http,
                                  mapillary_token="MLY|sandbox|token")
        q = open_queue(tmp_path / "q", "crawlunreach", C.EDGE_CITIES)
        try:
            return run, await q.counts(), await q.dead_letters(10)
        finally:
            await q.close()

    run, cities, dead = asyncio.run(main())
    by_name = {r.stage.name: r for r in run.runners}
    screener = by_name[C.STAGE_SCREENER]
    st = screener.stats
    assert set(st.unreachable) == {f"127.0.0.1:{port}"} and st.unreachable[f"127.0.0.1:{port}"][0] == 5
    assert st.blocked and st.done == 0 and st.dead == 0
    # 2 cities: the requests 1-4 of the streak were nacked (the cities retried by the queue), the 5th tripped the
    # breaker and was released untouched (and the other city's, if it was in flight then)
    assert len(world.cities) == 2 and st.failed == 4 and st.released in (1, 2)
    assert (cities.ready, cities.leased, cities.done, cities.dead) == (2, 0, 0, 0) and dead == []
    assert all(r.stats.done == 0 for r in run.runners)
    line, = screener.unreachable_lines(cities.ready)
    assert line.startswith(f"{screener.stage.name}: host 127.0.0.1:{port} unreachable (connection refused on 5 "
                           "consecutive requests)") and "2 cities left queued" in line
    assert "check [crawl.endpoints] overpass / the network" in line  # the config key holding the URL


def test_each_crawl_host_is_named_by_its_config_key(tmp_path):
    from geoagent.crawl.stages import CityScreenerStage, SiteSamplerStage, build_crawl_services
    from geoagent.runtime.stage import StageContext

    endpoints = {"overpass": "http://Ovp.example:8080/api", "overpass_mirrors": ["https://mirror.example/api"],
                 "wdqs": "https://wdqs.example/sparql", "pageviews": "https://pv.example/api/rest_v1",
                 "mapillary": "https://graph.example"}
    settings = _settings(build_world(0), endpoints)
    svc = build_crawl_services(settings, HttpClient(), state_dir=tmp_path / "state", images_root=tmp_path / "images",
                               mapillary_token="MLY|sandbox|token")
    svc.mapillary.thumb_hosts.add("cdn.example")

    async def started(stage):
        await stage.start(StageContext("hint", {"crawl": svc}))
        return stage

    sampler = asyncio.run(started(SiteSamplerStage()))
    assert CityScreenerStage().unreachable_hint("ovp.example:8080") is None  # not started: the generic hint
    assert sampler.unreachable_hint("ovp.example:8080") == "[crawl.endpoints] overpass"
    assert sampler.unreachable_hint("mirror.example") == "[crawl.endpoints] overpass_mirrors"
    assert sampler.unreachable_hint("wdqs.example") == "[crawl.endpoints] wdqs"
    assert sampler.unreachable_hint("pv.example") == "[crawl.endpoints] pageviews"
    assert sampler.unreachable_hint("graph.example") == "[crawl.endpoints] mapillary"
    assert "[crawl.fetcher] thumb_field" in sampler.unreachable_hint("cdn.example")
    assert sampler.unreachable_hint("elsewhere.example") is None
    from geoagent.config import ModelConfig

    svc.ref_model_cfg = ModelConfig(name="aud", provider="openai", model="x", base_url="http://LLM.example:9000/v1")
    assert sampler.unreachable_hint("llm.example:9000") == "[[models]] base_url of 'aud' (the [crawl.referenceability] model)"
