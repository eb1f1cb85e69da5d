"""A thumbnail host that resolves to no public address stops the fetch stage after a few walks (crawl43 #1).

Before: every delivery of every site asked the Graph API for the site's images and a fresh thumbnail URL again, then
failed the same way (:class:`geoagent.crawl.fetcher.ThumbnailHostNotPublic`), until each site was dead-lettered after
``[queue] max_attempts`` (the sandbox crawl below: 15 walks for its 3 sites, all 3 dead). Now the fetch stage counts
such failures per host (:class:`geoagent.crawl.not_public.NotPublicHosts`) and the stage runner's unreachable-host
breaker stops the stage after 5 in a row: the sites stay queued (their attempts given back), the stop line and
``status`` say why and what to check, and a re-run once the name resolves publicly completes.

Real crawl pipeline, queue, HTTP client and Mapillary fakes on loopback; a resolver stands in for the network's DNS
(tests/test_security42.py).
"""

from __future__ import annotations

import asyncio
import pickle
import time
from pathlib import Path

import pytest

from geoagent.crawl.fetcher import ThumbnailHostNotPublic
from geoagent.crawl.not_public import NotPublicHosts, host_name
from geoagent.crawl.settings import load_crawl_settings
from geoagent.crawl.stages import ImageryFetcherStage, build_crawl_services, run_crawl
from geoagent.runtime.http import HostPolicy, HttpClient, new_streak_id
from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.runtime.worker import UNREACHABLE_AFTER, unreachable_cause
from geoagent.sandbox import mapillary as mly
from geoagent.sandbox.city import build_world, serve_world
from geoagent.sandbox.server import serve
from geoagent.status import stop_reason
from tests.test_security42 import _Dns

#: the thumbnail CDN's name; the tests' "DNS" answers a private address for it (split-horizon DNS)
CDN = "cdn.example.net"
POLICY = {"rate": 500.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 2, "backoff_base_s": 0.01,
          "backoff_max_s": 0.05, "timeout_s": 10.0}


