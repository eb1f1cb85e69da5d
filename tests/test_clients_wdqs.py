"""WDQS client against the local SPARQL fake (W3C JSON results; 429 + Retry-After; timeouts)."""

from __future__ import annotations

import asyncio
import math
import random
import time

import pytest

from geoagent.clients.wdqs import (
    QueryTimeBudget,
    WdqsClient,
    WdqsThrottled,
    WdqsTimeout,
    entity_from_binding,
    parse_point,
)
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import wdqs as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=3, backoff_base_s=0.01, backoff_max_s=5.0, timeout_s=5)
LAT0, LON0 = 41.39, 2.17
MUSEUM, ART_MUSEUM, PARK, HUMAN = "Q33506", "Q207694", "Q22698", "Q5"


def _world(n=400, seed=1):
    rng = random.Random(seed)
    ents = []
    for i in range(n):
        cls = rng.choice([MUSEUM, ART_MUSEUM, PARK, HUMAN])
        ents.append(fake.FakeEntity(qid=f"Q{100 + i}", label=f"Thing {i}", lat=LAT0 + rng.uniform(-0.07, 0.07),
                                    lon=LON0 + rng.uniform(-0.09, 0.09), sitelinks=rng.choice([0, 3, 12, 40, 61, 150]),
                                    instance_of=(cls,), title=f"Thing {i}" if i % 3 else None))
    return ents


def _km(e):
    p1, p2 = math.radians(LAT0), math.radians(e.lat)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(e.lon - LON0) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(a))


async def _run(app, fn, policy=FAST, **kw):
    async with serve(app) as base, HttpClient(default_policy=policy) as http:
        return await fn(WdqsClient(http, base + "/sparql", UA, **kw))


def test_entities_around_paginates_every_item():
    ents = _world()
    app = fake.make_app(ents)
    got = asyncio.run(_run(app, lambda c: c.entities_around(LAT0, LON0, 6.0, page_size=50)))
    expected = {e.qid for e in ents if _km(e) <= 6.0}
    assert {g.qid for g in got} == expected and len(got) == len(expected)
    assert len(expected) > 150  # several pages
    st = app[fake.WDQS_STATE]
    assert len(st.queries) == len(expected) // 50 + 1
    # nothing truncated toward famous items: the high-sitelink ones are there and so are the zeros
    assert {g.sitelinks for g in got} >= {0, 150}
    by = {g.qid: g for g in got}
    e0 = next(e for e in ents if e.qid in by)
    assert by[e0.qid].lat == pytest.approx(e0.lat) and by[e0.qid].lon == pytest.approx(e0.lon)  # Point(lon lat) parsed
    assert by[e0.qid].dist_km == pytest.approx(_km(e0), abs=1e-3)


def test_site_candidates_types_subclasses_and_sitelink_ceiling():
    ents = _world()
    app = fake.make_app(ents, subclass_of={ART_MUSEUM: (MUSEUM,)}, class_labels={MUSEUM: "museum", PARK: "park"})
    got = asyncio.run(_run(app, lambda c: c.site_candidates(LAT0, LON0, 3.0, [MUSEUM, PARK], 60, page_size=40)))
    expected = {(e.qid, MUSEUM if e.instance_of[0] in (MUSEUM, ART_MUSEUM) else PARK) for e in ents
                if _km(e) <= 3.0 and e.sitelinks <= 60 and e.instance_of[0] != HUMAN}
    assert {(g.qid, g.type_qid) for g in got} == expected
    assert all(g.sitelinks <= 60 for g in got) and {g.type_label for g in got} == {"museum", "park"}
    assert any(e.instance_of[0] == ART_MUSEUM for e in ents if (e.qid, MUSEUM) in expected)  # subclass instance kept


def test_429_retry_after_is_honoured():
    app = fake.make_app(_world(50))
    st = app[fake.WDQS_STATE]
    st.throttle_next, st.retry_after_s = 1, 1
    t0 = time.monotonic()
    got = asyncio.run(_run(app, lambda c: c.entities_around(LAT0, LON0, 6.0)))
    assert got and st.throttled == 1
    assert time.monotonic() - t0 >= 0.95  # waited out Retry-After before the retry
    assert st.ignored_retry_after == 0


def test_persistent_429_raises_throttled_and_blocks_the_client():
    app = fake.make_app(_world(50))
    st = app[fake.WDQS_STATE]
    st.throttle_next, st.retry_after_s = 100, 30  # longer than backoff_max_s: give up at once

    async def go(c):
        with pytest.raises(WdqsThrottled) as ei:
            await c.entities_around(LAT0, LON0, 6.0)
        assert ei.value.retry_after_s == 30
        n = len(st.queries) + st.throttled
        # the next call must not reach the server before Retry-After has passed
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.entities_around(LAT0, LON0, 6.0), 0.3)
        return n

    n_before = asyncio.run(_run(app, go))
    assert st.throttled == 1 and n_before == 1 and st.ignored_retry_after == 0


