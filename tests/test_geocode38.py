"""GeoHint geocoder (session 38, geocode38).

Before:

* #1 a ``[hosts."nominatim.openstreetmap.org"]`` entry (rate 20, concurrency 8) lifted the public Nominatim's usage
  policy of 1 request/s, one at a time, without a word;
* #2 after Nominatim refused the application (HTTP 403) every later answer was dead-lettered and the requests went on;
  now the answer is held, the stage stops and the run ends "authentication failed" (exit 5; review38b #5: not as a
  budget stop);
* #3 the same query asked by concurrent geocoder tasks was sent once per task (4 x "Jinnan" to Nominatim, 4 x
  "Tokyo" to Wikidata);
* #7 fault 1 came back for an aside in curly brackets or one never closed ("Shibuya (Miyamasuzaka", a cut-off
  answer): city level, 3 km;
* #11 "未知" (the release's own null token), "不明", "I don't know" were looked up as place names.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest
from _geocode_env import CONTACT, FAST, UA, geocode_env
from _geocode_gaz import gazetteer_with

from geoagent.clients.cache import ResponseCache
from geoagent.clients.nominatim import NominatimClient
from geoagent.clients.wikidata import WikidataClient
from geoagent.geohint.geocode import Geocoder, ParsedAnswer
from geoagent.geohint.geocode_stage import GeocodeStage, GeocoderRefused
from geoagent.geohint.placenames import is_null_answer
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.server import serve

TRUTH_SHIBUYA = (35.6628, 139.6990)


@pytest.mark.parametrize("rate, period_s, concurrency", [(20, 1.0, 8), (60, 60.0, 1), (10, 5.0, 1), (1, 0.5, 1)])
def test_a_hosts_entry_cannot_speed_up_the_public_nominatim(caplog, rate, period_s, concurrency):
    """The limiter is a sliding window: 60 per 60 s would let 60 go at once (review38b #2); the window holds one."""
    async def go():
        fast = HostPolicy(rate=rate, period_s=period_s, concurrency=concurrency)
        async with HttpClient(policies={"nominatim.openstreetmap.org": fast}) as http:
            with caplog.at_level(logging.WARNING, logger="geoagent.clients.nominatim"):
                nm = NominatimClient(http, contact=CONTACT, policy=None)  # policy None: the [hosts] entry's
            return http.policy_for(nm.host)

    got = asyncio.run(go())
    assert got.rate == 1 and got.period_s >= 1.0 and got.concurrency == 1, got
    assert any("usage policy allows 1 per second" in r.getMessage() for r in caplog.records)


def test_a_slower_hosts_entry_for_the_public_nominatim_is_kept():
    async def go():
        slow = HostPolicy(rate=1, period_s=3.0, concurrency=1)
        async with HttpClient(policies={"nominatim.openstreetmap.org": slow}) as http:
            nm = NominatimClient(http, contact=CONTACT, policy=None)
            return http.policy_for(nm.host)

    got = asyncio.run(go())
    assert (got.rate, got.period_s, got.concurrency) == (1, 3.0, 1)


def test_a_refusal_by_nominatim_holds_the_answer_and_stops_the_geocoder(tmp_path):
    async def go():
        gaz = gazetteer_with()
        nm_app = nm_fake.make_app(gaz, min_interval_s=0.0)
        nm_app[nm_fake.NOMINATIM_STATE].blocked = True  # the application is blocked: 403 to every request
        async with serve(wd_fake.make_app(gaz)) as wd_url, serve(nm_app) as nm_url, \
                HttpClient(default_policy=FAST) as http:
            wd = WikidataClient(http, user_agent=UA, base_url=wd_url + "/w/api.php", policy=FAST, maxlag_min_wait_s=0.05)
            nm = NominatimClient(http, contact=CONTACT, base_url=nm_url, policy=FAST)
            stage = GeocodeStage(Geocoder(wd, nm))
            errors = []
            for i in range(3):
                task = Task(f"k{i}", {"parsed": {"city": "Tokyo", "area": f"Nowhere{i}"},
                                      "meta": {"site_lat": 35.6628, "site_lon": 139.699}}, 0, "lease")
                with pytest.raises(GeocoderRefused) as e:
                    await stage.handle(task, StageContext("x", {}))
                errors.append(e.value)
            return stage, errors, [r["status"] for r in nm_app[nm_fake.NOMINATIM_STATE].requests]

    stage, errors, statuses = asyncio.run(go())
    assert statuses == [403]  # one refusal: the later answers are held without asking again
    assert not stage.runnable() and "HTTP 403" in str(errors[0])
    (line,) = stage.auth_lines()
    assert "the geocoder was refused: HTTP 403" in line and "[geohint.geocoder] contact" in line


def test_the_same_query_asked_at_once_is_sent_once(tmp_path):
    gaz = gazetteer_with({"qid": "Q99000077", "labels": {"en": "Jinnan"}, "lat": 35.6630, "lon": 139.6985,
                          "kind": "area", "city": "Tokyo"})
    wd_gaz = gazetteer_with()  # Wikidata does not know Jinnan: Nominatim is asked

    async def go():
        cache = ResponseCache(tmp_path / "cache.sqlite")
        wd_app, nm_app = wd_fake.make_app(wd_gaz), nm_fake.make_app(gaz, min_interval_s=0.0)
        async with serve(wd_app) as wd_url, serve(nm_app) as nm_url, HttpClient(default_policy=FAST) as http:
            wd = WikidataClient(http, user_agent=UA, base_url=wd_url + "/w/api.php", cache=cache, policy=FAST,
                                maxlag_min_wait_s=0.05)
            nm = NominatimClient(http, contact=CONTACT, base_url=nm_url, cache=cache, policy=FAST)
            geocoder = Geocoder(wd, nm)
            located = await asyncio.gather(*[
                geocoder.locate(ParsedAnswer(city="Tokyo", area="Jinnan", building=f"Cafe {i}"),
                                true_lat=TRUTH_SHIBUYA[0], true_lon=TRUTH_SHIBUYA[1]) for i in range(4)])
            nm_q = Counter(r["q"] for r in nm_app[nm_fake.NOMINATIM_STATE].requests)
            wd_q = Counter((r.get("params") or {}).get("search") for r in wd_app[wd_fake.WIKIDATA_STATE].requests)
            return located, nm_q, wd_q

    located, nm_q, wd_q = asyncio.run(go())
    assert len({(x.resolved_level, x.label) for x in located}) == 1  # the same answer for each
    assert nm_q["Jinnan"] == 1, nm_q
    assert wd_q["Tokyo"] == 1 and wd_q["Jinnan"] == 1, wd_q


@pytest.mark.parametrize("area", ["Shibuya (Miyamasuzaka", "Shibuya {Miyamasuzaka}", "Shibuya（宮益坂"])
def test_fault1_an_aside_in_curly_brackets_or_never_closed_is_set_aside(area):
    async def go():
        async with geocode_env() as env:
            return await env.geocoder.locate(ParsedAnswer(city="Tokyo", area=area, building="unknown"),
                                             true_lat=TRUTH_SHIBUYA[0], true_lon=TRUTH_SHIBUYA[1])

    loc = asyncio.run(go())
    assert loc.resolved_level == "area" and loc.qid == "Q99000001" and loc.error_km < 1.0, loc


@pytest.mark.parametrize("text", ["未知", "未知。", "不明", "I don't know.", "I don\u2019t know", "I can't tell",
                                  "can't tell", "Unknown"])
def test_stock_no_answer_words_are_no_answer(text):
    assert is_null_answer(text)


def test_a_nominatim_place_matches_a_query_in_the_local_script_by_its_names():
    """#4: the API localises ``name`` to the accept-language ("Jinnan"); an answer naming "神南" was passed over as
    no match and scored at city level (3 km). Every name of the place (``namedetails``) now counts."""
    jinnan = {"qid": "Q99000077", "labels": {"en": "Jinnan", "ja": "神南"}, "lat": 35.6630, "lon": 139.6985,
              "kind": "area", "city": "Tokyo"}

    async def go():
        gaz = gazetteer_with(jinnan)
        async with serve(wd_fake.make_app(gazetteer_with())) as wd_url, \
                serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm_url, HttpClient(default_policy=FAST) as http:
            wd = WikidataClient(http, user_agent=UA, base_url=wd_url + "/w/api.php", policy=FAST, maxlag_min_wait_s=0.05)
            nm = NominatimClient(http, contact=CONTACT, base_url=nm_url, policy=FAST)
            raw = await nm.search("神南")
            loc = await Geocoder(wd, nm).locate(ParsedAnswer(city="Tokyo", area="神南", building="unknown"),
                                                true_lat=TRUTH_SHIBUYA[0], true_lon=TRUTH_SHIBUYA[1])
            return raw, loc

    raw, loc = asyncio.run(go())
    assert raw[0].name == "Jinnan" and "神南" in raw[0].names
    assert loc.resolved_level == "area" and loc.error_km < 1.0, loc


def test_a_blocked_geocoder_ends_the_run_authentication_failed_with_the_answers_queued(release_dir, tmp_path,
                                                                                       monkeypatch):
    from test_geohint_campaign import _cfg

    from geoagent import engine
    from geoagent.config import config_from_dict
    from geoagent.sandbox.gazetteer import Gazetteer

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    async def main():
        gaz = Gazetteer.from_release(release_dir)
        nm_app = nm_fake.make_app(gaz, min_interval_s=0.0)
        nm_app[nm_fake.NOMINATIM_STATE].blocked = True
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_app) as nm:
            cfg = config_from_dict(_cfg(wd, nm))
            out = await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)
            return out, [r["status"] for r in nm_app[nm_fake.NOMINATIM_STATE].requests]

    import anyio

    out, statuses = anyio.run(main)
    assert (out.status, out.exit_code) == ("authentication failed", 5), out.summary()
    assert set(statuses) == {403} and len(statuses) <= 4  # the stage's tasks in flight at the refusal, no more
    text = out.summary()
    assert "the geocoder was refused: HTTP 403" in text and "answers left queued" in text, text
    assert "budget" not in text.split("spend")[0].lower(), text


def test_naming_the_city_again_leaves_no_out_of_anchor_entry_in_the_trace():
    """#10: after Nominatim's ``same-as-city`` the trace also read ``out-of-anchor`` for the same name."""
    async def go():
        async with geocode_env() as env:
            return await env.geocoder.locate(ParsedAnswer(city="Paris", area="Paris", building="unknown"),
                                             true_lat=48.86, true_lon=2.35)

    loc = asyncio.run(go())
    nominatim = [t.outcome for t in loc.trace if t.level == "area" and t.source == "nominatim"]
    assert loc.resolved_level == "city" and "same-as-city" in nominatim and "out-of-anchor" not in nominatim, loc.trace
