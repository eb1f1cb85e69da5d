"""Adversarial review of the statistics, session 12: defects found by checking our scoring against the paper (seed
000), the release's analysis scripts (``Yifan1209/geocontext`` at f4975f2, ``analysis/*.py``) and hand counts.

Each test failed on main before its fix:

* a site-flip permutation test with no (or a negative number of) random flips returned p = 1 (or a negative p,
  -0.25 for 14 sites and -5 flips) instead of refusing, and the judged re-score command took ``--flips 0`` /
  ``--splits 0`` silently (every sampled p = 1; every corrected Table 3 cell empty);
* the regime functions of :mod:`geoagent.scoring.regime` took a threshold in percent (the release scripts'
  ``THRESHOLD = 50.0``) and put every site in the illegible regime, without a word.
"""

from __future__ import annotations

import numpy as np
import pytest

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
