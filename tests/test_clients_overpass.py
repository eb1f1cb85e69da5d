"""Overpass client against the local fake speaking the real wire format (api-notes.md section 1)."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from geoagent.clients.overpass import (
    OverpassClient,
    OverpassError,
    OverpassQueryError,
    OverpassRuntimeError,
    parse_error_page,
    parse_status,
)
from geoagent.crawl.screener import place_query
from geoagent.crawl.settings import ScreenerSettings
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox import overpass as fake
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=6, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)
LAT0, LON0 = 48.86, 2.34


def _elements(n=120, seed=3):
    rng = random.Random(seed)
    els = []
    for i in range(n):
        lat, lon = LAT0 + rng.uniform(-0.08, 0.08), LON0 + rng.uniform(-0.12, 0.12)
        place = rng.choice(["neighbourhood", "suburb", "quarter", "city", "locality"])
        els.append({"type": "node", "id": 1000 + i, "lat": lat, "lon": lon, "tags": {"place": place, "name": f"P{i}"}})
    els.append({"type": "node", "id": 5, "lat": LAT0, "lon": LON0})  # untagged node
    return els


def _within(el, r_m=6000):
    p1, p2 = math.radians(LAT0), math.radians(el["lat"])
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(el["lon"] - LON0) / 2) ** 2
    return 2 * 6371008.8 * math.asin(math.sqrt(a)) <= r_m


async def _with_client(app, fn, **kw):
    async with serve(app) as base, HttpClient(default_policy=FAST) as http:
        client = OverpassClient(http, base + "/api", UA, **kw)
        return await fn(client)


def test_place_nodes_within_radius():
    els = _elements()
    expected = sorted(e["id"] for e in els if (e.get("tags") or {}).get("place") in {"neighbourhood", "suburb", "quarter"} and _within(e))
    app = fake.make_app(els)
    data = asyncio.run(_with_client(app, lambda c: c.interpreter(place_query(LAT0, LON0, ScreenerSettings()))))
    assert sorted(e["id"] for e in data["elements"]) == expected
    assert 10 < len(expected) < len(els)
    st = app[fake.OVERPASS_STATE]
    assert st.user_agents == [UA] and st.status_calls == 1  # slots checked before the query


def test_swapped_coordinates_find_nothing():
    """around takes lat then lon; a query built with (lon, lat) lands elsewhere and finds nothing."""
    app = fake.make_app(_elements())
    data = asyncio.run(_with_client(app, lambda c: c.interpreter(place_query(LON0, LAT0, ScreenerSettings()))))
    assert data["elements"] == []


@pytest.mark.parametrize("mode", ["timeout", "oom"])
def test_runtime_error_remark_is_a_failure(mode):
    app = fake.make_app(_elements())
    app[fake.OVERPASS_STATE].remark_mode = mode
    with pytest.raises(OverpassRuntimeError) as ei:
        asyncio.run(_with_client(app, lambda c: c.interpreter(place_query(LAT0, LON0, ScreenerSettings()))))
    assert "runtime error" in ei.value.remark
    assert ei.value.n_elements > 0  # partial elements were present and still not accepted


def test_a_runtime_error_remark_counts_among_the_hosts_errors():
    """break34 crawl #4: the 200 with a runtime-error remark was a success to the HTTP layer, so the crawl's
    summary said 'error rate 0.0%' for answers it had to ask again."""
    app = fake.make_app(_elements())
    app[fake.OVERPASS_STATE].remark_mode = "timeout"

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            client = OverpassClient(http, base + "/api", UA)
            with pytest.raises(OverpassRuntimeError):
                await client.interpreter(place_query(LAT0, LON0, ScreenerSettings()))
            return http.stats()

    [(host, st)] = [(h, s) for h, s in asyncio.run(go()).items() if s.requests]
    assert st.errors == {"runtime error remark": 1}


def test_informational_remark_passes():
    from geoagent.clients.overpass import check_remark

    check_remark({"elements": [], "remark": "runtime remark: Timeout is 25 and maxsize is 536870912."})
    with pytest.raises(OverpassRuntimeError):
        check_remark({"elements": [], "remark": 'runtime error: Query timed out in "query" at line 2 after 25 seconds.'})


def test_syntax_error_page_is_permanent_with_messages():
    app = fake.make_app(_elements())
    with pytest.raises(OverpassQueryError) as ei:
        asyncio.run(_with_client(app, lambda c: c.interpreter("[out:json][timeout:25];\nrel[foo](1,2,3,4);\nout;")))
    # the page's own message (it follows ~300 characters of page head: read from the error's kept body)
    assert ei.value.messages and "line 2: parse error" in str(ei.value)
    assert app[fake.OVERPASS_STATE].queries  # sent once, not retried
    page = ('<html><body><p>The data included in this document is from www.openstreetmap.org.</p>\n'
            '<p><strong style="color:#FF0000">Error</strong>: line 2: parse error: Unknown type &quot;rel&quot;</p>\n'
            '<p><strong style="color:#FF0000">Error</strong>: line 2: parse error: An empty query is not allowed</p></body></html>')
    assert parse_error_page(page) == ['line 2: parse error: Unknown type "rel"', "line 2: parse error: An empty query is not allowed"]


def test_status_parsing_and_waiting_for_a_slot():
    text = ("Connected as: 1\nCurrent time: 2025-01-01T12:00:00Z\nRate limit: 2\n"
            "Slot available after: 2025-01-01T12:16:08Z, in 968 seconds.\n"
            "Slot available after: 2025-01-01T12:00:08Z, in 8 seconds.\nCurrently running queries (pid, space limit, time limit, start time):\n")
    st = parse_status(text)
    assert (st.rate_limit, st.slots_available, st.next_free_s) == (2, 0, 8.0)
    assert parse_status("Rate limit: 2\n2 slots available now.\n").slots_available == 2

    app = fake.make_app(_elements())
    app[fake.OVERPASS_STATE].slots_available = 0
    app[fake.OVERPASS_STATE].slot_wait_s = 1

    async def go(c):
        async def free_later():
            await asyncio.sleep(0.3)
            app[fake.OVERPASS_STATE].slots_available = 1
        t = asyncio.create_task(free_later())
        data = await c.interpreter(place_query(LAT0, LON0, ScreenerSettings()))
        await t
        return data

    data = asyncio.run(_with_client(app, go))
    assert data["elements"] and app[fake.OVERPASS_STATE].status_calls >= 2
    # no slot and no patience: fail before sending the query at all
    app2 = fake.make_app(_elements())
    app2[fake.OVERPASS_STATE].slots_available = 0
    with pytest.raises(OverpassError, match="no free Overpass slot"):
        asyncio.run(_with_client(app2, lambda c: c.interpreter(place_query(LAT0, LON0, ScreenerSettings())), max_slot_wait_s=0.0))
    assert app2[fake.OVERPASS_STATE].queries == []


def test_rate_limited_429_page_without_status_check():
    app = fake.make_app(_elements())
    app[fake.OVERPASS_STATE].slots_available = 0
    from geoagent.runtime.http import RetriesExhausted

    with pytest.raises(RetriesExhausted, match="429"):
        asyncio.run(_with_client(app, lambda c: c.interpreter(place_query(LAT0, LON0, ScreenerSettings())), check_slots=False))


def test_generic_user_agent_is_refused():
    app = fake.make_app(_elements())

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            return await OverpassClient(http, base + "/api", "python-requests/2.31", check_slots=False).interpreter(
                place_query(LAT0, LON0, ScreenerSettings()))

    with pytest.raises(PermanentHTTPError) as ei:
        asyncio.run(go())
    assert ei.value.status == 403


def test_survives_injected_faults():
    els = _elements()
    app = fake.make_app(els, faults=FaultConfig(rate=0.4, kinds=("429", "500", "503"), seed=2, retry_after_s=0.02))
    data = asyncio.run(_with_client(app, lambda c: c.interpreter(place_query(LAT0, LON0, ScreenerSettings())), check_slots=False))
    assert len(data["elements"]) == sum(1 for e in els if (e.get("tags") or {}).get("place") in {"neighbourhood", "suburb", "quarter"} and _within(e))


def test_two_slots_per_ip_are_respected():
    """The fake allows 2 queries in flight (Overpass's per-IP slots); the client's host policy (2 in flight,
    the default usage policy) never exceeds it, while a policy of 6 in flight does."""
    from geoagent.crawl.settings import DEFAULT_POLICIES

    assert DEFAULT_POLICIES["overpass"]["concurrency"] == 2

    def run(concurrency):
        app = fake.make_app(_elements())
        st = app[fake.OVERPASS_STATE]
        st.latency_s = 0.15
        pol = HostPolicy(rate=1000, period_s=1.0, concurrency=concurrency, max_attempts=1, timeout_s=5)

        async def go():
            async with serve(app) as base, HttpClient(default_policy=FAST) as http:
                c = OverpassClient(http, base + "/api", UA, policy=pol, check_slots=False)
                return await asyncio.gather(*(c.interpreter(place_query(LAT0, LON0, ScreenerSettings())) for _ in range(6)),
                                            return_exceptions=True)

        return asyncio.run(go()), st

    res, st = run(2)
    assert all(isinstance(r, dict) for r in res) and st.max_in_flight == 2 and st.rejected_busy == 0
    res, st = run(6)
    assert st.rejected_busy > 0 and any(isinstance(r, Exception) for r in res)


def test_failover_to_a_mirror_when_the_first_instance_is_overloaded():
    els = _elements()
    busy = fake.make_app(els, faults=FaultConfig(rate=1.0, kinds=("503",), seed=0, retry_after_s=0.0))
    good = fake.make_app(els)

    async def go():
        async with serve(busy) as b1, serve(good) as b2, HttpClient(default_policy=FAST) as http:
            c = OverpassClient(http, b1 + "/api", UA, mirrors=[b2 + "/api"], check_slots=False)
            return await c.interpreter(place_query(LAT0, LON0, ScreenerSettings())), c

    data, c = asyncio.run(go())
    assert data["elements"] and c.failovers == 1
    assert good[fake.OVERPASS_STATE].queries and not busy[fake.OVERPASS_STATE].queries


def test_instance_without_a_quota_is_queried_at_once():
    """A status page with ``Rate limit: 0`` and no slot lines (an instance without a per-IP quota) was read
    as "0 slots free, no wait announced": the client re-polled /status every second for max_slot_wait_s
    and then failed every query without sending it."""
    st = parse_status("Connected as: 1\nCurrent time: 2025-01-01T12:00:00Z\nRate limit: 0\n"
                      "Currently running queries (pid, space limit, time limit, start time):\n")
    assert st.unlimited and st.rate_limit == 0 and st.next_free_s == 0.0
    assert not parse_status("Rate limit: 2\nSlot available after: 2025-01-01T12:00:08Z, in 8 seconds.\n").unlimited
    app = fake.make_app(_elements())
    app[fake.OVERPASS_STATE].rate_limit = 0

    data = asyncio.run(_with_client(app, lambda c: c.interpreter(place_query(LAT0, LON0, ScreenerSettings())),
                                    max_slot_wait_s=3.0))
    want = sorted(e["id"] for e in _elements() if e.get("tags", {}).get("place") in ("neighbourhood", "suburb", "quarter") and _within(e))
    assert sorted(e["id"] for e in data["elements"]) == want
    assert app[fake.OVERPASS_STATE].status_calls == 1 and len(app[fake.OVERPASS_STATE].queries) == 1


def test_slot_announced_beyond_the_wait_limit_fails_without_holding_the_worker():
    """'Slot available after ..., in 968 seconds' with 2 s of patience: the client slept out its 2 s, asked
    again and only then gave up; it now gives up on the first reading (the task is retried later)."""
    app = fake.make_app(_elements())
    app[fake.OVERPASS_STATE].slots_available = 0
    app[fake.OVERPASS_STATE].slot_wait_s = 968
    with pytest.raises(OverpassError, match="frees in 968 s"):
        asyncio.run(_with_client(app, lambda c: c.interpreter(place_query(LAT0, LON0, ScreenerSettings())), max_slot_wait_s=2.0))
    assert app[fake.OVERPASS_STATE].status_calls == 1 and app[fake.OVERPASS_STATE].queries == []
