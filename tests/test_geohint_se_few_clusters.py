"""Table 6's cluster-robust SE follows the p-value's rule on few site clusters.

Before: with the normal reference a fit on 2-9 site clusters printed its SE (e.g. 0.0003 from 2 clusters) next
to a p withheld as "—" for exactly that reason (the cluster-robust variance is biased down with so few
clusters, Cameron and Miller 2015), so beta ± 1.96 SE gave back the interval the table had just refused.
Now the SE is withheld wherever the p is (normal reference, 2 <= G < 10), the note says both and why, and
the t reference (G - 1 df) keeps both. Every shown SE and p is checked against statsmodels' cluster-robust
OLS (and a hand-computed sandwich) on the same rows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH

sm = pytest.importorskip("statsmodels.api")


def _rows(n_sites: int) -> list[GeoHintResult]:
    rows = []
    rng = np.random.default_rng(11)
    for s in range(n_sites):
        for i in range(6):
            d = 0.6 + 0.9 * i + 0.05 * s
            err = 10 ** (-0.8 + 0.12 * d + 0.3 * math.sin(s) + 0.2 * rng.standard_normal())
            rows.append(GeoHintResult(
                key=f"{s}|m|{i}", site=f"site{s:02d}", image_id=f"im{s}", model="m", condition="forced",
                schema="forced", ref_qid=f"Q{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high", dist_km=d,
                resolved_level="area", error_km=err, hit=err < 1))
    return rows


def _statsmodels(rows: list[GeoHintResult], use_t: bool):
    x = sm.add_constant(np.array([r.dist_km for r in rows]))
    y = np.log10([r.error_km for r in rows])
    groups = np.array([int(r.site[4:]) for r in rows])
    return sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=use_t)


def _hand_se(rows: list[GeoHintResult]) -> float:
    """Sandwich with statsmodels' small-sample factor G/(G-1) * (N-1)/(N-K)."""
    x = np.column_stack([np.ones(len(rows)), [r.dist_km for r in rows]])
    y = np.log10([r.error_km for r in rows])
    beta = np.linalg.solve(x.T @ x, x.T @ y)
    u = y - x @ beta
    bread = np.linalg.inv(x.T @ x)
    sites = sorted({r.site for r in rows})
    meat = sum(np.outer(s_, s_) for s_ in (x[[r.site == s for r in rows]].T @ u[[r.site == s for r in rows]]
                                           for s in sites))
    g, n, k = len(sites), len(rows), 2
    v = g / (g - 1) * (n - 1) / (n - k) * bread @ meat @ bread
    return float(math.sqrt(v[1, 1]))


def _t6_row(agg, p_reference="normal"):
    t6 = GH.table6(agg, "forced", p_reference=p_reference)
    return dict(zip(t6.columns, {r[0]: r for r in t6.rows}["m"])), t6


@pytest.mark.parametrize("g", [2, 5, 9])
def test_se_is_withheld_with_the_p_under_the_normal_reference_below_ten_clusters(g):
    rows = _rows(g)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    row, t6 = _t6_row(agg)
    ref = _statsmodels(rows, use_t=False)
    assert row["beta"] == pytest.approx(ref.params[1], rel=1e-9)           # beta kept
    assert math.isnan(row["SE"]) and math.isnan(row["p"])                  # both withheld
    note = " ".join(t6.notes_lines())
    assert f"p and SE are {GH.DASH} for a fit on fewer than 10 site clusters (here G = {g})" in note
    md_row = next(line for line in t6.to_markdown().splitlines() if line.startswith("| m |"))
    assert md_row.count(GH.DASH) >= 2
    # the t reference keeps both, and both are statsmodels' (use_t=True: t with G - 1 df)
    row_t, t6t = _t6_row(agg, "t")
    ref_t = _statsmodels(rows, use_t=True)
    assert row_t["SE"] == pytest.approx(ref_t.bse[1], rel=1e-9) == pytest.approx(_hand_se(rows), rel=1e-9)
    assert row_t["p"] == pytest.approx(ref_t.pvalues[1], rel=1e-7)
    assert f"SE are {GH.DASH}" not in " ".join(t6t.notes_lines())


def test_ten_clusters_show_statsmodels_se_and_p_under_the_normal_reference():
    rows = _rows(10)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    row, t6 = _t6_row(agg)
    ref = _statsmodels(rows, use_t=False)
    assert row["SE"] == pytest.approx(ref.bse[1], rel=1e-9) == pytest.approx(_hand_se(rows), rel=1e-9)
    assert row["p"] == pytest.approx(ref.pvalues[1], rel=1e-7)
    assert "fewer than 10 site clusters" not in " ".join(t6.notes_lines())
