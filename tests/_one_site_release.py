"""A release folder of one site (``s1``, Paris) whose ladder holds one reference point (Q1, the Louvre Pyramid,
1.5-3 km, high tier): the smallest input the GeoHint raw-answer importer reads, for tests that add their own raw
file beside it."""

from __future__ import annotations

from pathlib import Path


def one_site_release(tmp_path: Path) -> Path:
    """Write ``tmp_path/rel`` (``sites.csv`` and ``ladders/s1_ladder_deepseek-en.csv``) and return it."""
    root = tmp_path / "rel"
    (root / "ladders").mkdir(parents=True)
    (root / "sites.csv").write_text("site,city,lat,lon\ns1,Paris,48.88,2.34\n", encoding="utf-8")
    (root / "ladders" / "s1_ladder_deepseek-en.csv").write_text(
        "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity,pageviews,n_in_cell,n_taken\n"
        "1.5-3.0km,high,,Louvre Pyramid,,Q1,2.0,5,,22,4\n", encoding="utf-8")
    return root
