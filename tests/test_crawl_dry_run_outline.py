"""The crawl's dry run outlines what its auditors' calls may cost, and the outline bounds the real crawl.

Walkthrough finding (session 8): ``run.py crawl CONFIG --simulate`` said only that a crawl's model calls
"cannot be counted in advance", so a researcher could not plan a real crawl's budget. The outline gives each
auditor's worst case per call and the config's bound on image audits; here the shipped sandbox crawl (local
fakes, illustrative prices) is run after its dry run, and every reservation the ledger made is checked against
the outline's figures: each image audit at most the outline's per-call worst case, their count at most its
bound, each rating and screening call at most the outline's per-call figure for a full batch.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.crawl.campaign import crawl_budget_figures
from geoagent.crawl.settings import CrawlSettings

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def test_crawl_dry_run_outline_bounds_what_the_crawl_reserves(isolated_roots, monkeypatch, capsys, tmp_path_factory):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    cfg = load_config(CONFIG)
    settings = cfg.section("crawl")
    assert isinstance(settings, CrawlSettings)
    fig = crawl_budget_figures(cfg, settings)
    assert fig["max_image_audits"] == 3 * 3 * 6  # 3 cities x sites_per_city 3 x max_images_per_site 6 (the file's)
    assert all(fig[k] and fig[k] > 0 for k in ("image_audit_usd", "rating_usd", "screen_usd"))

    assert main(["crawl", str(CONFIG), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    img_line = next(line for line in out.splitlines() if "image audit (model 'sandbox-vision-auditor')" in line)
    assert "at most 54 calls (3 cities x 3 sites x 6 images per site)" in img_line
    assert f"up to ${fig['image_audit_usd']:.4f} each" in img_line
    ref_line = next(line for line in out.splitlines() if "referenceability (model 'sandbox-text-auditor')" in line)
    per_batch = fig["rating_usd"] + fig["screen_usd"]
    # over the offline fake the candidate count is the fake world's own (session 19; 1,000 against a real endpoint:
    # tests/test_crawl_dry_run_total.py), an upper bound checked against the crawl below
    assert f"up to ${per_batch:.4f} per 40" in ref_line and "at most 309 candidates in a city (the offline fake" in ref_line
    assert ": 16 calls" in ref_line
    assert "plus re-asks" in ref_line  # unparseable batches are asked again in halves: not in the 16
    assert re.search(r"the \[budget\] cap \(\$1\.00\) holds", out)

    # the crawl itself: the session's one of this config (tests/_crawl_once.py), restored under a root of its own
    # (the dry run leaves no state: tests/test_crawl_sandbox_config.py), with the data roots pointed there
    from tests._crawl_once import sandbox_crawl

    root, _ = sandbox_crawl(tmp_path_factory, monkeypatch)
    db = root / "state" / "crawl-sandbox" / "campaign.sqlite"
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT model, amount_nusd FROM reservations").fetchall()
    image = [a / 1e9 for m, a in rows if m == "sandbox-vision-auditor"]
    text = [a / 1e9 for m, a in rows if m == "sandbox-text-auditor"]
    assert image and text  # both auditors were paid for
    assert len(image) <= fig["max_image_audits"]
    assert max(image) <= fig["image_audit_usd"] + 1e-12
    assert max(text) <= max(fig["rating_usd"], fig["screen_usd"]) + 1e-12
    # each city's candidates at most the outline's count for it (309 for Sandbox City and Mirror Bay)
    import csv

    with open(root / "state" / "crawl-sandbox" / "candidate_referenceability_by_city.csv", encoding="utf-8") as fh:
        per_city: dict[str, int] = {}
        for r in csv.DictReader(fh):
            per_city[r["city"]] = per_city.get(r["city"], 0) + 1
    assert per_city and max(per_city.values()) <= 309, per_city


ATLANTIS = """
[[crawl.cities]]
city = "Atlantis"
country = "XX"
continent = "EU"
lat = 10.0
lon = -30.0
"""


def test_outline_leaves_out_image_audits_of_a_city_outside_the_sandbox_world(isolated_roots, monkeypatch, capsys):
    """Walkthrough 24, item 5: with the offline fakes, a configured city outside their world (the dry run warns
    that the crawl finds nothing there) was still counted for 3 sites x 6 images of audits; it is now left out,
    by name, and a real Mapillary endpoint keeps counting every city (what it finds is known only once run)."""
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    path = isolated_roots / "atlantis.toml"
    path.write_text(CONFIG.read_text(encoding="utf-8") + ATLANTIS, encoding="utf-8")
    cfg = load_config(path)
    fig = crawl_budget_figures(cfg, cfg.section("crawl"))
    assert fig["barren_cities"] == ["Atlantis"] and fig["max_image_audits"] == 3 * 3 * 6
    assert main(["crawl", str(path), "--simulate", "--no-live"]) == 0
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())
    assert ("at most 54 calls (3 cities x 3 sites x 6 images per site; 'Atlantis' left out: the offline Mapillary "
            "fake has no image there)") in out, out
    assert "('Atlantis') lies outside the sandbox world" in out  # the warning it agrees with

    # a real Mapillary endpoint: every configured city may have images
    real = path.read_text(encoding="utf-8").replace('mapillary = "http://mapillary.sandbox.invalid', 'mapillary = "https://graph.mapillary.com')
    assert real != path.read_text(encoding="utf-8"), "the config names no Mapillary fake: the check checks nothing"
    path.write_text(real, encoding="utf-8")
    cfg = load_config(path)
    fig = crawl_budget_figures(cfg, cfg.section("crawl"))
    assert fig["barren_cities"] == [] and fig["max_image_audits"] == 4 * 3 * 6
