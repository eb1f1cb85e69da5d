"""Security breaker, session 42, #3: control and bidirectional formatting characters from models and APIs reached
data files and geocoder queries. Now:

* GeoHint place fields and evidence texts are cleaned as labels (``geoagent.textfmt.label_text``; answer parser 7):
  ESC, CR and U+202E never reach ``geohint_scored.csv`` or a Wikidata search, while the answer's text keeps them;
* the model name a provider echoes (``provider_model``) is cleaned and cut to 200 characters (OpenAI-compatible,
  Anthropic, Gemini, replay);
* Wikidata search hits' and entities' labels, aliases and descriptions are cleaned;
* Nominatim places' names, display names, address parts and ``namedetails`` names too (fixrev42 #3), so neither
  geocoder's label reaches ``resolved_label`` with such characters.

Against the real parser, providers, Wikidata client and geocoder, with the local fakes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from aiohttp import web

from _geocode_env import FAST, UA, geocode_env
from geoagent.clients.wikidata import WikidataClient
from geoagent.geohint.parse import ANSWER_PARSER_VERSION, parse_answer
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.base import MAX_PROVIDER_MODEL_CHARS
from geoagent.runtime.http import HttpClient
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer, GazetteerEntry
from geoagent.sandbox.server import serve

#: what the breaker's answers carried: a terminal title and colour escape, a carriage return, a right-to-left override
DIRT = ("\x1b]0;PWNED\x07", "\x1b[31m", "\r", "\u202e", "\x00", "\u2066")
BAD_CHARS = set("\x1b\x07\r\n\x00\u202e\u2066")


def _clean(s: str | None) -> bool:
    return s is None or not (set(s) & BAD_CHARS)


# -- GeoHint answer parser -------------------------------------------------------------------------------------


@pytest.mark.parametrize("literal", [False, True])
def test_place_fields_and_evidence_lose_control_and_bidi_characters_the_raw_text_keeps_them(literal):
    answer = {"city": "Pa\x1b[31mris\u202e", "area": "Le\r\nMarais", "building": "\x1b]0;PWNED\x07Louvre",
              "evidence": {"script": "French\x1b[2J signs", "terrain": "\u202enot visible"}}
    text = json.dumps(answer, ensure_ascii=False)  # the escapes JSON writes (\u001b, \r\n)
    if literal:  # or the characters themselves inside the strings, as a model may write them (repaired JSON)
        text = "{" + ", ".join(f'"{k}": "{v}"' for k, v in answer.items() if k != "evidence") + \
            ', "evidence": {' + ", ".join(f'"{k}": "{v}"' for k, v in answer["evidence"].items()) + "}}"
        assert "\x1b" in text and "\r\n" in text
    a = parse_answer(text)
    # the characters go; the printable rest of an escape sequence stays, inert text
    assert a.ok and (a.city, a.area, a.building) == ("Pa[31mris", "Le Marais", "]0;PWNEDLouvre"), a
    assert a.evidence == {"script": "French[2J signs", "terrain": "not visible"}
    assert a.evidence_slots == {"script": [1, 0], "terrain": [1, 1]}  # the override no longer hides "not visible"
    assert a.raw == text  # the answer itself is kept as it came
    # a field of nothing but such characters names no place
    b = parse_answer('{"city": "Paris", "building": "\\u001b\\u202e\\r\\n"}')
    assert b.ok and b.city == "Paris" and b.building is None
    # the pattern reader (no JSON object) cleans too
    c = parse_answer('city: "Ly\\u001bon\\u202e", area: "Vieux\\r\\nLyon"')
    assert c.method == "regex" and (c.city, c.area) == ("Lyon", "Vieux Lyon"), c


def test_the_answer_parser_version_was_raised_for_it():
    assert ANSWER_PARSER_VERSION >= 7  # 7 (session 42) brought the cleaning; stored answers are read again


def test_a_cleaned_answer_queries_wikidata_without_the_characters():
    text = json.dumps({"city": "\x1bParis\r\u202e", "area": "Le\u2066 Marais\x1b", "building": "Lou\x00vre"})

    async def go():
        async with geocode_env() as env:
            loc = await env.geocoder.locate(parse_answer(text), true_lat=48.8606, true_lon=2.3376)
            return loc, list(env.wd_state.requests), list(env.nm_state.requests)

    loc, wd_requests, nm_requests = asyncio.run(go())
    searches = [r["params"].get("search", "") for r in wd_requests if r["action"] == "wbsearchentities"]
    assert "Paris" in searches, searches
    assert all(_clean(s) for s in searches), searches
    assert all(_clean(json.dumps(r.get("params", r), ensure_ascii=False)) for r in nm_requests)


# -- provider_model ------------------------------------------------------------------------------------------

_MODEL = "gpt\x1b]0;PWNED\x07-\u202e4o\r\n" + "x" * 5000


def _answer_app(kind: str) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        if kind == "openai":
            body = {"model": _MODEL, "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                                  "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
        elif kind == "anthropic":
            body = {"model": _MODEL, "type": "message", "role": "assistant", "stop_reason": "end_turn",
                    "content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": 3, "output_tokens": 1}}
        else:
            body = {"modelVersion": _MODEL, "candidates": [{"content": {"parts": [{"text": "hi"}], "role": "model"},
                                                            "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}}
        return web.json_response(body)

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", answer)
    return app


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_provider_model_is_cleaned_and_capped(kind):
    req = ModelRequest(provider=kind, model="test-model", prompt="Where?", params={"max_output_tokens": 20})

    async def go():
        async with serve(_answer_app(kind)) as url, HttpClient(default_policy=FAST) as http:
            base = url + "/v1" if kind == "openai" else url
            prov = make_provider(ProviderSettings(kind=kind, model="test-model", base_url=base, api_key="local-s42-key"),
                                 http)
            return await prov.generate(req)

    out = asyncio.run(go())
    assert out.text == "hi"
    pm = out.provider_model
    assert pm.startswith("gpt]0;PWNED-4o x") and len(pm) == MAX_PROVIDER_MODEL_CHARS and pm.endswith("\u2026"), pm
    assert _clean(pm)
    assert out.to_json()["provider_model"] == pm  # what the store and the export keep


def test_a_replayed_model_name_is_cleaned_too(tmp_path):
    req = ModelRequest(provider="openai", model="m", prompt="p", params={"max_output_tokens": 9})
    path = tmp_path / "rec.jsonl"
    path.write_text(json.dumps({"key": req.key(), "text": "hi", "model": "rec\x1b\u202emodel\r"}) + "\n",
                    encoding="utf-8")
    prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_usage_field=None))
    assert asyncio.run(prov.generate(req)).provider_model == "recmodel"


# -- Wikidata labels -----------------------------------------------------------------------------------------


def test_wikidata_search_hits_and_entities_are_cleaned():
    entry = GazetteerEntry(qid="Q99042001", labels={"en": "Mirror\u202e Bay\x1b[31m", "ar": "\u200fخليج"},
                           aliases={"en": ("Bay\r\nof Mirrors", "\x1b\u202e")}, description="a bay\x1b]0;PWNED\x07",
                           lat=10.0, lon=20.0, kind="area", city="Mirror Bay")
    gaz = Gazetteer([entry])

    async def go():
        app = wd_fake.make_app(gaz)
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            client = WikidataClient(http, user_agent=UA, base_url=base + "/w/api.php", policy=FAST)
            return await client.search_entities("Mirror"), await client.get_entities(["Q99042001"])

    hits, ents = asyncio.run(go())
    assert hits and hits[0].qid == "Q99042001"
    h = hits[0]
    assert h.label == "Mirror Bay[31m" and h.description == "a bay]0;PWNED", h
    assert all(_clean(t) for t in (h.label, h.description, h.match_text, *h.aliases)), h
    e = ents["Q99042001"]
    assert e.labels["en"] == "Mirror Bay[31m" and e.labels["ar"] == "خليج" and e.description == "a bay]0;PWNED"
    assert e.aliases["en"] == ("Bay of Mirrors",)  # an alias of nothing but such characters is none
    assert all(_clean(t) for t in (*e.labels.values(), *e.aliases["en"], e.description))


# -- Nominatim names (fixrev42 #3) -----------------------------------------------------------------------------


def _nominatim_app(places: list[dict]) -> web.Application:
    async def search(request: web.Request) -> web.Response:
        return web.json_response(places)

    app = web.Application()
    app.router.add_get("/search", search)
    return app


def test_nominatim_names_are_cleaned_and_reach_resolved_label_clean():
    from geoagent.clients.nominatim import NominatimClient
    from geoagent.geohint.geocode import Geocoder

    dirty = {"osm_type": "way", "osm_id": 42, "lat": "48.86", "lon": "2.35", "category": "place", "type": "square",
             "addresstype": "square", "name": "Place\u202e des\r\nVosges\x1b[31m",
             "display_name": "Place des Vosges\x07, Le\u2066 Marais, Paris",
             "address": {"city": "Pa\x00ris\u202e"}, "extratags": {"wikidata": "Q99042002"},
             "namedetails": {"name": "Place des Vosges", "alt_name": "Place\x1b Royale;\u202e\r\n",
                             "name:fr": "Place des\tVosges"}}
    blank = {"osm_type": "node", "osm_id": 43, "lat": "48.0", "lon": "2.0", "category": "place", "type": "square",
             "name": "\x1b\u202e\r\n", "display_name": "Square\x1b d'Anvers, Paris"}

    async def go():
        async with serve(_nominatim_app([dirty, blank])) as base, HttpClient(default_policy=FAST) as http:
            client = NominatimClient(http, contact="t@example.org", base_url=base, policy=FAST)
            return await client.search("Place des Vosges")

    places = asyncio.run(go())
    p, q = places
    assert p.name == "Place des Vosges[31m" and p.display_name == "Place des Vosges, Le Marais, Paris", p
    assert p.names == ("Place des Vosges", "Place Royale") and p.address == {"city": "Paris"}, p
    assert q.name == "Square d'Anvers"  # a name of nothing but such characters falls back to display_name's first part
    assert all(_clean(t) for t in (p.name, p.display_name, *p.names, *p.address.values(), q.name))
    # the label a geocoded answer's resolved_label takes (geohint_scored.csv)
    assert Geocoder._from_place(p).label == "Place des Vosges[31m"
    raw = dataclasses.replace(p, name="Vosges\x1b\u202e\r")  # a place built without parse_place is cleaned too
    assert Geocoder._from_place(raw).label == "Vosges"
