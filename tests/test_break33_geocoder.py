"""Break helper, session 33: the GeoHint geocoder's inputs.

#2 A building answer of 32,000 unclosed brackets (a looping answer cut off inside its string) kept the bracket
   pattern busy for about a minute, on the event loop's thread: every pattern over a name now reads at most
   :data:`geoagent.geohint.placenames.MAX_NAME_CHARS` characters.
#3 A Wikidata 200 answer without its action's field (``{}``, ``{"search": null}``, a plaintext-format ``{"errors":
   [...]}``) was read as "no match", so the answer became a scored miss, and the response cache kept the body for
   every later run. Now it is a failed attempt (retried, then the task fails: missing, never a miss), never cached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import orjson
import pytest
from _geocode_env import FAST, GAZETTEER, UA
from aiohttp import web

from geoagent.clients.cache import ResponseCache
from geoagent.clients.wikidata import WikidataClient
from geoagent.geohint.placenames import MAX_NAME_CHARS, is_linear_name, name_variants, primary_name
from geoagent.runtime.http import HttpClient, RetriesExhausted
from geoagent.sandbox import wikidata as fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import free_port, serve


def test_name_patterns_read_a_bounded_prefix():
    t0 = time.perf_counter()
    assert len(primary_name("( " * 32000)) <= MAX_NAME_CHARS
    assert not is_linear_name("( " * 32000 + "Street")
    assert name_variants("Shibuya 109 (near Hachiko Square " * 4000)
    assert time.perf_counter() - t0 < 2.0  # was about a minute for the first alone
    assert primary_name("Shibuya 109 (Dogenzaka)") == "Shibuya 109" and MAX_NAME_CHARS == 300


@pytest.mark.parametrize("body", [{}, {"search": None}, {"errors": [{"code": "x", "text": "y"}]}, {"error": "text"},
                                  {"success": 1}])
def test_a_search_answer_without_its_field_is_retried_then_fails_and_is_never_cached(tmp_path, body):
    """A local server answering wbsearchentities with 200 and ``body``: the client raises (the geocoder's task fails,
    missing), after retrying, and caches nothing."""
    seen: list[str] = []

    async def api(request: web.Request) -> web.Response:
        seen.append(request.query.get("action", ""))
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/w/api.php", api)
    cache = ResponseCache(tmp_path / "wd.sqlite")

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            client = WikidataClient(http, user_agent=UA, base_url=base + "/w/api.php", policy=dataclasses.replace(
                FAST, max_attempts=2), cache=cache)
            with pytest.raises(RetriesExhausted, match="no 'search' list|invalid body"):
                await client.search_entities("Harajuku")

    asyncio.run(go())
    assert seen == ["wbsearchentities", "wbsearchentities"]
    assert cache._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 0


def test_a_malformed_body_an_earlier_version_cached_is_asked_again(tmp_path):
    cache = ResponseCache(tmp_path / "wd.sqlite")
    port = free_port()
    url = f"http://127.0.0.1:{port}/w/api.php"
    params = {"action": "wbsearchentities", "search": "Harajuku", "language": "en", "uselang": "en", "type": "item",
              "limit": 10, "format": "json", "maxlag": 5}
    cache.put("GET", url, params, 200, b"{}")  # what the client cached before (no "search" list)
    app = fake.make_app(Gazetteer.from_jsonl(GAZETTEER))

    async def go():
        async with serve(app, port=port) as base, HttpClient(default_policy=FAST) as http:
            client = WikidataClient(http, user_agent=UA, base_url=base + "/w/api.php", policy=FAST, cache=cache)
            return await client.search_entities("Harajuku"), len(app[fake.WIKIDATA_STATE].requests)

    hits, sent = asyncio.run(go())
    assert hits and hits[0].qid == "Q99000002" and sent == 1
    assert b"Q99000002" in bytes(cache.get("GET", url, params).body)


def test_a_null_building_gives_way_to_the_place_field():
    """#5: ``{"building": "N/A", "place": "Hachiko"}`` kept "N/A", which the geocoder drops: the place was lost."""
    from geoagent.geohint.parse import ANSWER_PARSER_VERSION, parse_answer

    assert ANSWER_PARSER_VERSION >= 3  # 3 brought this rule; later versions keep it
    assert parse_answer('{"city": "Tokyo", "building": "N/A", "place": "Hachiko"}').building == "Hachiko"
    assert parse_answer('{"city": "Tokyo", "building": "Shibuya 109", "place": "Hachiko"}').building == "Shibuya 109"
    assert parse_answer('{"city": "Tokyo", "building": "unknown"}').building == "unknown"  # the geocoder's null answer


def test_between_two_names_reads_the_first():
    """#4: "between Shibuya and Harajuku" was read as Harajuku ("between Shibuya" found nothing): now as Shibuya, the
    first name, as "Shibuya / Harajuku" is."""
    assert primary_name("between Shibuya and Harajuku") == "Shibuya"
    assert name_variants("between Shibuya and Harajuku")[:3] == ["between Shibuya and Harajuku", "Shibuya", "Harajuku"]
