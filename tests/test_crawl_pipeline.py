"""End to end: the crawl stages over the sandbox city (four local fakes, simulated auditors), and resume."""

from __future__ import annotations

import asyncio
import csv
import json

import pytest

from geoagent import constants as C
from geoagent.crawl.image_audit import IMAGE_AUDIT_COLUMNS
from geoagent.crawl.ladder import LADDER_COLUMNS, band_for, tier_for
from geoagent.crawl.referenceability import REF_PARSER_VERSION
from geoagent.crawl.sampler import SITES_COLUMNS
from geoagent.crawl.screener import CITY_POOL_COLUMNS
from geoagent.crawl.settings import load_crawl_settings
from geoagent.crawl.stages import run_crawl
from geoagent.geo import haversine_km
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.city import build_world, serve_world

FAST = {"rate": 500.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 10.0}


def _settings(world, endpoints, **extra):
    return load_crawl_settings({
        "contact": "mailto:crawl-test@example.org", "seed": 7, "cities": world.cities,
        "endpoints": endpoints, "policies": {k: FAST for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")},
        "referenceability": {"pageviews": True, "batch_size": 25}, **extra,
    })


async def _crawl(tmp_path, world, **extra):
    async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**FAST)) as http:
        settings = _settings(world, sb["endpoints"], **extra)
        run = await run_crawl(settings, campaign="crawltest", queues_root=tmp_path / "queues", state_dir=tmp_path / "state",
                              images_root=tmp_path / "images", http=http, mapillary_token="MLY|sandbox|token")
        return run, sb["apps"]


def _csv(path):
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crawl")
    world = build_world(0)
    run, apps = asyncio.run(_crawl(tmp, world))
    counts = asyncio.run(_counts(tmp))
    return tmp, world, run, apps, counts


async def _counts(tmp):
    from geoagent.runtime.queue import open_queue

    out = {}
    for e in (C.EDGE_CITIES, C.EDGE_ADMITTED, C.EDGE_SITES, C.EDGE_IMAGES, C.EDGE_SITES_FOR_AUDIT, C.EDGE_RATED):
        q = open_queue(tmp / "queues", "crawltest", e)
        out[e] = await q.counts()
        await q.close()
    return out


def test_screening_admits_the_city_and_rejects_the_sprawl(crawled):
    tmp, world, run, apps, counts = crawled
    rows = _csv(tmp / "state" / "city_pool.csv")
    assert tuple(rows[0]) == CITY_POOL_COLUMNS
    by = {r["city"]: r for r in rows}
    assert by["Sandbox City"]["eligible"] == "True" and by["Sprawl Town"]["eligible"] == "False"
    scr = json.loads((tmp / "state" / "screening" / "sandboxcity.json").read_text())
    assert scr["n_nodes_raw"] - scr["n_nodes_filtered"] == sum(
        1 for e in world.overpass_elements if "chome" in e["tags"]["name"] or "丁目" in e["tags"]["name"])
    assert all(c.dead == 0 and c.ready == 0 and c.leased == 0 for c in counts.values()), counts


def test_sites_follow_the_sampling_rules(crawled):
    tmp, world, run, apps, counts = crawled
    sites = _csv(tmp / "state" / "sites.csv")
    assert tuple(sites[0]) == SITES_COLUMNS and len(sites) == 3
    for s in sites:
        assert float(s["sitelinks"]) <= 60 and float(s["sv_perspective"]) >= 8
        assert s["sitelinks"].isdigit() and s["sv_perspective"].isdigit()  # counts, written as integers
        assert haversine_km(world.cities[0]["lat"], world.cities[0]["lon"], float(s["lat"]), float(s["lon"])) <= 3.0
    for a in sites:
        for b in sites:
            if a is not b:
                assert haversine_km(float(a["lat"]), float(a["lon"]), float(b["lat"]), float(b["lon"])) >= 0.25
    rec = json.loads((tmp / "state" / "sampling" / "sandboxcity.json").read_text())
    # spacing is checked before coverage: a spacing skip never costs a coverage call
    takes = [w for w in rec["walk"] if w["decision"] == "take"]
    cov = [w for w in rec["walk"] if w["decision"] in ("take", "skip_coverage")]
    assert rec["coverage_calls"] == len(cov) and len(takes) == 3 and isinstance(rec["seed"], int)


