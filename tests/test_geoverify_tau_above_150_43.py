"""GeoVerify decoy bands at a claim tolerance other than 150 m, part 2 (fixverify43).

#1 With tau between 150 and 300 m the builder already started the nearest band at tau (a candidate nearer than tau is
signal, Eq. 1: no decoy ever fell inside the claim radius), but labelled it ``0.15-0.3km``, edges it did not have.
Now it is labelled by its real edges (``0.2-0.3km`` for 200 m; the paper's 150 m keeps ``0.15-0.3km``), with the same
draws (no new trial builder version), and answers stored under the old label count in the new band. A table labelled
at 150 m whose ``0.15-0.3km`` decoys lack a distance, or lie nearer than tau, is refused at plan time.
#2 A table built at 150 m scored at a tau below it counts its ``0.15-0.3km`` decoys in ``<tau>-0.3km`` (fixverify42
#1), which then holds no decoy between tau and 150 m: the plan, the report, the terms and the summary say so.
#3 d', delta_1 and the read-out under both (hand-computed).
"""

from __future__ import annotations

import math
import sqlite3

import polars as pl
import pytest
from scipy.stats import norm

from geoagent.data.model import (DECOY_BAND_LABELS, Image, ReferencePoint, VerifyTrial, decoy_band_labels,
                                 decoy_bands_km, tier_of, verify_band)
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.plan import check_bands, check_tolerance
from geoagent.geoverify.trials import TRIAL_BUILDER_VERSION, build_trials, trial_builder_version
from geoagent.report.geoverify import band_gap_lines, render_markdown, render_terminal
from geoagent.scoring import sdt

TAU_200 = 0.2  # km
TAU_100 = 0.1


def _offset(lat: float, d_km: float) -> float:
    """The latitude ``d_km`` due north of ``lat`` on the project's sphere (R = 6371.0088 km)."""
    return lat + math.degrees(d_km / 6371.0088)


def _pool(spec: list[tuple[str, float, int]]) -> list[ReferencePoint]:
    return [ReferencePoint(qid=None, name_en=name, lat=_offset(48.0, d), lon=2.0, referenceability=r, tier=tier_of(r),
                           site_id="site_a") for name, d, r in spec]


# --- #1 the builder at tau = 200 m ---------------------------------------------------------------------------------


def test_no_decoy_falls_inside_tau_and_the_nearest_band_says_where_it_starts():
    # the reproduction: candidates 160-199 m away are signal at tau = 200 m (truth yes), never decoys
    img = Image("101", "site_a", 48.0, 2.0, continent="EU")
    pool = {"site_a": _pool([("s050", 0.05, 3), ("c160", 0.16, 3), ("c199", 0.199, 3), ("c250", 0.25, 3),
                             ("c290", 0.29, 3), ("c500", 0.5, 3)])}
    trials, rep = build_trials([img], pool, n_per_band=None, n_control=0, tau_km=TAU_200)
    got = {t.cand: (t.band, t.truth) for t in trials}
    assert got == {"s050": ("signal", "yes"), "c160": ("signal", "yes"), "c199": ("signal", "yes"),
                   "c250": ("0.2-0.3km", "no"), "c290": ("0.2-0.3km", "no"), "c500": ("0.3-0.7km", "no")}
    assert all(t.d_km >= TAU_200 for t in trials if t.truth == "no")
    assert rep.bands == ("0.2-0.3km", *DECOY_BAND_LABELS[1:])
    check_tolerance(trials, TAU_200)
    assert check_bands(trials, TAU_200) == []
    # the paper's tau keeps the paper's label; 250 m starts at 250 m
    assert decoy_bands_km(0.15)[0] == (0.15, 0.3) and decoy_band_labels(0.15) == DECOY_BAND_LABELS
    assert decoy_band_labels(0.25)[0] == "0.25-0.3km" and decoy_band_labels(0.2999)[0] == "0.2999-0.3km"
    assert verify_band(0.2, TAU_200) == "0.2-0.3km" and verify_band(0.1999, TAU_200) == "signal"
    assert verify_band(0.3, TAU_200) == "0.3-0.7km"


