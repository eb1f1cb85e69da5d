"""A slope p-value from too few site clusters under the normal reference is not printed (reviewer finding,
session 9: Table 7 printed ``p illegible 2.0e-177`` from 2 site clusters). Below MIN_CLUSTERS_NORMAL_P clusters
the p cell is an em dash and the note says why; beta is kept; the t reference (G - 1 df) still gives p."""

from __future__ import annotations

import math

import numpy as np

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH


def _rows(n_sites: int) -> list[GeoHintResult]:
    rows = []
    rng = np.random.default_rng(3)
    for s in range(n_sites):
        for i in range(6):
            d = 0.6 + 0.9 * i + 0.05 * s
            err = 10 ** (-0.8 + 0.12 * d + 0.3 * math.sin(s) + 0.01 * rng.standard_normal())
            rows.append(GeoHintResult(
                key=f"{s}|m|{i}", site=f"site{s:02d}", image_id=f"im{s}", model="m", condition="forced",
                schema="forced", ref_qid=f"Q{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high", dist_km=d,
                resolved_level="area", error_km=err, hit=err < 1))
    return rows


def test_threshold_is_ten():
    assert GH.MIN_CLUSTERS_NORMAL_P == 10


def test_two_clusters_print_no_p_under_the_normal_reference():
    agg = GeoHintAggregator()
    agg.add_many(_rows(2))
    t7 = GH.table7(agg, "forced")
    row = {r[0]: r for r in t7.rows}["m"]
    assert math.isfinite(row[8]) and math.isnan(row[9])  # beta all kept, p all blank
    md = t7.to_markdown()
    assert "e-" not in md.split("\n")[4]  # no tiny p in the model's row
    note = " ".join(t7.notes_lines())
    assert "fewer than 10 site clusters" in note and "G = 2" in note
    t6 = {r[0]: r for r in GH.table6(agg, "forced").rows}
    assert math.isnan(t6["m"][4]) and math.isfinite(t6["m"][2])
    # t with G - 1 df: a p-value, and a large one
    t7t = {r[0]: r for r in GH.table7(agg, "forced", p_reference="t").rows}
    assert math.isfinite(t7t["m"][9])
    assert "fewer than 10 site clusters" not in " ".join(GH.table7(agg, "forced", p_reference="t").notes_lines())


def test_ten_clusters_keep_the_p_value():
    agg = GeoHintAggregator()
    agg.add_many(_rows(10))
    row = {r[0]: r for r in GH.table7(agg, "forced").rows}["m"]
    assert math.isfinite(row[9])
    assert "fewer than 10 site clusters" not in " ".join(GH.table7(agg, "forced").notes_lines())
