"""Cluster-robust OLS from per-cluster sufficient statistics vs statsmodels (issue 4 point 5)."""

from __future__ import annotations

import numpy as np
import pytest

from geoagent.scoring.regression import ClusterOLS, design_slope, fit_slope, log10_error

sm = pytest.importorskip("statsmodels.api")


def _data(seed: int = 3, n_sites: int = 23):
    rng = np.random.default_rng(seed)
    sites, d, err = [], [], []
    for s in range(n_sites):
        m = int(rng.integers(3, 40))
        site_eff = rng.normal(0, 0.3)
        dd = rng.uniform(0.5, 6.0, m)
        e = 10 ** (0.08 * dd - 0.2 + site_eff + rng.normal(0, 0.4, m))
        sites += [f"site{s:03d}"] * m
        d.append(dd)
        err.append(e)
    return np.array(sites), np.concatenate(d), np.concatenate(err)


def _statsmodels(sites, d, err, use_t=False):
    X = sm.add_constant(d)
    y = np.log10(np.maximum(err, 1e-3))
    codes = np.unique(sites, return_inverse=True)[1]
    return sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=use_t)


@pytest.mark.parametrize("use_t", [False, True])
def test_slope_matches_statsmodels_cluster(use_t):
    sites, d, err = _data()
    ours = fit_slope(sites, d, err, use_t=use_t)
    ref = _statsmodels(sites, d, err, use_t=use_t)
    np.testing.assert_allclose(ours.params, ref.params, rtol=0, atol=1e-8)
    np.testing.assert_allclose(ours.bse, ref.bse, rtol=0, atol=1e-8)
    np.testing.assert_allclose(ours.pvalues, ref.pvalues, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(ours.cov, ref.cov_params(), rtol=0, atol=1e-10)
    assert ours.nobs == len(d) and ours.n_clusters == len(set(sites))
    nonrobust = sm.OLS(np.log10(err), sm.add_constant(d)).fit()
    np.testing.assert_allclose(ours.bse_nonrobust, nonrobust.bse, atol=1e-8)


def test_incremental_equals_from_scratch_after_each_batch():
    sites, d, err = _data(seed=11)
    y = log10_error(err)
    X = design_slope(d)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(d))
    ols = ClusterOLS(k=2)
    seen_mask = np.zeros(len(d), bool)
    for batch in np.array_split(order, 9):
        for s in np.unique(sites[batch]):
            idx = batch[sites[batch] == s]
            ols.add(s, X[idx], y[idx])
        seen_mask[batch] = True
        if len(set(sites[seen_mask])) < 2:
            continue
        ref = _statsmodels(sites[seen_mask], d[seen_mask], err[seen_mask])
        got = ols.fit()
        np.testing.assert_allclose(got.params, ref.params, atol=1e-8)
        np.testing.assert_allclose(got.bse, ref.bse, atol=1e-8)


def test_subset_of_clusters_equals_fit_on_subset_rows():
    sites, d, err = _data(seed=5)
    ols = ClusterOLS(k=2)
    X, y = design_slope(d), log10_error(err)
    for s in np.unique(sites):
        ols.add(s, X[sites == s], y[sites == s])
    chosen = sorted(set(sites))[::2]
    mask = np.isin(sites, chosen)
    ref = _statsmodels(sites[mask], d[mask], err[mask])
    got = ols.fit(chosen)
    np.testing.assert_allclose(got.params, ref.params, atol=1e-8)
    np.testing.assert_allclose(got.bse, ref.bse, atol=1e-8)


def test_reciting_the_hint_gives_the_documented_endpoint_slope():
    # A model that always answers with the hint has err == d_ref: the slope is the OLS slope of
    # log10(d) on d, computed here independently with numpy.polyfit.
    d = np.linspace(0.5, 6.0, 40)
    res = fit_slope(["a"] * 20 + ["b"] * 20, d, d)
    assert res.slope == pytest.approx(np.polyfit(d, np.log10(d), 1)[0], abs=1e-12)


def test_errors_are_clear():
    ols = ClusterOLS(k=2)
    with pytest.raises(ValueError, match="more than 2 rows"):
        ols.fit()
    ols.add("a", np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]), np.zeros(3))
    with pytest.raises(ValueError, match="singular"):
        ols.fit()
    with pytest.raises(ValueError, match="shapes"):
        ols.add("a", np.ones((2, 3)), np.zeros(2))


def test_zero_errors_are_dropped_not_floored():
    # An exact answer (error 0 km) has no log10; like the release's analysis (error_km > 0) the row is
    # dropped. Flooring it at 1 m would put log10 = -3 into the fit and pull the slope.
    sites, d, err = _data(seed=8)
    err = err.copy()
    err[[0, 5, 17]] = 0.0
    err[9] = np.nan
    ours = fit_slope(sites, d, err)
    keep = np.isfinite(err) & (err > 0)
    ref = _statsmodels(sites[keep], d[keep], err[keep])
    np.testing.assert_allclose(ours.params, ref.params, atol=1e-8)
    np.testing.assert_allclose(ours.bse, ref.bse, atol=1e-8)
    assert ours.nobs == int(keep.sum())
    floored = fit_slope(sites, np.where(np.isfinite(err), d, np.nan), err, floor_km=1e-3)
    assert abs(floored.slope - ours.slope) > 1e-4  # the floor really changes the fit


def test_default_pvalues_equal_statsmodels_default_cluster_fit():
    # statsmodels' OLS.fit(cov_type="cluster") without use_t: normal p-values, CR1 correction
    sites, d, err = _data(seed=21)
    codes = np.unique(sites, return_inverse=True)[1]
    ref = sm.OLS(np.log10(err), sm.add_constant(d)).fit(cov_type="cluster", cov_kwds={"groups": codes})
    ours = fit_slope(sites, d, err)
    np.testing.assert_allclose(ours.bse, ref.bse, rtol=0, atol=1e-8)
    np.testing.assert_allclose(ours.pvalues, ref.pvalues, rtol=1e-6, atol=1e-12)
