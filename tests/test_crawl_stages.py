"""Crawl daemon pieces: the sandbox crawl under injected API faults, config watching, audit responders."""

from __future__ import annotations

import asyncio
import filecmp
import json

import pytest

from geoagent import constants as C
from geoagent.crawl.demo import run_sandbox_crawl
from geoagent.crawl.image_audit import load_prompt, parse_image_audit
from geoagent.crawl.referenceability import RefCandidate, parse_ref_batch, parse_sensitive_batch, render_candidates
from geoagent.crawl.settings import CitySpec
from geoagent.crawl.stages import enqueue_cities, watch_config_cities
from geoagent.runtime.queue import open_queue
from geoagent.sandbox.faults import FaultConfig


@pytest.fixture(scope="module")
def clean_and_faulty(tmp_path_factory):
    a = tmp_path_factory.mktemp("clean")
    b = tmp_path_factory.mktemp("faulty")
    sa = asyncio.run(run_sandbox_crawl(a))
    faults = FaultConfig(rate=0.12, kinds=("429", "500", "503", "malformed"), seed=11, retry_after_s=0.02)
    sb = asyncio.run(run_sandbox_crawl(b, faults=faults))
    return a, sa, b, sb


def test_faulty_apis_give_the_same_crawl(clean_and_faulty):
    """With 12% of API requests answered 429/500/503 or a cut-off body, the crawl still completes with no
    dead task, and every table and ladder equals the fault-free crawl's (retries change nothing)."""
    a, sa, b, sb = clean_and_faulty
    assert all(s["dead"] == 0 and s["finished"] for s in sb["stages"]), sb["stages"]
    assert sa["files"] == sb["files"] and any(f.startswith("ladders/") for f in sa["files"])
    for f in sa["files"]:
        assert filecmp.cmp(a / "state" / f, b / "state" / f, shallow=False), f


def test_faults_were_hit_and_audit_logs_agree(clean_and_faulty):
    a, sa, b, sb = clean_and_faulty
    import json

    retries = sum(h["retries"] for h in sb["http"].values())
    reasons = {r for h in sb["http"].values() for r in h["errors"]}
    assert retries > 10 and {"http 429", "http 500", "http 503", "invalid body"} <= reasons, sb["http"]
    assert sum(h["retries"] for h in sa["http"].values()) == 0
    # per-API error rates for `status`
    assert set(sb["api"]) == {"overpass", "wdqs", "mapillary", "pageviews"}
    assert all(v["requests"] > 0 and v["error_rate"] < 0.5 for v in sb["api"].values()), sb["api"]
    assert sum(v["error_rate"] > 0 for v in sb["api"].values()) >= 2
    assert all(v["error_rate"] == 0 for v in sa["api"].values())

    assert (b / "state" / C.AUDIT_DECISIONS_FILE).is_file()
    dec_a = [json.loads(x) for x in (a / "state" / C.AUDIT_DECISIONS_FILE).read_text().splitlines()]
    dec_b = [json.loads(x) for x in (b / "state" / C.AUDIT_DECISIONS_FILE).read_text().splitlines()]
    strip = lambda d: {k: v for k, v in d.items() if k != "ts"}  # noqa: E731
    assert sorted(map(lambda d: sorted(strip(d).items(), key=str), dec_a), key=str) == \
        sorted(map(lambda d: sorted(strip(d).items(), key=str), dec_b), key=str)


def test_watch_config_enqueues_new_cities(tmp_path):
    cfg = tmp_path / "crawl.toml"

    def write(cities):
        body = '[crawl]\ncontact = "mailto:x@example.org"\n'
        for c in cities:
            body += f'\n[[crawl.cities]]\ncity = "{c}"\nlat = 10.0\nlon = 20.0\n'
        cfg.write_text(body, encoding="utf-8")

    async def go():
        q = open_queue(tmp_path / "queues", "w", C.EDGE_CITIES)
        write(["Alpha"])
        stop = asyncio.Event()
        task = asyncio.create_task(watch_config_cities(cfg, q, interval_s=0.05, stop=stop))
        await asyncio.sleep(0.2)
        n1 = (await q.counts()).total
        cfg.write_text("[crawl\nbroken", encoding="utf-8")  # a bad edit is skipped, not fatal
        await asyncio.sleep(0.15)
        write(["Alpha", "Beta", "Gamma"])
        await asyncio.sleep(0.2)
        stop.set()
        await task
        n2 = (await q.counts()).total
        again = await enqueue_cities(q, [CitySpec(city="Beta", lat=1, lon=2)])
        await q.close()
        return n1, n2, again

    assert asyncio.run(go()) == (1, 3, 0)


