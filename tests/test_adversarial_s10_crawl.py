"""Adversarial review, session 10: the crawl side and its API clients against the real APIs' rules.

Each test failed before its fix (see the commit that added it). External APIs are the local aiohttp fakes of
``geoagent/sandbox`` (no function-level mocks of our clients).
"""

from __future__ import annotations

import asyncio

import pytest

from geoagent.clients.overpass import OverpassClient
from geoagent.clients.pageviews import PageviewsClient
from geoagent.clients.wdqs import WdqsClient, around_query
from geoagent.crawl.screener import place_query
from geoagent.crawl.settings import CrawlConfigError, CrawlSettings, ScreenerSettings, load_crawl_settings
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox import overpass as overpass_fake
from geoagent.sandbox import pageviews as pageviews_fake
from geoagent.sandbox import wdqs as wdqs_fake
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)


# --- 1. a crawl User-Agent without contact details ------------------------------------------------------------
# Wikimedia's User-Agent policy (WDQS, pageviews) asks for contact information: an e-mail address or a URL
# (api-notes sections 2 and 4; https://meta.wikimedia.org/wiki/User-Agent_policy). The crawl builds its UA as
# "<tool> (GeoContext benchmark crawler; contact: <[crawl] contact>)", and the Overpass/WDQS/pageviews fakes took
# the bare word "contact" as contact details, so `contact = "Jane Doe"` ran clean against every fake while the
# real services get a UA with nothing to reach anyone by.

def test_crawl_contact_without_email_or_url_is_refused_at_load():
    with pytest.raises(CrawlConfigError) as ei:
        load_crawl_settings({"contact": "Jane Doe"})
    assert "contact" in str(ei.value)
    for ok in ("mailto:me@example.org", "me@example.org", "https://example.org/crawler"):
        assert load_crawl_settings({"contact": ok}).contact == ok


def _contactless_ua() -> str:
    # what a crawl would send with `contact = "Jane Doe"` (built without the settings' validation)
    return CrawlSettings.model_construct(contact="Jane Doe", tool_name="geoagent-crawl/0.1").user_agent


def test_overpass_wdqs_and_pageviews_fakes_refuse_a_ua_without_contact_details():
    ua = _contactless_ua()
    assert "contact" in ua and "@" not in ua and "://" not in ua

    async def go() -> list[int]:
        statuses = []
        async with serve(overpass_fake.make_app([])) as base, HttpClient(default_policy=FAST) as http:
            try:
                await OverpassClient(http, base + "/api", ua, check_slots=False).interpreter(
                    place_query(48.86, 2.34, ScreenerSettings()))
            except PermanentHTTPError as e:
                statuses.append(e.status)
        async with serve(wdqs_fake.make_app()) as base, HttpClient(default_policy=FAST) as http:
            try:
                await WdqsClient(http, base + "/sparql", ua).select(around_query(48.86, 2.34, 6.0, limit=10, offset=0))
            except PermanentHTTPError as e:
                statuses.append(e.status)
        async with serve(pageviews_fake.make_app({"X": 3})) as base, HttpClient(default_policy=FAST) as http:
            try:
                await PageviewsClient(http, base, ua).total("X", "20240101", "20240131")
            except PermanentHTTPError as e:
                statuses.append(e.status)
        return statuses

    assert asyncio.run(go()) == [403, 403, 403]


# --- 2. an image deleted since the search listed it: the Graph API's 400, not a 404 ---------------------------
# The Graph API (Mapillary's v4 is one) answers a GET of an object that no longer exists with HTTP 400 and
# {"error": {"message": "Unsupported get request. Object with ID '...' does not exist, cannot be loaded due to
# missing permissions, or does not support this operation. Please read the Graph API documentation at ...",
# "type": "GraphMethodException", "code": 100, "error_subcode": 33, "fbtrace_id": ...}} (Graph API error
# handling; Meta clients' fixtures show 400). The fake answered 404, the only status the client read as "gone";
# with the real 400 the client raised PermanentHTTPError out of fetch_site_images, so one image deleted between
# the search and the download dead-lettered its whole site. The body is longer than the HTTP layer's 300-char
# excerpt, so the code/subcode are cut off and only the message's start can be read.

