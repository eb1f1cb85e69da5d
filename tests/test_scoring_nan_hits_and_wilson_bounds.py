"""Split-half correction refuses a hit that is not 0 or 1; the Wilson interval reaches 0 and 1 exactly.

Before (session 12 follow-up): :func:`geoagent.scoring.regime.split_half_correction` took a NaN hit (a missing
answer passed as NaN) and silently returned NaN (empty) cells for its site's regime and model, and a hit of 2
raised no error; its caller (:func:`geoagent.report.geohint.table3`) passes 0/1 only, so NaN there is a caller's
bug, not a legitimate missing value. :func:`geoagent.scoring.geohint.wilson_interval` returned an upper bound of
``0.9999999999999999`` for ``k == n`` (e.g. 10 of 10) and a lower bound above 0 by rounding for ``k == 0``; the
Wilson bound is exactly 1 (0) there: ``centre + half = (1 + z^2/2n + z^2/2n) / (1 + z^2/n) = 1``.
Reference values: statsmodels ``proportion_confint(method="wilson")``.
"""

from __future__ import annotations

import math

import pytest

from geoagent.scoring.geohint import wilson_interval
from geoagent.scoring.regime import split_half_correction

proportion_confint = pytest.importorskip("statsmodels.stats.proportion").proportion_confint

BASE = dict(baseline_sites=["a", "a", "b", "b"], baseline_models=["m"] * 4, near_sites=["a", "b"],
            near_models=["m", "m"], near_hits=[1, 0])


@pytest.mark.parametrize("bad", [math.nan, 2, -1, 0.5])
def test_split_half_refuses_a_baseline_hit_that_is_not_0_or_1_naming_the_site(bad):
    with pytest.raises(ValueError, match=r"baseline_hits\[3\].*site 'b'"):
        split_half_correction(**BASE, baseline_hits=[1, 0, 1, bad], n_splits=3)


def test_split_half_refuses_a_nan_near_hit_naming_the_site():
    with pytest.raises(ValueError, match=r"near_hits\[0\].*site 'a'"):
        split_half_correction(**{**BASE, "near_hits": [math.nan, 0]}, baseline_hits=[1, 0, 1, 1], n_splits=3)


def test_split_half_takes_booleans_and_0_1():
    res = split_half_correction(**BASE, baseline_hits=[True, False, 1, 1], n_splits=3)
    assert res.n_splits == 3 and all(r.model == "m" for r in res.rows)


@pytest.mark.parametrize("n", [1, 2, 5, 7, 10, 13, 100, 1000, 12345])
def test_wilson_bounds_are_exactly_0_and_1_at_the_ends(n):
    lo, hi = wilson_interval(n, n)
    assert hi == 1.0 and lo == pytest.approx(proportion_confint(n, n, method="wilson")[0], abs=1e-12)
    lo, hi = wilson_interval(0, n)
    assert lo == 0.0 and hi == pytest.approx(proportion_confint(0, n, method="wilson")[1], abs=1e-12)


@pytest.mark.parametrize("k,n", [(1, 3), (3, 7), (50, 100), (99, 100), (1, 1000)])
def test_wilson_matches_statsmodels_inside(k, n):
    assert wilson_interval(k, n) == pytest.approx(proportion_confint(k, n, method="wilson"), abs=1e-12)
