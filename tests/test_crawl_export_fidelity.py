"""Crawl export (seed 000 Sec. 3.3, 5.2): the reference-point records obey the release's ladder rules."""

from __future__ import annotations

import orjson

from geoagent.crawl.export import crawl_records
from geoagent.crawl.ladder import band_for


def test_reference_point_band_follows_its_written_distance(tmp_path):
    """Each record's band is the band of its ``dist_km`` as recorded (3 decimals), as in the release's
    ladders: 1.4996 km is a 1.5 km point in 1.5-3.0 km, 5.9996 km a 6.0 km point outside every band."""
    state = tmp_path / "state"
    (state / "rated").mkdir(parents=True)
    rated = [{"qid": q, "label_raw": q, "dist_km": d, "familiarity": 4, "ok": True, "name_en": f"Place {q}",
              "name_zh": None, "sensitive": False, "pageviews": None}
             for q, d in (("Q1", 1.4996), ("Q2", 5.9996), ("Q3", 0.4996), ("Q4", 2.2))]
    (state / "rated" / "x_site.json").write_bytes(orjson.dumps({"site": {"site": "x_site"}, "rated": rated,
                                                                "coords": {"Q1": [0.0, 0.0]}}))
    pts = {p.qid: p for p in crawl_records(state, tmp_path / "images")["reference_points"]}
    assert {q: (p.dist_km, p.band) for q, p in pts.items()} == {
        "Q1": (1.5, "1.5-3.0km"), "Q2": (6.0, None), "Q3": (0.5, "0.5-1.5km"), "Q4": (2.2, "1.5-3.0km")}
    assert all(p.band == band_for(p.dist_km) for p in pts.values())
