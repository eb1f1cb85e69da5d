"""A city whose Mapillary coverage count is a lower bound (a search box still full at the minimum box size: the count
is "at least N") says so in ``city_pool.csv`` (column ``coverage_lower_bound``, last, after the release's columns in
their order), as ``sites.csv`` does since session 11, and in the exported ``city_pool`` table.

Before: the screening record had ``sv_lower_bound`` but ``city_pool.csv`` (the release's eleven columns) dropped it,
so a reader of the table took a floor for an exact count. Real crawl stage, real clients, local fakes."""

from __future__ import annotations

import asyncio
import csv
import json

import polars as pl

from geoagent import constants as C
from geoagent.crawl.export import export_crawl_tables
from geoagent.crawl.screener import CITY_POOL_COLUMNS, RELEASE_CITY_POOL_COLUMNS
from geoagent.crawl.settings import CitySpec, load_crawl_settings
from geoagent.crawl.stages import build_crawl_services, crawl_stages, enqueue_cities
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.stage import StageContext
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox import overpass as fake_op
from geoagent.sandbox.server import serve

POLICY = {"rate": 1000, "period_s": 1.0, "concurrency": 8, "max_attempts": 2, "backoff_base_s": 0.01,
          "backoff_max_s": 0.05, "timeout_s": 5}
DASH = (52.37, 4.895)  # a parked dashcam: more frames on one spot than one search page holds
QUIET = (48.20, 16.37)
PAGE = 2000  # the client's page limit (the API's maximum)


def _suburbs(lat, lon, base):
    return [{"type": "node", "id": base + i, "lat": lat + 0.004 * i, "lon": lon,
             "tags": {"place": "suburb", "name": f"S{base + i}"}} for i in range(5)]


def test_city_pool_marks_a_lower_bound_coverage_count(tmp_path):
    imgs = [fake_mly.FakeImage(str(700000000000 + i), *DASH) for i in range(PAGE + 50)]
    imgs += [fake_mly.FakeImage(str(710000000000 + i), QUIET[0] + 0.0005 * i, QUIET[1]) for i in range(40)]
    op_app = fake_op.make_app(_suburbs(*DASH, 100) + _suburbs(*QUIET, 200))
    mly_app = fake_mly.make_app(imgs)
    cities = [CitySpec(city="Dashcamville", country="NL", continent="EU", lat=DASH[0], lon=DASH[1]),
              CitySpec(city="Quietburg", country="AT", continent="EU", lat=QUIET[0], lon=QUIET[1])]

    async def go():
        async with serve(op_app) as op, serve(mly_app) as mly, \
                HttpClient(default_policy=HostPolicy(**POLICY)) as http:
            settings = load_crawl_settings({
                "contact": "mailto:test@example.org", "seed": 0, "cities": [c.model_dump() for c in cities],
                "endpoints": {"overpass": op + "/api", "mapillary": mly},
                "policies": {k: POLICY for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")}},
                where="test")
            svc = build_crawl_services(settings, http, state_dir=tmp_path / "state", images_root=tmp_path / "images",
                                       mapillary_token="MLY|test|tok")
            stages = crawl_stages()[:1]  # the city screener alone
            queues = open_edge_queues(tmp_path / "queues", "pool", stages)
            try:
                await enqueue_cities(queues[C.EDGE_CITIES], settings.cities)
                await run_pipeline("pool", stages, queues, StageContext("pool", {"crawl": svc, "config": settings}),
                                   burst=True, handle_signals=False)
            finally:
                for q in queues.values():
                    await q.close()

    asyncio.run(go())
    state = tmp_path / "state"
    with (state / "city_pool.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    assert header[:-1] == ["city", "country", "continent", "lat", "lon", "sv_total", "sv_perspective", "L_district",
                           "ok_streetview", "ok_scale", "eligible"] == list(RELEASE_CITY_POOL_COLUMNS)  # release order
    assert header[-1] == "coverage_lower_bound" and tuple(header) == CITY_POOL_COLUMNS
    by = {r["city"]: r for r in rows}
    assert by["Dashcamville"]["coverage_lower_bound"] == "True" and int(by["Dashcamville"]["sv_perspective"]) >= PAGE
    assert by["Quietburg"]["coverage_lower_bound"] == "False"
    # the same value as the screening record's flag
    rec = json.loads((state / "screening" / "dashcamville.json").read_text(encoding="utf-8"))
    assert rec["sv_lower_bound"] is True

    export_crawl_tables(state)
    df = pl.read_parquet(state / "export" / "city_pool.parquet")
    assert df.columns == list(CITY_POOL_COLUMNS) and df.schema["coverage_lower_bound"] == pl.Boolean
    assert dict(zip(df["city"], df["coverage_lower_bound"])) == {"Dashcamville": True, "Quietburg": False}


def test_screening_records_from_before_the_column_fill_it_from_their_flag_or_leave_it_empty(tmp_path):
    """A resumed crawl rewrites city_pool.csv from every screening record: one written before the column existed has
    no ``coverage_lower_bound`` in its stored row; its top-level ``sv_lower_bound`` (kept since the full-box change)
    fills it, and a record older still (no flag at all) leaves it empty (unknown), read back as null."""
    from geoagent.crawl.screener import city_pool_rows, write_city_pool_csv

    old_row = {"city": "Old", "country": "NL", "continent": "EU", "lat": 1.0, "lon": 2.0, "sv_total": 40,
               "sv_perspective": 35, "L_district": 0.5, "ok_streetview": True, "ok_scale": True, "eligible": True}
    recs = [{"row": dict(old_row), "eligible": True},
            {"row": dict(old_row, city="Flagged"), "sv_lower_bound": True, "eligible": True}]
    rows = city_pool_rows(recs)
    assert [r.get("coverage_lower_bound", "") for r in rows] == ["", True]
    write_city_pool_csv(rows, tmp_path / "city_pool.csv")
    with (tmp_path / "city_pool.csv").open(encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    assert [r["coverage_lower_bound"] for r in got] == ["", "True"]
    export_crawl_tables(tmp_path)
    df = pl.read_parquet(tmp_path / "export" / "city_pool.parquet")
    assert df["coverage_lower_bound"].to_list() == [None, True]
