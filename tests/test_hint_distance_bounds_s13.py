"""A corrupt hint distance is named where it is read, and never reaches the slope regression unexplained (s13).

Before: a ladder row with ``dist_km`` 1e200 passed the importer (finite, >= 0), overflowed ``X'X`` of the
distance-slope regression (1e400 = inf) and the fit failed with "X'X is singular (e.g. all hint distances
equal)", a reason about the data's spread, not about the one bad row; the table cell was then a dash.
Now the importer refuses a distance no two points on Earth can have (above half the equatorial circumference,
``constants.MAX_SURFACE_DISTANCE_KM``), naming file, line and value, and the regression refuses a row whose
products overflow, naming the row.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from geoagent import constants as C
from geoagent.data.importer import import_release
from geoagent.scoring.regression import ClusterOLS, ClusterStats

SITES = ("site,city,country,continent,landmark,qid,wd_type,lat,lon\n"
         "s1,Amsterdam,NL,EU,Church,Q1,church,52.37,4.90\n")
LADDER_HEAD = "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity,pageviews,n_in_cell,n_taken\n"


def _release(tmp: Path, dists: list[str], trial_d_km: str = "0.1368") -> Path:
    root = tmp / "rel"
    (root / "ladders").mkdir(parents=True)
    (root / "sites.csv").write_text(SITES, encoding="utf-8")
    def band(d: str) -> str:  # a band whose edges hold the distance (session 38 refuses one that does not)
        try:
            return "0.5-1.5km" if 0.5 <= float(d) < 1.5 else ""
        except ValueError:
            return ""

    rows = "".join(f"{band(d)},high,,Place {i},,Q{100 + i},{d},4,,3,1\n" for i, d in enumerate(dists))
    (root / "ladders" / "s1_ladder_deepseek-en.csv").write_text(LADDER_HEAD + rows, encoding="utf-8")
    (root / "verify_trials_sample.csv").write_text(
        "image_id,site,path,img_lat,img_lon,cand,cand_lat,cand_lon,fam,d_km,band,truth,arm,cont\n"
        f"101,s1,x/101.jpg,52.37,4.90,Church,52.37,4.90,4.0,{trial_d_km},signal,yes,main,EU\n", encoding="utf-8")
    return root


def test_the_bound_is_half_the_equatorial_circumference():
    assert C.MAX_SURFACE_DISTANCE_KM == pytest.approx(math.pi * 6378.137)  # 20037.5 km
    # the largest haversine distance on the mean-radius sphere the release's distances use is below it
    assert math.pi * C.EARTH_RADIUS_KM < C.MAX_SURFACE_DISTANCE_KM


@pytest.mark.parametrize("bad", ["1e200", "25000", "-3", "inf"])
def test_a_corrupt_ladder_distance_is_reported_with_file_line_and_value(tmp_path, bad):
    rel = import_release(_release(tmp_path, ["1.03", bad, "20000"]))
    pts = rel.ladders["s1"].points
    assert [p.dist_km for p in pts] == [1.03, 20000.0]  # the good rows stay, the bad one only is left out
    issues = [i for i in rel.report.issues if i.file.endswith("s1_ladder_deepseek-en.csv")]
    assert [i.line for i in issues] == [3], issues
    assert "dist_km" in issues[0].reason and bad.lstrip("-") in issues[0].reason.lower(), issues[0].reason
    if bad in ("1e200", "25000"):
        assert "20037.5" in issues[0].reason, issues[0].reason


def test_a_distance_spelled_nan_is_an_empty_cell(tmp_path):
    """Session 36 (reports36 #2): "nan" (pandas' and R's spelling of an empty numeric cell) in the optional
    ``dist_km`` is no distance, as an empty cell is: the point is kept without one (it was refused before)."""
    rel = import_release(_release(tmp_path, ["1.03", "nan", "20000"]))
    assert [p.dist_km for p in rel.ladders["s1"].points] == [1.03, None, 20000.0]
    assert not [i for i in rel.report.issues if i.file.endswith("s1_ladder_deepseek-en.csv")]


def test_a_corrupt_trial_distance_is_reported_with_file_line_and_value(tmp_path):
    rel = import_release(_release(tmp_path, ["1.03"], trial_d_km="1e200"))
    assert rel.trials == []
    issues = [i for i in rel.report.issues if i.file.endswith("verify_trials_sample.csv")]
    assert [i.line for i in issues] == [2] and "d_km" in issues[0].reason and "1e200" in issues[0].reason, issues


def test_a_row_that_overflows_the_regression_is_refused_by_name():
    ols = ClusterOLS(k=2)
    with pytest.raises(ValueError, match=r"site_b.*1e\+200.*overflow"):
        ols.add_row("site_b", (1.0, 1e200), 0.3)
    assert ols.clusters == {}  # nothing half-added
    with pytest.raises(ValueError, match=r"site_b.*overflow"):
        ols.add("site_b", np.array([[1.0, 1e200]]), np.array([0.3]))


def test_fit_on_non_finite_sums_says_so_not_singular():
    ols = ClusterOLS(k=2)
    ols.add_row("a", (1.0, 1.0), 0.1)
    ols.add_row("a", (1.0, 2.0), 0.2)
    ols.add_row("b", (1.0, 3.0), 0.4)
    bad = np.array([[1.0, np.inf], [np.inf, np.inf]])  # e.g. merged from a store written before the check
    ols.add_stats("c", ClusterStats(bad, np.array([0.1, np.inf]), 0.01, 1))
    with pytest.raises(ValueError) as exc:
        ols.fit()
    msg = str(exc.value)
    assert "singular" not in msg and "not finite" in msg and "'c'" in msg, msg


def test_the_aggregator_names_a_stored_result_with_a_corrupt_hint_distance():
    # a result scored before the importer refused such ladder rows: before, it went into the slope regression and
    # the Table 6 cell became a dash ("X'X is singular"); now add() names the result and changes nothing
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.result import GeoHintResult

    def res(key: str, d: float) -> GeoHintResult:
        return GeoHintResult(key=key, site="s1", image_id="101", model="m", condition="forced", schema="forced",
                             ref_qid="Q7", ref_name="Place", band="0.5-1.5km", tier="high", dist_km=d, city="A",
                             area="B", resolved_level="area", lat=52.0, lon=4.9, error_km=0.8, hit=True)

    agg = GeoHintAggregator()
    assert agg.add(res("ok", 1.2))
    with pytest.raises(ValueError, match=r"'bad'.*dist_km.*1e\+200"):
        agg.add(res("bad", 1e200))
    assert agg.keys == {"ok"} and sum(st.n for st in agg.ols[("m", "forced", False)].clusters.values()) == 1
