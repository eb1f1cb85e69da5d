"""The warning on answers that did not geocode says what they do to the rates, truly (walkthrough 9, item E).

Before: "They count as misses, so hit and echo rates there mostly measure the geocoder". But echo
(seed 000 Sec. 6.2.1, :mod:`geoagent.geohint.echo`) is a text match of the answer's area and building against
the reference point's names, scored whether or not the answer geocoded: only the hit (and what is built on
it) depends on the geocoder. Checked here on a scored answer that did not geocode and still echoes.
"""

from __future__ import annotations

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.geohint.stages import score_located
from geoagent.report import geohint as GH


def test_an_unresolved_answer_still_echoes_and_the_warning_says_so():
    payload = {"model": "a", "image_id": "s1-i",
               "meta": {"task": "geohint", "site": "s1", "condition": "forced", "ref_qid": "Q1", "ref_name": "Old Bridge",
                        "band": "0.5-1.5km", "tier": "high", "dist_km": 1.0, "site_lat": 45.0, "site_lon": 7.0},
               "parsed": {"ok": True, "city": "Nowhere", "area": "near the Old Bridge", "building": "a kiosk"},
               "located": {"resolved_level": "none"}}
    res = score_located("k1", payload)
    assert res.resolved_level == "none" and res.hit is False and res.echo is True  # echo needs no geocoder
    rows = [res] + [GeoHintResult(key=f"k{i}", site="s1", image_id="s1-i", model="a", condition="forced",
                                  schema="forced", ref_qid="Q1", ref_name="Old Bridge", band="0.5-1.5km", tier="high", dist_km=1.0,
                                  resolved_level="none",
                                  error_km=None, hit=False, echo=False) for i in range(2, 6)]
    agg = GeoHintAggregator()
    agg.add_many(rows)
    (w,) = GH.unresolved_warnings(agg)
    assert "echo rates there mostly measure the geocoder" not in w
    assert "hit rates there mostly measure the geocoder" in w, w
    assert "echo rates do not depend on it" in w, w
