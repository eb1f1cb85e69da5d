"""SDT scorer (Eq. 1-4) against scipy.stats.norm.ppf, hand computations and the release sample."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import polars as pl
import pytest
from scipy.stats import norm

from geoagent.data.importer import import_release
from geoagent.data.model import DECOY_BAND_LABELS
from geoagent.geoverify.score import scored_rows_from_release
from geoagent.scoring import sdt

BANDS = list(DECOY_BAND_LABELS)


def _ref_dc(hy, hn, fy, fn):
    zh = norm.ppf((hy + 0.5) / (hn + 1))
    zf = norm.ppf((fy + 0.5) / (fn + 1))
    return zh - zf, -(zh + zf) / 2


def test_hand_computed_dprime():
    # H' = (5 + .5) / (10 + 1) = 0.5 -> z = 0; F' = (0 + .5) / (1 + 1) = .25 -> z = -0.6744897501960817
    d, c = sdt.dprime_c(5, 10, 0, 1)
    assert d == pytest.approx(0.6744897501960817, abs=1e-12)
    assert c == pytest.approx(-0.5 * (0 - 0.6744897501960817), abs=1e-12)
    # all-yes signal and zero-yes noise stay finite (correction): symmetric, c = 0
    d, c = sdt.dprime_c(10, 10, 0, 10)
    assert d == pytest.approx(2 * norm.ppf(10.5 / 11)) and c == pytest.approx(0.0, abs=1e-12)
    assert math.isfinite(d)
    # all-yes noise band too
    d, c = sdt.dprime_c(3, 4, 7, 7)
    assert (d, c) == pytest.approx(_ref_dc(3, 4, 7, 7))
    # undefined when a side has no trials
    assert all(math.isnan(x) for x in sdt.dprime_c(0, 0, 1, 2))


def test_median_from_counts_matches_numpy():
    rng = np.random.default_rng(3)
    for _ in range(50):
        vals = rng.choice([0.1, 0.5, 0.8, 0.85, 0.9, 0.95, 1.0], size=rng.integers(1, 8), replace=False)
        counts = rng.integers(0, 5, size=vals.size)
        if counts.sum() == 0:
            continue
        assert sdt.median_from_counts(vals, counts) == pytest.approx(float(np.median(np.repeat(vals, counts))))
    assert math.isnan(sdt.median_from_counts([], []))


def test_discrimination_radius():
    assert sdt.discrimination_radius(BANDS, [0.2, 0.9, 1.0, 2.0, 3.0]) == "0.7-1.5km"
    assert sdt.discrimination_radius(BANDS, [0.2, 0.9, 0.5, 0.1, 0.99]) is None
    # an unmeasured nearer band leaves the minimum of Eq. 4 unidentified (the 0.3-0.7 km band is only an upper bound)
    assert sdt.discrimination_radius(BANDS, [math.nan, 1.5, 0, 0, 0]) == sdt.DELTA_UNDEFINED
    assert sdt.discrimination_radius(BANDS, [0.2, 1.5, math.nan, 0, 0]) == "0.3-0.7km"


@pytest.mark.parametrize(
    "near, far, fm, fmis, fblank, expect",
    [
        (0.3, 1.6, 0.4, 0.21, 0.0, "invalid"),  # mismatched F > 20 %
        (0.3, 1.6, 0.4, 0.05, 0.36, "invalid"),  # blank within 5 points (below)
        (0.3, 1.6, 0.4, 0.05, 0.45, "invalid"),  # blank within 5 points (above)
        (2.1, 3.0, 0.4, 0.05, 0.0, "uninformative"),
        (0.3, 1.6, 0.4, 0.20, 0.0, "informative"),  # exactly 20 % is not > 20 %
        (0.33, 1.20, 0.377, 0.05, 0.0, "inconclusive"),  # the paper's pooled result
        (0.32, 1.95, 0.131, 0.0, 0.0, "informative"),  # claude-opus-5 in Table 12
        (0.68, 2.36, 0.351, 0.035, 0.0, "inconclusive"),  # gemini-flash in Table 12
    ],
)
def test_readout(near, far, fm, fmis, fblank, expect):
    assert sdt.readout(near, far, fm, fmis, fblank).verdict == expect


@pytest.fixture(scope="module")
def sample_rows(release_dir):
    return scored_rows_from_release(import_release(release_dir))


def _reference_scores(rows):
    """Independent computation with plain dicts + scipy (no polars, no sdt helpers)."""
    cnt = defaultdict(lambda: [0, 0])  # (model, arm, band) -> [yes, n]
    fa_conf = defaultdict(list)
    for r in rows:
        if r["verdict"] is None:
            continue
        for m in (r["model"], "pooled"):
            key = (m, r["arm"], r["band"])
            cnt[key][0] += r["verdict"] == "yes"
            cnt[key][1] += 1
            if r["arm"] == "main" and r["band"] != "signal" and r["verdict"] == "yes" and r["conf"] is not None:
                fa_conf[m].append(r["conf"])
    out = {}
    for m in {k[0] for k in cnt}:
        hy, hn = cnt[(m, "main", "signal")]
        per_band = {}
        for b in BANDS:
            fy, fn = cnt[(m, "main", b)]
            per_band[b] = (fy, fn, *_ref_dc(hy, hn, fy, fn))
        fy_all = sum(v[0] for v in per_band.values())
        fn_all = sum(v[1] for v in per_band.values())
        conf = np.array(fa_conf[m])
        out[m] = dict(H=hy / hn, F=fy_all / fn_all, bands=per_band, median=float(np.median(conf)),
                      share=float((conf >= 0.8).mean()))
    return out


def test_release_sample_against_scipy(sample_rows):
    rows = pl.DataFrame(sample_rows)
    got = sdt.score(sdt.cells_from_rows(rows), sdt.conf_from_rows(rows))
    ref = _reference_scores(sample_rows)
    assert set(got) == set(ref) == {"claude-haiku-4-5", "gemini-flash", "qwen3-vl-235b", "qwen3-vl-8b", "pooled"}
    zero_bands = 0
    for m, r in ref.items():
        g = got[m]
        assert g.h == pytest.approx(r["H"]) and g.f == pytest.approx(r["F"])
        for b in BANDS:
            fy, fn, d, c = r["bands"][b]
            zero_bands += fy == 0
            bs = g.band(b)
            assert (bs.n_yes, bs.n) == (fy, fn)
            assert bs.d_prime == pytest.approx(d, abs=1e-12) and bs.c == pytest.approx(c, abs=1e-12)
        first = next((b for b in BANDS if r["bands"][b][2] >= 1), None)
        assert g.delta_1 == first
        assert g.fa_conf_median == pytest.approx(r["median"]) and g.fa_conf_share_high == pytest.approx(r["share"])
        assert g.n_parse_failures == 0
    assert zero_bands >= 1  # the sample holds a band with zero false alarms (qwen3-vl-8b, 3-6 km)


def test_zero_and_all_yes_bands_and_controls():
    rows = []
    # model m: 4 signal all yes; nearest band all yes (3/3); farthest band zero yes (0/5); controls
    rows += [dict(model="m", site="s1", arm="main", band="signal", verdict="yes")] * 4
    rows += [dict(model="m", site="s1", arm="main", band=BANDS[0], verdict="yes")] * 3
    rows += [dict(model="m", site="s2", arm="main", band=BANDS[-1], verdict="no")] * 5
    rows += [dict(model="m", site="s2", arm="main", band=BANDS[-1], verdict=None)] * 2  # parse failures
    rows += [dict(model="m", site="s1", arm="ctrl_mismatch", band=BANDS[0], verdict="yes")]
    rows += [dict(model="m", site="s1", arm="ctrl_mismatch", band=BANDS[2], verdict="no")] * 3
    rows += [dict(model="m", site="s2", arm="ctrl_noimage", band=BANDS[0], verdict="no")] * 2
    df = pl.DataFrame(rows, schema={"model": pl.Utf8, "site": pl.Utf8, "arm": pl.Utf8, "band": pl.Utf8, "verdict": pl.Utf8})
    s = sdt.score(sdt.cells_from_rows(df))["m"]
    near, far = s.band(BANDS[0]), s.band(BANDS[-1])
    assert (near.d_prime, near.c) == pytest.approx(_ref_dc(4, 4, 3, 3))
    assert (far.d_prime, far.c) == pytest.approx(_ref_dc(4, 4, 0, 5))
    assert math.isnan(s.band(BANDS[1]).d_prime) and s.band(BANDS[1]).n == 0
    assert s.h == 1.0 and s.f == pytest.approx(3 / 8)
    assert s.controls["ctrl_mismatch"] == (4, 1, 0.25) and s.controls["ctrl_noimage"] == (2, 0, 0.0)
    assert s.n_parse_failures == 2
    assert s.readout.verdict == "invalid"  # mismatched F 25 % > 20 %
    # nearest band d' ~ 0, farthest ~ 2.2, but the three bands between are unmeasured and might reach 1
    # first: the minimum of Eq. 4 is not identified
    assert s.delta_1 == sdt.DELTA_UNDEFINED


def _loop_bootstrap(sample_rows, idx, sites, model=None):
    """Plain-loop site bootstrap over the given draws: rows re-assembled site by site, statistics by hand."""
    by_site = {
        s: [r for r in sample_rows if r["site"] == s and r["verdict"] is not None and r["arm"] == "main"
            and (model is None or r["model"] == model)]
        for s in sites
    }
    out = defaultdict(list)
    for draw in idx:
        sample = [r for i in draw for r in by_site[sites[i]]]
        sig = [r for r in sample if r["band"] == "signal"]
        hy, hn = sum(r["verdict"] == "yes" for r in sig), len(sig)
        noise = [r for r in sample if r["band"] in BANDS]
        if hn:
            out["H"].append(hy / hn)
        if noise:
            out["F"].append(sum(r["verdict"] == "yes" for r in noise) / len(noise))
        for b in BANDS:
            band = [r for r in sample if r["band"] == b]
            fy, fn = sum(r["verdict"] == "yes" for r in band), len(band)
            if fn:
                out[f"F[{b}]"].append(fy / fn)
            if hn and fn:
                d, c = _ref_dc(hy, hn, fy, fn)
                out[f"d'[{b}]"].append(d)
                out[f"c[{b}]"].append(c)
    return out


def test_bootstrap_resamples_sites(sample_rows):
    rows = pl.DataFrame(sample_rows)
    cells = sdt.cells_from_rows(rows)
    n_boot, seed = 300, 11
    got = sdt.score(cells, n_boot=n_boot, seed=seed)
    again = sdt.score(cells, n_boot=n_boot, seed=seed)
    assert got["pooled"].ci == again["pooled"].ci  # deterministic under the seed
    assert got["pooled"].n_boot == n_boot and got["pooled"].boot_seed == seed
    # plain-loop reference over the same draws: one (n_boot, S) matrix over the sorted union of sites,
    # shared by every column (the pooled column and each model)
    sites = sorted(set(rows["site"].to_list()))
    idx = np.random.default_rng(seed).integers(0, len(sites), size=(n_boot, len(sites)))
    for column, model in (("pooled", None), ("qwen3-vl-8b", "qwen3-vl-8b"), ("gemini-flash", "gemini-flash")):
        ref = _loop_bootstrap(sample_rows, idx, sites, model)
        ci = got[column].ci
        keys = ["H", "F", *[f"{k}[{b}]" for b in BANDS for k in ("F", "d'", "c")]]
        for key in keys:
            if got[column].ci_sites[key] < sdt.CI_MIN_SITES:  # too few sites: withheld (session 10)
                assert key not in ci, (column, key)
                continue
            want = (np.quantile(ref[key], 0.025), np.quantile(ref[key], 0.975))
            if key in got[column].ci_exact:  # a rate at 0 or 1: zero-width percentile -> Clopper-Pearson
                assert want[0] == want[1] and want[0] in (0.0, 1.0), (column, key)
                assert ci[key][0] < ci[key][1] and ci[key][0] <= want[0] <= ci[key][1], (column, key)
                continue
            assert ci[key] == pytest.approx(want, abs=1e-12), (column, key)
            assert got[column].ci_n[key] == len(ref[key])
        if "H" in ci:
            lo, hi = ci["H"]
            assert lo <= got[column].h <= hi
        if f"d'[{BANDS[0]}]" in ci:
            lo, hi = ci[f"d'[{BANDS[0]}]"]
            assert lo <= got[column].bands[0].d_prime <= hi
    assert "H" in got["pooled"].ci and "H" not in got["qwen3-vl-8b"].ci  # 5 signal sites pooled, fewer per model
    assert "F[ctrl_mismatch]" not in got["pooled"].ci  # no control arm in the sample: no interval
    # a model's interval does not depend on which other models are scored (same seed, same sites)
    # (these two models cover every site of the sample, so the draw matrix is the same)
    two = cells.filter(pl.col("model").is_in(["qwen3-vl-8b", "gemini-flash"]))
    assert sorted(set(two["site"].to_list())) == sites
    one = sdt.score(two, n_boot=n_boot, seed=seed)
    assert one["qwen3-vl-8b"].ci == got["qwen3-vl-8b"].ci
    assert sdt.score(cells)["pooled"].ci == {}  # n_boot = 0: no intervals
    with pytest.raises(ValueError):
        sdt.score(cells, n_boot=-1)


def test_percentile_interval_matches_numpy():
    v = np.array([3.0, np.nan, 1.0, 2.0, 5.0, np.nan, 4.0])
    iv, kept = sdt.percentile_interval(v, 0.9)
    ok = v[~np.isnan(v)]
    assert kept == 5 and iv == pytest.approx((np.quantile(ok, 0.05), np.quantile(ok, 0.95)))
    assert sdt.percentile_interval([np.nan], 0.95) == (None, 0)


def test_readout_boundaries_exact_points():
    # blank-image F exactly 5 points from the main arm counts as "within 5 points" (inclusive), even though
    # 0.40 - 0.35 is 0.05000000000000004 in floating point
    assert sdt.readout(0.3, 1.6, 0.40, 0.0, 0.35).verdict == "invalid"
    assert sdt.readout(0.3, 1.6, 0.40, 0.0, 0.45).verdict == "invalid"
    assert sdt.readout(0.3, 1.6, 0.40, 0.0, 0.349).verdict == "informative"
    # counts: 7/20 = 35 % blank vs 8/20 = 40 % main
    assert sdt.readout(0.3, 1.6, 8 / 20, 0.0, 7 / 20).verdict == "invalid"
    # nearest d' exactly 2 is not "> 2"; exactly 0.5 is not "< 0.5"; farthest exactly 1.5 is not "> 1.5"
    assert sdt.readout(2.0, 3.0, 0.4, 0.0, 0.0).verdict == "inconclusive"
    assert sdt.readout(0.5, 3.0, 0.4, 0.0, 0.0).verdict == "inconclusive"
    assert sdt.readout(0.4, 1.5, 0.4, 0.0, 0.0).verdict == "inconclusive"
    # controls not run: no invalidity, the rest still applies
    assert sdt.readout(0.3, 1.6, 0.4, None, None).verdict == "informative"


def test_control_arm_counts_only_noise_trials():
    rows = [dict(model="m", site="s", arm="main", band="signal", truth="yes", verdict="yes")] * 2
    rows += [dict(model="m", site="s", arm="main", band=BANDS[0], truth="no", verdict="no")] * 2
    rows += [dict(model="m", site="s", arm="ctrl_noimage", band="signal", truth="yes", verdict="yes")] * 5
    rows += [dict(model="m", site="s", arm="ctrl_noimage", band=BANDS[1], truth="no", verdict="yes")]
    rows += [dict(model="m", site="s", arm="ctrl_noimage", band=BANDS[1], truth="no", verdict="no")] * 3
    s = sdt.score(sdt.cells_from_rows(pl.DataFrame(rows)))["m"]
    assert s.controls["ctrl_noimage"] == (4, 1, 0.25)