def _deleted_image_app():
    import math

    from geoagent.sandbox import mapillary as mly_fake

    lat0, lon0 = 48.85, 2.35
    imgs = []
    for i, dx in enumerate((0.0, 60.0, 120.0)):
        imgs.append(mly_fake.FakeImage(image_id=str(5100 + i), lat=lat0,
                                       lon=lon0 + dx / (111195.0 * math.cos(math.radians(lat0))), brightness=150,
                                       deleted=(i == 1)))
    return mly_fake.make_app(imgs), lat0, lon0


def test_mapillary_fake_answers_a_deleted_image_as_the_graph_api_does():
    from aiohttp import ClientSession

    app, _, _ = _deleted_image_app()

    async def go():
        async with serve(app) as base, ClientSession() as s:
            async with s.get(f"{base}/5101", params={"fields": "id,thumb_1024_url"},
                             headers={"Authorization": "OAuth MLY|1|x"}) as r:
                return r.status, await r.json(), len(await r.read())

    status, body, n = asyncio.run(go())
    assert status == 400
    assert body["error"]["code"] == 100 and body["error"]["error_subcode"] == 33
    assert body["error"]["type"] == "GraphMethodException"
    assert "does not exist" in body["error"]["message"] and n > 300


def test_fetcher_skips_an_image_deleted_since_the_search_and_keeps_the_site(tmp_path):
    from geoagent.clients.mapillary import MapillaryClient, ThumbnailUnavailable
    from geoagent.crawl.fetcher import fetch_site_images
    from geoagent.crawl.settings import FetcherSettings

    app, lat0, lon0 = _deleted_image_app()
    one = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=1, timeout_s=5)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=one) as http:
            c = MapillaryClient(http, base, "MLY|1|x", "geoagent-test (contact: mailto:t@example.org)")
            with pytest.raises(ThumbnailUnavailable) as ei:
                await c.fresh_thumb_url("5101")
            assert "gone" in str(ei.value) and ei.value.status == 400
            return await fetch_site_images({"site": "gone", "lat": lat0, "lon": lon0}, c, FetcherSettings(), tmp_path)

    res = asyncio.run(go())
    assert sorted(k["image_id"] for k in res.kept) == ["5100", "5102"]
    assert [(r["image_id"], "gone" in r["reason"]) for r in res.rejected] == [("5101", True)]


# --- 3. [crawl.fetcher] thumb_field must name a Mapillary thumbnail field ---------------------------------------
# The Graph API's image thumbnails are exactly thumb_256_url, thumb_1024_url, thumb_2048_url and
# thumb_original_url (api-notes section 6, from the official SDK's field list). The setting took any string:
# "thumb_512_url" or "thumb_1024" went to the API as a field name (400 "Tried accessing nonexisting field" on
# every image: every site fails after its searches), and a real non-thumbnail field such as "compass_angle" came
# back as a number, so every image was rejected "no thumbnail" and every site silently ended with no images.

@pytest.mark.parametrize("field", ["thumb_512_url", "thumb_1024", "compass_angle", "geometry", "THUMB_1024_URL"])
def test_thumb_field_that_is_not_a_mapillary_thumbnail_is_refused_at_load(field):
    with pytest.raises(CrawlConfigError) as ei:
        load_crawl_settings({"contact": "mailto:t@example.org", "fetcher": {"thumb_field": field}})
    msg = str(ei.value)
    assert "thumb_field" in msg and "thumb_1024_url" in msg and "thumb_original_url" in msg


@pytest.mark.parametrize("field", ["thumb_256_url", "thumb_1024_url", "thumb_2048_url", "thumb_original_url"])
def test_every_mapillary_thumbnail_field_loads(field):
    s = load_crawl_settings({"contact": "mailto:t@example.org", "fetcher": {"thumb_field": field}})
    assert s.fetcher.thumb_field == field


# --- 4. Overpass's 400 parse-error messages were always lost -----------------------------------------------------
# A 400 from Overpass is an HTML page whose error paragraphs come after ~300 characters of fixed preamble
# (XML declaration, head, the ODbL paragraph; api-notes section 1). The client parsed the messages from the HTTP
# layer's 300-character excerpt, which ends inside that preamble, so OverpassQueryError.messages was always empty
# and the dead-letter reason showed the page's head instead of "line 2: parse error: ...".

