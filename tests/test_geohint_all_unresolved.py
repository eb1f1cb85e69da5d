"""A GeoHint run in which no answer geocoded printed ``Hit rate 0.0`` (Table 1) and ``+0.00``, ``p 1`` (Table 9)
(reviewer finding, session 9). With nothing geocoded the hit rate is undetermined, not 0 (an answer that did not
geocode counts as a miss, so 0 % would measure the geocoder): those cells print an em dash, as the regime tables
do for undetermined sites, and the notes say why. Echo, a text match, is still given."""

from __future__ import annotations

import math

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH


def _rows(resolved: str | None = None) -> list[GeoHintResult]:
    rows = []
    for s in range(3):
        for i, band in enumerate(("0.5-1.5km", "1.5-3.0km", "3.0-6.0km")):
            for cond in ("forced", "forced_warn"):
                lvl = resolved or "none"
                err = 0.4 if resolved else None
                rows.append(GeoHintResult(
                    key=f"{s}|{i}|{cond}", site=f"s{s}", image_id=f"im{s}", model="m", condition=cond,
                    schema="forced", ref_qid=f"Q{i}", ref_name=f"P{i}", band=band, tier="high", dist_km=1.0 + i,
                    area=f"P{i}" if i == 0 else "x", building="b", resolved_level=lvl, error_km=err,
                    hit=bool(resolved), echo=i == 0))
    return rows


def test_nothing_geocoded_gives_undetermined_hit_rates():
    agg = GeoHintAggregator()
    agg.add_many(_rows())
    t1 = GH.table1(agg, "forced")
    (row,) = t1.rows
    assert row[1] == 9 and all(math.isnan(v) for v in row[2:6])  # hit rate and per band
    assert row[6] > 0  # echo still given
    md = t1.to_markdown()
    assert "| m | 9 | — | — | — | — |" in md
    assert "no answer geocoded" in " ".join(t1.notes_lines())
    t9 = GH.table9(agg, n_flips=10)
    (row9,) = t9.rows
    assert row9[1] == 9 and math.isnan(row9[2]) and math.isnan(row9[3])
    assert "no answer geocoded" in " ".join(t9.notes_lines())
    t8 = GH.table_paired(agg, "forced_warn", "forced", n_flips=10) if hasattr(GH, "table_paired") else None
    if t8 is not None:
        assert "+0.00" not in t8.to_markdown()


def test_geocoded_answers_keep_their_rates():
    agg = GeoHintAggregator()
    agg.add_many(_rows("area"))
    (row,) = GH.table1(agg, "forced").rows
    assert row[2] == 1.0
    assert "no answer geocoded" not in " ".join(GH.table1(agg, "forced").notes_lines())
    (row9,) = GH.table9(agg, n_flips=10).rows
    assert row9[2] == 0.0
