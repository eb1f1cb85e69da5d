"""The geocoder stage run by the real stage runner over SQLite queues, against the local fakes."""

from __future__ import annotations

import asyncio

import pytest
from _geocode_env import CONTACT, geocode_env, km

from geoagent import constants as C
from geoagent.geohint.geocode_stage import GeocodeStage, GeocoderSettings, build_geocoder
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import StageContext
from geoagent.runtime.worker import StageRunner

TRUTH = (35.6628, 139.6990)
SHIBUYA = (35.6595, 139.7005)
SHIBUYA_STATION = (35.6580, 139.7016)
TOKYO = (35.689722, 139.692222)


def _answer(city, area, building, *, ok=True, truth=TRUTH, ref_qid="Q99000002"):
    meta = {"task": "geohint", "site": "tokyo_test", "condition": "forced", "ref_qid": ref_qid}
    if truth is not None:
        meta.update(site_lat=truth[0], site_lon=truth[1])
    parsed = {"ok": ok, "raw": "...", "city": city, "area": area, "building": building}
    return {"model": "sim", "request_key": "rk", "image_id": "1", "meta": meta, "parsed": parsed}


ANSWERS = {
    "a-building": _answer("Tokyo", "Shibuya", "Shibuya Station"),
    "a-area": _answer("Tokyo", "Shibuya (Miyamasuzaka)", "Meiji-dori"),
    "a-city": _answer("Tokyo", "Atlantis Quarter", "unknown"),
    "a-unparsed": _answer(None, None, None, ok=False),
    "a-no-truth": _answer("Tokyo", "Shibuya", "unknown", truth=None),
}


def test_stage_geocodes_answers_through_the_runner(tmp_path):
    async def go():
        async with geocode_env() as env:
            inq = open_queue(tmp_path, "camp", C.EDGE_ANSWERS)
            outq = open_queue(tmp_path, "camp", C.EDGE_LOCATED)
            await inq.put_many(ANSWERS.items())
            stage = GeocodeStage(env.geocoder)
            ctx = StageContext("camp", {})
            await StageRunner(stage, inq, outq, ctx, burst=True).run()
            leased = await outq.lease(100, 60)
            counts = await inq.counts()
            dead = await inq.dead_letters()
            # redelivery is harmless: the same keys put again are no-ops
            again = await inq.put_many(ANSWERS.items())
            await inq.close()
            await outq.close()
            return {t.key: t.payload for t in leased}, counts, dead, again, env.wd_state

    out, counts, dead, again, wd_state = asyncio.run(go())
    assert set(out) == {"a-building", "a-area", "a-city", "a-unparsed"}
    assert counts.done == 4 and counts.dead == 1 and again == 0
    assert dead[0].key == "a-no-truth" and "site coordinate" in dead[0].reason

    b = out["a-building"]
    assert b["resolved_level"] == "building" and b["resolved_label"] == "Shibuya Station" and b["qid"] == "Q99000006"
    assert abs(b["error_km"] - km(*SHIBUYA_STATION, *TRUTH)) < 1e-9
    assert b["parsed"] == ANSWERS["a-building"]["parsed"] and b["meta"] == ANSWERS["a-building"]["meta"]  # input kept
    assert "Harajuku" in b["ref_aliases"] and "原宿" in b["ref_aliases"]  # reference point names for echo matching

    a = out["a-area"]
    assert a["resolved_level"] == "area" and a["resolved_label"] == "Shibuya" and not a["linear"]
    assert abs(a["error_km"] - km(*SHIBUYA, *TRUTH)) < 1e-9
    assert any(s["outcome"] == "linear-deferred" for s in a["geocode_trace"])

    c = out["a-city"]
    assert c["resolved_level"] == "city" and c["qid"] == "Q1490" and abs(c["error_km"] - km(*TOKYO, *TRUTH)) < 1e-9

    u = out["a-unparsed"]
    assert u["resolved_level"] == "none" and u["error_km"] is None and u["lat"] is None
    # one wbgetentities for the reference point serves every answer that shares it
    ref_calls = [r for r in wd_state.requests if r["action"] == "wbgetentities" and r["params"].get("props") == "labels|aliases"]
    assert len(ref_calls) == 1


def test_stage_takes_truth_from_the_sites_service():
    async def go():
        async with geocode_env() as env:
            stage = GeocodeStage(env.geocoder)
            ctx = StageContext("camp", {"sites": {"tokyo_test": {"lat": TRUTH[0], "lon": TRUTH[1]}}})
            await stage.start(ctx)
            from geoagent.runtime.queue import Task

            task = Task("k", ANSWERS["a-no-truth"], 0, "lease")
            return await stage.handle(task, ctx)

    [(key, payload)] = asyncio.run(go())
    assert key == "k" and payload["resolved_level"] == "area" and abs(payload["error_km"] - km(*SHIBUYA, *TRUTH)) < 1e-9


def test_settings_table_is_validated_and_contact_required():
    with pytest.raises(ValueError, match=r"\[geohint.geocoder\].*unknown key.*radius"):
        GeocoderSettings.from_mapping({"radius": 5})
    with pytest.raises(ValueError, match="anchor_radius_km"):
        GeocoderSettings.from_mapping({"anchor_radius_km": -1})
    s = GeocoderSettings.from_config({"geohint": {"geocoder": {"contact": CONTACT, "anchor_radius_km": 12}}})
    assert s.contact == CONTACT and s.anchor_radius_km == 12 and s.nominatim_url
    with pytest.raises(ValueError, match="contact"):
        build_geocoder(object(), GeocoderSettings())


def test_build_geocoder_installs_polite_host_policies_unless_the_config_sets_them():
    from geoagent.clients.nominatim import DEFAULT_NOMINATIM_POLICY
    from geoagent.clients.wikidata import DEFAULT_WIKIDATA_POLICY
    from geoagent.runtime.http import HostPolicy, HttpClient

    custom = HostPolicy(rate=50, period_s=1.0, concurrency=2)
    http = HttpClient(policies={"127.0.0.1:9": custom})
    settings = GeocoderSettings(contact=CONTACT, nominatim_url="http://127.0.0.1:9")
    g = build_geocoder(http, settings, configured_hosts=["127.0.0.1:9"])
    assert http.policy_for("www.wikidata.org") == DEFAULT_WIKIDATA_POLICY
    assert http.policy_for("127.0.0.1:9") == custom  # the config's [hosts] entry is kept
    assert g.nominatim is not None and g.wikidata.cache is None  # no state dir: no cache file
    http2 = HttpClient()
    build_geocoder(http2, GeocoderSettings(contact=CONTACT))
    pol = http2.policy_for("nominatim.openstreetmap.org")
    assert pol == DEFAULT_NOMINATIM_POLICY and (pol.rate, pol.period_s, pol.concurrency) == (1.0, 1.0, 1)
