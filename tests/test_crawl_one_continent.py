"""A crawl whose cities are all on one continent builds no swapped-image control trials (``ctrl_mismatch``
shows an image from another continent, seed 000's design): walkthrough 2, item 2.

Before, nothing said so until a GeoVerify campaign over the crawl's trials read out "swapped-image control not
run". Now the crawl's dry run warns (from the configured cities), the crawl's hand-off line warns (from the
sites it admitted), and a GeoVerify dry run over such a trial table warns that the read-out cannot check that
arm. The sandbox crawl (``geoagent/configs/crawl_sandbox.toml``) with Mirror Bay moved to Europe.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from _model_harness import geoverify_over_crawl_toml
from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"
WHY = ("no swapped-image control trials (ctrl_mismatch) can be built: every city is on one continent (EU), and that "
       "arm shows an image from another continent than the claim's site; add cities on another continent")


def _one_continent(tmp: Path) -> Path:
    text = CONFIG.read_text(encoding="utf-8")
    assert text.count('continent = "AS"') == 1
    p = tmp / "crawl_eu.toml"
    p.write_text(text.replace('continent = "AS"', 'continent = "EU"'), encoding="utf-8")
    return p


def test_one_continent_crawl_warns_in_dry_run_hand_off_and_geoverify_dry_run(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    cfg = _one_continent(isolated_roots)
    assert main(["crawl", str(cfg), "--simulate", "--no-live"]) == 0
    dry = " ".join(capsys.readouterr().out.split())
    assert f"warning: {WHY}" in dry, dry
    # the shipped config (two continents) gets no such warning
    assert main(["crawl", str(CONFIG), "--simulate", "--no-live"]) == 0
    assert "no swapped-image control" not in capsys.readouterr().out

    assert main(["crawl", str(cfg), "--no-live"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    crawl_dir, images = isolated_roots / "state" / CAMPAIGN, isolated_roots / "state" / "images"
    with open(crawl_dir / "verify_trials.csv", newline="", encoding="utf-8") as f:
        arms = [r["arm"] for r in csv.DictReader(f)]
    assert "main" in arms and "ctrl_noimage" in arms and "ctrl_mismatch" not in arms
    assert f"GeoVerify trials: {crawl_dir / 'verify_trials.csv'}" in out and f"; warning: {WHY}" in out, out
    summary = json.loads((crawl_dir / "report" / "crawl_summary.json").read_text(encoding="utf-8"))
    assert summary["verify_trials"]["written"] and summary["verify_trials"]["warning"].startswith(WHY)
    assert main(["status", str(cfg)]) == 0
    assert f"verify_trials.csv warning: {WHY}" in " ".join(capsys.readouterr().out.split())

    gv = geoverify_over_crawl_toml(isolated_roots, name="gv-eu", crawl_dir=crawl_dir, images=images, trials="release")
    assert main(["run", str(gv), "--simulate", "--no-live"]) == 0
    gdry = " ".join(capsys.readouterr().out.split())
    assert (f"warning: the {len(arms)} trials hold no swapped-image control (arm ctrl_mismatch): the pre-registered "
            "read-out will say 'swapped-image control not run' and skip that arm's validity check (F <= 20%)") in gdry, gdry
