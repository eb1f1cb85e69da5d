"""GeoHint intervals resample sites, as GeoVerify's do (reviewer finding, session 9: Tables 1, 2 and 4 had no
intervals and Fig. 2 had per-response Wilson intervals pooled over models). Table 1's hit and echo rates get 95 %
site-bootstrap percentile intervals (checked here against a plain loop over the same draws), Fig. 2's points
too; captions give the interval and its n (sites, responses); Table 4 and the heatmap say they pool models;
Table 2 gives the n behind its No-context column."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report import geohint as GH

from _geohint_synth import synth_results


@pytest.fixture(scope="module")
def agg():
    a = GeoHintAggregator()
    a.add_many(synth_results(seed=4, n_sites=12))
    return a


def _loop_ci(rows, sites, idx, key):
    vals = []
    for draw in idx:
        k = n = 0
        for i in draw:
            kk, nn = rows.get(sites[i], (0, 0))
            k += kk
            n += nn
        if n:
            vals.append(k / n)
    return np.quantile(vals, 0.025), np.quantile(vals, 0.975)


def test_table1_intervals_are_a_site_bootstrap(agg):
    n_boot, seed = 150, 7
    t1 = GH.table1(agg, "forced", n_boot=n_boot, seed=seed)
    assert "Hit rate 95 % CI" in t1.columns and "Echo rate 95 % CI" in t1.columns
    sites = agg.sites
    idx = np.random.default_rng(seed).integers(0, len(sites), size=(n_boot, len(sites)))
    for row in t1.rows:
        m = row[0]
        hits = {s: (agg.select(sites={s}, model=m, condition="forced").hits,
                    agg.select(sites={s}, model=m, condition="forced").n) for s in sites}
        echo = {s: (agg.select(sites={s}, model=m, condition="forced").echoes,
                    agg.select(sites={s}, model=m, condition="forced").echo_n) for s in sites}
        got = dict(zip(t1.columns, row))
        assert got["Hit rate 95 % CI"] == pytest.approx(_loop_ci(hits, sites, idx, "hit"), abs=1e-12)
        assert got["Echo rate 95 % CI"] == pytest.approx(_loop_ci(echo, sites, idx, "echo"), abs=1e-12)
        lo, hi = got["Hit rate 95 % CI"]
        assert lo <= got["Hit rate"] <= hi
    md = t1.to_markdown()
    lo, hi = t1.rows[0][t1.columns.index("Hit rate 95 % CI")]
    assert f"[{100 * lo:.1f}, {100 * hi:.1f}]" in md
    note = " ".join(t1.notes_lines())
    assert "site-bootstrap" in note and f"{n_boot} resamples" in note and "12 sites" in note and "responses" in note
    head, *rows = list(csv.reader(io.StringIO(t1.to_csv())))
    assert "Hit rate 95 % CI lo (fraction)" in head and "Hit rate 95 % CI hi (fraction)" in head
    assert float(rows[0][head.index("Hit rate 95 % CI lo (fraction)")]) == pytest.approx(lo)


def test_hit_by_band_points_resample_sites(agg):
    pts = GH.hit_by_band_points(agg, "forced", "baseline", n_boot=100, seed=3)
    for regime, per_band in pts.items():
        for p in per_band:
            if p["n"]:
                assert p["lo"] <= p["rate"] <= p["hi"] and p["n_sites"] >= 1
    legend = " ".join(GH.legend_for())
    assert "site-bootstrap" in legend and "Wilson" not in legend


def test_table2_gives_no_context_n_and_table4_says_it_pools(agg):
    t2 = GH.table2(agg, "forced", "baseline")
    assert "n no context" in t2.columns
    for row in t2.rows:
        got = dict(zip(t2.columns, row))
        assert got["n no context"] >= 0
    t4 = GH.table4(agg, "forced")
    note = " ".join(t4.notes_lines())
    assert "All models pooled" in note and "3 models" in note and "responses" in note and "12 sites" in note
