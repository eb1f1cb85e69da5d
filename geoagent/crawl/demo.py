"""The offline crawl demo: serve the sandbox city's four fake APIs and crawl it end to end.

``python -c "import asyncio; from geoagent.crawl.demo import run_sandbox_crawl; asyncio.run(run_sandbox_crawl('demo-out'))"``
or from ``run.py demo``. Everything goes over real HTTP on 127.0.0.1 through the shared HttpClient; the
auditors are the ``simulated`` provider. Re-running with the same ``root`` resumes (and repeats no call).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geoagent.crawl.settings import load_crawl_settings
from geoagent.crawl.stages import build_crawl_services, run_crawl
from geoagent.sandbox.city import build_world, serve_world

#: Fast local limits for the sandbox (the public APIs' policies stay the defaults for real runs).
SANDBOX_POLICY = {"rate": 500.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 5, "backoff_base_s": 0.02,
                  "backoff_max_s": 0.2, "timeout_s": 10.0}


def sandbox_settings(world: Any, endpoints: dict[str, str], **overrides: Any) -> Any:
    """Crawl settings for the sandbox world at ``endpoints`` (contact is a placeholder address)."""
    base: dict[str, Any] = {
        "contact": "mailto:sandbox@example.invalid", "seed": 0, "cities": world.cities, "endpoints": endpoints,
        "policies": {k: SANDBOX_POLICY for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")},
        "referenceability": {"pageviews": True},
    }
    base.update(overrides)
    return load_crawl_settings(base, where="sandbox")


async def run_sandbox_crawl(root: str | Path, *, seed: int = 0, campaign: str = "crawl-demo", faults: Any = None,
                            http: Any = None, tick: Any = None, **overrides: Any) -> dict[str, Any]:
    """Crawl the sandbox city into ``root`` (``queues/``, ``state/``, ``images/`` under it).

    Returns a summary: data folders, the run's stage stats, per-host HTTP counters (requests, retries,
    errors by reason) and the files written.
    """
    from geoagent.runtime.http import HostPolicy, HttpClient

    root = Path(root)
    world = build_world(seed)
    own_http = http is None
    async with serve_world(world, faults) as sb:
        if own_http:
            http = HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY), user_agent="geoagent-crawl-demo (contact: mailto:sandbox@example.invalid)")
            await http.start()
        try:
            settings = sandbox_settings(world, sb["endpoints"], **overrides)
            svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                                       mapillary_token="MLY|sandbox|demo")
            run = await run_crawl(settings, campaign=campaign, queues_root=root / "queues", state_dir=root / "state",
                                  http=http, tick=tick, services=svc)
            api = svc.api_stats()
            http_stats = {host: {"requests": st.requests, "retries": st.retries, "errors": dict(st.errors)}
                          for host, st in http.stats().items()}
        finally:
            if own_http:
                await http.close()
    state = root / "state"
    return {
        "state_dir": str(state), "images_root": str(root / "images"),
        "stages": [s.as_dict() for s in run.stats()],
        "http": http_stats,
        "api": api,
        "files": sorted(str(p.relative_to(state)) for p in state.rglob("*.csv")),
    }
