"""Nominatim client against the local fake: jsonv2 shapes, 1 request/s measured server-side, 403/429,
identifying User-Agent, cache, no bulk."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from _geocode_env import CONTACT, FAST, GAZETTEER

from geoagent.clients.cache import ResponseCache
from geoagent.clients.nominatim import (
    DEFAULT_NOMINATIM_POLICY,
    NominatimBudgetExceeded,
    NominatimClient,
    parse_place,
    user_agent_for,
)
from geoagent.runtime.http import HttpClient, PermanentHTTPError
from geoagent.sandbox import nominatim as fake
from geoagent.sandbox.faults import FaultConfig, find_fault_state
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import free_port, serve


def _run(fn, *, faults=None, min_interval_s=0.0, client_kw=None, port=0, state=None):
    gaz = Gazetteer.from_jsonl(GAZETTEER)
    app = fake.make_app(gaz, faults=faults, min_interval_s=min_interval_s, state=state)

    async def go():
        async with serve(app, port=port) as base, HttpClient(default_policy=FAST) as http:
            kw = {"contact": CONTACT, "base_url": base, "policy": FAST, **(client_kw or {})}
            client = NominatimClient(http, **kw)
            client.app = app
            return await fn(client, app[fake.NOMINATIM_STATE])

    return asyncio.run(go())


def test_search_parses_jsonv2_strings_and_sends_policy_fields():
    async def fn(c, st):
        return await c.search("Harajuku, Tokyo", addressdetails=True), st

    places, st = _run(fn)
    assert len(places) == 1
    p = places[0]
    assert (p.lat, p.lon) == (35.6717, 139.7032)  # sent as strings "35.6717000", parsed to float
    assert p.category == "place" and p.addresstype == "neighbourhood" and p.name == "Harajuku"
    assert p.wikidata == "Q99000002" and p.address["city"] == "Tokyo" and not p.is_linear
    b = p.boundingbox
    assert b[0] < p.lat < b[1] and b[2] < p.lon < b[3]  # [min_lat, max_lat, min_lon, max_lon]
    req = st.requests[0]
    assert req["params"]["format"] == "jsonv2" and req["params"]["extratags"] == "1"
    assert req["user_agent"] == f"geoagent/0.1 (+{CONTACT})"


def test_raw_wire_format_has_string_coordinates():
    """Fetch the fake directly and check the field types the client has to cope with."""

    async def go():
        import aiohttp

        app = fake.make_app(Gazetteer.from_jsonl(GAZETTEER), min_interval_s=0.0)
        async with serve(app) as base, aiohttp.ClientSession(headers={"User-Agent": f"t (+{CONTACT})"}) as s:
            async with s.get(base + "/search", params={"q": "Meiji-dori", "format": "jsonv2"}) as r:
                return r.status, await r.json()

    status, body = asyncio.run(go())
    assert status == 200 and isinstance(body, list) and len(body) == 1
    item = body[0]
    assert isinstance(item["lat"], str) and isinstance(item["lon"], str) and all(isinstance(v, str) for v in item["boundingbox"])
    assert item["category"] == "highway" and item["addresstype"] == "road" and isinstance(item["place_id"], int)
    assert parse_place(item).is_linear


def test_no_match_is_an_empty_array():
    async def fn(c, st):
        return await c.search("Nowhere-in-particular")

    assert _run(fn) == []


def test_viewbox_bounded_keeps_only_places_inside():
    async def fn(c, st):
        box = (139.60, 35.75, 139.80, 35.60)  # around Tokyo: x1,y1,x2,y2
        inside = await c.search("Shibuya", viewbox=box, bounded=True)
        outside = await c.search("Soho", viewbox=box, bounded=True)
        unbounded = await c.search("Soho")
        return inside, outside, unbounded

    inside, outside, unbounded = _run(fn)
    assert [p.wikidata for p in inside] == ["Q99000001"] and outside == []
    assert {p.wikidata for p in unbounded} == {"Q99000011", "Q99000021"}


@pytest.mark.wallclock  # asserts arrival times: run in the uncrowded phase (docs/development.md)
def test_one_request_per_second_measured_server_side():
    """Concurrent callers through the default policy: every arrival gap >= 1 s, and the fake (which
    answers 429 to gaps under 0.95 s) never had to refuse one."""

    async def fn(c, st):
        names = ["Shibuya", "Harajuku", "Shinjuku", "Soho"]
        await asyncio.gather(*(c.search(n) for n in names))
        return st

    st = _run(fn, min_interval_s=1.0, client_kw={"policy": DEFAULT_NOMINATIM_POLICY})
    gaps = st.arrival_gaps_s()
    assert len(st.requests) == 4 and st.count(429) == 0
    assert len(gaps) == 3 and min(gaps) >= 1.0 - 0.05, gaps


def test_too_fast_client_gets_429_from_the_fake():
    """The fake enforces the policy: without the 1 req/s host policy, back-to-back requests are refused."""

    async def fn(c, st):
        try:
            await asyncio.gather(*(c.search(n) for n in ["Shibuya", "Harajuku", "Shinjuku"]))
        except Exception:  # noqa: BLE001 - retries may run out; the server-side log is what we check
            pass
        return st

    fast_no_retry = dataclasses.replace(FAST, max_attempts=1)
    st = _run(fn, min_interval_s=1.0, client_kw={"policy": fast_no_retry})
    assert st.count(429) >= 1


def test_429_with_retry_after_is_retried():
    cfg = FaultConfig(rate=1.0, kinds=("429",), retry_after_s=0.2)

    async def fn(c, st):
        async def flip_off():
            await asyncio.sleep(0.05)
            cfg.rate = 0.0

        task = asyncio.create_task(flip_off())
        got = await c.search("Harajuku")
        await task
        return got, [(r.fault, r.status) for r in find_fault_state(c.app).log]

    got, log = _run(fn, faults=cfg)
    assert got[0].wikidata == "Q99000002" and log[0] == ("429", 429) and log[-1] == (None, 200)


def test_missing_or_stock_user_agent_gets_403():
    async def go():
        app = fake.make_app(Gazetteer.from_jsonl(GAZETTEER), min_interval_s=0.0)
        async with serve(app) as base, HttpClient(default_policy=FAST, user_agent="Python/3.12 aiohttp/3.9") as http:
            with pytest.raises(PermanentHTTPError) as ei:
                await http.request("GET", base + "/search", params={"q": "Shibuya", "format": "jsonv2"})
            return ei.value

    err = asyncio.run(go())
    assert err.status == 403 and "User-Agent" in err.body_excerpt


def test_contact_is_required_for_the_user_agent():
    with pytest.raises(ValueError, match="contact"):
        user_agent_for("")
    with pytest.raises(ValueError, match="contact"):
        user_agent_for("geoagent")
    assert user_agent_for("https://example.org/bot") == "geoagent/0.1 (+https://example.org/bot)"


def test_cache_avoids_repeat_requests_across_processes(tmp_path):
    path, port = tmp_path / "nm.sqlite", free_port()

    async def fn(c, st):
        a = await c.search("Shibuya")
        b = await c.search("Shibuya")
        return a, b, len(st.requests), c.requests_sent

    a, b, n, sent = _run(fn, client_kw={"cache": ResponseCache(path)}, port=port)
    assert a == b and n == 1 and sent == 1
    a2, _, n2, sent2 = _run(fn, client_kw={"cache": ResponseCache(path)}, port=port)
    assert a2 == a and n2 == 0 and sent2 == 0


def test_request_cap_forbids_bulk_use():
    async def fn(c, st):
        await c.search("Shibuya")
        await c.search("Shibuya")  # cached: free
        await c.search("Harajuku")
        with pytest.raises(NominatimBudgetExceeded):
            await c.search("Shinjuku")
        return len(st.requests)

    n = _run(fn, client_kw={"max_requests": 2, "cache": ResponseCache(":memory:")})
    assert n == 2