def _two_images_pool():
    imgs = [Image("101", "site_a", 48.0, 2.0, continent="EU"), Image("202", "site_a", 48.0, 2.0, continent="AS")]
    spec = [("s050", 0.05, 3), ("n210", 0.21, 1), ("n220", 0.22, 3), ("n230", 0.23, 4), ("n240", 0.24, 2),
            ("n260", 0.26, 3), ("n270", 0.27, 5), ("n280", 0.28, 3), ("n290", 0.29, 0),
            *[(f"m{i}", 0.3 + 0.05 * i, 3) for i in range(6)]]
    return imgs, {"site_a": _pool(spec)}


def test_relabelling_draws_the_same_trials_so_the_builder_version_is_unchanged():
    # the draws of these inputs at seed 7 before fixverify43 (recorded with the code of 7f1d7373, where the band was
    # labelled 0.15-0.3km): the nearest band's stream keeps its name, so the same candidates are drawn
    imgs, pool = _two_images_pool()
    trials, _ = build_trials(imgs, pool, seed=7, n_per_band=2, n_control=2, tau_km=TAU_200)
    got = sorted((t.image_id, t.arm, t.cand, t.image_ref, t.band) for t in trials)
    assert got == [
        ("101", "ctrl_mismatch", "m1", "202", "0.3-0.7km"), ("101", "ctrl_noimage", "m0", "blank:gray", "0.2-0.3km"),
        ("101", "ctrl_noimage", "m1", "blank:gray", "0.3-0.7km"), ("101", "main", "m0", "101", "0.2-0.3km"),
        ("101", "main", "m1", "101", "0.3-0.7km"), ("101", "main", "m4", "101", "0.3-0.7km"),
        ("101", "main", "n280", "101", "0.2-0.3km"), ("101", "main", "s050", "101", "signal"),
        ("202", "ctrl_mismatch", "m2", "101", "0.3-0.7km"), ("202", "ctrl_noimage", "m2", "blank:gray", "0.3-0.7km"),
        ("202", "ctrl_noimage", "s050", "blank:gray", "signal"), ("202", "main", "m0", "202", "0.2-0.3km"),
        ("202", "main", "m2", "202", "0.3-0.7km"), ("202", "main", "m3", "202", "0.3-0.7km"),
        ("202", "main", "n240", "202", "0.2-0.3km"), ("202", "main", "s050", "202", "signal")]
    # so a campaign at 150 m or more still records trial builder 3 (nothing it planned changed), below 150 m 4
    assert TRIAL_BUILDER_VERSION == 4
    assert trial_builder_version(0.15) == trial_builder_version(TAU_200) == trial_builder_version(0.2999) == 3
    assert trial_builder_version(TAU_100) == 4


# --- #1 stored answers and tables labelled 0.15-0.3km, scored at 200 m --------------------------------------------


def _cells(rows: list[tuple[str, str, str, int, int]]) -> pl.DataFrame:
    """(arm, band, truth, n_yes, n_no) rows of model "m" at one site each (sites s0, s1, ...)."""
    return pl.DataFrame([dict(model="m", site=f"s{i}", arm=arm, band=band, truth=truth, n_yes=y, n_no=n, n_fail=0)
                         for i, (arm, band, truth, y, n) in enumerate(rows)])


def _z(k: int, n: int) -> float:
    return float(norm.ppf((k + 0.5) / (n + 1)))  # log-linear correction (Hautus 1995)


def test_answers_stored_as_0_15_0_3km_count_in_the_nearest_band_at_200_m():
    # hand-computed: H = 40/50; nearest band 6/20 stored under the old label + 4/20 under the new one = 10/40;
    # 0.3-0.7 km 2/40; the other bands 0/40. d'(nearest) = z(40.5/51) - z(10.5/41) = 0.8208 - (-0.6554) = 1.4762
    cells = _cells([("main", "signal", "yes", 40, 10), ("main", "0.15-0.3km", "no", 6, 14),
                    ("main", "0.2-0.3km", "no", 4, 16), ("main", "0.3-0.7km", "no", 2, 38),
                    ("main", "0.7-1.5km", "no", 0, 40), ("main", "1.5-3.0km", "no", 0, 40),
                    ("main", "3.0-6.0km", "no", 0, 40)])
    s = sdt.score(cells, tau_km=TAU_200, pooled=False)["m"]
    assert [b.band for b in s.bands] == ["0.2-0.3km", *DECOY_BAND_LABELS[1:]]
    near = s.band("0.2-0.3km")
    assert (near.n, near.n_yes) == (40, 10)
    assert near.d_prime == pytest.approx(_z(40, 50) - _z(10, 40)) and near.d_prime == pytest.approx(1.4762, abs=1e-4)
    assert s.delta_1 == "0.2-0.3km"  # the nearest band whose d' reaches 1: no interpolation, a band
    assert s.band_gaps == {}  # the old label reaches below tau: no gap
    assert s.f == pytest.approx(12 / 200)
    # the read-out reads the nearest band's d' (1.48: neither > 2 nor < 0.5) and the farthest's
    far = _z(40, 50) - _z(0, 40)
    assert s.bands[-1].d_prime == pytest.approx(far)
    assert s.readout.verdict == "inconclusive"
    md = render_markdown({"m": s})
    assert "| F 0.2–0.3 km | 25.0 % (10/40) |" in md and "0.15–0.3 km" not in md
    assert "the nearest band, 0.2–0.3 km, starts at tau" in md.split("Terms:")[1]
    # the aggregator, as a campaign's report reads it
    agg = GeoVerifyAggregator()
    agg.cells = cells
    assert agg.scores(tau_km=TAU_200)["m"].band("0.2-0.3km").n == 40


