"""The upstream half of an offline crawl, for tests of the referenceability audit.

:func:`crawl_upstream` screens, samples, fetches and audits images of ``world`` against the sandbox fakes
(no referenceability audit yet): the sites wait on the ``sites_for_audit`` edge of campaign ``name`` under
``root / "queues"``. :func:`pending_sites` reads them back (leased, so call it on a copy of ``root``).
Nothing is mocked: the crawl stages, the HTTP client, SQLite queues and the sandbox servers are real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.crawl.demo import SANDBOX_POLICY, sandbox_settings
from geoagent.crawl.stages import build_crawl_services, crawl_stages, enqueue_cities
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import StageContext
from geoagent.sandbox.city import serve_world


async def crawl_upstream(root: Path, world: Any, name: str) -> None:
    """Run the first four crawl stages of ``world`` in burst mode under ``root`` (campaign ``name``)."""
    async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY)) as http:
        settings = sandbox_settings(world, sb["endpoints"])
        svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                                   mapillary_token="MLY|sandbox|test")
        stages = crawl_stages()[:4]
        queues = open_edge_queues(root / "queues", name, stages)
        try:
            await enqueue_cities(queues[C.EDGE_CITIES], settings.cities)
            await run_pipeline(name, stages, queues, StageContext(name, {"crawl": svc, "config": settings}),
                               burst=True, handle_signals=False)
        finally:
            for q in queues.values():
                await q.close()


async def pending_sites(root: Path, name: str) -> list[tuple[str, dict]]:
    """``(key, payload)`` of the sites waiting on the ``sites_for_audit`` edge, sorted by key (leases them)."""
    q = open_queue(root / "queues", name, C.EDGE_SITES_FOR_AUDIT)
    try:
        tasks = await q.lease(100, 600.0)
    finally:
        await q.close()
    return sorted((t.key, t.payload) for t in tasks)


async def audit_with_three_workers(root: Path, name: str, ctx: StageContext) -> None:
    """Run the referenceability auditor (three workers) and the ladder builder over the sites waiting on
    the ``sites_for_audit`` edge under ``root``, in burst mode; assert nothing was dead-lettered."""
    from geoagent.crawl.stages import LadderBuilderStage, ReferenceabilityAuditorStage

    class ThreeWorkers(ReferenceabilityAuditorStage):
        concurrency = 3

    stages = [ThreeWorkers(), LadderBuilderStage()]
    queues = open_edge_queues(root / "queues", name, stages)
    try:
        run = await run_pipeline(name, stages, queues, ctx, burst=True, handle_signals=False)
    finally:
        for q in queues.values():
            await q.close()
    assert all(s["dead"] == 0 and s["finished"] for s in (x.as_dict() for x in run.stats()))