def test_images_saved_spread_bright_and_audited(crawled):
    tmp, world, run, apps, counts = crawled
    sites = _csv(tmp / "state" / "sites.csv")
    bright = {i.image_id: i.brightness for i in world.images}
    n_total = 0
    for s in sites:
        meta = json.loads((tmp / "state" / "image_selection" / f"{s['site']}.json").read_text())
        kept = meta["kept"]
        n_total += len(kept)
        for k in kept:
            assert (tmp / "images" / s["site"] / f"{k['image_id']}.jpg").is_file()
            assert k["brightness"] >= 90 and bright[k["image_id"]] >= 90
            assert {"image_id", "lat", "lon", "captured_at_ms", "compass_angle"} <= set(k)
        for a in kept:
            for b in kept:
                if a is not b:
                    assert haversine_km(a["lat"], a["lon"], b["lat"], b["lon"]) * 1000 >= 40
        reasons = " ".join(r["reason"] for r in meta["rejected"])
        assert all(bright[r["image_id"]] < 90 for r in meta["rejected"] if r["reason"].startswith("too dark"))
        assert "panorama" in reasons or "too dark" in reasons or "within 40 m" in reasons
    rows = _csv(tmp / "state" / "image_audit.csv")
    assert tuple(rows[0]) == IMAGE_AUDIT_COLUMNS and len(rows) == n_total > 0
    # every image path of the crawl's tables is relative to the images root, the same value in each table
    paths_csv = {r["image_id"]: r["path"] for r in _csv(tmp / "state" / "images.csv")}
    assert {r["image"] for r in rows} == set(paths_csv.values())
    assert all((tmp / "images" / r["image"]).is_file() for r in rows)


def test_referenceability_logs_and_ladders(crawled):
    tmp, world, run, apps, counts = crawled
    sites = _csv(tmp / "state" / "sites.csv")
    decisions = [json.loads(l) for l in (tmp / "state" / C.AUDIT_DECISIONS_FILE).read_text().splitlines()]
    sens = [json.loads(l) for l in (tmp / "state" / C.AUDIT_SENSITIVE_FILE).read_text().splitlines()]
    ok_keys = {"qid", "label", "model", "ok", "familiarity", "name_zh", "name_en", "why", "ts"}
    # the crawl rates per city: the release's keys plus the city key the rating was made for and the version of
    # the candidate lines it was shown (session 12: 2, with the English Wikipedia title) and the version of the rules
    # its answer was read by (session 40, crawl40 #1/#2)
    assert all(set(d) == ok_keys | {"city", "candidate_lines", "parser_version"} or {"error", "raw", "city"} <= set(d)
               for d in decisions)
    assert {d.get("parser_version") for d in decisions} == {REF_PARSER_VERSION}
    assert {d.get("candidate_lines") for d in decisions if "error" not in d} == {2}
    assert {d["city"] for d in decisions} == {s["city"].lower().replace(" ", "") for s in sites}  # "Sandbox City" -> sandboxcity
    assert {"qid", "label", "model", "auditor", "sensitive", "why", "ts"} <= set(sens[0])
    # every entity within 6 km of each site was audited, famous or not
    audited = {d["qid"] for d in decisions}
    for s in sites:
        near = {e.qid for e in world.entities if haversine_km(float(s["lat"]), float(s["lon"]), e.lat, e.lon) <= 6.0}
        assert near <= audited
    assert any(d["qid"] == next(e.qid for e in world.entities if "Slave Trader" in e.label) and d["sensitive"] for d in sens)
    cr = _csv(tmp / "state" / "candidate_referenceability.csv")
    assert tuple(cr[0]) == ("qid", "sitelinks", "familiarity") and len(cr) == len({d["qid"] for d in decisions if d["familiarity"] is not None})
    links = {e.qid: e.sitelinks for e in world.entities}
    assert all(int(r["sitelinks"]) == links[r["qid"]] for r in cr)
    for s in sites:
        files = list((tmp / "state" / "ladders").glob(f"{s['site']}_ladder_*.csv"))
        assert len(files) == 1
        rows = _csv(files[0])
        assert rows and tuple(rows[0]) == LADDER_COLUMNS
        for r in rows:
            assert band_for(float(r["dist_km"])) == r["band"] and tier_for(r["familiarity"]) == r["tier"]
            assert int(r["n_taken"]) <= 2 and r["qid"] != s["qid"]
            assert "Slave Trader" not in r["label_raw"]


def test_rerun_resumes_without_new_calls(crawled, tmp_path):
    """A second run over the same state finds every task done: no API or model call is repeated."""
    tmp, world, run, apps, counts = crawled
    run2, apps2 = asyncio.run(_crawl(tmp, world))
    from geoagent.sandbox import mapillary, overpass, wdqs

    assert apps2["overpass"][overpass.OVERPASS_STATE].queries == []
    assert apps2["wdqs"][wdqs.WDQS_STATE].queries == []
    assert apps2["mapillary"][mapillary.MAPILLARY_STATE].search_requests == []


