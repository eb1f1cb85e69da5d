"""Child process for tests/test_crawl_sampler_two_processes.py: one crawl process sampling one city.

Usage: ``python tests/_sampler_proc_child.py CONFIG STATE_DIR CITY GO_FILE``. Serves the sandbox fakes the config
names (:func:`geoagent.sandbox.launch.launch`, the demo world), opens the campaign's services as a run does
(:func:`geoagent.engine.open_services`; the campaign's folder must be ``STATE_DIR``) and the crawl's
(:func:`geoagent.crawl.stages.services_from_context`), prints ``ready``,
waits until ``GO_FILE`` exists (so two children start sampling together), then runs the site sampler stage's
``handle`` on the ``[[crawl.cities]]`` entry named ``CITY`` (as a ``--stages site_sampler`` process would on a task
it leased) and prints one JSON line ``{"city", "sites": [qid, ...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path


async def main(config: str, state_dir: str, city: str, go: str) -> None:
    from geoagent.config import load_config
    from geoagent.crawl.stages import SiteSamplerStage, services_from_context
    from geoagent.engine import open_services
    from geoagent.runtime.queue import Task
    from geoagent.sandbox.launch import launch

    cfg = load_config(config)
    spec = next(c for c in cfg.section("crawl").cities if c.city == city)
    async with launch(cfg) as lcfg, open_services(lcfg) as ctx:
        assert str(ctx.services["state_dir"]) == state_dir, (ctx.services["state_dir"], state_dir)
        services_from_context(ctx)
        print("ready", flush=True)
        while not Path(go).exists():
            await asyncio.sleep(0.01)
        task = Task(key=f"city:{city}", payload={"city": spec.model_dump(mode="json")}, attempts=0, lease_id="x")
        out = await SiteSamplerStage().handle(task, ctx)
    print(json.dumps({"city": city, "sites": [m[1]["site"]["qid"] for m in out], "t": time.time()}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