def test_at_the_paper_tau_nothing_folds_and_a_smaller_taus_band_stays_refused():
    assert sdt.band_folds(["0.15-0.3km", "0.1-0.3km", "0.3-0.7km"], DECOY_BAND_LABELS) == {}
    assert sdt.band_folds(["0.15-0.3km", "0.12-0.3km", "signal"], decoy_band_labels(TAU_200)) == {
        "0.15-0.3km": "0.2-0.3km"}  # a table built at 120 m holds decoys inside 200 m: not counted


def _trial(band: str, d_km: float | None, cand: str = "c") -> VerifyTrial:
    return VerifyTrial(image_id="1", site_id="s1", arm="main", cand=f"{cand} {band} {d_km}", img_lat=0.0, img_lon=0.0,
                       cand_lat=None, cand_lon=None, referenceability=None, d_km=d_km, band=band, truth="no")


def test_plan_refuses_a_150_m_table_with_decoys_inside_or_without_distance_at_200_m():
    ok = [_trial("0.15-0.3km", 0.25), _trial("0.3-0.7km", 0.5)]
    assert check_bands(ok, TAU_200, source="t.csv") == []
    # a decoy 180 m away labelled at 150 m is inside a 200 m claim radius: the claim is true
    inside = [*ok, _trial("0.15-0.3km", 0.18)]
    with pytest.raises(ValueError, match=r"tau_m = 200 m disagrees"):
        check_tolerance(inside, TAU_200, source="t.csv")
    with pytest.raises(ValueError, match=r"t\.csv: 1 main-arm decoy trial\(s\) of band '0\.15-0\.3km' with no distance "
                                         r"\(d_km\) or one below \[geoverify\] tau_m = 200 m.*inside the claim radius"):
        check_bands(inside, TAU_200, source="t.csv")
    # without d_km check_tolerance cannot judge it; check_bands refuses it
    no_d = [*ok, _trial("0.15-0.3km", None)]
    check_tolerance(no_d, TAU_200)
    with pytest.raises(ValueError, match=r"d_km = None"):
        check_bands(no_d, TAU_200, source="t.csv")
    # a table built at 120 m scored at 200 m: its band lies outside those scored
    with pytest.raises(ValueError, match=r"e\.g\. band '0\.12-0\.3km'"):
        check_bands([_trial("0.12-0.3km", 0.25)], TAU_200, source="t.csv")


def test_a_release_table_at_200_m_is_refused_for_its_decoys_between_150_and_200_m(release_dir):
    from geoagent.data.importer import import_release

    rel = import_release(release_dir)
    inside = [t for t in rel.trials if t.arm == "main" and t.band == "0.15-0.3km" and t.d_km < TAU_200]
    assert inside  # the release sample holds decoys 150-200 m away
    with pytest.raises(ValueError, match=r"tau_m = 200 m disagrees with the truth labels"):
        check_tolerance(rel.trials, TAU_200, source="verify_trials.csv")
    with pytest.raises(ValueError, match=r"of band '0\.15-0\.3km' with no distance \(d_km\) or one below"):
        check_bands(rel.trials, TAU_200, source="verify_trials.csv")


# --- #2 a table built at 150 m scored below it: the gap between tau and 150 m is named ----------------------------