@pytest.mark.parametrize("mode", ["500", "truncated"])
def test_timeouts_raise_wdqs_timeout(mode):
    app = fake.make_app(_world(50))
    st = app[fake.WDQS_STATE]
    st.timeout_next, st.timeout_mode = 100, mode
    with pytest.raises(WdqsTimeout):
        asyncio.run(_run(app, lambda c: c.entities_around(LAT0, LON0, 6.0)))
    # no deadline answer was repeated, though FAST allows 3 attempts: the same query would time out again
    # and every repeat costs a minute of the client's processing budget and one of its errors. (The circle's
    # timeout is followed by its spatial split, whose box queries time out here too: each is sent once.)
    assert 100 - st.timeout_next == len(st.queries) == len(set(st.queries)) >= 1


def test_other_server_errors_are_still_retried():
    """A 500 without the deadline marker (a restarting server) is retried as any 5xx: the query succeeds."""
    from geoagent.sandbox.faults import FaultConfig

    faults = FaultConfig(rate=1.0, kinds=("500",))
    app = fake.make_app(_world(50), faults=faults)

    async def go(c):
        async def heal():
            await asyncio.sleep(0.05)
            faults.rate = 0.0  # the server is back after the first answer

        healer = asyncio.create_task(heal())
        try:
            return await c.entities_around(LAT0, LON0, 6.0)
        finally:
            await healer

    got = asyncio.run(_run(app, go, policy=HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=5,
                                                        backoff_base_s=0.2, backoff_max_s=0.2, timeout_s=5)))
    assert got and app[fake.WDQS_STATE].queries  # answered after the retry


def test_one_query_at_a_time_per_client():
    app = fake.make_app(_world(100))
    st = app[fake.WDQS_STATE]
    st.latency_s = 0.05

    async def go(c):
        await asyncio.gather(*(c.entities_around(LAT0, LON0, r) for r in (1.0, 2.0, 3.0, 4.0, 5.0)))

    asyncio.run(_run(app, go))
    assert st.max_in_flight == 1 and st.throttled == 0 and len(st.queries) == 5


def test_query_time_budget_sliding_window():
    now = [0.0]
    b = QueryTimeBudget(budget_s=60.0, window_s=60.0, clock=lambda: now[0])
    b.record(0.0, 40.0)
    now[0] = 40.0
    assert b.delay_s() == 0.0
    b.record(40.0, 65.0)  # 65 s used within the window ending at 65
    now[0] = 65.0
    # the first query (ended at 40) must leave the window: at t = 100 usage drops to 25 s
    assert b.delay_s() == pytest.approx(35.0)
    now[0] = 100.0
    assert b.delay_s() == 0.0 and b.used_s() == pytest.approx(25.0)


def test_binding_parsing_is_defensive():
    assert parse_point("Point(13.38 52.51)") == (52.51, 13.38)
    assert parse_point("Point(200 10)") is None and parse_point(None) is None
    b = {"item": {"type": "uri", "value": "http://www.wikidata.org/entity/Q64"},
         "coord": {"type": "literal", "value": "Point(13.383333 52.516667)"},
         "dist": {"type": "literal", "value": "0.5"}, "links": {"type": "literal", "value": "250"}}
    e = entity_from_binding(b)
    assert (e.qid, e.label, e.sitelinks, e.dist_km) == ("Q64", "Q64", 250, 0.5)  # label falls back to the QID
    assert entity_from_binding({"item": {"type": "uri", "value": "http://example.org/x"}}) is None


def test_client_budget_keeps_under_the_server_budget():
    """The fake enforces a query-time budget per User-Agent (429 when exceeded); a client whose own budget
    is a little below the server's never trips it, a client without a budget does."""
    def run(client_budget_s):
        app = fake.make_app(_world(30))
        st = app[fake.WDQS_STATE]
        st.latency_s, st.budget_s, st.budget_window_s, st.retry_after_s = 0.05, 0.12, 0.5, 1

        async def go(c):
            for r in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
                await c.entities_around(LAT0, LON0, r)

        asyncio.run(_run(app, go, budget_s=client_budget_s, window_s=0.5))
        return st

    st = run(0.1)
    assert st.throttled == 0 and len(st.queries) == 6
    st = run(1e9)
    assert st.throttled >= 1 and len(st.queries) == 6  # throttled, waited Retry-After, completed


def test_a_429_naming_timeoutexception_is_still_a_throttle_retried_after_retry_after():
    """The no-retry rule is for the query deadline (a 5xx naming ``TimeoutException``, or a cut-off 2xx).
    A 429 is throttling whatever its text says (e.g. a throttle page explaining that the client's query TIME
    budget ran out and naming the exception): it is waited out (``Retry-After``) and sent again inside the
    request, like the plain 429 of ``test_429_retry_after_is_honoured``, not turned into ``WdqsThrottled``
    at once."""
    from aiohttp import web

    app = fake.make_app(_world(50))
    seen = {"n": 0}

    @web.middleware
    async def budget_429(request, handler):
        seen["n"] += 1
        if seen["n"] == 1:
            return web.Response(status=429, headers={"Retry-After": "1"}, content_type="text/plain",
                                text="Query time budget exceeded (java.util.concurrent.TimeoutException); retry in 1 s\n")
        return await handler(request)

    app.middlewares.insert(0, budget_429)
    t0 = time.monotonic()
    got = asyncio.run(_run(app, lambda c: c.entities_around(LAT0, LON0, 6.0)))
    assert {g.qid for g in got} == {e.qid for e in _world(50) if _km(e) <= 6.0}
    assert seen["n"] == 2 and time.monotonic() - t0 >= 0.95  # one retry, after the Retry-After