def test_results_feed_the_evaluations(crawled):
    """The crawl's state folder imports like a release (sites, ladders), and its images and rated
    candidates build GeoVerify trials with signal and decoy bands."""
    from geoagent.crawl.export import crawl_records
    from geoagent.data.importer import import_release
    from geoagent.geoverify.trials import build_trials

    tmp, world, run, apps, counts = crawled
    rel = import_release(tmp / "state")
    recs = crawl_records(tmp / "state", tmp / "images")
    assert len(recs["sites"]) == 3 and recs["images"] and recs["reference_points"]
    assert {s.site_id for s in recs["sites"]} == {im.site_id for im in recs["images"]}
    assert all(p.lat is not None and p.band in (None, "0.5-1.5km", "1.5-3.0km", "3.0-6.0km") for p in recs["reference_points"])
    pools = {}
    for p in recs["reference_points"]:
        pools.setdefault(p.site_id, []).append(p)
    trials, rep = build_trials(recs["images"], pools, seed=1)
    bands = {t.band for t in trials}
    assert "signal" in bands and len(bands) >= 4, bands
    with (tmp / "state" / "images.csv").open(encoding="utf-8") as f:
        assert sum(1 for r in csv.DictReader(f) if r["usable"] == "True") == len(recs["images"])
    assert set(rel.sites) == {s.site_id for s in recs["sites"]} and set(rel.ladders) == set(rel.sites)
    assert rel.report.ok, rel.report.summary()
    # GeoHint: the imported ladders and the crawled images (real files on disk) make a request plan
    from geoagent.geohint.conditions import DEFAULT_CONDITIONS, get_condition
    from geoagent.geohint.plan import ModelSpec, plan_requests

    planned, summary = plan_requests(rel.sites, recs["images"], rel.ladders, [ModelSpec("sim-model")],
                                     [get_condition(c) for c in DEFAULT_CONDITIONS], image_root=tmp / "images")
    assert planned and all(p.image_ref for p in planned)
    n_points = sum(len(l.points) for l in rel.ladders.values())
    assert n_points > 0


def test_human_verdicts_merge_into_the_audit_table(crawled, tmp_path):
    """A human keep/exclude CSV is joined by image id; `usable` follows the human verdict; the agreement
    summary and the two disagreement tables are written."""
    from geoagent.crawl.stages import build_crawl_services, rewrite_image_audit_csv
    from geoagent.crawl.image_audit import image_key

    tmp, world, run, apps, counts = crawled
    rows = _csv(tmp / "state" / "image_audit.csv")
    human = tmp_path / "human.csv"
    with human.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "human_verdict", "human_reason"])
        for i, r in enumerate(rows):
            verdict = "exclude" if i % 4 == 0 else "keep"
            w.writerow([r["image"].replace("/", "\\"), verdict, "nothing identifies a location" if verdict == "exclude" else ""])
    settings = _settings(world, {"overpass": "http://127.0.0.1:9/api", "wdqs": "http://127.0.0.1:9/sparql",
                                 "pageviews": "http://127.0.0.1:9", "mapillary": "http://127.0.0.1:9"},
                         image_audit={"human_verdicts": str(human)})
    state = tmp_path / "state"
    import shutil

    shutil.copytree(tmp / "state", state)
    svc = build_crawl_services(settings, HttpClient(), state_dir=state, images_root=tmp / "images", mapillary_token="MLY|x|y")
    rewrite_image_audit_csv(svc)
    merged = {image_key(r["image"]): r for r in _csv(state / "image_audit.csv")}
    assert len(merged) == len(rows)
    for i, r in enumerate(rows):
        m = merged[image_key(r["image"])]
        assert m["human_verdict"] == ("exclude" if i % 4 == 0 else "keep")
        assert m["usable"] == ("False" if i % 4 == 0 else "True")
    summ = json.loads((state / "image_audit_agreement.json").read_text())
    assert summ["n"] == len(rows)
    n_hx = sum(1 for i, r in enumerate(rows) if i % 4 == 0 and r["ai_usable"] == "True")
    assert summ["human_excludes_model_accepts"] == n_hx == len(_csv(state / "image_audit_human_excludes_model_accepts.csv"))
    usable_csv = [r for r in _csv(state / "images.csv") if r["usable"] == "True"]
    assert len(usable_csv) == sum(1 for i in range(len(rows)) if i % 4)