def test_a_150_m_table_scored_at_100_m_names_the_gap_in_report_terms_and_plan():
    # hand-computed: H = 8/10 -> z(8.5/11) = 0.7479; nearest 6/10 -> z(6.5/11) = 0.2299, d' = 0.5180;
    # 0.3-0.7 km 2/10 -> z(2.5/11) = -0.7479, d' = 1.4957: delta_1 = 0.3-0.7km whether or not the band has a gap
    cells = _cells([("main", "signal", "yes", 8, 2), ("main", "0.15-0.3km", "no", 6, 4),
                    ("main", "0.3-0.7km", "no", 2, 8), ("main", "0.7-1.5km", "no", 1, 9),
                    ("main", "1.5-3.0km", "no", 1, 9), ("main", "3.0-6.0km", "no", 0, 10)])
    scores = sdt.score(cells, tau_km=TAU_100, pooled=False)
    s = scores["m"]
    assert s.band_gaps == {"0.1-0.3km": 0.15}
    assert s.band("0.1-0.3km").n == 10
    assert s.band("0.1-0.3km").d_prime == pytest.approx(0.5180, abs=1e-4)
    assert s.band("0.3-0.7km").d_prime == pytest.approx(1.4957, abs=1e-4)
    assert s.delta_1 == "0.3-0.7km" and s.readout.verdict == "inconclusive"
    (line,) = band_gap_lines(scores)
    assert line == ("Band gap (0.1–0.3 km): these trials hold no decoy between 100 m and 150 m: the band's decoys are "
                    "labelled from 150 m on (a trial table built at tau = 150 m, e.g. the release's, scored at tau = "
                    "100 m), so its F, d' and delta_1 describe decoys from 150 m on, not from tau. Build the trials "
                    "at this tau ([geoverify] trials = \"build\") to probe 100 m to 150 m.")
    md = render_markdown(scores)
    assert f"**{line}**" in md
    assert ("these trials hold decoys of the band 0.1–0.3 km from 150 m on only (a table built at that tau: see the "
            "band gap warning)") in md.split("Terms:")[1]
    assert line in render_terminal(scores)
    # the plan says it too (logged as a warning), naming the file
    notes = check_bands([_trial("0.15-0.3km", 0.2), _trial("0.3-0.7km", 0.5)], TAU_100, source="t.csv")
    assert notes == ["t.csv: " + line]
    # stored answers of both labels (a build campaign re-planned at 100 m, fixverify42 #1): decoys from 100 m exist
    both = cells.vstack(_cells([("main", "0.1-0.3km", "no", 1, 4)]).with_columns(pl.lit("s9").alias("site")))
    assert sdt.score(both, tau_km=TAU_100, pooled=False)["m"].band_gaps == {}
    assert band_gap_lines(sdt.score(both, tau_km=TAU_100)) == []
    # the paper's tau: no gap, no line
    assert band_gap_lines(sdt.score(cells)) == [] and "Band gap" not in render_markdown(sdt.score(cells))


# --- end to end: a build campaign at 200 m, its stored answers relabelled as a run before the fix stored them -----


def _gv_toml(tmp_path, release_dir, tau_m: float):
    from geoagent.config import load_config

    from test_geoverify_tau_bands42 import write_build_toml

    return load_config(write_build_toml(tmp_path / f"gv{tau_m:g}.toml", f"gv43-tau{tau_m:g}", release_dir, tau_m))


