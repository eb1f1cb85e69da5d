"""Candidates shared by two cities are rated the same whatever the order in which the cities are rated.

Two admitted cities 1.5 km apart (the demo world's Sandbox City and "Sandbox East", whose centre is 1.5 km
further east: the same neighbourhoods and entities, other sites) share most of their 6 km candidates.
Before the ratings were kept per city, the city rated second left out every candidate the first city had
already rated, so its batches, their prompts and request keys, and the rating a shared candidate got,
depended on which city finished first. The crawl runs once up to the referenceability auditor; copies of
that state are then audited with the sites in key order (Sandbox City first), in reverse order (Sandbox
East first) and by the real runner with three workers. Every order must send the same rating calls (request
keys counted by the provider) and end with the same ratings table, rated sites and decision logs. The
batches are recomputed from the world: per city, every entity within 6 km of one of its sites (haversine
written in ``tests/_reference.py``), sorted by QID number and cut into batches of 40, each asked whole once.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from _crawl_upstream import audit_with_three_workers, crawl_upstream, pending_sites
from _reference import csv_rows, haversine_km
from geoagent import constants as C
from geoagent.crawl.demo import SANDBOX_POLICY, sandbox_settings
from geoagent.crawl.referenceability import RAW_ANSWERS_FILE, REF_MARKER
from geoagent.crawl.stages import (
    ReferenceabilityAuditorStage,
    build_crawl_services,
    crawl_stages,
    enqueue_cities,
)
from geoagent.demo import demo_world
from geoagent.providers.base import ModelRequest, ModelResponse, Provider
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.sandbox.city import KM_PER_DEG_LAT, serve_world

BATCH = 40  # the sandbox settings' batch size (ReferenceabilitySettings default)
EAST_KM = 1.5


def _world():
    """The demo world with Sandbox City and a second city whose centre is ``EAST_KM`` further east."""
    import math

    world = demo_world()
    sc = world.cities[0]
    dlon = EAST_KM / (KM_PER_DEG_LAT * math.cos(math.radians(sc["lat"])))
    world.cities = [sc, {"city": "Sandbox East", "country": "SB", "continent": "EU", "lat": sc["lat"],
                         "lon": round(sc["lon"] + dlon, 6)}]
    return world


WORLD = _world()


class Recording(Provider):
    """Passes each request to the crawl's own (simulated) provider and records its request key and prompt."""

    kind = "recording-test"
    paid = False

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[str, str]] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls.append((request.key(), request.prompt))
        return await self.inner.generate(request)

    def ref_keys(self) -> list[str]:
        return [k for k, p in self.calls if REF_MARKER in p]


async def _services(root: Path, http, sb):
    settings = sandbox_settings(WORLD, sb["endpoints"])
    svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                               mapillary_token="MLY|sandbox|test")
    return settings, svc


async def _upstream(root: Path) -> None:
    """Screen, sample, fetch and audit images: the sites wait on the ``sites_for_audit`` edge."""
    await crawl_upstream(root, WORLD, "shared")


async def _pending_sites(root: Path) -> list[tuple[str, dict]]:
    return await pending_sites(root, "shared")


