"""Crawl walkthrough defects (session 13, crawl2; seed 000 Sec. 3).

* A city added 1.1 km from Mirror Bay sampled Peony Bell Tower (Q6000034) again, with the same photos, as a site of
  both cities; the crawl only warned and every campaign over its folder dropped the duplicate trial rows as
  malformed. A benchmark holds a landmark once: the sampler skips a candidate already a site of another city of
  the crawl (the city sampled first keeps it), and an image kept under two sites is used under one of them.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from geoagent.cli import main

MIRROR_BAY_NORTH = '''
[[crawl.cities]]
city = "Mirror Bay North"
country = "MB"
continent = "AS"
lat = 45.0802
lon = 107.6869
'''


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _config(tmp: Path, extra: str = "", name: str = "crawl_x.toml", head_extra: str = "") -> Path:
    from tests.test_crawl_human_verdicts_applied import CRAWL_CONFIG

    head, sep, rest = CRAWL_CONFIG.read_text(encoding="utf-8").partition("\n[crawl.endpoints]")
    p = tmp / name
    p.write_text(head + head_extra + extra + sep + rest, encoding="utf-8")
    return p


def test_a_landmark_of_two_overlapping_cities_is_a_site_of_the_city_sampled_first_only(isolated_roots, monkeypatch,
                                                                                        capsys):
    # before: mirrorbaynorth_peony (Q6000034, the 6 photos of mirrorbay_peony) was sampled, verify_trials.csv held
    # each of those photos' trial rows twice, and the summary only warned
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    cfg = _config(isolated_roots, MIRROR_BAY_NORTH)
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    state = isolated_roots / "state" / "crawl-sandbox"
    sites = _rows(state / "sites.csv")
    by_qid: dict[str, list[str]] = {}
    for s in sites:
        by_qid.setdefault(s["qid"], []).append(s["city"])
    assert by_qid["Q6000034"] == ["Mirror Bay"], by_qid["Q6000034"]
    assert all(len(v) == 1 for v in by_qid.values()), by_qid
    assert any(s["city"] == "Mirror Bay North" for s in sites), sites  # the north city has sites of its own
    images = [r["image_id"] for r in _rows(state / "images.csv")]
    assert len(images) == len(set(images)), "an image under two sites"
    trials = [(r["image_id"], r["arm"], r["cand"]) for r in _rows(state / "verify_trials.csv")]
    assert len(trials) == len(set(trials)), "duplicate trial rows"
    rec = json.loads((state / "sampling" / "mirrorbaynorth.json").read_text(encoding="utf-8"))
    skipped = [w for w in rec["walk"] if w["decision"] == "skip_other_city"]
    assert [(w["qid"], w["city"]) for w in skipped] == [("Q6000034", "Mirror Bay")], skipped
    assert rec["sampler_version"] == 5
    line = next(ln for ln in out.splitlines() if "already a site of another city" in ln)
    assert re.search(r"\b1 candidate skipped\b", line) and "sampled first keeps it" in line, line
    trials_line = next(ln for ln in out.splitlines() if "GeoVerify trials:" in ln)
    assert "more than one" not in trials_line, trials_line


def test_a_crawl_already_holding_a_shared_landmark_keeps_its_sites_and_warns(isolated_roots, monkeypatch, capsys):
    # a crawl sampled before the rule (sampler version 4) that holds Q6000034 under both cities keeps its stored
    # sites on resume (resampling would change them silently) and keeps naming them; its images are used under
    # one site each (the nearest; on a tie, the first site id)
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(_config(isolated_roots)), "--no-live"]) == 0
    capsys.readouterr()
    state = isolated_roots / "state" / "crawl-sandbox"
    south = json.loads((state / "sampling" / "mirrorbay.json").read_text(encoding="utf-8"))
    north = dict(south, city=dict(south["city"], city="Mirror Bay North", lat=45.0802), sampler_version=4)
    north["sites"] = [dict(s, city="Mirror Bay North", site=s["site"].replace("mirrorbay_", "mirrorbaynorth_"))
                      for s in south["sites"]]
    (state / "sampling" / "mirrorbaynorth.json").write_text(json.dumps(north), encoding="utf-8")
    cfg = _config(isolated_roots, MIRROR_BAY_NORTH)
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    sites = _rows(state / "sites.csv")
    assert sorted(s["city"] for s in sites if s["qid"] == "Q6000034") == ["Mirror Bay", "Mirror Bay North"]
    line = next(ln for ln in out.splitlines() if "GeoVerify trials:" in ln)
    assert "Q6000034" in line and "mirrorbaynorth_peony (Mirror Bay North)" in line, line
    assert "sampled before sampler version 5" in line and "the stored sites are kept" in line, line
    assert re.search(r"\b\d+ images were kept under more than one site\b.*nearest", line), line
    images = [r["image_id"] for r in _rows(state / "images.csv")]
    assert len(images) == len(set(images)), "an image under two sites"
    assert {r["site"] for r in _rows(state / "images.csv") if r["site"].startswith("mirrorbaynorth_")} == set()
    # the copies under the north sites are not audited (paid) a second time: they are used under mirrorbay_*
    assert not list((state / "image_audit").glob("mirrorbaynorth_*/*.json"))
    audit_line = next(ln for ln in out.splitlines() if "images kept:" in ln)
    assert "not audited yet" not in audit_line, audit_line
    assert re.search(r"\b\d+ more copies of kept images under a farther site too\b", audit_line), audit_line
    trials = [(r["image_id"], r["arm"], r["cand"]) for r in _rows(state / "verify_trials.csv")]
    assert len(trials) == len(set(trials)), "duplicate trial rows"
    summary = json.loads((state / "report" / "crawl_summary.json").read_text(encoding="utf-8"))
    assert "Q6000034" in (summary["verify_trials"]["warning"] or ""), summary["verify_trials"]
    from tests.test_crawl_walk2_s13 import subprocess_status

    assert "Q6000034" in subprocess_status(cfg)


def _seed_config(tmp: Path, seed: int, ladder: str = "", name: str = "crawl_seed.toml") -> Path:
    from tests.test_crawl_human_verdicts_applied import CRAWL_CONFIG

    text = CRAWL_CONFIG.read_text(encoding="utf-8")
    text = text.replace('[crawl]\ncontact = "mailto:you@example.org"\nseed = 20260401\n',
                        f'[crawl]\ncontact = "mailto:you@example.org"\nseed = {seed}\n', 1)
    assert f"seed = {seed}\nevaluated_models" in text
    head, sep, rest = text.partition("\n[crawl.endpoints]")
    p = tmp / name
    p.write_text(head + ladder + sep + rest, encoding="utf-8")
    return p


def _ladders(state: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((state / "ladders").glob("*.csv"))}


def test_a_changed_crawl_seed_that_redraws_the_ladders_is_said_and_recorded(isolated_roots, monkeypatch, capsys):
    # before: [crawl] seed changed on a finished crawl (no [crawl.ladder] seed) printed "the change affects none of
    # the stored results: they keep the old settings, and the manifest keeps recording those ... Use a new
    # [campaign] name", while the same run redrew every ladder with the new seed; the manifest kept the old seed
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(_seed_config(isolated_roots, 20260401)), "--no-live"]) == 0
    capsys.readouterr()
    state = isolated_roots / "state" / "crawl-sandbox"
    before = _ladders(state)
    sampling = (state / "sampling" / "mirrorbay.json").read_bytes()
    assert main(["crawl", str(_seed_config(isolated_roots, 7)), "--no-live"]) == 0
    got = capsys.readouterr()
    assert "this run: 0 new model calls" in got.out, got.out[-2000:]
    assert _ladders(state) != before  # redrawn with the new seed
    assert (state / "sampling" / "mirrorbay.json").read_bytes() == sampling  # stored picks kept
    assert "affects none of the stored results" not in got.err and "new [campaign] name" not in got.err, got.err
    line = next(ln for ln in got.err.splitlines() if "crawl.seed" in ln)
    assert line.startswith("info:") and "ladder" in line and "no model call" in line, line
    assert "sampling/<city>.json" in line and "[crawl.ladder] seed" in line, line
    man = json.loads((state / "manifest.json").read_text(encoding="utf-8"))
    assert man["config"]["crawl"]["seed"] == 7 and not man.get("config_not_applied"), man.get("config_not_applied")


def test_a_changed_crawl_seed_under_a_fixed_ladder_seed_changes_no_stored_result(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    fixed = "\n[crawl.ladder]\nseed = 5\n"
    assert main(["crawl", str(_seed_config(isolated_roots, 20260401, fixed)), "--no-live"]) == 0
    capsys.readouterr()
    state = isolated_roots / "state" / "crawl-sandbox"
    before = _ladders(state)
    assert main(["crawl", str(_seed_config(isolated_roots, 7, fixed)), "--no-live"]) == 0
    got = capsys.readouterr()
    assert _ladders(state) == before
    line = next(ln for ln in got.err.splitlines() if "crawl.seed" in ln)
    assert "affects none of the stored results" in line, line


def test_verdicts_and_decisions_that_decide_nothing_are_warning_lines_like_the_clis_others(isolated_roots, monkeypatch,
                                                                                          capsys):
    # before: "2026-12-02 01:02:03,456 WARNING geoagent.crawl.review: 1 review decision matches no rated candidate ..."
    # and "... WARNING geoagent.crawl.campaign: 1 human verdict of ... names no image ...": logging records, where the
    # CLI's other warnings are "warning: ..." lines
    from tests.test_crawl_human_verdicts_applied import CRAWL_CONFIG

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(CRAWL_CONFIG), "--no-live"]) == 0
    capsys.readouterr()
    state = isolated_roots / "state" / "crawl-sandbox"
    site = _rows(state / "sites.csv")[0]["site"]
    hv, rv = isolated_roots / "hv.csv", isolated_roots / "rv.csv"
    hv.write_text(f"image,human_verdict\n{site}/999.jpg,exclude\n", encoding="utf-8")
    rv.write_text(f"site,qid,decision\n{site},Q999999999,4\n", encoding="utf-8")
    text = CRAWL_CONFIG.read_text(encoding="utf-8")
    text = text.replace('model = "sandbox-vision-auditor"\n', f'model = "sandbox-vision-auditor"\nhuman_verdicts = "{hv}"\n', 1)
    text = text.replace('model = "sandbox-text-auditor"\n', f'model = "sandbox-text-auditor"\nreview_verdicts = "{rv}"\n', 1)
    cfg = isolated_roots / "crawl_both.toml"
    cfg.write_text(text, encoding="utf-8")
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    err = capsys.readouterr().err
    review = [ln for ln in err.splitlines() if "Q999999999" in ln]
    verdict = [ln for ln in err.splitlines() if "999.jpg" in ln]
    assert len(review) == 1 and review[0].startswith("warning: ") and f"{rv}:2" in review[0], err[-3000:]
    assert len(verdict) == 1 and verdict[0].startswith("warning: ") and f"{hv}:2" in verdict[0], err[-3000:]
    assert not re.search(r"^\d{4}-\d\d-\d\d .*WARNING geoagent", err, re.M), err[-3000:]


def test_a_review_decision_written_as_an_integral_float_is_read_as_that_rating(tmp_path):
    # before: "4.0" (as the release writes ratings: verify_trials.csv fam 4.0, and as a spreadsheet saves a number
    # column) was refused: "decision must be keep (the model's rating stands) or a corrected referenceability 0-5,
    # got '4.0'", while every crawl table reading ratings takes 4.0
    import pytest

    from geoagent.crawl.review import read_review_verdicts

    p = tmp_path / "rv.csv"
    p.write_text("site,qid,decision\na,Q1,4.0\na,Q2,0.0\na,Q3,5.00\na,Q4,keep\na,Q5,3\n", encoding="utf-8")
    got = read_review_verdicts(p)
    assert [(k[1], v["decision"], v["familiarity"]) for k, v in got.items()] == [
        ("Q1", "4", 4), ("Q2", "0", 0), ("Q3", "5", 5), ("Q4", "keep", None), ("Q5", "3", 3)]
    for bad in ("4.5", "6", "-1", "6.0", "nan", "inf", "1e0", '"4,0"', "", "4.0.0"):
        p.write_text(f"site,qid,decision\na,Q1,keep\na,Q2,{bad}\n", encoding="utf-8")
        with pytest.raises(ValueError) as exc:
            read_review_verdicts(p)
        assert f"{p}:3" in str(exc.value) and "0-5" in str(exc.value), (bad, str(exc.value))


def test_equal_pageview_counts_share_one_tier_whatever_their_qids():
    # before: tiers were cut by rank in (views, QID) order, so four candidates with 0 views were split 2 low / 2 mid by
    # their QID numbers, and whether a 0-view candidate rated 5 went to the review queue (gap 2: low vs high) depended
    # on its QID
    from geoagent.crawl.referenceability import pageview_tiers

    views = {"Q1": 0, "Q2": 0, "Q3": 0, "Q4": 0, "Q5": 10, "Q6": 20}
    got = pageview_tiers(views)
    assert {got[q] for q in ("Q1", "Q2", "Q3", "Q4")} == {"low"}, got
    assert got["Q6"] == "high", got
    # relabelling the candidates moves no count to another tier
    relabelled = pageview_tiers({"Q9" + q[1:]: v for q, v in reversed(list(views.items()))})
    assert {views[q]: t for q, t in got.items()} == {views["Q" + q[2:]]: t for q, t in relabelled.items()}
    # a tie across a cut (positions 1 and 2 of 6; the cut lies at 2): the group takes the tier of its mean position
    assert pageview_tiers({"Q1": 1, "Q2": 2, "Q3": 2, "Q4": 4, "Q5": 5, "Q6": 6}) == {
        "Q1": "low", "Q2": "low", "Q3": "low", "Q4": "mid", "Q5": "high", "Q6": "high"}
    assert set(pageview_tiers({"Q1": 0, "Q2": 0, "Q3": 0}).values()) == {"mid"}  # no order at all: the middle
    # distinct counts: as before (tertiles of the rank)
    assert pageview_tiers({"Q1": 5846, "Q2": 2294, "Q3": 10, "Q4": 900, "Q5": 400, "Q6": 50}) == {
        "Q3": "low", "Q6": "low", "Q5": "mid", "Q4": "mid", "Q2": "high", "Q1": "high"}
