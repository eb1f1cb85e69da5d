"""A response cache keys a sandbox fake's answers by the URL the config wrote, not the fake's local port (walk28 #2).

Before: the crawl's pageviews cache (``state/<crawl>/pageviews_cache.sqlite``) keyed each answer on its full URL,
which held the port the in-process fake got at that launch; each run gets a new port, so a resumed crawl found
none of its earlier answers and asked the fake again for every window (194 of 634 requests repeated), and the
crawl's ``requests.all_runs`` count was inflated by as many. The geocoder's cache (Wikidata, Nominatim) had the
same flaw. Now a URL that reaches a fake served by :func:`geoagent.sandbox.launch.launch` is keyed as
``http://<fake>.sandbox.invalid/...``; a real host's URL is keyed as it is.

Two launches of the shipped sandbox crawl config (two different local ports) share one cache file, as a stopped and a
resumed crawl do; the fake counts the requests it served.
"""

from __future__ import annotations

import anyio

from geoagent.clients.cache import ResponseCache
from geoagent.clients.pageviews import PageviewsClient
from geoagent.config import load_config
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import launch as sandbox
from geoagent.sandbox.launch import as_written_url, launch

CONFIG = sandbox.Path(sandbox.__file__).parent.parent / "configs" / "crawl_sandbox.toml"
UA = "geoagent-test/0 (mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, timeout_s=10.0, max_attempts=1)
ASKS = [("Birch Park", "20240101", "20241231"), ("Old Mill", "20240101", "20240630")]


def test_a_second_launch_reads_the_first_launchs_cached_answers(tmp_path):
    cfg = load_config(CONFIG)
    cache_file = tmp_path / "pageviews_cache.sqlite"

    async def one_run():
        async with launch(cfg) as live:
            base = live.section("crawl").endpoints.pageviews
            assert "sandbox.invalid" not in base  # a local port, new at each launch
            before = sandbox.request_counts().get("pageviews", 0)
            cache = ResponseCache(cache_file)
            try:
                async with HttpClient(default_policy=FAST) as http:
                    c = PageviewsClient(http, base, UA, cache=cache)
                    totals = [(t.views, t.days_with_data) for t in [await c.total(*a) for a in ASKS]]
            finally:
                cache.close()
            return base, totals, sandbox.request_counts().get("pageviews", 0) - before

    base1, first, sent1 = anyio.run(one_run)
    base2, again, sent2 = anyio.run(one_run)
    assert sent1 == len(ASKS)
    assert base1 != base2  # two ports ...
    assert sent2 == 0 and again == first  # ... one cache: the second run asked nothing


def test_as_written_url_hand_cases():
    real = "https://wikimedia.org/api/rest_v1/metrics/pageviews/per-article/x"
    assert as_written_url(real) == real  # no fake served: unchanged
    assert as_written_url("not a url") == "not a url"
    sandbox._SERVED["http://127.0.0.1:45123"] = sandbox._Served("pageviews", "pageviews")
    try:
        assert as_written_url("http://127.0.0.1:45123/metrics/a?b=1") == "http://pageviews.sandbox.invalid/metrics/a?b=1"
        assert as_written_url("http://127.0.0.1:45124/metrics/a") == "http://127.0.0.1:45124/metrics/a"  # another port
        assert as_written_url(real) == real
    finally:
        sandbox._SERVED.pop("http://127.0.0.1:45123")


def test_the_geocoder_fakes_cache_label_carries_their_gazetteer(tmp_path):
    """Walk28 review #3: the Wikidata and Nominatim fakes answer from a gazetteer built from the campaign's release
    folder and seed; a cache keyed ``http://nominatim.sandbox.invalid/...`` served one gazetteer's answers to a
    campaign of another. Now their label carries the gazetteer's fingerprint; the world fakes keep their name."""
    from geoagent.sandbox.gazetteer import Gazetteer, GazetteerEntry

    def gaz(lat):
        return Gazetteer([GazetteerEntry(qid="Q1", labels={"en": "Old Mill"}, lat=lat, lon=7.0, kind="building", city="Turin")])

    cfg = load_config(CONFIG)
    cfg = cfg.model_copy(update={"models": [m.model_copy(update={"base_url": "http://nominatim.sandbox.invalid"})
                                            for m in cfg.models][:1] or cfg.models})

    async def label(g):
        async with launch(cfg, gazetteer=g):
            urls = {s.name: as_written_url(b + "/search?q=x") for b, s in sandbox._SERVED.items()}
        return urls

    a, b, a2 = anyio.run(label, gaz(45.0)), anyio.run(label, gaz(46.0)), anyio.run(label, gaz(45.0))
    assert a["nominatim"] != b["nominatim"] and a["nominatim"] == a2["nominatim"], (a, b)
    assert a["nominatim"].startswith(f"http://nominatim-{gaz(45.0).fingerprint()}.sandbox.invalid/search")
    assert a["pageviews"] == "http://pageviews.sandbox.invalid/search?q=x"  # the fixed demo world: its name
    assert gaz(45.0).fingerprint() == gaz(45.0).fingerprint() != gaz(45.0 + 1e-9).fingerprint()
