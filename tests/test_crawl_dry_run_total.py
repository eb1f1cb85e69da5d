"""The crawl's dry run totals the worst case of its planned model calls and compares it with the cap.

Leftover of session 13: the crawl's budget outline gave each auditor's worst case per call and the config's bound
on image audits, but no total against ``[budget] cap_usd``, which the evaluation campaigns' dry run gives
(``total: ... worst $W, cap $C (within cap)`` and ``!!! OVER CAP`` when it is not). The outline now adds the total:
every image audit the config allows at its worst case, plus the referenceability calls at
:data:`geoagent.crawl.campaign.OUTLINE_CANDIDATES` candidates in each city (the count is illustrative: the real one
depends on what the crawl finds, and the line says so), against the cap; over the cap it says what the cap pays for.
The shipped offline crawl config through the CLI entry (local fakes, illustrative prices), with its Wikidata endpoint
set back to the public one (session 19: over the offline fake the count is the fake world's own, and the shipped
example is within its cap: tests/test_friction_s19_crawl_help.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.crawl.campaign import OUTLINE_CANDIDATES, crawl_budget_figures

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def _dry_run(path, capsys):
    assert main(["crawl", str(path), "--simulate", "--no-live"]) == 0
    return capsys.readouterr().out


def _worst(path):
    cfg = load_config(path)
    settings = cfg.section("crawl")
    f = crawl_budget_figures(cfg, settings)
    per_batch = f["rating_usd"] + f["screen_usd"]
    ref = len(settings.cities) * math.ceil(OUTLINE_CANDIDATES / f["batch_size"]) * per_batch
    return f["image_audit_usd"] * f["max_image_audits"], ref


def _real_wikidata(tmp_path, cap="0.50"):
    """The shipped sandbox crawl against the public Wikidata endpoint (its default): priced at 1,000 candidates
    per city, as the offline fake's own count (geoagent.crawl.campaign.outline_candidates) no longer applies."""
    p = tmp_path / "crawl.toml"
    text = CONFIG.read_text(encoding="utf-8")
    assert 'wdqs = "http://wdqs.sandbox.invalid/sparql"\n' in text and "cap_usd = 1.00" in text
    p.write_text(text.replace('wdqs = "http://wdqs.sandbox.invalid/sparql"\n', "")
                 .replace("cap_usd = 1.00", f"cap_usd = {cap}"), encoding="utf-8")
    return p


def test_a_crawl_total_over_its_cap_says_what_the_cap_pays_for(isolated_roots, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    path = _real_wikidata(tmp_path)
    out = _dry_run(path, capsys)
    img, ref = _worst(path)
    line = next((ln for ln in out.splitlines() if ln.strip().startswith("total (worst case)")), None)
    assert line is not None, out  # before: no total line
    assert f"${img + ref:.4f}" in line and f"image audits ${img:.4f}" in line and f"referenceability ${ref:.4f}" in line
    assert "1,000 candidates in each of 3 cities" in line and "cap $0.50 (OVER cap)" in line
    over = next(ln for ln in out.splitlines() if "!!! OVER CAP" in ln)
    m = re.search(r"about ([\d,]+) candidates per city", over)
    assert m, over
    cfg = load_config(path)
    f = crawl_budget_figures(cfg, cfg.section("crawl"))
    per_cand = (f["rating_usd"] + f["screen_usd"]) / f["batch_size"]
    n = int(m.group(1).replace(",", ""))
    # the cap left after every image audit, shared by the 3 cities, in whole batches at their worst case
    assert n == int((0.50 - img) / 3 / (per_cand * f["batch_size"])) * f["batch_size"]


def test_a_cap_above_the_total_reads_within(isolated_roots, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    p = _real_wikidata(tmp_path, "100.00")
    out = _dry_run(p, capsys)
    img, ref = _worst(p)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("total (worst case)"))
    assert f"${img + ref:.4f}" in line and "cap $100.00 (within cap)" in line
    assert "!!! OVER CAP" not in out
