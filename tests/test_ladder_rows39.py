"""Ladder rows (session 39, geohint39 #5).

Before: a blank ``band`` cell planned the point at any distance (a hint 50 m from the site, "I took this photo near
X", paid and then in no band table), and ``familiarity = 3.5`` gave tier "mid" beside referenceability 4 (a high-tier
score). Now a blank band is the distance's band (none outside 0.5-6 km: not planned, counted), a familiarity that is
no whole number and a tier that contradicts it are refused with file, line and column.
"""

from __future__ import annotations

from pathlib import Path

from geoagent.data.importer import import_release
from geoagent.geohint.conditions import conditions_from_config
from geoagent.geohint.plan import ModelSpec, plan_requests

HEADER = "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity,pageviews,n_in_cell,n_taken\n"


def _release(tmp: Path, rows: list[str]) -> Path:
    (tmp / "ladders").mkdir(parents=True)
    (tmp / "sites.csv").write_text(
        "site,city,country,continent,landmark,qid,wd_type,lat,lon,sitelinks,sv_perspective,selection_method\n"
        "paris_x,Paris,FR,EU,Somewhere,Q1,museum,48.8606,2.3522,3,40,algorithm\n", encoding="utf-8")
    (tmp / "ladders" / "paris_x_ladder.csv").write_text(HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return tmp


def test_blank_bands_take_the_distances_band_and_bad_ratings_are_refused(tmp_path):
    root = _release(tmp_path, [
        ",high,,Near Thing,,Q10,0.05,5,,,",        # 50 m: no band
        ",mid,,Mid Thing,,Q11,2.0,3,,,",           # blank band: 1.5-3.0km
        "0.5-1.5km,high,,Kept,,Q12,1.0,4,,,",
        ",,,Half Thing,,Q13,1.0,3.5,,,",           # not a whole number: refused
        "0.5-1.5km,high,,Wrong Tier,,Q14,1.0,1,,,",  # tier contradicts familiarity: refused
        ",,,Far Thing,,Q15,7.5,2,,,",              # beyond 6 km: no band
    ])
    rel = import_release(root)
    pts = {p.name_en: p for p in rel.ladders["paris_x"].points}
    assert set(pts) == {"Near Thing", "Mid Thing", "Kept", "Far Thing"}
    assert pts["Mid Thing"].band == "1.5-3.0km" and pts["Near Thing"].band is None and pts["Far Thing"].band is None
    assert (pts["Kept"].referenceability, pts["Kept"].tier) == (4, "high")
    issues = [(i.line, i.reason) for i in rel.report.issues if i.file.endswith("paris_x_ladder.csv")]
    assert any(line == 5 and "familiarity" in why and "whole number" in why for line, why in issues), issues
    assert any(line == 6 and "tier" in why and "'low'" in why for line, why in issues), issues


def test_points_in_no_band_are_not_planned_and_are_counted(tmp_path):
    from geoagent.data.model import Image

    root = _release(tmp_path, [",high,,Near Thing,,Q10,0.05,5,,,", ",mid,,Mid Thing,,Q11,2.0,3,,,",
                               ",,,Far Thing,,Q15,7.5,2,,,"])
    rel = import_release(root)
    img = Image(image_id="123", site_id="paris_x", lat=48.8606, lon=2.3522)
    conds = conditions_from_config({"geohint": {"conditions": ["baseline", "forced"]}})
    reqs, summary = plan_requests(rel.sites, [img], rel.ladders, [ModelSpec("m")], conds, seed=1)
    hinted = [r for r in reqs if "near" in r.prompt]
    assert len(hinted) == 1 and "Mid Thing" in hinted[0].prompt, [r.prompt[:80] for r in reqs]
    assert not any("Near Thing" in r.prompt or "Far Thing" in r.prompt for r in reqs)
    assert summary.points_outside_bands == 2


def test_cell_draw_keeps_at_most_n_per_cell_nested_and_order_free():
    """geohint39 #3: the paper draws 2 points per band x tier cell (Sec. 3.3); the released ladders hold up to 4."""
    import random
    from collections import Counter

    from geoagent.data.model import ReferencePoint
    from geoagent.geohint.plan import cell_draw

    pts = [ReferencePoint(qid=f"Q{i}", name_en=f"P{i}", dist_km=0.6 + (i % 3) * 1.5, band=None,
                          tier=("high", "mid", "low")[i // 3 % 3], referenceability=None, usable=True)
           for i in range(40)]
    for n in (1, 2, 3):
        kept = cell_draw(pts, n, seed=7, site_id="s")
        cells = Counter((p.dist_km, p.tier) for p in kept)
        assert max(cells.values()) <= n and len(cells) == len(Counter((p.dist_km, p.tier) for p in pts))
        assert {p.qid for p in cell_draw(pts, n, seed=7, site_id="s")} <= {p.qid for p in cell_draw(pts, n + 1, seed=7, site_id="s")}
        shuffled = pts[:]
        random.Random(1).shuffle(shuffled)
        assert {p.qid for p in cell_draw(shuffled, n, seed=7, site_id="s")} == {p.qid for p in kept}
    assert [p.qid for p in cell_draw(pts, 2, seed=7, site_id="s")] != [p.qid for p in cell_draw(pts, 2, seed=8, site_id="s")]


def test_points_per_cell_on_the_release_ladders(release_dir):
    from geoagent.data.model import Image

    rel = import_release(release_dir)
    site = "paris_marais" if "paris_marais" in rel.sites else sorted(rel.ladders)[0]
    img = Image(image_id="1", site_id=site, lat=rel.sites[site].lat, lon=rel.sites[site].lon)
    conds = conditions_from_config({"geohint": {"conditions": ["forced"]}})
    all_reqs, _ = plan_requests(rel.sites, [img], rel.ladders, [ModelSpec("m")], conds, seed=3)
    two, summary = plan_requests(rel.sites, [img], rel.ladders, [ModelSpec("m")], conds, seed=3, points_per_cell=2)
    cells = {}
    for r in two:
        key = (r.meta["band"], r.meta["tier"])
        cells[key] = cells.get(key, 0) + 1
    assert max(cells.values()) <= 2 and len(two) <= 18 and len(two) + summary.points_not_drawn == len(all_reqs)
    assert {r.key for r in two} <= {r.key for r in all_reqs}  # the same requests, fewer of them


def test_a_baseline_only_plan_counts_no_point_as_left_out(tmp_path):
    """review39c #10: a plan asking no reference point said "N outside the bands"."""
    from geoagent.data.model import Image

    rel = import_release(_release(tmp_path, [",high,,Near Thing,,Q10,0.05,5,,,", ",mid,,Mid Thing,,Q11,2.0,3,,,"]))
    img = Image(image_id="123", site_id="paris_x", lat=48.8606, lon=2.3522)
    conds = conditions_from_config({"geohint": {"conditions": ["baseline"]}})
    _, summary = plan_requests(rel.sites, [img], rel.ladders, [ModelSpec("m")], conds, seed=1, points_per_cell=1)
    assert (summary.points_outside_bands, summary.points_not_drawn) == (0, 0)
