"""The referenceability tables keep every city's rating of a candidate shared by two cities.

Referenceability is rated per city (the prompt shows the distance from that city's nearest site), so a
candidate within 6 km of sites of two cities can get a different rating in each. The release's
``candidate_referenceability.csv`` has one row per QID; the crawl keeps it in exactly that layout and writes
every (QID, city) rating to ``candidate_referenceability_by_city.csv``. The release table's choice for a
shared QID is explicit: the rating made for the city whose site is nearest to the candidate (ties to the
smaller city key).

The world is the demo world with a second city 1.5 km east of Sandbox City (``test_crawl_ref_shared``); the
crawl runs up to the referenceability auditor once, and copies are audited with the sites in key order and
in reverse order (the two cities rated in opposite orders). The auditor here is a provider double that
rates by the distance the prompt shows (nearer: more referenceable), so shared candidates really get
different ratings per city. Expected tables are recomputed from the world: each city's sites from
``sites.csv``, every entity within 6 km of one of them, distances by the haversine of ``tests/_reference.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import orjson
import pytest

from _crawl_upstream import crawl_upstream, pending_sites
from _reference import csv_rows, haversine_km
from geoagent import constants as C
from geoagent.crawl.demo import SANDBOX_POLICY, sandbox_settings
from geoagent.crawl.referenceability import REF_MARKER
from geoagent.crawl.stages import ReferenceabilityAuditorStage, build_crawl_services
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, Usage
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.sandbox.city import serve_world
from test_crawl_ref_shared import WORLD

_LINE = re.compile(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))?(?: \(([0-9.]+) km\))?$", re.M)


def rating_for(dist_km: float) -> int:
    """The double's referenceability for a candidate shown ``dist_km`` from the reference point: 5 within
    1 km, one less per further km, 0 from 5 km."""
    return max(0, 5 - int(dist_km))


class DistanceRater(Provider):
    """Rates each listed candidate by the distance its prompt line shows; screens nothing as sensitive."""

    kind = "distance-rater-test"
    paid = False

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if REF_MARKER in request.prompt:
            body = request.prompt.split("Candidates", 1)[-1]
            arr = [{"idx": int(i), "ok": True, "familiarity": rating_for(float(d)), "zh": None, "en": lab, "why": "d"}
                   for i, lab, d in _LINE.findall(body)]
        else:
            body = request.prompt.split("Names:", 1)[-1]
            arr = [{"idx": int(i), "sensitive": False, "why": "ordinary"} for i, _, _ in _LINE.findall(body)]
        return ModelResponse(text=orjson.dumps(arr).decode(), usage=Usage(10, 10))


async def _audit(root: Path, sites: list[tuple[str, dict]]) -> None:
    async with serve_world(WORLD) as sb, HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY)) as http:
        settings = sandbox_settings(WORLD, sb["endpoints"])
        svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                                   mapillary_token="MLY|sandbox|test")
        svc.ref_provider = DistanceRater()
        ctx = StageContext("citytables", {"crawl": svc, "config": settings})
        stage = ReferenceabilityAuditorStage()
        await stage.start(ctx)
        for key, payload in sites:
            await stage.handle(Task(key, payload, 0, "test-lease"), ctx)


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    base = tmp_path_factory.mktemp("citytables")
    asyncio.run(crawl_upstream(base / "up", WORLD, "citytables"))
    shutil.copytree(base / "up", base / "peek")
    sites = asyncio.run(pending_sites(base / "peek", "citytables"))
    assert len(sites) == 6 and len({p["site"]["city"] for _, p in sites}) == 2, sites
    for mode, order in (("forward", sites), ("reverse", sites[::-1])):
        shutil.copytree(base / "up", base / mode)
        asyncio.run(_audit(base / mode, order))
    return base


def _expected(state: Path) -> tuple[dict[tuple[str, str], tuple[int, float]], dict[str, str]]:
    """(qid, city key) -> (rating, km from the city's nearest site), and qid -> the city the release table
    takes it from (nearest site; ties to the smaller city key), recomputed from the world."""
    per_city: dict[tuple[str, str], float] = {}
    for s in csv_rows(state / "sites.csv"):
        city = s["city"].lower().replace(" ", "")
        for e in WORLD.entities:
            d = haversine_km(float(s["lat"]), float(s["lon"]), e.lat, e.lon)
            if d <= 6.0 and d < per_city.get((e.qid, city), float("inf")):
                per_city[(e.qid, city)] = d
    # the prompt shows the distance with two decimals: that is what the double rated
    out = {k: (rating_for(float(f"{d:.2f}")), d) for k, d in per_city.items()}
    chosen: dict[str, str] = {}
    for (q, city), (_, d) in sorted(out.items()):
        if q not in chosen or d < out[(q, chosen[q])][1]:
            chosen[q] = city
    return out, chosen


def test_per_city_ratings_are_kept_and_the_release_table_takes_the_nearest_city(audited):
    state = audited / "forward" / "state"
    want, chosen = _expected(state)
    rows = csv_rows(state / "candidate_referenceability_by_city.csv")
    assert list(rows[0]) == ["qid", "city", "sitelinks", "familiarity", "dist_km"]
    got = {(r["qid"], r["city"]): r for r in rows}
    assert len(got) == len(rows) and set(got) == set(want)
    links = {e.qid: e.sitelinks for e in WORLD.entities}
    for k, r in got.items():
        assert int(r["familiarity"]) == want[k][0], k
        assert float(r["dist_km"]) == pytest.approx(want[k][1], abs=1e-5), k
        assert int(r["sitelinks"]) == links[k[0]], k
    assert [(r["qid"], r["city"]) for r in rows] == sorted(got)  # by QID text, then city
    # the ratings really differ between the cities for many shared candidates (the case the table is for)
    shared = {q for q, c in want if (q, "sandboxcity") in want and (q, "sandboxeast") in want}
    differ = {q for q in shared if want[(q, "sandboxcity")][0] != want[(q, "sandboxeast")][0]}
    assert len(differ) > 20
    # both cities' ratings are the ones logged for them
    decisions = [json.loads(x) for x in (state / C.AUDIT_DECISIONS_FILE).read_text().splitlines()]
    logged = {(d["qid"], d["city"]): d["familiarity"] for d in decisions}
    assert all(logged[k] == int(r["familiarity"]) for k, r in got.items())

    release = csv_rows(state / "candidate_referenceability.csv")
    assert list(release[0]) == ["qid", "sitelinks", "familiarity"]  # the release's layout, one row per QID
    assert [r["qid"] for r in release] == sorted(chosen)  # sorted by QID text, as released
    for r in release:
        q = r["qid"]
        assert int(r["familiarity"]) == want[(q, chosen[q])][0], q
        assert int(r["sitelinks"]) == links[q]
    # the choice is not "the city whose sites sort last": some shared candidates come from each city
    picked = {chosen[q] for q in differ}
    assert picked == {"sandboxcity", "sandboxeast"}


def test_both_tables_are_the_same_whichever_city_is_rated_first(audited):
    first = {}
    for mode in ("forward", "reverse"):
        state = audited / mode / "state"
        recs = [json.loads(x) for x in (state / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]
        first[mode] = [r["city"] for r in recs if r["event"] == "ref_city_rating"]
    assert first["forward"] == first["reverse"][::-1] and len(set(first["forward"])) == 2  # opposite orders
    for name in ("candidate_referenceability.csv", "candidate_referenceability_by_city.csv"):
        a, b = ((audited / m / "state" / name).read_bytes() for m in ("forward", "reverse"))
        assert a == b and a.count(b"\n") > 100, name