def test_a_deadline_trace_whose_query_holds_429_is_a_timeout_not_a_throttle():
    """Blazegraph's deadline answer echoes the query (``SPARQL-QUERY: queryStr=...``, api-notes), so its text
    can hold "429" anywhere, e.g. in a centre latitude of 41.429. It is a timeout (the area is split and
    answered), not a throttle: no ``WdqsThrottled`` and no 60 s block of the client for a 500."""
    from aiohttp import web

    lat0 = 41.429
    ents = [fake.FakeEntity(qid=f"Q{500 + i}", label=f"P{i}", lat=lat0 + 0.001 * i, lon=LON0, sitelinks=3,
                            instance_of=(PARK,)) for i in range(5)]
    app = fake.make_app(ents)
    seen = {"n": 0}

    @web.middleware
    async def deadline_once(request, handler):
        seen["n"] += 1
        if seen["n"] == 1:
            query = (await request.post())["query"]
            return web.Response(status=500, content_type="text/plain",
                                text="SPARQL-QUERY: queryStr=" + query + "\njava.util.concurrent.TimeoutException\n")
        return await handler(request)

    app.middlewares.insert(0, deadline_once)

    async def go(c):
        got = await c.entities_around(lat0, LON0, 2.0)
        return got, c.splits

    got, splits = asyncio.run(_run(app, go))
    assert {g.qid for g in got} == {e.qid for e in ents}
    assert splits == 1  # the whole circle's timeout was split once; its quadrants answered


def test_no_spatial_split_after_a_stop_request():
    """A query that hits the deadline after a stop request (Ctrl-C while it ran) is not followed by the
    spatial split's box queries: each could run up to the 60 s deadline, past the runner's grace period, and
    spend the client's processing budget for a task that is cut off anyway. The area query ends with
    ``RetriesStopped`` (an ``Abandoned``: the crawl stage's task is released untouched and redone next run)."""
    from aiohttp import web

    from geoagent.runtime.http import RetriesStopped
    from geoagent.runtime.stage import Abandoned

    app = fake.make_app(_world(50))
    st = app[fake.WDQS_STATE]
    st.timeout_next = 100  # every query hits the deadline
    holder: dict = {}

    @web.middleware
    async def stop_during_query(request, handler):
        if len(st.queries) == 0:
            holder["http"].stop_retries()  # the stop arrives while the first query runs
        return await handler(request)

    app.middlewares.insert(0, stop_during_query)
    splits: list = []

    async def main():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            holder["http"] = http
            c = WdqsClient(http, base + "/sparql", UA)
            with pytest.raises(RetriesStopped) as ei:
                await c.entities_around(LAT0, LON0, 6.0, on_split=splits.append)
            return ei.value, c.splits

    exc, n_splits = asyncio.run(main())
    assert isinstance(exc, Abandoned)
    assert len(st.queries) == 1 and n_splits == 0 and splits == []  # no box query was sent


def test_no_further_page_after_a_stop_request():
    """A stop request while the first page of a many-page area query runs: that page is answered, but no
    further page is asked for (each is a new query of up to 60 s, past the grace period), and the rows read
    so far are not returned as if they were the whole answer: ``RetriesStopped`` (an ``Abandoned``), so the
    crawl stage stores nothing and its task is released untouched."""
    from aiohttp import web

    from geoagent.runtime.http import RetriesStopped
    from geoagent.runtime.stage import Abandoned

    ents = _world()
    app = fake.make_app(ents)
    st = app[fake.WDQS_STATE]
    holder: dict = {}

    @web.middleware
    async def stop_during_first_page(request, handler):
        if len(st.queries) == 0:
            holder["http"].stop_retries()  # the stop arrives while the first page is being answered
        return await handler(request)

    app.middlewares.insert(0, stop_during_first_page)

    async def main():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            holder["http"] = http
            c = WdqsClient(http, base + "/sparql", UA)
            with pytest.raises(RetriesStopped) as ei:
                await c.entities_around(LAT0, LON0, 6.0, page_size=50)
            with pytest.raises(RetriesStopped):  # nor a first page of a new query
                await c.site_candidates(LAT0, LON0, 3.0, [MUSEUM], 60)
            return ei.value

    exc = asyncio.run(main())
    assert isinstance(exc, Abandoned)
    assert sum(1 for e in ents if _km(e) <= 6.0) > 100  # the whole answer needs at least 3 pages of 50
    assert len(st.queries) == 1  # only the page under way at the stop was answered
