"""The shipped offline crawl (``geoagent/configs/crawl_sandbox.toml``) through the CLI entry, twice.

``MAPILLARY_TOKEN='MLY|sandbox' python run.py crawl geoagent/configs/crawl_sandbox.toml`` must run end to end
with every API on ``*.sandbox.invalid`` (local fakes serving the demo's sandbox world, started in-process by
:mod:`geoagent.sandbox.launch`), and a second run must resume without a single request to any fake (counted
server-side, :func:`geoagent.sandbox.launch.request_counts`). The outputs are checked against the world the
fakes serve, recomputed here: coverage counts and ``L_district`` per city with a haversine written here, the
admission rule of Sec. 3.2.1, and each ladder row's entity, distance and band.
"""

from __future__ import annotations

import hashlib
import re
import statistics
import tomllib
from pathlib import Path

import pytest

from _reference import csv_rows, haversine_km
from geoagent.cli import main
from geoagent.sandbox.launch import FAKES, WORLD_FAKES, fake_name, request_counts

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"


def _digest(folder: Path) -> dict[str, str]:
    """SHA-256 of every CSV table and ladder file of the crawl folder."""
    files = sorted(folder.glob("*.csv")) + sorted((folder / "ladders").glob("*.csv"))
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _expected_screening(world, city: dict) -> tuple[int, float]:
    """(perspective images within 1 km, L_district in km) of ``city``, recomputed from the world: place
    nodes (neighbourhood/suburb/quarter) within 6 km minus the chome addressing units, median
    nearest-neighbour haversine distance."""
    c_lat, c_lon = city["lat"], city["lon"]
    persp = sum(1 for im in world.images if not im.is_pano and haversine_km(im.lat, im.lon, c_lat, c_lon) <= 1.0)
    nodes = [(el["lat"], el["lon"]) for el in world.overpass_elements
             if el["tags"].get("place") in ("neighbourhood", "suburb", "quarter")
             and haversine_km(el["lat"], el["lon"], c_lat, c_lon) <= 6.0
             and not re.search(r"chome|丁目", el["tags"].get("name", ""))]
    nn = [min(haversine_km(a, b, c, d) for j, (c, d) in enumerate(nodes) if j != i) for i, (a, b) in enumerate(nodes)]
    return persp, statistics.median(nn)


def test_sandbox_names_cover_the_crawl_endpoints():
    """Every [crawl.endpoints] URL of the shipped config names a known fake, one per crawl API."""
    doc = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    ep = doc["crawl"]["endpoints"]
    assert {fake_name(ep[k]) for k in WORLD_FAKES} == set(WORLD_FAKES)
    assert set(WORLD_FAKES) <= set(FAKES)
    assert all(fake_name(m["base_url"]) == "openai" for m in doc["models"])
    assert not re.search(r"\{[a-z_]+\}", repr(doc))  # not a template: no {placeholder} in any value
    with pytest.raises(ValueError, match="unknown sandbox host"):
        fake_name("http://thumbs.sandbox.invalid/x.jpg")


