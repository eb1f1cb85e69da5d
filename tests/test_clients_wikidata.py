"""Wikidata Action API client against the local fake (real wire format, error envelopes, maxlag)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from _geocode_env import FAST, GAZETTEER, UA

from geoagent.clients.cache import ResponseCache
from geoagent.clients.wikidata import WikidataClient, WikidataError, parse_entity
from geoagent.runtime.http import HttpClient, PermanentHTTPError
from geoagent.sandbox import wikidata as fake
from geoagent.sandbox.faults import FaultConfig, find_fault_state
from geoagent.sandbox.gazetteer import Gazetteer, GazetteerEntry
from geoagent.sandbox.server import free_port, serve


def _run(fn, *, gaz=None, faults=None, client_kw=None, http_kw=None, port=0):
    gaz = gaz or Gazetteer.from_jsonl(GAZETTEER)
    app = fake.make_app(gaz, faults=faults)

    async def go():
        async with serve(app, port=port) as base, HttpClient(**(http_kw or {"default_policy": FAST})) as http:
            kw = {"user_agent": UA, "base_url": base + "/w/api.php", "policy": FAST, **(client_kw or {})}
            client = WikidataClient(http, **kw)
            client.app = app  # for tests that inspect the fault middleware's log
            return await fn(client, app[fake.WIKIDATA_STATE])

    return asyncio.run(go())


def test_search_returns_real_shape_and_sends_maxlag_and_user_agent():
    async def fn(c, st):
        return await c.search_entities("Shibuya", limit=5), st

    hits, st = _run(fn)
    assert [h.qid for h in hits][:2] == ["Q99000001", "Q99000006"]  # exact label first, then prefix match
    assert hits[0].label == "Shibuya" and hits[0].match_type == "label" and hits[0].description == "area of Tokyo"
    req = st.requests[0]
    assert req["params"]["maxlag"] == "5" and req["params"]["format"] == "json"
    assert req["params"]["action"] == "wbsearchentities" and req["params"]["limit"] == "5"
    assert req["user_agent"] == UA


def test_search_matches_aliases_and_diacritics():
    async def fn(c, st):
        return await c.search_entities("south of houston"), await c.search_entities("明治通り"), await c.search_entities("Meiji Dori")

    alias, ja, folded = _run(fn)
    assert alias[0].qid == "Q99000021" and alias[0].match_type == "alias" and alias[0].match_text == "South of Houston"
    assert alias[0].label == "SoHo"
    assert ja[0].qid == "Q99000003" and ja[0].match_text == "明治通り"
    assert folded[0].qid == "Q99000003" and folded[0].match_text == "Meiji-dōri"  # case/diacritics/hyphen folded


def test_get_entities_batches_at_most_50_ids_and_parses_coordinates():
    entries = [
        GazetteerEntry(qid=f"Q{5000 + i}", labels={"en": f"Place {i}"}, lat=10 + i / 1000, lon=20 - i / 1000, kind="building", city="X")
        for i in range(120)
    ]
    gaz = Gazetteer(entries)

    async def fn(c, st):
        ids = [e.qid for e in entries] + ["Q5000", "Q999999999"]  # a duplicate and a missing id
        return await c.get_entities(ids), st

    ents, st = _run(fn, gaz=gaz)
    sizes = [len(r["params"]["ids"].split("|")) for r in st.requests if r["action"] == "wbgetentities"]
    assert sizes == [50, 50, 21]  # 121 unique ids, ceil(121 / 50) = 3 requests
    assert len(ents) == 121 and ents["Q999999999"].missing and not ents["Q999999999"].has_coordinates
    for i, e in enumerate(entries):
        got = ents[e.qid]
        assert (got.lat, got.lon) == (e.lat, e.lon) and got.label() == f"Place {i}" and got.classes == ("Q41176",)


def test_maxlag_error_waits_retry_after_and_retries():
    async def fn(c, st):
        st.lag_s, st.lagged_requests, st.retry_after_s = 7.5, 2, 1
        t0 = time.monotonic()
        hits = await c.search_entities("Harajuku")
        return hits, time.monotonic() - t0, list(c.maxlag_waits_s), st, c.http.pauses(c.host)

    hits, elapsed, waits, st, pauses = _run(fn)
    assert hits[0].qid == "Q99000002"
    assert [r["outcome"] for r in st.requests] == ["maxlag", "maxlag", "ok"]
    assert waits == [1.0, 1.0]  # Retry-After honoured as sent
    assert elapsed >= 2.0  # two waits of 1 s each really happened
    assert len(pauses) == 2  # the host was paused for every caller of the shared HttpClient


def test_maxlag_without_retry_after_waits_the_lag_and_gives_up_after_max_retries():
    async def fn(c, st):
        st.lag_s, st.lagged_requests, st.retry_after_s = 0.3, -1, None  # lagged forever, no Retry-After
        with pytest.raises(WikidataError) as ei:
            await c.search_entities("Harajuku")
        return ei.value, list(c.maxlag_waits_s), st

    # maxlag=0 so that a 0.3 s lag already refuses (keeps the test fast); floor 0.05 s < lag
    err, waits, st = _run(fn, client_kw={"maxlag_s": 0, "maxlag_max_retries": 2, "maxlag_min_wait_s": 0.05})
    assert err.code == "maxlag" and "0.3 seconds lagged" in err.info
    assert st.count(outcome="maxlag") == 3  # first try + 2 retries, then it gives up
    assert waits == [0.3, 0.3]  # the reported lag, since no Retry-After came


def test_maxlag_wait_uses_reported_lag_when_no_retry_after():
    c = WikidataClient.__new__(WikidataClient)
    c.maxlag_min_wait_s, c.host = 5.0, "www.wikidata.org"
    assert c._wait_after("maxlag", {"lag": 12.0}, {}, 1) == 12.0
    assert c._wait_after("maxlag", {"lag": 1.0}, {}, 1) == 5.0  # never below the 5 s floor (Manual:Maxlag)
    assert c._wait_after("maxlag", {"lag": 12.0}, {"retry-after": "3"}, 1) == 3.0
    assert [c._wait_after("ratelimited", {}, {}, k) for k in (1, 2, 3)] == [5.0, 10.0, 20.0]


def test_ratelimited_error_backs_off_and_retries():
    async def fn(c, st):
        st.ratelimited_requests = 1
        return await c.search_entities("Harajuku"), st, list(c.maxlag_waits_s)

    hits, st, waits = _run(fn, client_kw={"maxlag_min_wait_s": 0.05})
    assert hits[0].qid == "Q99000002" and [r["outcome"] for r in st.requests] == ["ratelimited", "ok"] and waits == [0.05]


def test_other_error_envelopes_raise_with_code():
    async def fn(c, st):
        with pytest.raises(WikidataError) as ei:
            await c.get_entities(["not-an-id"])
        return ei.value

    err = _run(fn)
    assert err.code == "no-such-entity" and "not-an-id" in err.info.lower()


def test_429_with_retry_after_from_the_edge_is_retried_by_the_http_layer():
    cfg = FaultConfig(rate=1.0, kinds=("429",), retry_after_s=0.2, seed=3)

    async def fn(c, st):
        async def flip_off():
            await asyncio.sleep(0.1)
            cfg.rate = 0.0

        task = asyncio.create_task(flip_off())
        hits = await c.search_entities("Harajuku")
        await task
        return hits, [(r.fault, r.status) for r in find_fault_state(c.app).log]

    hits, log = _run(fn, faults=cfg)
    assert hits[0].qid == "Q99000002"
    assert log[0] == ("429", 429) and log[-1] == (None, 200)


def test_malformed_json_body_is_retried():
    cfg = FaultConfig(rate=0.4, kinds=("malformed",), seed=7)

    async def fn(c, st):
        got = [await c.search_entities(n) for n in ("Harajuku", "Shibuya", "Shinjuku", "Paris")]
        return got, find_fault_state(c.app).injected.get("malformed", 0)

    patient = dataclasses.replace(FAST, max_attempts=12)  # a run of bad bodies must not exhaust retries
    results, injected = _run(fn, faults=cfg, client_kw={"policy": patient})
    assert [r[0].qid for r in results] == ["Q99000002", "Q99000001", "Q99000007", "Q90"]
    assert injected >= 1  # at least one truncated body was really sent and retried


def test_stock_user_agent_is_refused_with_403():
    async def fn(c, st):
        with pytest.raises(PermanentHTTPError) as ei:
            await c.search_entities("Harajuku")
        return ei.value

    err = _run(fn, client_kw={"user_agent": "Python/3.12 aiohttp/3.9"})
    assert err.status == 403 and "user-agent" in err.body_excerpt.lower()


def test_cache_answers_repeat_requests_and_survives_reopen(tmp_path):
    path = tmp_path / "wd.sqlite"
    port = free_port()  # same URL in both runs, as for the real API

    async def first(c, st):
        a = await c.search_entities("Harajuku")
        b = await c.search_entities("Harajuku")
        e = await c.get_entities(["Q99000002"])
        return a, b, e, len(st.requests)

    a, b, e, n = _run(first, client_kw={"cache": ResponseCache(path)}, port=port)
    assert a == b and n == 2  # one search + one wbgetentities; the repeat came from the cache

    async def second(c, st):
        return await c.search_entities("Harajuku"), await c.get_entities(["Q99000002"]), len(st.requests)

    a2, e2, n2 = _run(second, client_kw={"cache": ResponseCache(path)}, port=port)
    assert a2 == a and e2 == e and n2 == 0  # a new process: answered from disk


def test_maxlag_error_is_never_cached(tmp_path):
    cache = ResponseCache(tmp_path / "wd.sqlite")

    async def fn(c, st):
        st.lag_s, st.lagged_requests, st.retry_after_s = 9, 1, 0
        await c.search_entities("Harajuku")
        return [r["outcome"] for r in st.requests]

    outcomes = _run(fn, client_kw={"cache": cache})
    assert outcomes == ["maxlag", "ok"]
    bodies = [bytes(b) for (b,) in cache._db.execute("SELECT body FROM responses")]
    assert len(bodies) == 1 and b'"error"' not in bodies[0] and b"Q99000002" in bodies[0]


def test_parse_entity_prefers_preferred_rank_and_skips_deprecated_and_novalue():
    def st(lat, rank, snaktype="value"):
        snak = {"snaktype": snaktype, "property": "P625", "datatype": "globe-coordinate"}
        if snaktype == "value":
            snak["datavalue"] = {"type": "globecoordinate", "value": {"latitude": lat, "longitude": 1.0, "globe": "http://www.wikidata.org/entity/Q2"}}
        return {"mainsnak": snak, "type": "statement", "rank": rank}

    obj = {"id": "Q1", "claims": {"P625": [st(None, "normal", "novalue"), st(5.0, "deprecated"), st(6.0, "normal"), st(7.0, "preferred")]}}
    assert parse_entity("Q1", obj).lat == 7.0
    obj["claims"]["P625"] = [st(None, "normal", "somevalue"), st(5.0, "deprecated")]
    assert parse_entity("Q1", obj).lat is None
    assert parse_entity("Q2", {"id": "Q2", "missing": ""}).missing


def test_response_cache_keys_ignore_maxlag_and_param_order_and_honour_ttl(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite", ttl_s=0.2)
    cache.put("GET", "http://h/api", {"b": 2, "a": "x", "maxlag": 5}, 200, b'{"ok": 1}')
    assert cache.get("get", "http://h/api", {"a": "x", "b": "2", "maxlag": 9}).json() == {"ok": 1}
    assert cache.get("GET", "http://h/api", {"a": "x"}) is None  # a different request
    time.sleep(0.3)
    assert cache.get("GET", "http://h/api", {"a": "x", "b": 2}) is None  # expired
    with pytest.raises(ValueError, match="ttl_s"):
        ResponseCache(":memory:", ttl_s=0)
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(Exception, match="not-a-db.sqlite"):
        ResponseCache(bad)


def test_fake_serves_from_a_child_process_given_a_fixture_path():
    """``spawn`` passes plain arguments: the factory accepts a gazetteer path (JSONL or release folder)."""
    from geoagent.sandbox.server import spawn, wait_ready

    proc, base = spawn("geoagent.sandbox.wikidata:make_app", gazetteer=str(GAZETTEER))
    try:
        wait_ready(base)

        async def go():
            async with HttpClient(default_policy=FAST) as http:
                c = WikidataClient(http, user_agent=UA, base_url=base + "/w/api.php", policy=FAST)
                return await c.coordinates(["Q90", "Q99000001"])

        coords = asyncio.run(go())
    finally:
        proc.terminate()
        proc.join(10)
    assert coords == {"Q90": (48.856667, 2.352222), "Q99000001": (35.6595, 139.7005)}


def test_redirected_and_missing_ids_come_back_under_the_id_asked_for():
    """A merged item answers with its target's data keyed by the requested id (``id`` names the target,
    ``redirects`` says from/to); an unknown id is ``missing``; a label-less item falls back to its QID."""

    async def fn(client, state):
        state.redirects["Q77777777"] = "Q90"
        return await client.get_entities(["Q77777777", "Q90", "Q88888888"])

    ents = _run(fn)
    assert set(ents) == {"Q77777777", "Q90", "Q88888888"}
    moved, paris = ents["Q77777777"], ents["Q90"]
    assert moved.qid == "Q90" and not moved.missing and (moved.lat, moved.lon) == (paris.lat, paris.lon) != (None, None)
    assert ents["Q88888888"].missing and not ents["Q88888888"].has_coordinates
    assert parse_entity("Q5", {"id": "Q5", "type": "item"}).label() == "Q5"
