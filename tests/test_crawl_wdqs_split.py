"""The crawl over a WDQS that times out on big areas: the site sampler and the referenceability auditor split
their area queries and end with exactly the outputs of a crawl whose WDQS answers every query whole.

Both crawls run the whole pipeline over the sandbox world (local fakes, simulated auditors); the second
fake answers every query over more than 20 km^2 with the real timeout shape (500 + Blazegraph
``TimeoutException``), so the 3 km candidate circle (28 km^2) and the 6 km entity circle (113 km^2) can only be
answered in boxes. Every split is in ``crawl_decisions.jsonl`` (and in the export's ``crawl_decisions``
table). A depth limit too small for the area dead-letters the city with a message naming it.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from geoagent import constants as C
from geoagent.crawl.settings import load_crawl_settings
from geoagent.crawl.stages import run_crawl
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.sandbox.city import build_world, serve_world
from geoagent.sandbox.wdqs import WDQS_STATE, area_km2

FAST = {"rate": 500.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 2, "backoff_base_s": 0.01,
        "backoff_max_s": 0.05, "timeout_s": 10.0}


async def _crawl(tmp, world, *, threshold_km2=None, **extra):
    async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**FAST)) as http:
        st = sb["apps"]["wdqs"][WDQS_STATE]
        st.timeout_above_km2 = threshold_km2
        settings = load_crawl_settings({
            "contact": "mailto:crawl-test@example.org", "seed": 7, "cities": world.cities[:1],
            "endpoints": sb["endpoints"], "policies": {k: FAST for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")},
            "referenceability": {"pageviews": False, "batch_size": 25}, **extra,
        })
        await run_crawl(settings, campaign="splittest", queues_root=tmp / "queues", state_dir=tmp / "state",
                        images_root=tmp / "images", http=http, mapillary_token="MLY|sandbox|token")
        return st


def _outputs(state):
    """Sampling records, rated candidates per site, sites.csv and the ladder files of a finished crawl."""
    sampling = {p.name: json.loads(p.read_text()) for p in sorted((state / "sampling").glob("*.json"))}
    rated = {p.name: json.loads(p.read_text()) for p in sorted((state / "rated").glob("*.json"))}
    ladders = {p.name: p.read_text() for p in sorted((state / "ladders").glob("*.csv"))}
    return sampling, rated, (state / "sites.csv").read_text(), ladders


@pytest.fixture(scope="module")
def two_crawls(tmp_path_factory):
    world = build_world(0)
    whole_dir, split_dir = tmp_path_factory.mktemp("whole"), tmp_path_factory.mktemp("split")
    st_whole = asyncio.run(_crawl(whole_dir, world))
    st_split = asyncio.run(_crawl(split_dir, world, threshold_km2=20.0))
    return world, whole_dir / "state", split_dir / "state", st_whole, st_split


def test_split_crawl_has_exactly_the_items_of_the_whole_queries(two_crawls):
    world, whole, split, st_whole, st_split = two_crawls
    assert st_whole.area_timeouts == 0 and st_split.area_timeouts > 0
    assert sum(area_km2(q) > 20.0 for q in st_split.queries) == st_split.area_timeouts  # only big areas failed
    s_whole, r_whole, sites_whole, l_whole = _outputs(whole)
    s_split, r_split, sites_split, l_split = _outputs(split)
    assert s_whole and r_whole and l_whole
    assert s_split == s_whole  # same candidate count, same shuffled walk, same sites
    assert sites_split == sites_whole
    assert r_split.keys() == r_whole.keys()
    for name in r_whole:
        assert r_split[name]["n_candidates"] == r_whole[name]["n_candidates"] > 0
        assert r_split[name]["coords"] == r_whole[name]["coords"]
        assert r_split[name]["sitelinks"] == r_whole[name]["sitelinks"]
        assert r_split[name]["rated"] == r_whole[name]["rated"]
    assert l_split == l_whole
    # the candidate set of each site, recomputed from the world: every entity within 6 km
    from _reference import haversine_km

    for rec in r_split.values():
        site = rec["site"]
        expected = {e.qid for e in world.entities
                    if haversine_km(float(site["lat"]), float(site["lon"]), e.lat, e.lon) <= 6.0}
        assert set(rec["coords"]) == expected


def test_every_split_is_in_the_decision_log(two_crawls):
    world, whole, split, st_whole, st_split = two_crawls
    logged = {name: [json.loads(line) for line in (state / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]
              for name, state in (("whole", whole), ("split", split))}
    assert {r["event"] for r in logged["whole"]} == {"ref_city_rating"}  # no split without a timeout
    # the per-city rating step is logged once per city, the same with or without splits
    for name, state in (("whole", whole), ("split", split)):
        steps = [r for r in logged[name] if r["event"] == "ref_city_rating"]
        sites = sorted(json.loads(p.read_text())["site"]["site"] for p in (state / "rated").glob("*.json"))
        assert [(r["city"], r["sites"]) for r in steps] == [("Sandbox City", sites)], name
    # the step's counts, recomputed from the stored per-site candidate lists and the raw answer log
    for name, state in (("whole", whole), ("split", split)):
        (step,) = [r for r in logged[name] if r["event"] == "ref_city_rating"]
        lists = [[c["qid"] for c in json.loads(p.read_text())["candidates"]]
                 for p in sorted((state / "ref_candidates").glob("*.json"))]
        per_qid = Counter(q for qs in lists for q in set(qs))
        raw = [json.loads(line) for line in (state / "audit_raw_answers.jsonl").read_text().splitlines()]
        assert step["n_candidates"] == len(per_qid) and step["n_site_listings"] == sum(map(len, lists)), name
        assert step["n_shared_candidates"] == sum(1 for n in per_qid.values() if n > 1) > 0, name
        assert step["n_site_listings"] >= step["n_candidates"] >= step["n_shared_candidates"]
        assert step["batch_size"] == 25 and step["rating_batches"] == -(-len(per_qid) // 25)
        # a first crawl asks every batch (rating and sensitive screen) and replays nothing
        assert step["rating_batches_asked"] == step["screening_batches_asked"] == step["rating_batches"], step
        assert step["answers_replayed"] == 0 and step["model_calls"] == len(raw), (step, len(raw))
        assert not {"n_shared", "asked", "calls", "replayed"} & set(step)
    recs = [r for r in logged["split"] if r["event"] != "ref_city_rating"]
    assert recs and all(r["event"] == "wdqs_split" for r in recs)
    by_stage = {r["stage"] for r in recs}
    assert by_stage == {C.STAGE_SAMPLER, C.STAGE_REF_AUDITOR}
    sampler = [r for r in recs if r["stage"] == C.STAGE_SAMPLER]
    # 3 km circle (28 km^2) -> four 3 x 3 km boxes (9 km^2 <= 20): one split of the whole circle
    assert [(r["city"], r["depth"], r["query"]) for r in sampler] == [("Sandbox City", 0, "site_candidates")]
    assert sampler[0]["area"] == "city Sandbox City"
    sites = {json.loads(p.read_text())["site"]["site"] for p in (split / "rated").glob("*.json")}
    refs = [r for r in recs if r["stage"] == C.STAGE_REF_AUDITOR]
    # 6 km circle (113 km^2) -> 36 km^2 quadrants -> 9 km^2 boxes: per site 1 + 4 splits
    assert {r["site"] for r in refs} == sites
    for sid in sites:
        assert sorted(r["depth"] for r in refs if r["site"] == sid) == [0, 1, 1, 1, 1]
    # the log records the timeouts it reacted to, one per split (a deadline answer is never sent again)
    assert st_split.area_timeouts == len(recs)


def test_decision_log_is_exported_row_for_row(two_crawls, tmp_path):
    """``run.py export``'s crawl tables include the decision log: one row per record, in log order; a split
    with its centre, box and parts (Parquet and CSV agree; CSV: the parts list as JSON text); the city rating
    steps (``ref_city_rating``) with their own fields in ``extra``."""
    import csv

    import polars as pl

    from geoagent.crawl.export import export_crawl_tables

    world, whole, split, st_whole, st_split = two_crawls
    recs = [json.loads(line) for line in (split / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]
    tables = {t.table: t for t in export_crawl_tables(split, tmp_path / "export")}
    assert tables["crawl_decisions"].rows == len(recs) > 0
    df = pl.read_parquet(tmp_path / "export" / "crawl_decisions.parquet")
    assert df.height == len(recs) and df["event"].to_list() == [r["event"] for r in recs]
    rating = [(row, rec) for row, rec in zip(df.iter_rows(named=True), recs) if rec["event"] == "ref_city_rating"]
    assert rating  # one per city
    for row, rec in rating:
        assert (row["stage"], row["city"], row["site"]) == (rec["stage"], rec["city"], rec["site"])
        extra = json.loads(row["extra"])
        assert extra["n_candidates"] == rec["n_candidates"] and extra["sites"] == rec["sites"]
    splits = [(i, rec) for i, rec in enumerate(recs) if rec["event"] == "wdqs_split"]
    rows = df.to_dicts()
    for row, rec in ((rows[i], rec) for i, rec in splits):
        assert (row["ts"], row["stage"], row["event"], row["query"], row["area"], row["depth"], row["reason"]) == (
            rec["ts"], rec["stage"], rec["event"], rec["query"], rec["area"], rec["depth"], rec["reason"])
        assert row["city"] == rec.get("city") and row["site"] == rec.get("site")
        assert [row["center_lat"], row["center_lon"]] == rec["center"] and row["radius_km"] == rec["radius_km"]
        assert [row["box_west"], row["box_south"], row["box_east"], row["box_north"]] == rec["box"]
        assert row["box_km2"] == rec["box_km2"] and row["parts"] == rec["parts"] and row["n_parts"] == 4
        assert row["extra"] is None
    with (tmp_path / "export" / "crawl_decisions.csv").open(encoding="utf-8", newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert [json.loads(csv_rows[i]["parts"]) for i, _ in splits] == [r["parts"] for _, r in splits]
    assert [float(csv_rows[i]["box_km2"]) for i, _ in splits] == [r["box_km2"] for _, r in splits]
    # the crawl whose WDQS answered every query whole: only its city rating steps, the same columns
    whole_df = pl.read_parquet(export_crawl_tables(whole, tmp_path / "whole")[-1].parquet)
    assert set(whole_df["event"]) == {"ref_city_rating"} and whole_df.columns == df.columns


def test_depth_limit_dead_letters_the_city_naming_it(tmp_path):
    world = build_world(0)
    asyncio.run(_crawl(tmp_path, world, threshold_km2=5.0, sampler={"wdqs_split_depth": 1}))

    async def dead():
        q = open_queue(tmp_path / "queues", "splittest", C.EDGE_ADMITTED)
        try:
            return await q.dead_letters(10)
        finally:
            await q.close()

    letters = asyncio.run(dead())
    assert len(letters) == 1 and letters[0].attempts == 1
    assert "city Sandbox City" in letters[0].reason and "1 spatial split" in letters[0].reason
    assert not (tmp_path / "state" / "sites.csv").exists() or "Sandbox City" not in (tmp_path / "state" / "sites.csv").read_text()
