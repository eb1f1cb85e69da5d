"""A site whose Mapillary coverage count is a lower bound (a search box still full at the minimum box size: the
count is "at least N") says so in ``sites.csv`` (column ``coverage_lower_bound``, after the release's columns)
and in the exported ``sites`` table, so a reader of the table knows the count is a floor. Real clients, fakes."""

from __future__ import annotations

import asyncio
import csv

import polars as pl

from geoagent.clients.mapillary import MapillaryClient
from geoagent.clients.wdqs import WdqsClient
from geoagent.crawl.export import export_crawl_tables
from geoagent.crawl.sampler import SITES_COLUMNS, sample_sites, write_sites_csv
from geoagent.crawl.settings import CitySpec, SamplerSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox import wdqs as fake_wd
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT0, LON0 = 52.37, 4.895
PAGE = 10  # the client's page limit, standing in for the API's 2,000
B_LAT = LAT0 + 0.01  # ~1.1 km north


def test_sites_csv_marks_a_lower_bound_coverage_count(tmp_path):
    ents = [fake_wd.FakeEntity("Q101", "Dashcam Museum", LAT0, LON0, 5, ("Q33506",)),
            fake_wd.FakeEntity("Q102", "Quiet Museum", B_LAT, LON0, 5, ("Q33506",))]
    imgs = [fake_mly.FakeImage(str(900000000000 + i), LAT0, LON0) for i in range(3 * PAGE)]  # parked dashcam
    imgs += [fake_mly.FakeImage(str(910000000000 + i), B_LAT + 0.0001 * (i - 4), LON0) for i in range(9)]
    wd_app, mly_app = fake_wd.make_app(ents), fake_mly.make_app(imgs)

    async def go():
        async with serve(wd_app) as wd, serve(mly_app) as mly, HttpClient(default_policy=FAST) as http:
            wdqs = WdqsClient(http, wd + "/sparql", UA)
            mapillary = MapillaryClient(http, mly, "MLY|1|tok", UA, limit=PAGE)
            city = CitySpec(city="Dashcamville", country="NL", continent="EU", lat=LAT0, lon=LON0)
            return await sample_sites(city, wdqs, mapillary, SamplerSettings(sites_per_city=2), seed=1)

    res = asyncio.run(go())
    assert {s["qid"] for s in res.sites} == {"Q101", "Q102"}, res.walk
    write_sites_csv(res.sites, tmp_path / "sites.csv")
    with (tmp_path / "sites.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    assert header[: len(header) - 1] == ["site", "city", "country", "continent", "landmark", "qid", "wd_type", "lat",
                                        "lon", "sitelinks", "sv_perspective", "selection_method"]  # release order kept
    assert header[-1] == "coverage_lower_bound" and tuple(header) == SITES_COLUMNS
    by_qid = {r["qid"]: r for r in rows}
    assert by_qid["Q101"]["coverage_lower_bound"] == "True" and int(by_qid["Q101"]["sv_perspective"]) >= PAGE
    assert by_qid["Q102"]["coverage_lower_bound"] == "False" and by_qid["Q102"]["sv_perspective"] == "9"
    take = {w["qid"]: w for w in res.walk if w["decision"] == "take"}
    assert take["Q101"]["coverage_lower_bound"] is True and take["Q102"]["coverage_lower_bound"] is False

    export_crawl_tables(tmp_path)
    df = pl.read_parquet(tmp_path / "export" / "sites.parquet")
    assert df.schema["coverage_lower_bound"] == pl.Boolean
    assert dict(zip(df["qid"], df["coverage_lower_bound"])) == {"Q101": True, "Q102": False}


def test_an_older_sites_csv_without_the_column_exports_it_empty(tmp_path):
    old = ["site", "city", "country", "continent", "landmark", "qid", "wd_type", "lat", "lon", "sitelinks",
           "sv_perspective", "selection_method"]
    (tmp_path / "sites.csv").write_text(",".join(old) + "\nx_a,X,NL,EU,A,Q1,museum,1.0,2.0,3,12,algorithm\n",
                                        encoding="utf-8")
    export_crawl_tables(tmp_path)
    df = pl.read_parquet(tmp_path / "export" / "sites.parquet")
    assert df.schema["coverage_lower_bound"] == pl.Boolean and df["coverage_lower_bound"].to_list() == [None]
