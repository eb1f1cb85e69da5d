"""A site-flip test is labelled by the models whose answers it holds, not by every model of the campaign (session
20; review rev19, finding 5).

The label picks the test's stream of flips (geoagent.scoring.permutation, "label"), and the report promises that
the same test wherever it appears draws the same flips and prints the same p. A campaign where a second model
answered only the control condition has exactly model 1's pairs in Table 8's all-models row and in model 1's row
of Table 9; the all-models label named both models, so the two rows printed different sampled p-values for the
same data.
"""

from __future__ import annotations

from test_stats_report_edges_s19 import _paired_rows

import numpy as np

from geoagent.geohint.aggregate import GeoHintAggregator, GeoHintResult
from geoagent.report import geohint as GH


def _agg() -> GeoHintAggregator:
    agg = GeoHintAggregator()
    agg.add_many(_paired_rows(["m1"]))
    agg.add_many(r for r in _paired_rows(["m2"]) if r.condition == "forced")  # m2: the control only, no pairs
    return agg


def test_the_all_models_item_test_is_the_one_models_test_when_only_it_has_pairs():
    agg = _agg()
    assert agg.models == ["m1", "m2"]
    pooled = GH._paired_block(agg, "forced_warn", "forced", None, None, 499, 3)
    one = GH._paired_block(agg, "forced_warn", "forced", None, "m1", 499, 3)
    assert pooled["n"] == one["n"] > 0
    assert pooled["p"] == one["p"] and pooled["building_p"] == one["building_p"]
    t9 = {row[0]: row[3] for row in GH.table9(agg, n_flips=499, seed=3).rows}
    assert t9["m1"] == one["p"]


def _image_rows(model: str, conditions: tuple[str, ...], band: str = "0.5-1.5km", n_sites: int = 24
                ) -> list[GeoHintResult]:
    pattern = np.random.default_rng(8).random((n_sites, 2)) < [0.7, 0.35]
    rows = []
    for s in range(n_sites):
        for j, cond in enumerate(("forced", "baseline")):
            if cond not in conditions:
                continue
            hit = bool(pattern[s, j])
            ctx = cond != "baseline"
            rows.append(GeoHintResult(
                key=f"{cond}|{model}|{s}", site=f"s{s:02d}", image_id=f"im{s}", model=model, condition=cond,
                schema="forced" if ctx else "baseline", ref_qid="Q1" if ctx else None, ref_name="P1" if ctx else None,
                band=band if ctx else None, tier="high" if ctx else None, dist_km=1.0 if ctx else None,
                resolved_level="building" if hit else "area", error_km=0.5 if hit else 5.0, hit=hit))
    return rows


def test_the_all_models_image_test_is_labelled_by_the_models_it_pools():
    agg = GeoHintAggregator()
    agg.add_many(_image_rows("m1", ("forced", "baseline")))
    agg.add_many(_image_rows("m2", ("forced",), band="3.0-6.0km"))  # m2: another band, no answer without context
    only_m1 = GeoHintAggregator()
    only_m1.add_many(_image_rows("m1", ("forced", "baseline")))
    for measure in ("hit", "building"):
        pooled = GH.image_paired_difference(agg, "forced", "baseline", band="0.5-1.5km", measure=measure,
                                            n_flips=499, seed=3)
        alone = GH.image_paired_difference(only_m1, "forced", "baseline", band="0.5-1.5km", measure=measure,
                                           n_flips=499, seed=3)
        one = GH.image_paired_difference(agg, "forced", "baseline", band="0.5-1.5km", measure=measure,
                                         n_flips=499, seed=3, model="m1")
        assert pooled.n_images == alone.n_images == one.n_images > 0
        assert pooled.p_value == alone.p_value == one.p_value, measure
