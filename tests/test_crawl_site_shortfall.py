"""A crawl whose sampler finds fewer sites than ``[crawl.sampler] sites_per_city`` says so, per city (user
walkthrough, defect 1).

Before, the sandbox crawl with four site types, ``max_sitelinks = 40``, ``min_spacing_m = 400`` and
``sites_per_city = 4`` ended ``complete`` with 1 site per city and nothing in the console summary, ``run.py
status`` or ``report/crawl_summary.json`` said so: the reason (7 of 8 candidates below ``min_coverage``) was only in
``sampling/<city>.json``. The number of sites is the number of clusters behind every confidence interval, so the
summary, the summary file and ``status`` now name each city short of sites, why its candidates were skipped (the
walk's decisions), which configured site types gave no candidate, and the settings to relax. The crawl still
exits 0 (it did complete). Runs the sandbox crawl (``geoagent/configs/crawl_sandbox.toml``, local fakes) twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from geoagent import constants as C
from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"

SAMPLER = """
[crawl.sampler]
site_types = {{ museum = "Q33506", park = "Q22698", church = "Q16970", square = "Q174782"{extra} }}
max_sitelinks = 40
min_spacing_m = 400.0
sites_per_city = 4
min_coverage = {min_coverage}
"""


def _config(tmp: Path, name: str, min_coverage: int, extra: str = "") -> Path:
    text = CONFIG.read_text(encoding="utf-8")
    assert text.count('name = "crawl-sandbox"') == 1 and "[crawl.sampler]" not in text
    p = tmp / f"{name}.toml"
    p.write_text(text.replace('name = "crawl-sandbox"', f'name = "{name}"')
                 + SAMPLER.format(min_coverage=min_coverage, extra=extra), encoding="utf-8")
    return p


def test_crawl_with_fewer_sites_than_asked_says_so_per_city(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    # the walkthrough's four types and castle, of which the sandbox world holds none
    cfg = _config(isolated_roots, "my-crawl", 8, extra=', castle = "Q23413"')
    assert main(["crawl", str(cfg), "--no-live"]) == 0  # the crawl completed: exit 0
    out = " ".join(capsys.readouterr().out.split())
    assert "campaign my-crawl: complete" in out
    city_line = "Sandbox City: 1 of 4 sites (8 candidates: 7 below min_coverage 8 Mapillary images within 150 m"
    assert "site sampler: 2 of 2 sampled cities got fewer sites than sites_per_city 4" in out, out
    assert city_line in out, out
    assert "Mirror Bay: 1 of 4 sites (8 candidates: 7 below min_coverage 8" in out, out
    assert ("Sandbox City: 1 of 4 sites (8 candidates: 7 below min_coverage 8 Mapillary images within 150 m, 1 taken); "
            "no candidate of the configured site types castle") in out, out
    relax = ("relax [crawl.sampler] min_coverage (8 images), max_sitelinks (40), min_spacing_m (400 m) or site_types "
             "(5 types)")
    assert relax in out, out

    summary = json.loads((isolated_roots / "state" / "my-crawl" / "report" / "crawl_summary.json")
                         .read_text(encoding="utf-8"))
    short = {s["city"]: s for s in summary["site_shortfall"]}
    assert set(short) == {"Sandbox City", "Mirror Bay"}
    sc = short["Sandbox City"]
    assert (sc["sites"], sc["sites_per_city"], sc["n_candidates"]) == (1, 4, 8)
    assert sc["skipped"] == {"skip_coverage": 7}
    assert sc["types_without_candidates"] == ["castle"]
    assert sc["settings"]["min_coverage"] == 8

    assert main(["status", str(cfg)]) == 0
    status = " ".join(capsys.readouterr().out.split())
    assert city_line in status and relax in status, status

    # the decision log has one record per short city (session 24's noticed item: it was in the summary only)
    import polars as pl

    decisions = pl.read_parquet(isolated_roots / "state" / "my-crawl" / "export" / "crawl_decisions.parquet")
    rows = decisions.filter(pl.col("event") == "site_shortfall").sort("city")
    assert rows["city"].to_list() == ["Mirror Bay", "Sandbox City"], decisions
    assert rows["stage"].unique().to_list() == [C.STAGE_SAMPLER]
    sc_row = rows.row(1, named=True)
    assert sc_row["reason"].startswith(city_line), sc_row
    extra = json.loads(sc_row["extra"])
    assert (extra["sites"], extra["sites_per_city"], extra["n_candidates"]) == (1, 4, 8)
    assert extra["skipped"] == {"skip_coverage": 7} and extra["types_without_candidates"] == ["castle"]

    # with min_coverage 4 the same crawl gets its 4 sites per city: nothing is said
    cfg4 = _config(isolated_roots, "my-crawl-4", 4)
    assert main(["crawl", str(cfg4), "--no-live"]) == 0
    out4 = " ".join(capsys.readouterr().out.split())
    assert "fewer sites than sites_per_city" not in out4, out4
    summary4 = json.loads((isolated_roots / "state" / "my-crawl-4" / "report" / "crawl_summary.json")
                          .read_text(encoding="utf-8"))
    assert summary4["site_shortfall"] == []
    decisions4 = pl.read_parquet(isolated_roots / "state" / "my-crawl-4" / "export" / "crawl_decisions.parquet")
    assert decisions4.filter(pl.col("event") == "site_shortfall").height == 0
