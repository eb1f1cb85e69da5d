"""Statistics and report edge cases found by earlier reviews (session 19).

1. Exact fit: when every error is equal (or log10 err is exactly linear in d_ref) the residuals are zero, and the
   cluster-robust SE came out as rounding noise (~1e-17) with an arbitrary p (0.007 for a slope of 7e-17 fitted to
   equal errors), which Table 6 printed as an SE of 0.0000 and a "significant" p. statsmodels gives the same noise
   (its SE 7e-18, p 0.011 on such data: it has no guard), so the reference here is the algebra: SE = 0 exactly,
   t = beta / 0 undefined. The fit now says ``exact_fit`` and leaves SE, t and p NaN; the report shows dashes and
   names the cells under the table.
2. A signed number that rounds to zero printed ``-0.00`` (and a zero difference ``+0.00``): now ``0.00``.
3. Table 6's ``SE / unclustered SE`` under the t reference with few sites was shown without the few-clusters
   caution its SE carries; the caution now names it.
4. The GeoHint report's Terms line said "models pooled" for a one-model campaign (and the header's regime line
   "all models pooled").
5. Every site-flip test of a report drew from one stream (``default_rng(seed)``): tests with the same site sums got
   the very same flips, so their Monte-Carlo errors were correlated. Each test now draws from
   ``SeedSequence(seed, spawn_key=blake2b(label))``, checked here by a hand computation of that recipe and against
   the exact p of enumeration.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH
from geoagent.report import geoverify as GV
from geoagent.scoring import permutation as P
from geoagent.scoring.regression import fit_slope

sm = pytest.importorskip("statsmodels.api")
REPO = Path(__file__).resolve().parents[1]


# --- 1. exact fit ---------------------------------------------------------------------------------------------------
def _slope_data(kind: str, n_sites: int = 12, per_site: int = 5):
    rng = np.random.default_rng(4)
    sites = np.repeat([f"s{i:02d}" for i in range(n_sites)], per_site)
    d = rng.uniform(0.5, 6.0, sites.size)
    if kind == "equal":
        err = np.full(sites.size, 5.0)
    elif kind == "linear":
        err = 10 ** (0.3 + 0.07 * d)
    else:  # a real, if tight, fit: residual sd 1e-3 in log10 units
        err = 10 ** (0.3 + 0.07 * d + 1e-3 * rng.standard_normal(sites.size))
    return sites, d, err


@pytest.mark.parametrize("kind,slope", [("equal", 0.0), ("linear", 0.07)])
def test_an_exact_fit_has_no_se_and_no_p(kind, slope):
    sites, d, err = _slope_data(kind)
    y, X = np.log10(err), sm.add_constant(d)
    ref = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": np.unique(sites, return_inverse=True)[1]})
    # the reference's own SE is rounding noise (it has no guard): the algebra, not statsmodels, says "undefined"
    assert ref.ssr <= 1e-20 * float(y @ y) and ref.bse[1] < 1e-12
    for use_t in (False, True):
        r = fit_slope(sites, d, err, use_t=use_t)
        assert getattr(r, "exact_fit", False) is True
        assert r.slope == pytest.approx(slope, abs=1e-12) and r.slope == pytest.approx(ref.params[1], abs=1e-12)
        assert math.isnan(r.slope_se) and math.isnan(r.slope_p) and math.isnan(r.tvalues[-1])
        assert np.isnan(r.cov).all() and np.isnan(r.bse_nonrobust).all()


def test_a_tight_but_real_fit_keeps_statsmodels_se_and_p():
    sites, d, err = _slope_data("tight")
    r = fit_slope(sites, d, err)
    ref = sm.OLS(np.log10(err), sm.add_constant(d)).fit(
        cov_type="cluster", cov_kwds={"groups": np.unique(sites, return_inverse=True)[1]})
    assert r.exact_fit is False
    assert r.slope_se == pytest.approx(ref.bse[1], rel=1e-6)
    assert r.slope_p == pytest.approx(ref.pvalues[1], rel=1e-6, abs=1e-300)


def _gh(site: str, i: int, model: str, d: float, err: float) -> GeoHintResult:
    return GeoHintResult(
        key=f"{site}|{model}|{i}", site=site, image_id=f"im{site}", model=model, condition="forced", schema="forced",
        ref_qid=f"Q{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high", dist_km=d, resolved_level="area",
        error_km=err, hit=err < 1)


def _exact_agg(models=("m-a", "m-b")) -> GeoHintAggregator:
    sites, d, err = _slope_data("equal")
    agg = GeoHintAggregator()
    agg.add_many([_gh(s, i, m, float(di), float(ei)) for m in models for i, (s, di, ei) in enumerate(zip(sites, d, err))])
    return agg


@pytest.mark.parametrize("p_reference", ["normal", "t"])
def test_table6_shows_an_exact_fit_as_undefined_and_says_so(p_reference):
    t6 = GH.table6(_exact_agg(), "forced", p_reference=p_reference)
    for row in t6.rows:
        got = dict(zip(t6.columns, row))
        assert got["beta"] == pytest.approx(0.0, abs=1e-12)
        assert math.isnan(got["SE"]) and math.isnan(got["p"]) and math.isnan(got["SE / unclustered SE"])
    line = next(ln for ln in t6.notes_lines() if ln.startswith("Exact fit"))
    assert "m-a SE, p, SE / unclustered SE" in line and "All SE, p" in line and "undefined" in line
    md = {ln.split(" | ")[0]: ln for ln in t6.to_markdown().splitlines() if ln.startswith("| m-a |")}
    cells = [c.strip() for c in md["| m-a"].strip("|").split("|")]
    assert cells[2] == "0.0000" and cells[3] == cells[4] == cells[8] == GH.DASH  # beta shown (unsigned 0), the rest dashes
    rows = list(csv.DictReader(io.StringIO(t6.to_csv())))
    assert rows[0]["SE"] == rows[0]["p"] == rows[0]["SE / unclustered SE"] == ""


def test_table6_with_one_model_names_only_the_models_cells_for_an_exact_fit():
    t6 = GH.table6(_exact_agg(("m-a",)), "forced")
    line = next(ln for ln in t6.shown.notes_lines() if ln.startswith("Exact fit"))
    assert "m-a SE" in line and f"{GH.POOLED_ROW} SE" not in line


def test_table7_shows_an_exact_fits_p_as_undefined():
    t7 = GH.table7(_exact_agg(), "forced")
    for row in t7.rows:
        got = dict(zip(t7.columns, row))
        assert got["beta all"] == pytest.approx(0.0, abs=1e-12) and math.isnan(got["p all"])
    line = next(ln for ln in t7.notes_lines() if ln.startswith("Exact fit"))
    assert "m-a p all" in line and "p is undefined" in line


# --- 2. no "-0.00" --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("v,f,want", [
    (-0.001, "pp", "0.00"), (0.0, "pp", "0.00"), (-0.0, "f2", "0.00"), (-0.004, "f2", "0.00"),
    (-0.00004, "f4", "0.0000"), (0.00004, "f4", "0.0000"), (-0.0001, "pct", "0.0"), (-0.004, "pps", "0.00"),
    (-0.006, "pp", "-0.01"), (0.006, "pp", "+0.01"), (-0.00005, "f4", "-0.0001"), (0.5, "f4", "+0.5000"),
])
def test_geohint_cells_rounding_to_zero_have_no_sign(v, f, want):
    assert GH._fmt(v, f) == want


def test_fixed_text():
    from geoagent.textfmt import fixed_text

    assert fixed_text(-1e-9, 2) == "0.00" and fixed_text(-1e-9, 2, signed=True) == "0.00"
    assert fixed_text(0.0, 3, signed=True) == "0.000" and fixed_text(-0.0, 1) == "0.0"
    assert fixed_text(-0.125, 2) == "-0.12" and fixed_text(1.5, 1, signed=True) == "+1.5"


def test_geoverify_numbers_rounding_to_zero_have_no_sign():
    assert GV._num(-0.001) == "0.00" and GV._num(-0.001, signed=True) == "0.00" and GV._num(-0.02, True) == "-0.02"
    assert GV._pct(-1e-6) == "0.0 %"


@pytest.mark.parametrize("n_boot", [0, 200])
def test_geoverify_table_prints_a_criterion_of_minus_zero_as_0_00(n_boot):
    """H = 1 - F in a band (15/20 signal yes, 5/20 decoys yes) gives c = -(z(H) + z(F)) / 2 = -1.1e-16 (or -0.0): the
    table printed "-0.00" in its criterion rows."""
    from test_report_review_s17 import _cells
    from geoagent.scoring.sdt import score

    scores = score(_cells({"m": [(15, 20), (5, 20), (5, 20), (5, 20), (5, 20)]}), n_boot=n_boot, seed=0)
    assert scores["m"].bands[0].c <= 0 and abs(scores["m"].bands[0].c) < 1e-12
    for text in (GV.render_markdown(scores), GV.render_terminal(scores)):
        assert "-0.00" not in text and "+0.00" not in text
        crit = [ln for ln in text.splitlines() if "nearest band" in ln and "0.00" in ln]
        assert crit, text


def test_the_table9_markdown_of_a_tiny_negative_difference_prints_no_minus_zero():
    t = GH.Table("t", "t", ["Model", "d"], ["text", "pp"], [["m", -0.001]])
    assert "| m | 0.00 |" in t.to_markdown() and "-0.00" not in t.to_markdown()


# --- 3. the SE ratio under the few-clusters caution --------------------------------------------------------------------
def test_the_se_ratio_carries_the_few_clusters_caution_of_its_se():
    from _geohint_synth import synth_results

    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=3, n_sites=4))
    t6 = GH.table6(agg, "forced", p_reference="t")
    row = dict(zip(t6.columns, t6.rows[0]))
    assert math.isfinite(row["SE"]) and math.isfinite(row["SE / unclustered SE"])  # both shown under t
    note = next(ln for ln in t6.notes_lines() if ln.startswith("p: two-sided, from Student's t"))
    caution = note[note.index("from fewer than 10 site clusters") - 40:]
    assert "'SE / unclustered SE'" in caution and "biased down" in caution
    # 10 sites or more: no caution, for neither column
    agg10 = GeoHintAggregator()
    agg10.add_many(synth_results(seed=3, n_sites=12))
    assert "biased down" not in GH.table6(agg10, "forced", p_reference="t").notes


# --- 4. one model: nothing "pooled" in the Terms -----------------------------------------------------------------------
def test_the_terms_line_names_the_one_model_instead_of_a_pool():
    one = GH.legend_for(models=["m-a"])
    assert not any("models pooled" in ln for ln in one) and any("model m-a" in ln for ln in one)
    assert any("models pooled" in ln for ln in GH.legend_for(models=["m-a", "m-b"]))
    assert any("models pooled" in ln for ln in GH.legend_for())


def test_a_one_model_report_says_models_pooled_nowhere_in_its_header_and_terms(tmp_path):
    from _geohint_synth import synth_results

    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=5, n_sites=20, models=("m-a",)))
    assert agg.models == ["m-a"]
    GH.write_report(agg, tmp_path, n_flips=20, n_splits=3, n_boot=20)
    head = (tmp_path / "report.md").read_text(encoding="utf-8").split("### ")[0]
    fig_line = next(ln for ln in head.splitlines() if ln.startswith("- Figure fig_hit_by_band.png"))
    assert "error bars are 95 % site-bootstrap" in fig_line and "sites of the regime resampled, model m-a;" in fig_line
    assert "models pooled" not in head, [ln for ln in head.splitlines() if "models pooled" in ln]
    assert "no-context hit rate (model m-a)" in head
    # several models: still pooled
    agg2 = GeoHintAggregator()
    agg2.add_many(synth_results(seed=5, n_sites=20, models=("m-a", "m-b")))
    GH.write_report(agg2, tmp_path / "two", n_flips=20, n_splits=3, n_boot=20)
    head2 = (tmp_path / "two" / "report.md").read_text(encoding="utf-8").split("### ")[0]
    assert "sites of the regime resampled, models pooled;" in head2 and "(all models pooled)" in head2


# --- 5. one stream per test ----------------------------------------------------------------------------------------------
def _hand_p(sums: np.ndarray, n_flips: int, seed: int, label: str) -> float:
    """The documented recipe, written out: SeedSequence(seed, spawn_key = BLAKE2b-128 of the label as 4 LE uint32),
    PCG64, sign vectors drawn in chunks of 2000 as int8 0/1 -> -1/+1, count |sum| >= |observed| (tolerance 1e-12)."""
    h = hashlib.blake2b(label.encode(), digest_size=16).digest()
    key = tuple(int.from_bytes(h[i:i + 4], "little") for i in range(0, 16, 4))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))
    thresh = abs(sums.sum()) - 1e-12 * max(1.0, np.abs(sums).sum())
    count = done = 0
    while done < n_flips:
        m = min(2000, n_flips - done)
        signs = rng.integers(0, 2, size=(m, sums.size), dtype=np.int8) * 2 - 1
        count += int(np.count_nonzero(np.abs(signs @ sums) >= thresh))
        done += m
    return (1 + count) / (1 + n_flips)


def test_a_labelled_test_follows_the_documented_stream_and_no_label_keeps_default_rng():
    sums = np.array([3.0, -1.0, 2.0, 0.5, 1.0, -0.5, 2.5, 1.5, -2.0, 1.0, 0.5, 2.0, -1.0, 3.0, 0.5, 1.0])
    for label in ("a", "site-flip|item|hit|forced_warn vs forced|models m|sites s1"):
        res = P.site_flip_test_from_sums(sums, 40, n_flips=3000, seed=7, label=label)
        assert not res.exact and res.label == label
        assert res.p_value == _hand_p(sums, 3000, 7, label)
    # no label: the stream of default_rng(seed), as before (the p-values of direct callers are unchanged)
    a = np.random.default_rng(np.random.SeedSequence(7)).integers(0, 2, 50)
    b = np.random.default_rng(7).integers(0, 2, 50)
    c = np.random.default_rng(P.flip_seed_sequence(7)).integers(0, 2, 50)
    assert (a == b).all() and (b == c).all()


def test_labelled_streams_are_independent_and_centred_on_the_exact_p():
    """60 tests of the same sums under one seed: from one shared stream they were 60 copies of one estimate; with a
    stream per label they scatter around the exact p (enumeration) as independent binomial estimates do."""
    rng = np.random.default_rng(1)
    sums = rng.normal(0.1, 1.0, 14)  # exact p 0.18
    exact = P.site_flip_test_from_sums(sums, 60, exact=True).p_value
    n = 400
    ps = np.array([P.site_flip_test_from_sums(sums, 60, n_flips=n, seed=3, label=f"test {i}").p_value for i in range(60)])
    shared = {P.site_flip_test_from_sums(sums, 60, n_flips=n, seed=3).p_value for _ in range(3)}
    assert len(shared) == 1                      # no label: one stream, one value (the old behaviour)
    assert len(set(ps)) > 10                     # labelled: each its own estimate
    sd = math.sqrt(exact * (1 - exact) / n)
    assert abs(ps.mean() - exact) < 4 * sd / math.sqrt(len(ps)) + 1 / n
    assert 0.5 * sd < ps.std() < 1.6 * sd


def test_labelled_p_is_the_same_in_a_fresh_process_with_another_hash_seed():
    code = ("import numpy as np; from geoagent.scoring.permutation import site_flip_test_from_sums as f; "
            "print(repr(f(np.arange(1.0, 17.0) - 6, 30, n_flips=999, seed=5, label='table9|m').p_value))")
    outs = {subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": h, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}).stdout
            for h in ("1", "2")}
    assert len(outs) == 1
    assert float(outs.pop()) == _hand_p(np.arange(1.0, 17.0) - 6, 999, 5, "table9|m")


def _paired_rows(models, n_sites=16):
    """forced and forced_warn answers with the same hits for every model (identical paired data per model; exact
    site-flip p of each model's hit difference 0.31, so a sampled p is far from its floor)."""
    pattern = np.random.default_rng(2).random((n_sites, 3, 2)) < [0.45, 0.6]
    rows = []
    for m in models:
        for s in range(n_sites):
            for i in range(3):
                for j, cond in enumerate(("forced", "forced_warn")):
                    hit = bool(pattern[s, i, j])
                    rows.append(GeoHintResult(
                        key=f"{cond}|{m}|{s}|{i}", site=f"s{s:02d}", image_id=f"im{s}", model=m, condition=cond,
                        schema="forced", ref_qid=f"Q{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high",
                        dist_km=1.0, resolved_level="area", error_km=0.5 if hit else 5.0, hit=hit))
    return rows


def test_table9_rows_draw_independent_streams():
    """Before: every model's test used default_rng(seed), so models with the same paired data printed the same
    sampled p (one Monte-Carlo error for the whole column). Now each row's p is the documented stream of its label,
    checked by the hand computation, and the rows differ."""
    models = ["m1", "m2", "m3", "m4"]
    agg = GeoHintAggregator()
    agg.add_many(_paired_rows(models))
    t9 = GH.table9(agg, n_flips=500, seed=11)
    ps = {row[0]: row[3] for row in t9.rows}
    assert len(set(ps.values())) > 1
    for m in models:
        pairs = agg.paired("forced_warn", "forced", model=m)
        _, sums, _ = P.site_sums([p[0] for p in pairs], [p[1].hit - p[2].hit for p in pairs])
        exact = P.site_flip_test_from_sums(sums, len(pairs), exact=True).p_value
        label = GH._flip_label("item", "hit", "forced_warn", "forced", [m], [p[0] for p in pairs])
        assert ps[m] == _hand_p(sums, 500, 11, label)
        assert abs(ps[m] - exact) < 4 * math.sqrt(exact * (1 - exact) / 500)  # a sampled estimate of the exact p
    # reproducible: the same table again gives the same p-values
    assert {row[0]: row[3] for row in GH.table9(agg, n_flips=500, seed=11).rows} == ps