def test_overpass_query_error_carries_the_pages_parse_error_messages():
    from geoagent.clients.overpass import OverpassQueryError

    async def go():
        async with serve(overpass_fake.make_app([])) as base, HttpClient(default_policy=FAST) as http:
            with pytest.raises(OverpassQueryError) as ei:
                await OverpassClient(http, base + "/api", "geoagent-test (mailto:t@example.org)",
                                     check_slots=False).interpreter("[out:json][timeout:25];\nrel[foo](1,2,3,4);\nout;")
            return ei.value

    err = asyncio.run(go())
    assert len(err.messages) == 1 and err.messages[0].startswith("line 2: parse error: Unknown type")
    assert "line 2: parse error" in str(err) and "<?xml" not in str(err)


# --- 5. WDQS's 400: the reason lies after the echoed query ------------------------------------------------------
# Blazegraph answers a query it cannot parse with HTTP 400 and a stack trace that starts by echoing the whole
# query ("SPARQL-QUERY: queryStr=<query>") and names "MalformedQueryException: <why>" after it (api-notes
# section 2; the client's own timeout handling already reads the deadline the same way). Our queries are some
# 600 characters, so WdqsQueryError, built from the 300-character excerpt, showed only the start of our own
# query and never the reason; the fake answered a one-line body, so no test saw it.

def test_wdqs_query_error_names_the_reason_after_the_echoed_query():
    from aiohttp import ClientSession

    from geoagent.clients.wdqs import WdqsQueryError, site_candidates_query

    bad = site_candidates_query(48.86, 2.34, 3.0, ["Q33506"], 60, limit=10, offset=0).replace("wdt:P625", "wdt:P999")
    assert len(bad) > 300

    async def go():
        async with serve(wdqs_fake.make_app()) as base:
            async with ClientSession() as s:
                async with s.post(base + "/sparql", data={"query": bad},
                                  headers={"User-Agent": "geoagent-test (mailto:t@example.org)"}) as r:
                    raw = (r.status, await r.text())
            async with HttpClient(default_policy=FAST) as http:
                with pytest.raises(WdqsQueryError) as ei:
                    await WdqsClient(http, base + "/sparql", "geoagent-test (mailto:t@example.org)").select(bad)
                return raw, str(ei.value)

    (status, body), msg = asyncio.run(go())
    assert status == 400 and body.startswith("SPARQL-QUERY: queryStr=" + bad[:40]) and "MalformedQueryException" in body
    assert "MalformedQueryException" in msg and len(msg) < 700


# --- 6. an item with two coordinates: which one a site gets must not depend on the answer's row order ----------
# Wikidata items often carry several P625 statements (a park's two entrances, a bridge's two ends); the
# candidate query then gives one row per coordinate. The query ordered by ?item ?type only, so the order of an
# item's coordinate rows is the service's choice (SPARQL leaves ties unordered, and it may differ between the
# pages of one query), and merge_candidates kept the first row seen: the same item became a site at one
# coordinate or the other, and the split fallback (which sorts rows by coordinate) could disagree with the
# single query. The site's coordinate decides its spacing check, coverage count and every distance after it.

def test_site_coordinate_of_a_multi_coordinate_item_does_not_depend_on_row_order():
    from geoagent.crawl.sampler import merge_candidates
    from geoagent.sandbox.wdqs import FakeEntity

    a = FakeEntity("Q777", "Twin Park", 48.8610, 2.3410, sitelinks=5, instance_of=("Q22698",))
    b = FakeEntity("Q777", "Twin Park", 48.8590, 2.3390, sitelinks=5, instance_of=("Q22698",))
    other = FakeEntity("Q778", "Other Park", 48.8620, 2.3420, sitelinks=5, instance_of=("Q22698",))

    async def candidates(entities):
        async with serve(wdqs_fake.make_app(entities)) as base, HttpClient(default_policy=FAST) as http:
            ents = await WdqsClient(http, base + "/sparql", "geoagent-test (mailto:t@example.org)").site_candidates(
                48.86, 2.34, 3.0, ["Q22698"], 60)
        return [(c.qid, c.lat, c.lon) for c in merge_candidates(ents, ["Q22698"])]

    first = asyncio.run(candidates([a, b, other]))
    second = asyncio.run(candidates([b, a, other]))
    assert first == second
    assert [q for q, _, _ in first] == ["Q777", "Q778"]