def test_a_build_campaign_at_200_m_reports_its_band_and_keeps_answers_stored_under_the_old_label(
        tmp_path, release_dir, monkeypatch, capsys):
    import orjson

    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    cfg = _gv_toml(tmp_path, release_dir, 200)
    assert main(["run", str(cfg.source), "--no-live"]) == 0
    capsys.readouterr()
    assert orjson.loads((cfg.state_dir() / "manifest.json").read_bytes())["designs"] == {"geoverify.trial_builder": 3}
    md_path = cfg.state_dir() / "report" / "geoverify_table.md"
    md = md_path.read_text(encoding="utf-8")
    row = next(line for line in md.splitlines() if line.startswith("| F 0.2–0.3 km |"))
    assert "0.15–0.3 km" not in md and "Band gap" not in md
    # the stored answers as a run before fixverify43 stored them (band 0.15-0.3km); the re-run plans the same trials
    # (no "trial builder changed"), re-asks nothing, and counts them in 0.2-0.3 km: the same row
    dbs = [p for p in cfg.state_dir().rglob("*.sqlite") if "results" in _tables(p)]
    assert dbs
    n = 0
    for db in dbs:
        with sqlite3.connect(db) as con:
            n += con.execute("UPDATE results SET row = replace(row, '\"0.2-0.3km\"', '\"0.15-0.3km\"') "
                            "WHERE tbl = 'geoverify_scored'").rowcount
    assert n > 0
    assert main(["run", str(cfg.source), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "trial builder changed" not in err
    md2 = md_path.read_text(encoding="utf-8")
    assert next(line for line in md2.splitlines() if line.startswith("| F 0.2–0.3 km |")) == row
    assert "0.15–0.3 km" not in md2


def _tables(db) -> set[str]:
    with sqlite3.connect(db) as con:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_the_release_table_scored_at_100_m_warns_of_its_gap_in_plan_summary_and_report(
        tmp_path, release_dir, monkeypatch, capsys, caplog):
    """The release's table (labelled at 150 m) without its signal trials 100-150 m away (which tau = 100 m would
    refuse, check_tolerance), run with trials = "release" at tau_m = 100: its 0.15-0.3km decoys count in 0.1-0.3 km,
    and the plan's warning, the console summary, the report and its terms say the band holds none from 100 to 150 m."""
    import csv
    import shutil

    from geoagent.cli import main
    from geoagent.config import load_config

    rel = tmp_path / "rel"
    rel.mkdir()
    shutil.copy(release_dir / "sites.csv", rel / "sites.csv")
    with open(release_dir / "verify_trials_sample.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    kept = [r for r in rows if not (r["band"] == "signal" and float(r["d_km"]) >= TAU_100)]
    assert len(kept) < len(rows) and any(r["band"] == "0.15-0.3km" for r in kept)
    with open(rel / "verify_trials.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(kept)
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    p = tmp_path / "gv.toml"
    p.write_text(f"""
[campaign]
name = "gv43-release100"
kind = "geoverify"
seed = 7
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[geoverify]
trials = "release"
release_dir = "{rel}"
tau_m = 100
n_boot = 0
""", encoding="utf-8")
    cfg = load_config(p)
    assert main(["run", str(p), "--no-live"]) == 0
    out = capsys.readouterr()
    said = out.out + out.err
    gap = ("Band gap (0.1–0.3 km): these trials hold no decoy between 100 m and 150 m: the band's decoys are labelled "
           "from 150 m on")
    assert f"GeoVerify: {rel / 'verify_trials.csv'}: {gap}" in caplog.text  # the plan's warning names the file
    assert f"  {gap}" in said  # the summary's line
    md = (cfg.state_dir() / "report" / "geoverify_table.md").read_text(encoding="utf-8")
    assert f"**{gap}" in md and "| F 0.1–0.3 km |" in md
    assert "decoys of the band 0.1–0.3 km from 150 m on only" in md.split("Terms:")[1]


def test_delta_1_bootstrap_range_names_the_relabelled_band():
    # 12 sites, each: 8/10 signal accepted, nearest band 2/10 (half stored under the old label), farther bands 0/10:
    # d'(nearest) = z(96.5/121) - z(24.5/121) = 0.8328 + 0.8328 = 1.6656 > 1, so delta_1 and both ends of its range
    # are the nearest band, named 0.2-0.3km (the old rows folded in every resample)
    rows = []
    for i in range(12):
        site = f"s{i:02d}"
        rows += [dict(model="m", site=site, arm="main", band=b, truth=t, n_yes=y, n_no=n, n_fail=0)
                 for b, t, y, n in (("signal", "yes", 8, 2), ("0.15-0.3km", "no", 1, 4), ("0.2-0.3km", "no", 1, 4),
                                    *((b, "no", 0, 10) for b in DECOY_BAND_LABELS[1:]))]
    s = sdt.score(pl.DataFrame(rows), tau_km=TAU_200, n_boot=200, seed=3, pooled=False)["m"]
    assert s.band("0.2-0.3km").n == 120
    assert s.band("0.2-0.3km").d_prime == pytest.approx(1.6656, abs=1e-4)
    assert s.delta_1 == "0.2-0.3km" and s.delta_1_ci == ("0.2-0.3km", "0.2-0.3km")
