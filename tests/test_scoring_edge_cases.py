"""Edge cases of the scorers found in the statistics review (seed 000 Sec. 4-6), each against an
independent reference: statsmodels, numpy, exact enumeration or a hand computation."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from geoagent.data.model import DECOY_BAND_LABELS
from geoagent.scoring import sdt
from geoagent.scoring.geohint import hits, is_hit, normalize_level
from geoagent.scoring.regime import assign_regimes, regime_of
from geoagent.scoring.permutation import paired_site_permutation_test, site_flip_test_from_sums
from geoagent.scoring.regression import ClusterOLS, design_slope, fit_slope

sm = pytest.importorskip("statsmodels.api")
BANDS = list(DECOY_BAND_LABELS)


# --- regression (Tables 6-7) -------------------------------------------------------------------
@pytest.mark.parametrize("d_km", [0.7, 2.3, 1.0, 1 / 3])
def test_regression_constant_hint_distance_is_singular_not_garbage(d_km):
    """Every hint distance equal: the slope is not identified. statsmodels' design matrix has rank 1;
    we must refuse to fit (before: 0.7 km or 2.3 km gave arbitrary coefficients, and an SE of 3e6)."""
    rng = np.random.default_rng(5)
    sites = np.repeat(np.arange(10), 5)
    d = np.full(50, d_km)
    err = rng.lognormal(0.0, 1.0, 50)
    assert np.linalg.matrix_rank(sm.add_constant(d, has_constant="add")) == 1  # independent check
    with pytest.raises(ValueError, match="singular"):
        fit_slope(sites, d, err)


def test_regression_narrow_but_real_spread_still_fits_like_statsmodels():
    """The singularity test must not reject a legitimate, narrow spread of hint distances."""
    rng = np.random.default_rng(8)
    sites = np.repeat(np.arange(12), 6)
    d = 1.0 + rng.uniform(0, 1e-3, sites.size)
    err = 10 ** (0.1 * d + rng.normal(0, 0.3, sites.size))
    ours = fit_slope(sites, d, err)
    ref = sm.OLS(np.log10(err), sm.add_constant(d)).fit(cov_type="cluster", cov_kwds={"groups": sites})
    np.testing.assert_allclose(ours.params, ref.params, rtol=1e-6)
    np.testing.assert_allclose(ours.bse, ref.bse, rtol=1e-6)


def test_regression_cluster_listed_twice_counts_once():
    rng = np.random.default_rng(2)
    ols = ClusterOLS(k=2)
    rows = {}
    for g in range(6):
        d = rng.uniform(0.5, 6, 7)
        y = 0.1 * d + rng.normal(0, 0.3, 7)
        ols.add(g, design_slope(d), y)
        rows[g] = (d, y)
    once = ols.fit([0, 1, 2])
    twice = ols.fit([0, 1, 2, 2, 0])
    d = np.concatenate([rows[g][0] for g in (0, 1, 2)])
    y = np.concatenate([rows[g][1] for g in (0, 1, 2)])
    ref = sm.OLS(y, sm.add_constant(d)).fit(cov_type="cluster", cov_kwds={"groups": np.repeat([0, 1, 2], 7)})
    for r in (once, twice):
        assert r.nobs == 21 and r.n_clusters == 3
        np.testing.assert_allclose(r.params, ref.params, atol=1e-10)
        np.testing.assert_allclose(r.bse, ref.bse, atol=1e-10)


# --- permutation (Tables 8-10) -----------------------------------------------------------------
def test_permutation_nan_difference_is_an_error_not_p_min():
    """A NaN outcome made every |T*| >= |T| comparison False, so p came out 1/(1+n_flips) = 0.000999:
    the most significant value possible, for an undefined statistic."""
    with pytest.raises(ValueError, match="finite"):
        paired_site_permutation_test(["a", "b", "c", "d"], [1, np.nan, 0, 1], [0, 0, 0, 0], n_flips=1000, seed=1)
    with pytest.raises(ValueError, match="finite"):
        site_flip_test_from_sums(np.array([1.0, np.inf]), 2, exact=True)
    # the same data without the undefined pair is a proper test. By hand: site sums D = (1, 0, 1), |T*| >= |T|
    # exactly when the signs of a and d agree (c's sign is free): 4 of the 8 sign vectors, p = 0.5
    r = paired_site_permutation_test(["a", "c", "d"], [1, 0, 1], [0, 0, 0], exact=True)
    assert r.p_value == pytest.approx(4 / 8) and r.delta == pytest.approx(2 / 3)


# --- regime split (Sec. 6.1.2) --------------------------------------------------------------------
def test_regime_of_undefined_rate_is_an_error_not_illegible():
    """NaN >= 0.5 is False, so an undefined rate used to land silently in the illegible regime."""
    with pytest.raises(ValueError, match="NaN"):
        regime_of(float("nan"))
    # the threshold itself is legible (release: ``< 50`` is illegible); sites with n = 0 are left out
    assert regime_of(0.5) == "legible" and regime_of(0.4999) == "illegible"
    assert assign_regimes({"a": (1, 2), "b": (0, 0), "c": (2, 5)}) == {"a": "legible", "c": "illegible"}


# --- GeoHint hit (Sec. 4.2) ----------------------------------------------------------------------
def test_missing_resolution_level_from_pandas_is_none_not_a_crash():
    """pandas reads an empty ``resolved_level`` cell as float NaN; it means nothing resolved."""
    assert normalize_level(float("nan")) == "none"
    assert is_hit(0.3, float("nan")) is False
    e = np.array([0.3, 0.3, 0.3])
    lv = np.array(["area", np.nan, None], dtype=object)
    assert hits(e, lv).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="unknown resolution level"):
        normalize_level(3)


# --- SDT (Eq. 2-4, Table 12) ---------------------------------------------------------------------
def _cells(rows):
    return pl.DataFrame(rows, schema=sdt.empty_cells().schema, orient="row")


def test_delta_1_is_undefined_not_none_without_signal_trials():
    """No signal trials: H, hence every d', is undefined, so "no band reaches d' = 1" would be a claim the
    data cannot make (the paper's "none" in Table 12 is a measured outcome)."""
    cells = _cells([("m", "s1", "main", b, "no", 1, 9, 0) for b in BANDS])
    s = sdt.score(cells)["m"]
    assert all(math.isnan(b.d_prime) for b in s.bands)
    assert s.delta_1 == sdt.DELTA_UNDEFINED
    # hand rule: every band measured and below 1 -> None ("none"); a band reaching 1 -> that band
    assert sdt.discrimination_radius(BANDS, [0.1, 0.2, 0.3, 0.4, 0.9]) is None
    assert sdt.discrimination_radius(BANDS, [0.1, 0.2, math.nan, 0.4, 0.9]) == sdt.DELTA_UNDEFINED
    assert sdt.discrimination_radius(BANDS, [0.1, 1.0, math.nan, 0.4, 0.9]) == BANDS[1]  # ties count (>= 1)
    assert sdt.discrimination_radius(BANDS, [0.1, 1.2, 0.8, 1.4, 0.9]) == BANDS[1]  # crosses twice: first


def test_delta_1_with_all_bands_measured_matches_hand_dprime():
    # H = 8/10 on signal; bands F = 5/10, 4/10, 3/10, 1/10, 0/10: d' by hand with (k+.5)/(n+1)
    from scipy.stats import norm

    rows = [("m", "s1", "main", "signal", "yes", 8, 2, 0)]
    f_yes = [5, 4, 3, 1, 0]
    rows += [("m", "s1", "main", b, "no", k, 10 - k, 0) for b, k in zip(BANDS, f_yes)]
    s = sdt.score(_cells(rows))["m"]
    zh = norm.ppf(8.5 / 11)
    ref = [zh - norm.ppf((k + 0.5) / 11) for k in f_yes]
    np.testing.assert_allclose([b.d_prime for b in s.bands], ref, atol=1e-12)
    first = next(b for b, d in zip(BANDS, ref) if d >= 1)
    assert s.delta_1 == first


def test_nan_confidence_is_missing_not_counted():
    """Polars keeps NaN apart from null: a NaN confidence entered the counts, sorted above 1.0 for the
    median and lowered the share >= 0.8 (0.8 of 3 stated values became 2 of 3 counted as < 0.8)."""
    rows = pl.DataFrame({
        "model": ["m"] * 4, "site": ["a"] * 4, "arm": ["main"] * 4, "band": [BANDS[0]] * 4, "truth": ["no"] * 4,
        "verdict": ["yes"] * 4, "conf": [0.9, 0.85, float("nan"), 0.3],
    })
    conf = sdt.conf_from_rows(rows)
    assert conf["n"].sum() == 3
    s = sdt.score(sdt.cells_from_rows(rows), conf)["m"]
    stated = np.array([0.9, 0.85, 0.3])
    assert s.fa_conf_median == pytest.approx(float(np.median(stated)))
    assert s.fa_conf_share_high == pytest.approx(float(np.mean(stated >= 0.8)))
    assert s.n_false_acceptances == 4  # the verdict still counts in F; only the confidence is missing


def test_percentile_interval_drops_non_finite_replicates():
    vals = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0, 3.0, 4.0])
    (lo, hi), kept = sdt.percentile_interval(vals, 0.5)
    finite = np.array([1.0, 2.0, 3.0, 4.0])
    assert kept == 4
    assert (lo, hi) == pytest.approx((np.quantile(finite, 0.25), np.quantile(finite, 0.75)))