def test_simulated_auditors_answer_in_our_formats():
    import geoagent.crawl.simulate  # noqa: F401
    from geoagent.sandbox.responders import respond

    audits = [parse_image_audit(respond(load_prompt("crawl_image_audit.txt"), str(1000 + i), "m", 0)) for i in range(200)]
    assert all(a.parsed for a in audits)
    assert all(a.usable == a.usable_rule for a in audits)
    usable = sum(a.usable for a in audits)
    assert 120 < usable < 190 and any(a.scene_type == "vehicle_interior" for a in audits) and any(a.answer_overlay for a in audits)
    assert respond(load_prompt("crawl_image_audit.txt"), "1", "m", 0) == respond(load_prompt("crawl_image_audit.txt"), "1", "m", 0)
    cands = [RefCandidate(f"Q{i}", lab, 1.0, 0, 0) for i, lab in enumerate(["Central Station", "4th District", "Old Church", "Blue Plaque", "Elm Cafe"])]
    prompt = load_prompt("crawl_referenceability.txt").replace("{candidates}", render_candidates(cands))
    texts = [respond(prompt, None, "m", s) for s in range(40)]
    parsed = [parse_ref_batch(t, 5) for t in texts]
    full = [p for p in parsed if p is not None and len(p) == 5]
    assert full and len(full) < 40  # some answers are cut off on purpose
    assert all(p[1]["ok"] is False and p[0]["familiarity"] >= 3 for p in full)
    sprompt = load_prompt("crawl_sensitive.txt").replace("{candidates}", render_candidates(cands, with_distance=False))
    assert parse_sensitive_batch(respond(sprompt, None, "m", 0), 5) == {i: {"sensitive": False, "why": "ordinary place"} for i in range(5)}


def test_engine_runs_the_crawl_campaign_and_resumes(tmp_path, monkeypatch):
    """``run.py crawl CONFIG`` path: the engine plans the cities and runs the six stages; a re-run is a no-op."""
    from geoagent import engine
    from geoagent.config import config_from_dict
    from geoagent.crawl.demo import SANDBOX_POLICY
    from geoagent.sandbox.city import build_world, serve_world

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|engine|test")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    world = build_world(0)

    async def go():
        async with serve_world(world) as sb:
            cfg = config_from_dict({
                "campaign": {"name": "crawl-e2e", "kind": "crawl"}, "budget": {"cap_usd": 0.0},
                "crawl": {"contact": "mailto:e2e@example.org", "cities": world.cities, "endpoints": sb["endpoints"],
                          "policies": {k: SANDBOX_POLICY for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")}},
            })
            first = await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)
            report = json.loads(first.report_files[0].read_text())
            second = await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)
            return first, report, second, sb["apps"]

    first, report, second, apps = asyncio.run(go())
    assert first.status == "complete" and first.exit_code == 0, first.summary()
    assert first.counts[C.EDGE_RATED].done == 3 and first.counts[C.EDGE_CITIES].done == 2
    state = tmp_path / "state" / "crawl-e2e"
    assert len(list((state / "ladders").glob("*.csv"))) == 3
    assert (tmp_path / "state" / C.IMAGES_DIR).is_dir()
    assert report["api"]["wdqs"]["requests"] > 0 and "sites.csv" in report["files"]
    assert second.status == "complete"
    from geoagent.sandbox import overpass

    n_queries = len(apps["overpass"][overpass.OVERPASS_STATE].queries)
    assert n_queries == 2  # two cities screened once; the second run asked nothing
    assert any("error rate" in line for line in first.extra_lines)