async def _crawl(root: Path, world, *, dns_private: bool) -> dict:
    """One crawl run over the world's first city, thumbnails on :data:`CDN`; ``dns_private``: this network resolves
    the CDN's name to 10.20.30.40 and thumbnails connect to public addresses only (a public Graph API's rule), else
    the name is fetched as the sandbox fetches it (the network fixed). Returns what the checks need."""
    dns = _Dns({CDN: [["10.20.30.40"]]} if dns_private else {})
    async with serve_world(world, separate_cdn=True) as sb, \
            HttpClient(default_policy=HostPolicy(**POLICY), resolver=dns) as http:
        st = sb["apps"]["mapillary"][mly.MAPILLARY_STATE]
        st.cdn_base = f"http://{CDN}:{sb['cdn'].rsplit(':', 1)[1]}"  # the CDN on a name of its own
        settings = load_crawl_settings({
            "contact": "mailto:crawl-test@example.org", "seed": 7, "cities": world.cities[:1],
            "endpoints": sb["endpoints"], "fetcher": {"max_images_per_site": 3},
            "policies": {k: POLICY for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")}})
        svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                                   mapillary_token="MLY|sandbox|token")
        # the sandbox's Graph API is local, so its thumbnails may be too; a public API's may not (security42 #1)
        svc.mapillary.thumbs_public_only = dns_private
        run = await run_crawl(settings, campaign="c", queues_root=root / "queues", state_dir=root / "state",
                              images_root=root / "images", http=http, services=svc)
        (fetcher,) = [r for r in run.runners if r.stage.name == ImageryFetcherStage.name]
        return {"walks": len(st.image_requests), "thumbs": len(st.thumb_requests), "runner": fetcher,
                "record": fetcher.stats.as_dict(time.monotonic())}


def _sites(root: Path):
    q = SQLiteQueue.open(root / "queues", "c", "sites")
    try:
        return q.counts_sync(), q.dead_letters_sync(10)
    finally:
        q.close_sync()


def test_a_private_cdn_answer_stops_the_fetch_stage_and_keeps_the_sites_queued(tmp_path):
    world = build_world(0)
    got = asyncio.run(_crawl(tmp_path, world, dns_private=True))
    counts, dead = _sites(tmp_path)
    n_sites = counts.ready
    assert n_sites >= 1 and (counts.dead, counts.done, counts.leased) == (0, 0, 0) and dead == []
    # the Graph API was asked for a thumbnail URL once per walk: 5 in a row opened the breaker (plus walks already
    # in flight then); before, 5 walks per site (15 here), every site dead-lettered
    assert UNREACHABLE_AFTER <= got["walks"] <= UNREACHABLE_AFTER + ImageryFetcherStage.concurrency - 1
    assert got["walks"] < n_sites * 5 and got["thumbs"] == 0  # nothing connected to the private address
    runner = got["runner"]
    assert list(runner.stats.unreachable) == [CDN] and runner.stats.unreachable[CDN][0] == UNREACHABLE_AFTER
    assert runner.stats.refunded_attempts >= 1  # the walks before the breaker opened are given back
    (line,) = runner.unreachable_lines(n_sites)
    assert line.startswith(f"imagery_fetcher: host {CDN} unreachable (no public address in this network's DNS "
                           f"answer on {UNREACHABLE_AFTER} consecutive requests); check what this network's DNS "
                           f"answers for {CDN}, a Mapillary thumbnail host")
    assert f"{n_sites} sites left queued; re-run the same command to resume" in line
    said = stop_reason({"stages": [got["record"]], "finished": True})
    assert said == (f"imagery_fetcher: host {CDN} unreachable (no public address in this network's DNS answer on "
                    f"{UNREACHABLE_AFTER} consecutive requests); its tasks left queued, re-run to resume")
    assert not list((tmp_path / "images").rglob("images-*.json"))  # no selection stored without those images
    # the network fixed (the name resolves where the thumbnails are): the same crawl resumes and completes
    again = asyncio.run(_crawl(tmp_path, world, dns_private=False))
    counts, _ = _sites(tmp_path)
    assert (counts.done, counts.ready, counts.dead) == (n_sites, 0, 0) and again["thumbs"] > 0
    assert not again["runner"].stats.unreachable


def _failure(host: str | None = CDN) -> ThumbnailHostNotPublic:
    return ThumbnailHostNotPublic("s", "1", f"thumbnail of 1 not fetched: {host} resolves to no public address "
                                  "(10.0.0.5): not connected", 0, host)


def test_a_run_of_failures_restarts_once_the_host_answered():
    async def go():
        async with serve(_ok_app()) as base, HttpClient(default_policy=HostPolicy(timeout_s=5.0)) as http:
            host = base.split("//", 1)[1].split(":", 1)[0]  # 127.0.0.1: the name the resolver would refuse
            hosts = NotPublicHosts()
            first = [hosts.count(_failure(host), http) for _ in range(2)]
            await http.request("GET", base + "/ok")  # the host answered: the name resolved publicly meanwhile
            later = hosts.count(_failure(host), http)
            return first, later, hosts

    (a, b), later, hosts = asyncio.run(go())
    assert (a.streak, b.streak) == (1, 2) and a.streak_id == b.streak_id > 0 and a.unreachable
    assert later.streak == 1 and later.streak_id > a.streak_id  # a new run: the runner keeps the larger id
    assert hosts.knows("127.0.0.1:8080") and not hosts.knows(CDN)


def _ok_app():
    from aiohttp import web

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/ok", ok)
    return app


def test_a_failure_without_a_host_is_an_ordinary_failure_and_counts_travel_pickled():
    hosts = NotPublicHosts()
    nameless = hosts.count(_failure(None))
    assert nameless.streak == 0 and not nameless.unreachable  # nacked as before, no breaker
    err = hosts.count(_failure(), None)
    back = pickle.loads(pickle.dumps(err))
    assert (back.host, back.streak, back.streak_id, back.unreachable) == (CDN, 1, err.streak_id, True)
    assert back.last == err.reason and str(back) == str(err) and "stops after a few such failures" in str(back)
    assert new_streak_id() > err.streak_id


@pytest.mark.parametrize("key, name", [("cdn.example.net", "cdn.example.net"), ("CDN.example.net:8443",
                                                                                 "cdn.example.net"),
                                       ("[::1]:80", "[::1]"), ("[fd00::5]", "[fd00::5]")])
def test_host_names_drop_the_port_only(key, name):
    assert host_name(key) == name


def test_the_cause_says_dns_answered_privately_not_that_the_lookup_failed():
    assert unreachable_cause("thumbnail of 1 not fetched: x resolves to no public address (10.0.0.5): not "
                             "connected") == "no public address in this network's DNS answer"
    assert unreachable_cause("connection: DNS lookup failed") == "DNS lookup failed"