async def _audit(root: Path, sites, mode: str) -> Recording:
    """The referenceability stage over ``sites``: "forward" (key order), "reverse", or "runner" (the
    pipeline runner with three workers, then the ladder builder)."""
    async with serve_world(WORLD) as sb, HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY)) as http:
        settings, svc = await _services(root, http, sb)
        rec = Recording(svc.ref_provider)
        svc.ref_provider = rec
        ctx = StageContext("shared", {"crawl": svc, "config": settings})
        if mode == "runner":
            await audit_with_three_workers(root, "shared", ctx)
        else:
            stage = ReferenceabilityAuditorStage()
            await stage.start(ctx)
            tasks = [Task(key, payload, 0, "test-lease") for key, payload in sites]
            for t in (tasks if mode == "forward" else tasks[::-1]):
                await stage.handle(t, ctx)
        return rec


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _outcome(state: Path) -> dict:
    strip = lambda d: {k: v for k, v in d.items() if k != "ts"}  # noqa: E731
    order = lambda d: (d["qid"], str(d.get("city")))  # noqa: E731
    raw = _lines(state / RAW_ANSWERS_FILE)
    return {
        "table": (state / "candidate_referenceability.csv").read_bytes(),
        "rated": {p.name: json.loads(p.read_text())["rated"] for p in sorted((state / "rated").glob("*.json"))},
        "decisions": sorted((strip(d) for d in _lines(state / C.AUDIT_DECISIONS_FILE)), key=order),
        "sensitive": sorted((strip(d) for d in _lines(state / C.AUDIT_SENSITIVE_FILE)), key=order),
        "raw_ref_keys": sorted(r["key"] for r in raw if r["task"] == "crawl_referenceability"),
    }


MODES = ("forward", "reverse", "runner")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("refshared")
    asyncio.run(_upstream(base / "up"))
    shutil.copytree(base / "up", base / "peek")
    sites = asyncio.run(_pending_sites(base / "peek"))
    assert len(sites) == 6 and len({p["site"]["city"] for _, p in sites}) == 2, sites
    out = {"base": base, "sites": sites}
    for mode in MODES:
        shutil.copytree(base / "up", base / mode)
        out[mode] = asyncio.run(_audit(base / mode, sites, mode))
    return out


def _city_batches(state: Path) -> dict[str, list[list[str]]]:
    """Per city (name): every world entity within 6 km of one of its sites, by QID number, in batches of 40."""
    sites = csv_rows(state / "sites.csv")
    out = {}
    for city in sorted({s["city"] for s in sites}):
        near = {e.qid for s in sites if s["city"] == city for e in WORLD.entities
                if haversine_km(float(s["lat"]), float(s["lon"]), e.lat, e.lon) <= 6.0}
        order = sorted(near, key=lambda q: int(q[1:]))
        out[city] = [order[i:i + BATCH] for i in range(0, len(order), BATCH)]
    return out


def test_shared_candidates_get_the_same_calls_and_ratings_in_every_city_order(runs):
    base = runs["base"]
    batches = _city_batches(base / "forward" / "state")
    a, b = (set(q for chunk in v for q in chunk) for v in batches.values())
    assert len(a & b) > 100  # the two cities really share most of their candidates
    ref = {m: runs[m].ref_keys() for m in MODES}
    for m in MODES:
        assert Counter(ref[m]) == Counter(ref["forward"]), m  # the same rating calls ...
        assert len(set(ref[m])) == len(ref[m]), m  # ... each sent once
    outcomes = {m: _outcome(base / m / "state") for m in MODES}
    for m in MODES:
        assert outcomes[m]["raw_ref_keys"] == sorted(ref[m]), m
        assert outcomes[m] == outcomes["forward"], m
    # the order really differed: the two cities were rated in opposite orders
    first = {m: [r["city"] for r in _lines(base / m / "state" / C.CRAWL_DECISIONS_FILE) if r["event"] == "ref_city_rating"]
             for m in ("forward", "reverse")}
    assert first["forward"] == first["reverse"][::-1] and len(first["forward"]) == 2


def test_every_city_asks_each_of_its_batches_whole_even_when_another_city_rated_them(runs):
    """Recomputed from the world: each city's fixed batches (shared candidates included) are each asked
    whole exactly once for that city, whichever city came first; every other rating call re-asks part
    of one of them (a cut-off answer split in halves)."""
    for m in ("forward", "reverse"):
        state = runs["base"] / m / "state"
        raw = [r for r in _lines(state / RAW_ANSWERS_FILE) if r["task"] == "crawl_referenceability"]
        batches = _city_batches(state)
        chunks = [c for v in batches.values() for c in v]
        per_city = Counter(tuple(c) for c in chunks)  # both cities' first batches hold the same QIDs
        assert max(per_city.values()) == 2
        for chunk, n in per_city.items():  # each city's prompt shows its own distances: a call per city
            assert sum(1 for r in raw if tuple(r["qids"]) == chunk) == n, (m, chunk[:3])
        for r in raw:
            assert any(set(r["qids"]) <= set(c) for c in chunks), (m, r["qids"][:3])


