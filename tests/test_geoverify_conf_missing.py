"""A false acceptance without a stated confidence is counted, not silently left out (audit 24).

The confidence median and the share of false acceptances stated at >= 0.8 (seed 000 Table 12, the abstract's
83.8 %) are over the answers that give a confidence. A "yes" without one (null, NaN, unparsable) entered neither,
and nothing said how many: a share over 3 answers read as one over the 5 that F counts. The scores now carry the
count and the table gives a row for it whenever one is missing.
"""

from __future__ import annotations

import math

import numpy as np

from geoagent.data.model import BAND_SIGNAL, DECOY_BAND_LABELS
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.report.geoverify import render_csv, render_markdown

NEAR = DECOY_BAND_LABELS[0]


def _row(tid: str, verdict: str, band: str, conf: float | None, site: str = "s1") -> dict:
    truth = "yes" if band == BAND_SIGNAL else "no"
    return {"trial_id": tid, "model": "m", "site": site, "arm": "main", "band": band, "truth": truth,
            "verdict": verdict, "conf": conf}


def _scores(rows: list[dict]):
    agg = GeoVerifyAggregator()
    agg.update(rows)
    return agg.scores()


def test_false_acceptances_without_a_confidence_are_counted_and_shown():
    confs = [0.9, 0.85, 0.5, None, math.nan]
    rows = [_row(f"fa{i}", "yes", NEAR, c) for i, c in enumerate(confs)]
    rows += [_row("cr", "no", NEAR, 0.7), _row("h1", "yes", BAND_SIGNAL, 0.95), _row("m1", "no", BAND_SIGNAL, None)]
    s = _scores(rows)["m"]
    stated = np.array([c for c in confs if c is not None and math.isfinite(c)])
    assert s.n_false_acceptances == 5 and s.fa_conf_n == 3 and s.fa_conf_missing == 2
    assert s.fa_conf_median == np.median(stated) and s.fa_conf_share_high == (stated >= 0.8).mean()
    md = render_markdown(_scores(rows))
    (line,) = [ln for ln in md.splitlines() if "without a confidence (left out)" in ln]
    assert "2 of 5" in line, line
    assert "without a confidence (left out)" in render_csv(_scores(rows))


def test_no_row_when_every_false_acceptance_states_a_confidence():
    rows = [_row("fa1", "yes", NEAR, 0.9), _row("fa2", "yes", NEAR, 0.4), _row("h1", "yes", BAND_SIGNAL, None)]
    s = _scores(rows)["m"]
    assert (s.fa_conf_n, s.fa_conf_missing) == (2, 0)  # a hit without a confidence is not a false acceptance
    assert "without a confidence" not in render_markdown(_scores(rows))
