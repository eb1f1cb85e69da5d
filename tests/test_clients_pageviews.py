"""Pageviews client against the local REST fake (zero days omitted, 404 = no data)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from geoagent.clients.pageviews import PageviewsClient, article_path
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox import pageviews as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)


async def _run(app, fn, ua=UA):
    async with serve(app) as base, HttpClient(default_policy=FAST) as http:
        return await fn(PageviewsClient(http, base, ua))


def test_totals_fill_zero_days_and_404_is_zero():
    app = fake.make_app({"AC/DC_Museum": 10, "Rose_Garden": 3}, zero_every=7)

    async def go(c):
        return (await c.total("AC/DC Museum", "20240101", "20240131"), await c.total("Rose Garden", "20240101", "20240107"),
                await c.total("Nobody Reads This", "20240101", "20240131"))

    a, b, z = asyncio.run(_run(app, go))
    days = (dt.date(2024, 1, 31) - dt.date(2024, 1, 1)).days + 1
    zero_days = days // 7  # every 7th day has no item
    assert (a.views, a.days_with_data) == (10 * (days - zero_days), days - zero_days)
    assert (b.views, b.days_with_data) == (3 * 6, 6)
    assert (z.views, z.days_with_data) == (0, 0)
    assert app[fake.PAGEVIEWS_STATE].requests[0] == "AC/DC_Museum"  # the slash travelled as %2F


def test_article_encoding_and_bad_input():
    assert article_path("AC/DC Museum") == "AC%2FDC_Museum"
    assert article_path("Café de Flore") == "Caf%C3%A9_de_Flore"
    with pytest.raises(ValueError):
        article_path("  ")
    app = fake.make_app({})
    with pytest.raises(ValueError):
        asyncio.run(_run(app, lambda c: c.total("X", "2024-01-01", "20240131")))


def test_bad_range_is_permanent_and_generic_ua_refused():
    app = fake.make_app({"X": 1})
    with pytest.raises(PermanentHTTPError) as ei:
        asyncio.run(_run(app, lambda c: c.total("X", "20240131", "20240101")))
    assert ei.value.status == 400
    with pytest.raises(PermanentHTTPError) as ei:
        asyncio.run(_run(fake.make_app({"X": 1}), lambda c: c.total("X", "20240101", "20240131"), ua="aiohttp/3.9"))
    assert ei.value.status == 403


def test_no_request_is_sent_after_a_stop_request_also_none_queued_for_the_host():
    """A stop request (``HttpClient.stop_retries``) ends the client's sending: the request already sent is
    answered; the ones waiting for the host's single slot, and any new one, raise ``RetriesStopped`` (an
    ``Abandoned``: the caller's task is released untouched) without reaching the server."""
    from aiohttp import web

    from geoagent.runtime.http import RetriesStopped
    from geoagent.runtime.stage import Abandoned

    one_at_a_time = HostPolicy(rate=1000, period_s=1.0, concurrency=1, max_attempts=3, backoff_base_s=0.01,
                               backoff_max_s=0.05, timeout_s=5)
    app = fake.make_app({f"Place_{i}": 5 for i in range(5)})
    clients = []

    @web.middleware
    async def stop_at_first(request, handler):
        clients[0].stop_retries()  # the stop arrives while the first request is at the server
        await asyncio.sleep(0.05)
        return await handler(request)

    app.middlewares.append(stop_at_first)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=one_at_a_time) as http:
            clients.append(http)
            c = PageviewsClient(http, base, UA)
            got = await asyncio.gather(*(c.total(f"Place {i}", "20240101", "20240107") for i in range(5)),
                                       return_exceptions=True)
            with pytest.raises(RetriesStopped):  # a new request (an article not asked before)
                await c.total("Place 9", "20240101", "20240107")
            return got

    got = asyncio.run(go())
    assert app[fake.PAGEVIEWS_STATE].requests == ["Place_0"]  # only the request sent before the stop
    assert got[0].views == 5 * 6  # 7 days, the 7th without views (zero_every=7)
    assert all(isinstance(g, RetriesStopped) and isinstance(g, Abandoned) for g in got[1:]), got


def test_answers_of_past_windows_are_kept_in_the_cache_file_for_a_later_client(tmp_path):
    """Walkthrough 24 #4: a crawl stopped mid-way asked Wikimedia again for every pageviews answer it had (47 of
    444 requests repeated: the answers lived in the process's memory only). With the crawl's cache file a later
    client (a resumed run) reads settled windows' answers back without a request; a window that ended less than a
    week ago is asked again (Wikimedia loads a day's counts late: its answer may still lack days or be a 404,
    review rev24), and a 404 of a settled window (no data) is kept like any answer."""
    from geoagent.clients.cache import ResponseCache

    app = fake.make_app({"Rose_Garden": 3}, zero_every=0)
    cache_file = tmp_path / "pageviews_cache.sqlite"
    today = dt.datetime.now(dt.timezone.utc)
    recent = [(today - dt.timedelta(days=d)).strftime("%Y%m%d") for d in (0, 1, 6)]
    past = [("Rose Garden", "20240101", "20240107"), ("Nobody Reads This", "20240101", "20240131")]
    requests = app[fake.PAGEVIEWS_STATE].requests

    async def go():
        async with serve(app) as base:
            async def client_run(asks):  # a client of its own and the cache file opened anew: a later run
                cache = ResponseCache(cache_file)
                try:
                    async with HttpClient(default_policy=FAST) as http:
                        c = PageviewsClient(http, base, UA, cache=cache)
                        return [await c.total(*a) for a in asks]
                finally:
                    cache.close()

            first = await client_run(past)
            assert len(requests) == 2 and [t.views for t in first] == [21, 0]
            again = await client_run(past)  # no request
            assert [(t.views, t.days_with_data) for t in again] == [(t.views, t.days_with_data) for t in first]
            assert len(requests) == 2
            for _ in range(2):  # windows ending today, yesterday, 6 days ago: never kept, asked by each client
                await client_run([("Rose Garden", "20240101", end) for end in recent])
            assert len(requests) == 2 + 2 * len(recent)

    asyncio.run(go())