def run_paid_audit_crawl(name: str, budget: dict):
    """Run ``run_campaign`` on a one-city sandbox crawl whose image auditor is a priced simulated [[models]]
    entry (10 USD per 1M tokens both ways) under ``budget`` (the ``[budget]`` table); returns the outcome.
    The caller sets MAPILLARY_TOKEN and the GEOAGENT_QUEUES / GEOAGENT_STATE roots."""
    from geoagent import engine
    from geoagent.config import config_from_dict
    from geoagent.crawl.demo import SANDBOX_POLICY
    from geoagent.sandbox.city import build_world, serve_world

    world = build_world(0)

    async def go():
        async with serve_world(world) as sb:
            cfg = config_from_dict({
                "campaign": {"name": name, "kind": "crawl"}, "budget": budget,
                "models": [{"name": "aud-vision", "provider": "simulated", "model": "sim-vision",
                            "price_input_usd_per_mtok": 10.0, "price_output_usd_per_mtok": 10.0}],
                "crawl": {"contact": "mailto:e2e@example.org", "cities": world.cities[:1], "endpoints": sb["endpoints"],
                          "image_audit": {"model": "aud-vision"},
                          "policies": {k: SANDBOX_POLICY for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")}},
            })
            return await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)

    return asyncio.run(go())


def test_paid_auditor_is_metered_and_capped(tmp_path, monkeypatch):
    """An auditor that is a priced [[models]] entry goes through the campaign ledger: the crawl stops
    dispatching audits at the cap and never spends past it."""
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|engine|test")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    cap = 0.2
    out = run_paid_audit_crawl("crawl-cap", {"cap_usd": cap})
    assert out.status == "budget exhausted", out.summary()
    assert 0 < out.spend["spent_usd"] + out.spend["unknown_usd"] <= cap
    audited = list((tmp_path / "state" / "crawl-cap" / "image_audit").glob("*/*.json"))
    assert len(audited) == out.spend["calls"] > 0
    rec = json.loads(audited[0].read_text())
    assert rec["model"] == "aud-vision" and rec["input_tokens"] > 765  # the image went with the prompt


def test_partial_run_then_resume_gives_the_same_crawl(clean_and_faulty, tmp_path):
    """Stop after the first three stages (as a daemon killed mid-crawl would leave it), then run the whole
    crawl over the same queues and state: the result equals an uninterrupted crawl's."""
    from geoagent.crawl.demo import sandbox_settings
    from geoagent.crawl.stages import build_crawl_services, crawl_stages, enqueue_cities, run_crawl
    from geoagent.runtime.daemon import open_edge_queues, run_pipeline
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.runtime.stage import StageContext
    from geoagent.sandbox.city import build_world, serve_world

    a, sa, _, _ = clean_and_faulty
    world = build_world(0)

    async def go():
        async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(rate=500)) as http:
            settings = sandbox_settings(world, sb["endpoints"])
            kw = dict(state_dir=tmp_path / "state", images_root=tmp_path / "images", mapillary_token="MLY|x|y")
            svc = build_crawl_services(settings, http, **kw)
            stages = crawl_stages()
            queues = open_edge_queues(tmp_path / "queues", "crawl-demo", stages)
            await enqueue_cities(queues[C.EDGE_CITIES], settings.cities)
            await run_pipeline("crawl-demo", stages[:3], queues, StageContext("crawl-demo", {"crawl": svc}), handle_signals=False)
            mid = {e: await q.counts() for e, q in queues.items()}
            for q in queues.values():
                await q.close()
            await run_crawl(settings, campaign="crawl-demo", queues_root=tmp_path / "queues", http=http, **kw)
            return mid

    mid = asyncio.run(go())
    assert mid[C.EDGE_IMAGES].ready == 3 and mid[C.EDGE_RATED].total == 0  # stopped half way
    for f in sa["files"]:
        assert filecmp.cmp(a / "state" / f, tmp_path / "state" / f, shallow=False), f


def test_city_names_that_would_share_a_crawl_key_are_refused_at_load():
    """Two cities whose names fold to one key (Córdoba ES / Cordoba AR) shared one queue key, so the second
    was silently never crawled; a name with no Latin letters or digits had no key at all and failed only
    when its task ran. Both are now config errors naming the cities."""
    from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings
    from geoagent.crawl.stages import city_key

    base = {"contact": "ops@example.org"}
    ok = load_crawl_settings({**base, "cities": [{"city": "Córdoba", "lat": 37.88, "lon": -4.78},
                                                 {"city": "Córdoba AR", "lat": -31.42, "lon": -64.18},
                                                 {"city": "Łódź", "lat": 51.76, "lon": 19.46}]})
    assert [city_key(c.city) for c in ok.cities] == ["cordoba", "cordobaar", "odz"]
    with pytest.raises(CrawlConfigError, match=r"cities\[1\].city = 'Cordoba' and cities\[0\].city = 'Córdoba' share the key 'cordoba'"):
        load_crawl_settings({**base, "cities": [{"city": "Córdoba", "lat": 37.88, "lon": -4.78},
                                                {"city": "Cordoba", "lat": -31.42, "lon": -64.18}]})
    for name in ("東京", "القاهرة", "---"):
        with pytest.raises(CrawlConfigError, match="Latin script"):
            load_crawl_settings({**base, "cities": [{"city": name, "lat": 35.0, "lon": 139.0}]})
