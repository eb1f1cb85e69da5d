"""A crawl's own exported tables carry the interim-export line in their Parquet metadata (rev23b minor).

Before, an export of a crawl not finished said so in ``export_note.txt`` only: its Parquet files (``sites``,
``images``, the ladders, ...), handed on alone, read as the whole crawl. Now each carries the line under
``geoagent.progress``, as the campaign tables do; an export with no work left drops it again.
"""

from __future__ import annotations

import anyio
import polars as pl

from _sandbox_crawl import sandbox_crawl_config
from geoagent import constants as C
from geoagent.cli import main
from geoagent.config import load_config
from geoagent.runtime.export import PARQUET_PROGRESS_KEY
from geoagent.runtime.queue import open_queue


def test_a_crawl_not_finished_marks_its_own_parquet_files(tmp_path, capsys):
    cfg_path = sandbox_crawl_config(tmp_path, "crawlp")
    cfg = load_config(cfg_path)
    out = tmp_path / "state" / "crawlp" / C.EXPORT_DIR

    async def queue_a_city(done: bool) -> None:  # a city still to crawl, as a stopped crawl leaves one
        q = open_queue(cfg.queues_root(), cfg.name, C.EDGE_CITIES)
        try:
            if done:
                await q.ack(await q.lease(1, 60.0))
            else:
                await q.put("city:later", {"city": "Later"})
        finally:
            await q.close()

    assert main(["export", cfg_path]) == 0  # the finished crawl: no mark (and its campaign.sqlite made)
    assert not any(PARQUET_PROGRESS_KEY in pl.read_parquet_metadata(p) for p in out.glob("*.parquet"))
    anyio.run(queue_a_city, False)
    assert main(["export", cfg_path]) == 0
    written = sorted(out.glob("*.parquet"))
    assert {p.stem for p in written} >= {"sites", "images", "ladders", "crawl_decisions", "spend"}
    for p in written:
        meta = pl.read_parquet_metadata(p)
        assert meta.get(PARQUET_PROGRESS_KEY, "").startswith("Interim export: campaign crawlp is not finished"), p
    anyio.run(queue_a_city, True)  # the city done: nothing left
    assert main(["export", cfg_path]) == 0
    assert not any(PARQUET_PROGRESS_KEY in pl.read_parquet_metadata(p) for p in out.glob("*.parquet"))
