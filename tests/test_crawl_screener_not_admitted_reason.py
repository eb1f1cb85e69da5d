"""The "not admitted" reason names the measured L_district with enough digits, and the side of the range it failed
(session 19; adversarial review break19, finding 8).

Seed 000 Sec. 3.1: Seville, L_district 0.316 km, was not admitted under the 0.32 km floor. The crawl summary and
``run.py status`` (:func:`geoagent.crawl.screener.not_admitted_lines`) printed it rounded to 0.01 km, "L_district
0.32 km outside [0.32, 0.65] km": a value inside the range given as the reason it is outside. The decision itself
was right (made on the unrounded value); only the line misled.
"""

from __future__ import annotations

from geoagent.crawl.screener import not_admitted_reasons
from geoagent.crawl.settings import ScreenerSettings


def _rec(ld: float) -> dict:
    return {"eligible": False, "ok_scale": False, "ok_streetview": True, "l_district_km": ld,
            "n_nodes_raw": 40, "n_nodes_filtered": 40}


def test_seville_reads_below_the_floor_with_three_decimals():
    (reason,) = not_admitted_reasons(_rec(0.316), ScreenerSettings())
    assert reason.startswith("L_district 0.316 km, below the floor 0.32 km of [0.32, 0.65] km"), reason
    assert "0.32 km outside" not in reason


def test_a_value_over_the_range_reads_above_the_ceiling_with_the_digits_that_show_it():
    (reason,) = not_admitted_reasons(_rec(0.71), ScreenerSettings())
    assert reason.startswith("L_district 0.710 km, above the ceiling 0.65 km of [0.32, 0.65] km"), reason
    (reason,) = not_admitted_reasons(_rec(0.6504), ScreenerSettings())  # 0.650 at three decimals: one more
    assert reason.startswith("L_district 0.6504 km, above the ceiling 0.65 km"), reason
