"""The crawl summary's images line counts thumbnails examined, and separately the thumbnails this run downloaded
(walkthrough 2, item 4).

Before, it read ``images kept: 32 of 45 downloaded`` also for a crawl that reused another crawl's selection
made with the same settings and downloaded nothing. The sandbox crawl (``geoagent/configs/crawl_sandbox.toml``)
twice under one state root, the second under another campaign name (the first is the session's one, restored:
``sandbox_crawled``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
LINE = re.compile(r"images kept: (\d+) of (\d+) examined \((.*)\); thumbnails downloaded by this run: (\d+)"
                  r"(?: \(([^)]*)\))?; audit: ")


def test_images_line_says_examined_and_what_this_run_downloaded(sandbox_crawled, capsys):
    isolated_roots, printed = sandbox_crawled  # the finished crawl (run once per session, tests/_crawl_once.py)
    capsys.readouterr()
    first = " ".join(printed.split())
    m1 = LINE.search(first)
    assert m1, first
    records = [json.loads(p.read_text()) for p in (isolated_roots / "state" / "crawl-sandbox" / "image_selection").glob("*.json")]
    fetched = sum(r["downloads"] for r in records)
    assert fetched > 0 and int(m1.group(4)) == fetched, (m1.group(0), fetched)

    other = isolated_roots / "crawl_again.toml"
    other.write_text(CONFIG.read_text(encoding="utf-8").replace('name = "crawl-sandbox"', 'name = "crawl-again"', 1),
                     encoding="utf-8")
    assert main(["crawl", str(other), "--no-live"]) == 0
    second = " ".join(capsys.readouterr().out.split())
    m2 = LINE.search(second)
    assert m2, second
    # the same selection (another campaign's, same settings): the same images examined, none downloaded
    assert (m2.group(1), m2.group(2), m2.group(3)) == (m1.group(1), m1.group(2), m1.group(3))
    assert m2.group(4) == "0" and "read from disk" in (m2.group(5) or ""), m2.group(0)
