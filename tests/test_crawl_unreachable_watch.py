"""Crawl watch mode reads ``[queue] watch_probe_after_s`` / ``watch_probe_max_s`` as ``run --watch`` does
(``run_crawl(..., queue=...)``; geoagent.runtime.worker, "Unreachable hosts"): with the Overpass endpoint on a
closed port the screener's breaker opens, probes the host after 0.2 s (not the runtime's 30 s default), and the
failed probes double the cool-down to 0.4 s and no further (the max). Real crawl stages, runners, SQLite queues,
HTTP client and loopback fakes; the run is stopped from its progress tick once two probes failed."""

from __future__ import annotations

import asyncio
import logging
import socket

from geoagent import constants as C
from geoagent.config import QueueSection
from geoagent.crawl.stages import run_crawl
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.city import build_world, serve_world
from test_crawl_pipeline import FAST, _settings


def test_crawl_watch_mode_probes_with_the_queue_sections_settings(tmp_path, caplog):
    world = build_world(0)
    # a port bound here and never listening: connections are refused for the whole run, and no other test process
    # can take it (a free port, closed again, was once taken by a parallel test's server: the host answered, the
    # breaker never probed and the run hit its 60 s limit)
    hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hold.bind(("127.0.0.1", 0))
    port = hold.getsockname()[1]
    state: dict = {}

    def messages() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "geoagent.runtime.worker"]

    async def tick(view) -> None:
        screener = next(r for r in view.runners if r.stage.name == C.STAGE_SCREENER)
        state["settings"] = (screener.probe_after_s, screener.probe_max_s)
        if sum("still unreachable" in m for m in messages()) >= 2 and "stopped" not in state:
            state["stopped"] = True
            for r in view.runners:
                r.request_stop()

    async def main():
        async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**FAST)) as http:
            endpoints = {**sb["endpoints"], "overpass": f"http://127.0.0.1:{port}/api"}
            return await asyncio.wait_for(run_crawl(
                _settings(world, endpoints), campaign="crawlwatch", queues_root=tmp_path / "q",
                state_dir=tmp_path / "s", images_root=tmp_path / "i", http=http, mapillary_token="MLY|sandbox|token",
                burst=False, tick=tick, queue=QueueSection(watch_probe_after_s=0.2, watch_probe_max_s=0.4)), 60)

    try:
        with caplog.at_level(logging.WARNING, logger="geoagent.runtime.worker"):
            run = asyncio.run(main())
    finally:
        hold.close()
    assert state["settings"] == (0.2, 0.4) and state.get("stopped")
    screener = next(r for r in run.runners if r.stage.name == C.STAGE_SCREENER)
    assert set(screener.stats.unreachable) == {f"127.0.0.1:{port}"}
    msgs = messages()
    opened = [m for m in msgs if "the stage waits for it" in m]
    assert opened and opened[0].endswith("next probe in 0.2 s")
    probes = [m for m in msgs if "still unreachable" in m]
    assert len(probes) >= 2 and all(m.endswith("next probe in 0.4 s") for m in probes)  # doubled, capped at max
