"""Small-n flag of the GeoVerify report: a band's d' resting on fewer than SMALL_N_TRIALS decoy (or signal)
trials, and a delta_1 at such a band, are marked; the statistic is unchanged (fresh-user finding: delta_1 =
0.15-0.3 km from F = 0/5 or 3/5 in a band of 5 trials, others 48-52)."""

import csv
import io

import polars as pl
import pytest
from scipy.stats import norm

from geoagent.data.model import DECOY_BAND_LABELS
from geoagent.report.geoverify import (DELTA_SMALL_N_ROW, SMALL_N_MARK, render_csv, render_markdown,
                                       render_terminal, small_n_warnings)
from geoagent.scoring.sdt import SMALL_N_TRIALS, delta_1_small_n, score, small_n_bands

NEAR, *OTHERS = DECOY_BAND_LABELS


def _cells(n_signal: int, yes_signal: int, bands: dict[str, tuple[int, int]]) -> pl.DataFrame:
    rows = [("m", "s1", "main", "signal", "yes", yes_signal, n_signal - yes_signal, 0)]
    rows += [("m", "s1", "main", b, "no", y, n - y, 0) for b, (n, y) in bands.items()]
    return pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"], orient="row")


def test_threshold_is_twenty():
    assert SMALL_N_TRIALS == 20


def test_nearest_band_of_five_trials_flags_dprime_and_delta_1():
    bands = {NEAR: (5, 0), **{b: (50, 5) for b in OTHERS}}
    sc = score(_cells(50, 40, bands), pooled=False)["m"]
    # the statistic is unchanged: log-linear d' by hand (scipy)
    want = norm.ppf(40.5 / 51) - norm.ppf(0.5 / 6)
    assert sc.band(NEAR).d_prime == pytest.approx(want)
    assert want >= 1 and sc.delta_1 == NEAR
    assert small_n_bands(sc) == [NEAR] and delta_1_small_n(sc)
    scores = {"m": sc}
    md = render_markdown(scores)
    assert f"{want:.2f} {SMALL_N_MARK}" in md
    assert "(5 decoy trials)" in md and "delta_1 = 0.15–0.3 km rests on it" in md
    for b in OTHERS:
        assert f"{sc.band(b).d_prime:.2f} {SMALL_N_MARK}" not in md
    txt = render_terminal(scores)
    assert SMALL_N_MARK in txt and "Small n (m)" in txt
    rows = list(csv.reader(io.StringIO(render_csv(scores))))
    head = rows[0]
    by_label = {r[1]: dict(zip(head, r)) for r in rows[1:]}
    assert by_label[NEAR]["m_text"] == "small n" and float(by_label[NEAR]["m"]) == pytest.approx(want)
    assert by_label[OTHERS[0]]["m_text"] == ""
    assert by_label[DELTA_SMALL_N_ROW]["m_text"] == "yes"


def test_boundary_and_signal_side():
    at = score(_cells(50, 40, {b: (SMALL_N_TRIALS, 2) for b in DECOY_BAND_LABELS}), pooled=False)["m"]
    assert small_n_bands(at) == [] and not small_n_warnings({"m": at})
    assert DELTA_SMALL_N_ROW not in render_csv({"m": at}) and SMALL_N_MARK not in render_markdown({"m": at})
    below = score(_cells(50, 40, {NEAR: (SMALL_N_TRIALS - 1, 2), **{b: (50, 5) for b in OTHERS}}), pooled=False)["m"]
    assert small_n_bands(below) == [NEAR]
    assert below.delta_1 == NEAR and delta_1_small_n(below)
    few_signal = score(_cells(SMALL_N_TRIALS - 1, 15, {b: (50, 5) for b in DECOY_BAND_LABELS}), pooled=False)["m"]
    assert small_n_bands(few_signal) == list(DECOY_BAND_LABELS)
    # a band without trials has no d' to flag
    empty = score(_cells(50, 40, {NEAR: (0, 0), **{b: (50, 5) for b in OTHERS}}), pooled=False)["m"]
    assert NEAR not in small_n_bands(empty)


