"""A sandbox crawl (geoagent.crawl.demo.run_sandbox_crawl: the local Overpass, Wikidata, Mapillary and model
fakes) moved under ``<root>/state/<name>`` with a crawl campaign file naming that folder: the set-up of the tests of
``run.py export`` on a crawl."""

from __future__ import annotations

import asyncio
from pathlib import Path

from geoagent.crawl.demo import run_sandbox_crawl


def sandbox_crawl_config(root: Path, name: str) -> str:
    """Crawl into ``root/run``, move its output folder to ``root/state/<name>`` and write ``root/crawl.toml`` (a
    crawl campaign ``name`` whose state root is ``root/state``); return the config's path."""
    asyncio.run(run_sandbox_crawl(root / "run"))
    (root / "state").mkdir()
    (root / "run" / "state").rename(root / "state" / name)
    cfg = root / "crawl.toml"
    cfg.write_text(f'[campaign]\nname = "{name}"\nkind = "crawl"\n[budget]\ncap_usd = 1.0\n'
                   f'[paths]\nstate = "{root / "state"}"\nqueues = "{root / "queues"}"\n'
                   '[crawl]\ncontact = "mailto:test@example.org"\n', encoding="utf-8")
    return str(cfg)