def test_a_shared_candidate_is_rated_for_each_city_from_that_citys_batch(runs):
    """Each city's rated sites carry the decision its own batch gave, logged once per (city, candidate)."""
    state = runs["base"] / "reverse" / "state"
    batches = _city_batches(state)
    decisions = _lines(state / C.AUDIT_DECISIONS_FILE)
    keys = [(d["city"], d["qid"]) for d in decisions]
    assert len(keys) == len(set(keys))
    city_key = {c: c.lower().replace(" ", "") for c in batches}
    for city, chunks in batches.items():
        assert {q for (c, q) in keys if c == city_key[city]} == {q for ch in chunks for q in ch}
    by = {(d["city"], d["qid"]): d for d in decisions}
    sites = {s["site"]: s["city"] for s in csv_rows(state / "sites.csv")}
    for p in sorted((state / "rated").glob("*.json")):
        rec = json.loads(p.read_text())
        ck = city_key[sites[rec["site"]["site"]]]
        for r in rec["rated"]:
            assert r["familiarity"] == by[(ck, r["qid"])]["familiarity"], (p.name, r["qid"])


async def _full_crawl(root: Path, cities: list[dict]) -> Recording:
    """The whole crawl (screen to ladders, the runner in burst mode) with ``[[crawl.cities]]`` in this order."""
    async with serve_world(WORLD) as sb, HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY)) as http:
        settings = sandbox_settings(WORLD, sb["endpoints"], cities=cities)
        svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                                   mapillary_token="MLY|sandbox|test")
        rec = Recording(svc.ref_provider)
        svc.ref_provider = rec
        stages = crawl_stages()
        queues = open_edge_queues(root / "queues", "shared", stages)
        try:
            await enqueue_cities(queues[C.EDGE_CITIES], settings.cities)
            await run_pipeline("shared", stages, queues, StageContext("shared", {"crawl": svc, "config": settings}),
                               burst=True, handle_signals=False)
        finally:
            for q in queues.values():
                await q.close()
        return rec


def test_crawls_that_add_the_cities_in_opposite_orders_agree(tmp_path):
    """The crawl end to end, one city crawled to the end before the other is added (as ``watch`` mode
    adds cities to a running crawl): Sandbox City then Sandbox East, and Sandbox East then Sandbox City,
    send the same rating calls and end with the same tables and ladders."""
    recs = {}
    for name, order in (("ab", WORLD.cities), ("ba", WORLD.cities[::-1])):
        first = asyncio.run(_full_crawl(tmp_path / name, [order[0]]))
        second = asyncio.run(_full_crawl(tmp_path / name, list(order)))  # the same state: resumes, adds a city
        recs[name] = first.ref_keys() + second.ref_keys()
        rated = [r["city"] for r in _lines(tmp_path / name / "state" / C.CRAWL_DECISIONS_FILE) if r["event"] == "ref_city_rating"]
        assert rated == [c["city"] for c in order], name  # the cities really were rated in opposite orders
    assert Counter(recs["ab"]) == Counter(recs["ba"]) and len(set(recs["ab"])) == len(recs["ab"]) > 0
    assert _outcome(tmp_path / "ab" / "state") == _outcome(tmp_path / "ba" / "state")
    for f in ("sites.csv", "candidate_referenceability.csv"):
        assert (tmp_path / "ab" / "state" / f).read_bytes() == (tmp_path / "ba" / "state" / f).read_bytes(), f
    ladders = {n: {p.name: p.read_bytes() for p in sorted((tmp_path / n / "state" / "ladders").glob("*.csv"))} for n in recs}
    assert ladders["ab"] == ladders["ba"] and len(ladders["ab"]) == 6
