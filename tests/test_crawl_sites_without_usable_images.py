"""A crawl site left with no usable image is named, not silently dropped (crawl40 #4).

Before: a site whose kept images were all excluded (or that kept none) stayed in ``sites.csv``, had no row in
``verify_trials.csv`` and no request in a GeoHint plan, and neither the crawl's summary nor the campaigns' plans
said so. Now the crawl's summary (and ``run.py status``) says ``usable images: 0`` for that site,
``report/crawl_summary.json`` lists it under ``sites_without_usable_images``, and a GeoVerify or GeoHint plan over
the crawl's folder names the sites of ``sites.csv`` without an image. The shipped offline crawl (local fakes)
through the CLI; human verdicts exclude every image of one site.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from geoagent.cli import main
from test_crawl_handoff import _rows  # one copy of the CSV reader and the campaign table
from test_crawl_handoff import _toml as _campaign

CRAWL_CONFIG = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"




def test_a_site_without_a_usable_image_is_named_by_the_crawl_and_by_both_plans(sandbox_crawled, capsys, monkeypatch):
    root, _first = sandbox_crawled
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # the plans below read the crawl's folder
    state = root / "state" / "crawl-sandbox"
    images = _rows(state / "images.csv")
    site, _n = min(collections.Counter(r["site"] for r in images).items(), key=lambda kv: (kv[1], kv[0]))
    mine = [r for r in images if r["site"] == site]
    hv = root / "hv.csv"
    hv.write_text("image,human_verdict\n" + "".join(f"{r['path']},exclude\n" for r in mine), encoding="utf-8")
    text = CRAWL_CONFIG.read_text(encoding="utf-8").replace(
        'model = "sandbox-vision-auditor"\n', f'model = "sandbox-vision-auditor"\nhuman_verdicts = "{hv}"\n', 1)
    cfg = root / "crawl_hv.toml"
    cfg.write_text(text, encoding="utf-8")
    capsys.readouterr()

    assert main(["crawl", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    city = next(r["city"] for r in _rows(state / "sites.csv") if r["site"] == site)
    line = next((ln for ln in out.splitlines() if f"site {site} ({city}): usable images: 0" in ln), None)
    assert line is not None, out
    assert line.startswith("  warning:") and f"{len(mine)} image" in line and "excluded by the image audit" in line
    # only that site: every other one keeps a usable image
    assert out.count("usable images: 0") == 1, out
    summary = json.loads((state / "report" / "crawl_summary.json").read_text(encoding="utf-8"))
    (entry,) = summary["sites_without_usable_images"]
    assert (entry["site"], entry["kept"], entry["excluded"], entry["no_verdict"]) == (site, len(mine), len(mine), 0)
    assert site in {r["site"] for r in _rows(state / "sites.csv")}
    assert site not in {t["site"] for t in _rows(state / "verify_trials.csv")}

    assert main(["status", str(cfg)]) == 0
    assert f"site {site} ({city}): usable images: 0" in capsys.readouterr().out

    images_root = root / "state" / "images"
    gv = _campaign(root, "gv-bare", "geoverify", state, f'trials = "release"\nimage_root = "{images_root}"\nn_boot = 0')
    assert main(["run", str(gv), "--simulate", "--no-live"]) == 0
    got = capsys.readouterr()
    warn = [ln for ln in (got.out + got.err).splitlines() if "no image in the trial table" in ln]
    assert warn and f": {site} (from a crawl" in warn[0] and "1 site of" in warn[0], got.out + got.err
    gh = _campaign(root, "gh-bare", "geohint", state, 'images = "release"\nconditions = ["baseline"]')
    assert main(["run", str(gh), "--simulate", "--no-live"]) == 0
    got = capsys.readouterr()
    warn = [ln for ln in (got.out + got.err).splitlines() if "no image in the trial table" in ln]
    assert warn and f": {site} (from a crawl" in warn[0], got.out + got.err


def test_a_crawl_whose_sites_all_have_usable_images_says_nothing(sandbox_crawled):
    root, first = sandbox_crawled
    assert "usable images: 0" not in first
    summary = json.loads((root / "state" / "crawl-sandbox" / "report" / "crawl_summary.json").read_text())
    assert summary["sites_without_usable_images"] == []
