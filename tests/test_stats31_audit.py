"""Statistics audit of session 31 (stats31), three findings on GeoVerify scoring.

F1. A control-arm row with no truth (null or "") fell out of its arm's F (``sdt._matrix`` read only "no"), while
    the unparsed count read it as "no": the read-out then said the control was not run. It is a noise trial.
F2. A bare confidence in (1, 10] was read as a percentage ("confidence": 9 -> 0.09), though it may be 9 on a 0-10
    scale (0.9); the two readings move Table 12's false-acceptance median and share >= 0.8 in opposite ways. It is
    now no confidence (rule ``confidence_ambiguous_scale``), counted in the table's "without a confidence" row.
F3. A main-arm row with truth "yes" and no band (the band column is optional) fell out of H. It is a signal trial.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from geoagent.geoverify import parse as P
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.scoring import sdt

BANDS = sdt.DECOY_BAND_LABELS


def _rows(*, control_truth, signal_band) -> list[dict]:
    """Six sites: per site 4 signal trials (3 accepted), 4 noise trials per band (1 accepted), 10 swapped-image
    control trials (5 accepted)."""
    rows = []
    for s in range(6):
        for i in range(4):
            rows.append(dict(trial_id=f"s{s}-sig{i}", model="m", site=f"s{s}", arm="main", band=signal_band,
                             truth="yes", verdict="yes" if i < 3 else "no", conf=0.9))
        for b in BANDS:
            for i in range(4):
                rows.append(dict(trial_id=f"s{s}-{b}-{i}", model="m", site=f"s{s}", arm="main", band=b, truth="no",
                                 verdict="yes" if i < 1 else "no", conf=0.8))
        for i in range(10):
            rows.append(dict(trial_id=f"s{s}-mis{i}", model="m", site=f"s{s}", arm="ctrl_mismatch", band=None,
                             truth=control_truth, verdict="yes" if i < 5 else "no", conf=0.7))
    return rows


def _score(rows: list[dict]) -> sdt.ModelScores:
    frame = pl.DataFrame(rows, schema_overrides={"band": pl.Utf8, "truth": pl.Utf8})
    return sdt.score(sdt.cells_from_rows(frame), sdt.conf_from_rows(frame), pooled=False)["m"]


def _key_figures(sc: sdt.ModelScores) -> tuple:
    return (sc.n_signal, sc.n_hits, sc.h, sc.n_noise, sc.f, sc.controls.get("ctrl_mismatch"), sc.readout.verdict,
            sc.hit_conf_median, sc.fa_conf_median, [(b.band, b.n, b.d_prime, b.c) for b in sc.bands])


@pytest.mark.parametrize("missing", [None, ""])
def test_a_control_trial_without_truth_counts_in_its_arms_f(missing):
    reference = _score(_rows(control_truth="no", signal_band="signal"))
    assert reference.controls["ctrl_mismatch"] == (60, 30, 0.5)  # 6 sites x 10 trials, half accepted
    assert reference.readout.verdict == "invalid"  # F 50 % on the swapped-image control
    assert _key_figures(_score(_rows(control_truth=missing, signal_band="signal"))) == _key_figures(reference)


@pytest.mark.parametrize("missing", [None, ""])
def test_a_true_claim_without_band_counts_in_h(missing):
    reference = _score(_rows(control_truth="no", signal_band="signal"))
    assert (reference.n_signal, reference.n_hits, reference.h) == (24, 18, 0.75)
    assert _key_figures(_score(_rows(control_truth="no", signal_band=missing))) == _key_figures(reference)


def test_the_incremental_aggregator_places_them_the_same_way():
    reference = _score(_rows(control_truth="no", signal_band="signal"))
    agg = GeoVerifyAggregator()
    rows = _rows(control_truth=None, signal_band=None)
    agg.update(rows[: len(rows) // 2])
    agg.update(rows[len(rows) // 2:])
    got = sdt.score(agg.cells, agg.conf, pooled=False)["m"]
    assert _key_figures(got) == _key_figures(reference)


@pytest.mark.parametrize("missing", [None, ""])
def test_a_main_arm_noise_trial_without_band_enters_f_and_no_bands_rate(missing):
    """What the importer documents: such a trial counts in F (every main-arm trial with truth "no", as the release's
    verify_results.py and the false-acceptance confidence figures count them; stats35 #2: session 31 kept it out of
    F while those figures held it) and in no band's F, d' or c; H is unchanged by it."""
    rows = _rows(control_truth="no", signal_band="signal")
    reference = _score(rows)
    extra = [dict(trial_id=f"nb{i}", model="m", site="s0", arm="main", band=missing, truth="no", verdict="yes",
                  conf=0.9) for i in range(5)]
    got = _score(rows + extra)
    assert (got.n_signal, got.n_hits, got.h) == (reference.n_signal, reference.n_hits, reference.h)
    assert [(b.band, b.n, b.d_prime, b.c) for b in got.bands] == [(b.band, b.n, b.d_prime, b.c) for b in reference.bands]
    # 6 sites x 5 bands x 4 decoys, 1 accepted each: 30 of 120; with the five unbanded decoys, all accepted: 35 of 125
    assert (reference.n_noise, reference.n_false_acceptances) == (120, 30)
    assert (got.n_noise, got.n_false_acceptances, got.f) == (125, 35, pytest.approx(35 / 125))
    assert got.fa_conf_n == got.n_false_acceptances


def _answer(conf_json: str) -> str:
    return '{"verdict": "yes", "confidence": ' + conf_json + ', "evidence": ["a sign"]}'


@pytest.mark.parametrize("conf_json, expect, rule", [
    ("9", None, P.RULE_CONF_AMBIGUOUS),
    ("10", None, P.RULE_CONF_AMBIGUOUS),
    ("1.5", None, P.RULE_CONF_AMBIGUOUS),
    ('"9"', None, P.RULE_CONF_AMBIGUOUS),
    ("10.5", 0.105, P.RULE_CONF_PERCENT),
    ("85", 0.85, P.RULE_CONF_PERCENT),
    ("100", 1.0, P.RULE_CONF_PERCENT),
    ('"9%"', 0.09, P.RULE_CONF_PERCENT),   # a percent sign says which scale
    ('"10 %"', 0.10, P.RULE_CONF_PERCENT),
    ("1", 1.0, None),
    ("0.9", 0.9, None),
    ("101", None, P.RULE_CONF_INVALID),
])
def test_a_bare_confidence_between_1_and_10_is_no_confidence(conf_json, expect, rule):
    res = P.parse_verdict(_answer(conf_json))
    assert res.ok and res.verdict == "yes"  # the verdict stands either way
    assert res.confidence == (pytest.approx(expect) if expect is not None else None)
    if rule is not None:
        assert rule in res.rules
    else:
        assert not {P.RULE_CONF_AMBIGUOUS, P.RULE_CONF_PERCENT, P.RULE_CONF_INVALID} & set(res.rules)


def test_ambiguous_confidences_leave_table_12s_confidence_rows_and_are_counted():
    """The stats31 reproduction: false-acceptance confidences 0.9, 0.9, 9, 9, 9 gave median 0.09 and share 40 %;
    the three ambiguous ones are now left out (median 0.9, share 100 % of the two that state one)."""
    rows = []
    for s in range(5):
        rows.append(dict(trial_id=f"sig{s}", model="m", site=f"s{s}", arm="main", band="signal", truth="yes",
                         verdict="yes", conf=0.95))
    for i, text in enumerate(["0.9", "0.9", "9", "9", "9"]):
        res = P.parse_verdict(_answer(text))
        rows.append(dict(trial_id=f"fa{i}", model="m", site=f"s{i}", arm="main", band=BANDS[0], truth="no",
                         verdict=res.verdict, conf=res.confidence))
    sc = _score(rows)
    assert sc.n_false_acceptances == 5
    assert sc.fa_conf_median == pytest.approx(0.9)
    assert sc.fa_conf_share_high == pytest.approx(1.0)


def test_the_parser_version_moved_so_stored_rows_are_read_again():
    from geoagent.geoverify.reparse import is_stale

    assert P.VERDICT_PARSER_VERSION >= 4  # 5 since break32 (tests/test_break32.py)
    assert is_stale({"parser_version": 3})
    json.dumps(P.parse_verdict(_answer("9")).to_json())  # the rule name travels in the stored row