def test_crawl_sandbox_config_runs_offline_and_resumes_without_requests(isolated_roots, monkeypatch, capsys):
    from geoagent.demo import demo_world
    from geoagent.runtime.store import open_campaign_state

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    state_root = isolated_roots / "state"
    crawl_dir = state_root / CAMPAIGN

    # dry run: a plan, no request to any fake, nothing left under state/
    before = request_counts()
    assert main(["run", str(CONFIG), "--simulate", "--no-live"]) == 0
    assert "dry run" in capsys.readouterr().out
    assert request_counts() == before
    assert not crawl_dir.exists()

    # first run: end to end through every fake
    assert main(["crawl", str(CONFIG), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "complete" in out and "planned 3 cities" in out  # a crawl plans cities, not requests
    after_first = request_counts()
    for name in (*WORLD_FAKES, "openai"):
        assert after_first.get(name, 0) > before.get(name, 0), name

    world = demo_world()
    cities = {c["city"]: c for c in world.cities}
    pool = {r["city"]: r for r in csv_rows(crawl_dir / "city_pool.csv")}
    assert set(pool) == {"Sandbox City", "Sprawl Town", "Mirror Bay"}
    for name, row in pool.items():
        persp, l_km = _expected_screening(world, cities[name])
        assert int(row["sv_perspective"]) == persp, name
        assert float(row["L_district"]) == pytest.approx(l_km, abs=0.006), name
        admitted = persp >= 30 and 0.32 <= l_km <= 0.65  # Sec. 3.2.1 defaults
        assert row["eligible"] == str(admitted), name
    assert {n for n, r in pool.items() if r["eligible"] == "True"} == {"Sandbox City", "Mirror Bay"}

    sites = csv_rows(crawl_dir / "sites.csv")
    assert sites and {s["city"] for s in sites} == {"Sandbox City", "Mirror Bay"}
    entities = {e.qid: e for e in world.entities}
    band_re = re.compile(r"^([0-9.]+)-([0-9.]+)km$")
    ladders = sorted((crawl_dir / "ladders").glob("*.csv"))
    assert len(ladders) == len(sites)
    for s in sites:
        c = cities[s["city"]]
        assert haversine_km(float(s["lat"]), float(s["lon"]), c["lat"], c["lon"]) <= 3.0  # sites within 3 km
        assert s["qid"] in entities
        files = [p for p in ladders if p.name.startswith(s["site"] + "_ladder_")]
        assert len(files) == 1, (s["site"], [p.name for p in ladders])
        rows = csv_rows(files[0])
        assert 0 < len(rows) <= 18  # 3 bands x 3 tiers x 2 draws per cell
        for r in rows:
            e = entities[r["qid"]]
            d = haversine_km(float(s["lat"]), float(s["lon"]), e.lat, e.lon)
            assert float(r["dist_km"]) == pytest.approx(d, abs=0.0015), r
            lo, hi = map(float, band_re.match(r["band"]).groups())
            assert lo <= float(r["dist_km"]) <= hi, r
            assert r["name_en"] == e.label
    images = csv_rows(crawl_dir / "images.csv")
    assert images and all((state_root / "images" / im["path"]).is_file() for im in images)
    with open_campaign_state(CAMPAIGN, root=state_root, recover=False) as st:
        calls_first = st.ledger.summary().calls
    assert calls_first > 0
    digest = _digest(crawl_dir)

    # second run: resumes, no request to any fake, no model call, same tables
    assert main(["crawl", str(CONFIG), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "0 new model calls" in out
    assert request_counts() == after_first
    with open_campaign_state(CAMPAIGN, root=state_root, recover=False) as st:
        assert st.ledger.summary().calls == calls_first
    assert _digest(crawl_dir) == digest


def test_crawl_command_dry_run_sends_nothing_and_leaves_no_state(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    before = dict(request_counts())
    assert main(["crawl", str(CONFIG), "--simulate", "--no-live"]) == 0
    assert dict(request_counts()) == before
    assert not (isolated_roots / "state" / "crawl-sandbox").exists()
    assert "plan" in capsys.readouterr().out


def test_a_crawl_policy_of_the_file_keeps_its_pace_against_the_fakes(tmp_path, monkeypatch):
    """A walkthrough set ``[crawl.policies] pageviews = { rate = 25, period_s = 1.0 }`` in a sandbox crawl and saw
    834 pageviews requests in a 5.4 s run: the sandbox gave every fake's host fast local limits in ``[hosts]``,
    which win over the crawl's own policies. Now an API the file paces keeps its pace (no ``[hosts]`` entry for
    its fake), the others still get the fast local limits, and the crawl's policy for it is the file's rate."""
    from geoagent.config import load_config
    from geoagent.crawl.settings import CrawlSettings
    from geoagent.sandbox.launch import rewrite_config

    text = CONFIG.read_text(encoding="utf-8")
    assert "[crawl.policies" not in text and "policies =" not in text
    text = text.replace("[crawl]\n", "[crawl]\npolicies = { pageviews = { rate = 25, period_s = 1.0 } }\n", 1)
    p = tmp_path / "c.toml"
    p.write_text(text, encoding="utf-8")
    cfg = load_config(p)
    bases = {name: f"http://127.0.0.1:{40000 + i}" for i, name in enumerate(WORLD_FAKES)}
    bases["openai"] = "http://127.0.0.1:40009"
    out = rewrite_config(cfg, bases)
    assert "127.0.0.1:40002" not in out.hosts            # pageviews (WORLD_FAKES[2]): paced by the file
    assert WORLD_FAKES[2] == "pageviews"
    assert {"127.0.0.1:40000", "127.0.0.1:40001", "127.0.0.1:40003"} <= set(out.hosts)
    settings = CrawlSettings.model_validate(out.tasks["crawl"])
    pol = settings.host_policy("pageviews")
    assert (pol.rate, pol.period_s) == (25, 1.0)
