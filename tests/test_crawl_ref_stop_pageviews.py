"""After a stop request the referenceability auditor finishes its paid call in flight but starts no pageviews
request (free work that the next run redoes); the site is released untouched and the resumed run fetches the
pageviews without paying for the rating again.

The crawl of the demo world's Sandbox City runs up to the referenceability auditor; then the auditor runs under
the real stage runner (SQLite queues, the shared HTTP client as the ``http`` service, the local pageviews fake).
The rating model is a provider double that rates all of the city's candidates in one call (one batch, no
screening pass) and, while that call is in flight, asks the runner to stop: the call was sent, so it finishes
in the grace period and its answer is kept; the pageviews of the site's candidates come after it and must not
be requested.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from _crawl_upstream import crawl_upstream
from geoagent import constants as C
from geoagent.crawl.demo import SANDBOX_POLICY, sandbox_settings
from geoagent.crawl.referenceability import REF_MARKER
from geoagent.crawl.stages import ReferenceabilityAuditorStage, build_crawl_services
from geoagent.demo import demo_world
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.stage import StageContext
from geoagent.sandbox.city import serve_world
from geoagent.sandbox.pageviews import PAGEVIEWS_STATE
from test_crawl_ref_city_tables import DistanceRater

NAME = "refstoppv"


def _world():
    world = demo_world()
    world.cities = world.cities[:1]  # Sandbox City: its three sites
    return world


WORLD = _world()


class StopDuringCall(DistanceRater):
    """Rates as :class:`DistanceRater`; with ``stop`` set, the first rating call requests the run's stop while
    it is in flight (once the runner's view is known), then answers."""

    def __init__(self, state: dict, stop: bool) -> None:
        self.state, self.stop = state, stop
        self.prompts: list[str] = []

    async def generate(self, request):
        self.prompts.append(request.prompt)
        if self.stop and REF_MARKER in request.prompt and "stopped" not in self.state:
            for _ in range(400):
                if "view" in self.state:
                    break
                await asyncio.sleep(0.025)
            self.state["stopped"] = len(self.state["pageviews"].requests)
            for r in self.state["view"].runners:
                r.request_stop()
        return await super().generate(request)


async def _audit(root: Path, *, stop: bool) -> tuple[StopDuringCall, dict, list]:
    state: dict = {}

    async def tick(view) -> None:
        state.setdefault("view", view)

    async with serve_world(WORLD) as sb, HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY)) as http:
        state["pageviews"] = sb["apps"]["pageviews"][PAGEVIEWS_STATE]
        settings = sandbox_settings(WORLD, sb["endpoints"],
                                    referenceability={"pageviews": True, "batch_size": 1000, "sensitive_screen": False})
        svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                                   mapillary_token="MLY|sandbox|test")
        prov = svc.ref_provider = StopDuringCall(state, stop)
        stages = [ReferenceabilityAuditorStage()]
        queues = open_edge_queues(root / "queues", NAME, stages)
        try:
            ctx = StageContext(NAME, {"crawl": svc, "config": settings, "http": http})
            await run_pipeline(NAME, stages, queues, ctx, burst=True, handle_signals=False, tick=tick, tick_interval_s=0.02)
            q = queues[C.EDGE_SITES_FOR_AUDIT]
            counts = await q.counts()
            leased = await q.lease(10, 60.0)
            await q.release(leased)
        finally:
            for q in queues.values():
                await q.close()
        return prov, {**state, "counts": counts, "requests": list(state["pageviews"].requests)}, leased


def test_no_pageviews_request_starts_after_a_stop_and_the_resume_pays_nothing_again(tmp_path):
    asyncio.run(crawl_upstream(tmp_path, WORLD, NAME))
    state_dir = tmp_path / "state"

    prov, st, leased = asyncio.run(_audit(tmp_path, stop=True))
    assert "stopped" in st and st["stopped"] == 0  # the stop came during the first paid call, before any pageviews
    assert len(prov.prompts) == 1  # one call: every candidate of the city in one batch, no screening pass
    assert st["requests"] == []  # no pageviews request after the stop
    # the site was released untouched, and nothing of it was stored as rated
    assert (st["counts"].ready, st["counts"].done, st["counts"].dead) == (3, 0, 0)
    assert sorted(t.attempts for t in leased) == [0, 0, 0]
    assert not (state_dir / "rated").exists() or not any((state_dir / "rated").iterdir())
    # the paid answer in flight at the stop was finished and kept: a decision for every candidate of the city
    marker = json.loads(next((state_dir / "ref_cities").glob("*.json")).read_text())
    decisions = [json.loads(x) for x in (state_dir / C.AUDIT_DECISIONS_FILE).read_text().splitlines()]
    assert sorted(d["qid"] for d in decisions) == sorted(marker["qids"]) and len(decisions) > 100

    prov2, st2, _ = asyncio.run(_audit(tmp_path, stop=False))
    assert prov2.prompts == []  # the rating is not paid for again
    assert st2["counts"].done == 3 and len(list((state_dir / "rated").glob("*.json"))) == 3
    # the resumed run asked for the pageviews: once per article with an English Wikipedia title (a candidate near
    # two of the city's sites is asked once: the client keeps its answers)
    titles: set[str] = set()
    for p in sorted((state_dir / "ref_candidates").glob("*.json")):
        titles |= {c["enwiki_title"].replace(" ", "_") for c in json.loads(p.read_text())["candidates"] if c["enwiki_title"]}
    assert sorted(st2["requests"]) == sorted(titles) and titles
