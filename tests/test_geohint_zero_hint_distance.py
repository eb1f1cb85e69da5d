"""Break27 #1: a context answer whose hint distance is 0 km (a reference point at the site) was left out of the
slope fits of Tables 6-7 (and of Table 5) with no word: the Table 6 note counted only the err = 0 answers it left
out. It is still left out (the "beta if reciting" endpoint, log10 d_ref, is undefined there and the fits share its
rows; Table 5's geometric mean of d_ref and err/d_ref need d_ref > 0), and every table that leaves it out now
counts it in its notes. Reference slope: statsmodels OLS with site-clustered SEs on the rows kept."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report.geohint import table5, table6, table7


def _result(key, site, j, d, err, *, condition="forced", level="area"):
    return GeoHintResult(key=key, site=site, image_id=f"{site}-i", model="m", condition=condition, schema="forced",
                         ref_qid=f"Q{j}", ref_name=f"n{j}", band=None, tier="high", dist_km=d, resolved_level=level,
                         error_km=err, hit=err < 1)


def _aggregator(distances):
    agg = GeoHintAggregator()
    rng = np.random.default_rng(0)
    kept = ([], [], [])
    k = 0
    for s in range(12):
        site = f"s{s}"
        k += 1  # a no-context answer per site (the regimes of Table 5 and 7)
        agg.add(GeoHintResult(key=f"b{k}", site=site, image_id=f"{site}-i", model="m", condition="baseline",
                              schema="forced", ref_qid=None, ref_name=None, band=None, tier=None, dist_km=None,
                              resolved_level="city", error_km=float(5 + s), hit=False))
        for j, d in enumerate(distances):
            err = float(np.exp(rng.normal(0, 1) + 0.3 * d))
            k += 1
            agg.add(_result(f"k{k}", site, j, d, err))
            if d > 0:
                kept[0].append(d)
                kept[1].append(math.log10(err))
                kept[2].append(site)
    return agg, kept


def test_answers_at_hint_distance_zero_are_left_out_and_counted():
    agg, (x, y, g) = _aggregator([0.0, 0.8, 2.0, 4.0])
    fit = agg.regression(models=["m"], condition="forced").fit()
    ref = sm.OLS(np.array(y), sm.add_constant(np.array(x))).fit(cov_type="cluster", cov_kwds={"groups": np.array(g)})
    assert fit.nobs == len(y) == 36
    assert fit.slope == pytest.approx(ref.params[1], rel=1e-9)
    assert agg.n_zero_dref(condition="forced") == 12 and agg.n_zero_dref(condition="forced", fine_only=True) == 12
    assert agg.n_zero_err(condition="forced") == 0
    assert agg.select(condition="forced").n_zero_dref == 12
    t6 = table6(agg).notes
    assert "Left out because the hint distance is 0 km" in t6 and "context answers: all levels 12, fine only 12" in t6, t6
    t5 = table5(agg).notes
    assert "finer-than-city answers: " in t5 and "all 12." in t5.split("hint distance is 0 km")[1], t5
    t7 = table7(agg).notes
    assert "Left out because the hint distance is 0 km" in t7 and "all 12." in t7.split("hint distance is 0 km")[1], t7


def test_no_note_without_such_an_answer():
    agg, _ = _aggregator([0.8, 2.0, 4.0])
    assert agg.n_zero_dref(condition="forced") == 0
    for t in (table5(agg), table6(agg), table7(agg)):
        assert "hint distance is 0 km" not in t.notes, t.notes
