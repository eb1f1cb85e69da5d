"""Console wording found by the session-10 fresh-user walkthrough (one test per defect).

Each test runs the real code path (local files, real queues; no function-level mocks) and checks the text a
user reads.
"""

from __future__ import annotations

import asyncio

from geoagent import constants as C
from geoagent.crawl.stages import watch_config_cities
from geoagent.runtime.queue import open_queue


def test_watch_new_city_line_does_not_say_the_tool_edited_the_config(tmp_path, capsys):
    """``crawl --watch`` read ``planned new city 'Mirror Bay' (city:mirrorbay), added to /tmp/.../c4.toml``, as if
    the tool had edited the user's file: the city was *found in* it."""
    cfg = tmp_path / "c4.toml"

    async def go():
        q = open_queue(tmp_path / "queues", "w", C.EDGE_CITIES)
        cfg.write_text('[crawl]\ncontact = "mailto:x@example.org"\n\n[[crawl.cities]]\ncity = "Mirror Bay"\n'
                       'lat = 10.0\nlon = 20.0\n', encoding="utf-8")
        stop = asyncio.Event()
        task = asyncio.create_task(watch_config_cities(cfg, q, interval_s=0.05, stop=stop))
        await asyncio.sleep(0.2)
        stop.set()
        await task
        await q.close()

    asyncio.run(go())
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "Mirror Bay" in ln)
    assert "added to" not in line, line
    assert f"found in {cfg}" in line, line
