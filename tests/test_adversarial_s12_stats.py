"""Adversarial review of the statistics, session 12: defects found by checking our scoring against the paper (seed
000), the release's analysis scripts (``Yifan1209/geocontext`` at f4975f2, ``analysis/*.py``) and hand counts.

Each test failed on main before its fix:

* a site-flip permutation test with no (or a negative number of) random flips returned p = 1 (or a negative p,
  -0.25 for 14 sites and -5 flips) instead of refusing, and the judged re-score command took ``--flips 0`` /
  ``--splits 0`` silently (every sampled p = 1; every corrected Table 3 cell empty);
* the regime functions of :mod:`geoagent.scoring.regime` took a threshold in percent (the release scripts'
  ``THRESHOLD = 50.0``) and put every site in the illegible regime, without a word;
* Table 11's "Evidence" column divided by the parsed answers; the paper's column is "the share of responses
  carrying an evidence object" over every forced_chain response (seed 000 Sec. 6.3.2, Table 11: "2799
  responses"), and the release's ``analysis/chain_compliance.py`` divides by every response (``with_ev[m] / n[m]``).
"""

from __future__ import annotations

import numpy as np
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.parse import EVIDENCE_CATEGORIES
from geoagent.geohint.result import GeoHintResult
from geoagent.report.geohint import table11
from geoagent.scoring.permutation import paired_site_permutation_test, site_flip_test_from_sums
from geoagent.scoring.regime import assign_regimes, regime_of, split_half_correction


# --- permutation: the flip count -------------------------------------------------------------------------------


@pytest.mark.parametrize("n_flips", [0, -5])
def test_a_sampled_site_flip_test_without_flips_is_refused_not_p_one_or_negative(n_flips):
    # 14 sites: above the enumeration cap for any n_flips < 2**14, so the test samples. Before: p = 1.0 (0 flips)
    # and p = -0.25 (-5 flips: (1 + 0) / (1 - 5)), printed as p-values.
    sums = np.arange(1.0, 15.0)
    with pytest.raises(ValueError, match="n_flips"):
        site_flip_test_from_sums(sums, 14, n_flips=n_flips)
    with pytest.raises(ValueError, match="n_flips"):
        paired_site_permutation_test([f"s{i}" for i in range(14)], sums, np.zeros(14), n_flips=n_flips)


def test_the_exact_test_still_needs_no_flip_count():
    # exact=True enumerates every sign vector: the flip count plays no part (2 sites: 4 vectors, p = 2/4)
    res = site_flip_test_from_sums(np.array([1.0, 2.0]), 2, n_flips=0, exact=True)
    assert res.p_value == 0.5 and res.exact


@pytest.mark.parametrize("n_splits", [0, -1])
def test_a_split_half_correction_without_splits_is_refused(n_splits):
    # before: 0 splits gave every corrected cell NaN and "nan sites change side" (-1: a numpy error)
    with pytest.raises(ValueError, match="n_splits"):
        split_half_correction(["a", "a", "b", "b"], ["m"] * 4, [1, 0, 1, 1], ["a", "b"], ["m", "m"], [1, 1],
                              n_splits=n_splits)


@pytest.mark.parametrize("flag", ["--flips", "--splits"])
def test_judged_command_refuses_a_flip_or_split_count_below_one(flag, tmp_path, capsys):
    from geoagent.geohint.judged import main

    # refused as an argument error (argparse: exit 2) naming the option, before the release folder is read; before:
    # the run went on (a missing folder was the only complaint; with a release, every sampled p came out 1.0)
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "no-release"), str(tmp_path / "out"), flag, "0"])
    assert e.value.code == 2
    assert f"{flag} must be 1 or more, got 0" in capsys.readouterr().err


# --- regime threshold: a fraction, never a percentage ----------------------------------------------------------


def test_regime_functions_refuse_a_threshold_in_percent():
    # the release's scripts write THRESHOLD = 50.0 (percent); ours is a fraction. Before: every site illegible.
    with pytest.raises(ValueError, match="threshold"):
        regime_of(0.9, threshold=50)
    with pytest.raises(ValueError, match="threshold"):
        assign_regimes({"a": (9, 10)}, threshold=50.0)
    with pytest.raises(ValueError, match="threshold"):
        split_half_correction(["a", "a"], ["m", "m"], [1, 1], ["a"], ["m"], [1], threshold=50.0, n_splits=2)
    assert regime_of(0.9, threshold=0.5) == "legible"


# --- Table 11: evidence share over every response --------------------------------------------------------------


def _chain(key: str, *, parsed: bool, evidence: dict | None) -> GeoHintResult:
    return GeoHintResult(key=key, site="s1", image_id="111", model="m", condition="forced_chain", schema="forced_chain",
                         ref_qid="Q1", ref_name="P", band="1.5-3.0km", tier="high", dist_km=2.0, parse_ok=parsed,
                         evidence=evidence, resolved_level="none", hit=None)


def test_table11_evidence_share_counts_every_response_as_the_paper_and_release_do():
    full = {c: "seen" for c in EVIDENCE_CATEGORIES}
    agg = GeoHintAggregator()
    agg.add_many([
        _chain("a", parsed=True, evidence=full),
        _chain("b", parsed=True, evidence={**full, "vegetation": "not visible"}),
        _chain("c", parsed=True, evidence=None),   # parsed, no evidence object
        _chain("d", parsed=False, evidence=None),  # unparseable: a response without an evidence object
    ])
    row = dict(zip(table11(agg).columns, table11(agg).rows[0]))
    # by hand (chain_compliance.py: with_ev / n over every response): 2 of 4; before: 2 of 3 parsed
    assert row["n"] == 4 and row["Unparseable"] == 1
    assert row["Evidence"] == pytest.approx(2 / 4)
    # the "not visible" shares run over the slots of the responses that parsed (unchanged): vegetation 1 of 2
    assert row["Veg."] == pytest.approx(0.5) and row["Arch."] == 0.0
