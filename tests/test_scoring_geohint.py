"""GeoHint per-response metrics against independent references (scipy, statsmodels, hand cases)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from geoagent.scoring.geohint import error_ratio, geometric_mean, hits, is_hit, normalize_level, wilson_interval

smp = pytest.importorskip("statsmodels.stats.proportion")


@pytest.mark.parametrize(
    "err, level, expected",
    [
        (0.5, "area", True),
        (0.5, "building", True),
        (0.5, "place", True),  # release spelling of building
        (0.761, "city", False),  # Sec. 4.3 fault 4: the Paris centroid is censored, never a hit
        (1.0, "area", False),  # strictly below 1 km
        (0.999, "area", True),
        (None, "area", False),
        (float("nan"), "area", False),
        (0.2, "", False),
        (0.2, "none", False),
    ],
)
def test_hit_definition(err, level, expected):
    assert is_hit(err, level) is expected


def test_vectorised_hits_and_levels():
    e = np.array([0.5, 0.5, np.nan, 2.0])
    lv = np.array(["area", "city", "building", "place"], dtype=object)
    assert hits(e, lv).tolist() == [True, False, False, False]
    assert normalize_level("Place") == "building" and normalize_level(None) == "none"
    with pytest.raises(ValueError, match="unknown resolution level"):
        normalize_level("street")


def test_wilson_matches_statsmodels():
    for k, n in [(0, 10), (3, 10), (10, 10), (517, 1151), (1, 2)]:
        lo, hi = wilson_interval(k, n)
        rlo, rhi = smp.proportion_confint(k, n, alpha=0.05, method="wilson")
        assert lo == pytest.approx(rlo, abs=1e-12) and hi == pytest.approx(rhi, abs=1e-12)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    with pytest.raises(ValueError):
        wilson_interval(5, 3)


def test_geometric_mean_and_ratio():
    x = np.array([0.5, 1.2, 3.3, 5.9])
    assert geometric_mean(x) == pytest.approx(stats.gmean(x))
    assert math.isnan(geometric_mean(np.array([])))
    # zero / missing distances have no logarithm and are left out (Table 5 uses err_km > 0)
    assert geometric_mean(np.array([0.0, 0.5, np.nan, 2.0])) == pytest.approx(stats.gmean([0.5, 2.0]))
    assert math.isnan(geometric_mean(np.array([0.0])))
    assert error_ratio(np.array([1.0, 3.0]), np.array([2.0, 3.0])).tolist() == [0.5, 1.0]
    with pytest.raises(ValueError, match="positive"):
        error_ratio(np.array([1.0]), np.array([0.0]))
