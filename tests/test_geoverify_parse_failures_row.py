"""The GeoVerify table's parse-failure row says it counts every arm, and gives the main-arm figure too, as the
console line does (walkthrough 9, item D).

Before, the tables (geoverify_table.md/.csv/.txt) showed ``parse failures 5`` right under ``n parsed (main arm)
232`` though it counted the answers of every arm (console: ``parse failures 5 (main 3, swapped image 1, gray
field 1)``), so it read as the main arm's. Hand-made scored rows: model-a has 2 unparsed main-arm answers and
1 unparsed swapped-image answer.
"""

from __future__ import annotations

import csv
import io

from geoagent.data.model import ARM_BLANK, ARM_MAIN, ARM_MISMATCH
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.score import scored_row
from geoagent.report import geoverify as GV

FULL = '{"verdict": "no", "confidence": 0.9, "evidence": ["a tram stop sign"]}'
BROKEN = '```json\n{"confid'


def _scores():
    rows = []
    for i in range(40):
        for arm in (ARM_MAIN, ARM_MISMATCH, ARM_BLANK):
            band = "signal" if i % 2 == 0 else "0.3-0.7km"
            bad = (arm == ARM_MAIN and i in (3, 5)) or (arm == ARM_MISMATCH and i == 7)
            trial = {"trial_id": f"t{i}|{arm}", "site": f"s{i % 5}", "arm": arm, "band": band,
                     "truth": "yes" if (arm == ARM_MAIN and band == "signal") else "no"}
            rows.append(scored_row(trial, "model-a", parse_verdict(BROKEN if bad else FULL), finish_reason="stop"))
    agg = GeoVerifyAggregator()
    agg.update(rows)
    return agg.scores()


def test_parse_failure_rows_name_all_arms_and_the_main_arm_figure():
    scores = _scores()
    md = GV.render_markdown(scores)
    assert "| parse failures (all arms) | 3 (main 2, swapped image 1) |" in md, md
    assert "| parse failures, main arm | 2 |" in md, md
    assert "| parse failures |" not in md
    rows = list(csv.reader(io.StringIO(GV.render_csv(scores))))
    by = {r[1]: dict(zip(rows[0][2:], r[2:])) for r in rows[1:]}
    assert by["parse failures (all arms)"]["model-a"] == "3"
    assert by["parse failures, main arm"]["model-a"] == "2"
    assert "parse failures (all arms)" in GV.render_terminal(scores)