# --- 7. a GeoHint campaign's contact that is not an e-mail address or URL ---------------------------------------
# The geocoder's clients refuse such a contact (Nominatim: geoagent.clients.nominatim.user_agent_for; Wikimedia's
# User-Agent policy), but the load check only looked for an empty one: with `contact = "Jane Doe"` the dry run
# passed and the run planned and wrote its state before the geocoder refused it (walkthrough 9 item B, for a
# contact that is present but unusable).

@pytest.mark.parametrize("where", ["campaign", "geocoder"])
def test_geohint_contact_that_is_not_an_email_or_url_is_a_config_error(isolated_roots, capsys, where):
    from pathlib import Path

    from geoagent.cli import main

    text = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geohint_sandbox.toml").read_text("utf-8")
    line = 'contact = "mailto:you@example.org"\n'
    assert text.count(line) == 1
    if where == "campaign":
        text = text.replace(line, 'contact = "Jane Doe"\n')
    else:  # the geocoder's own contact wins over a good campaign one
        text = text.replace("[geohint.geocoder]\n", '[geohint.geocoder]\ncontact = "Jane Doe"\n')
    cfg = isolated_roots / "hint_badcontact.toml"
    cfg.write_text(text, encoding="utf-8")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    key = "campaign.contact" if where == "campaign" else "geohint.geocoder.contact"
    assert err.startswith(f"config error: {cfg}: {key}: 'Jane Doe' is not an e-mail address or URL"), err
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()


# --- 8. pageviews: one request per article and window, not one per site ---------------------------------------
# The referenceability auditor asked the pageviews API for every candidate of every site, and a city's sites
# share most of their 6 km candidates: the sandbox crawl sent 1,274 pageviews requests for 416 distinct
# articles (3 sites a city). Past days' views never change and Wikimedia asks clients to cache them
# (api-notes section 4, "Limits"; the client's own docstring: "the caller may cache them").

def test_pageviews_are_requested_once_per_article_and_window_across_sites(tmp_path):
    from geoagent.crawl.referenceability import RefCandidate, ReferenceabilityAuditor
    from geoagent.crawl.settings import ReferenceabilitySettings
    from geoagent.providers.base import ModelResponse, Provider, Usage

    class EveryoneOk(Provider):  # a test double of the auditor model (not of our API clients)
        kind = "scripted-test"
        paid = False

        async def generate(self, request):
            import re

            import orjson

            idx = [int(i) for i in re.findall(r"^(\d+)\. ", request.prompt, re.M)]
            if "CONTENTIOUS" in request.prompt:
                return ModelResponse(text=orjson.dumps([{"idx": i, "sensitive": False} for i in idx]).decode(),
                                     usage=Usage(1, 1))
            return ModelResponse(text=orjson.dumps([{"idx": i, "ok": True, "familiarity": 3, "en": f"P{i}"}
                                                    for i in idx]).decode(), usage=Usage(1, 1))

    titles = [f"Place_{i}" for i in range(6)]
    shared = [RefCandidate(f"Q{100 + i}", t, 1.0 + i / 10, 0.0, 0.0, 5, t) for i, t in enumerate(titles)]
    state = pageviews_fake.PageviewsFakeState({t: 10 + i for i, t in enumerate(titles)})

    async def go():
        async with serve(pageviews_fake.make_app(state=state)) as base, HttpClient(default_policy=FAST) as http:
            pv = PageviewsClient(http, base, "geoagent-test (mailto:t@example.org)")
            aud = ReferenceabilityAuditor(EveryoneOk(), ReferenceabilitySettings(model="aud-1", pageviews=True), tmp_path,
                                          pageviews=pv)
            a = await aud.audit("city_one", shared[:5], city="city")
            b = await aud.audit("city_two", shared[1:], city="city")
            return a, b

    a, b = asyncio.run(go())
    assert sorted(state.requests) == sorted(titles)  # each article once, though five of six are near both sites
    assert {r.qid: r.pageviews for r in a}["Q101"] == {r.qid: r.pageviews for r in b}["Q101"] > 0