def test_delta_1_not_flagged_when_it_and_every_nearer_band_are_large():
    # the farthest band small; delta_1 lands on the second band, with the nearest band large (d' < 1 there)
    sc = score(_cells(50, 40, {NEAR: (50, 30), OTHERS[0]: (50, 2), OTHERS[1]: (50, 2), OTHERS[2]: (50, 2),
                               OTHERS[3]: (5, 0)}), pooled=False)["m"]
    assert norm.ppf(40.5 / 51) - norm.ppf(30.5 / 51) < 1
    assert sc.delta_1 == OTHERS[0] and small_n_bands(sc) == [OTHERS[3]] and not delta_1_small_n(sc)


def test_delta_1_flagged_when_a_small_nearer_band_decides_it():
    # nearest band small and d' < 1 there (F = 3/5); one more "no" there would reach d' >= 1 (F = 2/5)
    sc = score(_cells(50, 40, {NEAR: (5, 3), **{b: (50, 2) for b in OTHERS}}), pooled=False)["m"]
    assert norm.ppf(40.5 / 51) - norm.ppf(3.5 / 6) < 1 <= norm.ppf(40.5 / 51) - norm.ppf(2.5 / 6)
    assert sc.delta_1 == OTHERS[0] and small_n_bands(sc) == [NEAR] and delta_1_small_n(sc)


def test_console_summary_marks_small_n():
    from geoagent.geoverify.campaign import GeoVerifyCampaign

    sc = score(_cells(50, 40, {NEAR: (5, 0), **{b: (50, 5) for b in OTHERS}}), pooled=False)
    camp = GeoVerifyCampaign()
    camp._scores = sc
    lines = camp.summary_lines(None, None, None)
    line = next(ln for ln in lines if ln.strip().startswith("m:"))
    want = norm.ppf(40.5 / 51) - norm.ppf(0.5 / 6)
    assert f"d'(nearest) {want:.2f} {SMALL_N_MARK}" in line and f"delta_1 0.15–0.3 km {SMALL_N_MARK}" in line
    assert any("Small n (m)" in ln and "(5 decoy trials)" in ln for ln in lines)


def test_small_n_line_names_the_small_side():
    """Reviewer finding (session 9): bands of 21-22 decoy trials were listed under "fewer than 20 on one side"
    when the signal side was the small one; the line now names the side and its n."""
    few_signal = score(_cells(SMALL_N_TRIALS - 5, 10, {NEAR: (7, 1), **{b: (22, 5) for b in OTHERS}}),
                       pooled=False)["m"]
    (line,) = small_n_warnings({"m": few_signal})
    assert "signal side: 15 signal trials behind H" in line
    assert "decoy side too at 0.15–0.3 km (7 decoy trials)" in line
    assert "(22 decoy trials)" not in line and "on one side" not in line
    few_decoy = score(_cells(50, 40, {NEAR: (7, 1), **{b: (50, 5) for b in OTHERS}}), pooled=False)["m"]
    (line,) = small_n_warnings({"m": few_decoy})
    assert "decoy side: 0.15–0.3 km (7 decoy trials)" in line and "the signal side has 50 trials" in line


def test_a_band_of_one_decoy_trial_is_singular():
    """Session 18 walkthrough: a budget-stopped run printed "0.15–0.3 km (1 decoy trials)"."""
    sc = score(_cells(50, 40, {NEAR: (1, 0), **{b: (50, 5) for b in OTHERS}}), pooled=False)["m"]
    (line,) = small_n_warnings({"m": sc})
    assert "(1 decoy trial)" in line and "(1 decoy trials)" not in line
    few_signal = score(_cells(2, 1, {NEAR: (1, 0), **{b: (2, 1) for b in OTHERS}}), pooled=False)["m"]
    (line,) = small_n_warnings({"m": few_signal})
    assert "decoy side too at 0.15–0.3 km (1 decoy trial)," in line and "(2 decoy trials)" in line
