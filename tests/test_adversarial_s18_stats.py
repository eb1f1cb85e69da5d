"""Session 18 adversarial review of the scorer's statistics (seed 000 Sec. 4-6): attacks not covered before.

Each test states the attack and checks the project's result against an independent reference written here
(statsmodels, pandas-free hand computations) or against the project's own rule for undefined numbers (reports
never print ``nan``: an undefined value is named as such).
"""

from __future__ import annotations

import polars as pl

from geoagent.data.model import DECOY_BAND_LABELS
from geoagent.report.geoverify import render_markdown
from geoagent.scoring import sdt


def _cells_without_nearest_band() -> pl.DataFrame:
    """Three sites, signal trials and decoys in every band but the nearest (a sparse nearest cell)."""
    rows = []
    for s in range(3):
        rows.append(dict(model="m", site=f"s{s}", arm="main", band="signal", truth="yes", n_yes=9, n_no=1, n_fail=0))
        for b in DECOY_BAND_LABELS[1:]:
            rows.append(dict(model="m", site=f"s{s}", arm="main", band=b, truth="no", n_yes=1, n_no=9, n_fail=0))
    return pl.DataFrame(rows)


def test_readout_reason_names_an_undefined_dprime_instead_of_printing_nan():
    """Attack: a campaign whose nearest decoy band holds no parsed answers (d' undefined there, the far band
    measured). The read-out's reason went into geoverify_table.md as "nearest-band d' nan": the read-out must say
    the d' is undefined, as every other report line does, never print a bare ``nan``."""
    scores = sdt.score(_cells_without_nearest_band())
    reasons = "; ".join(scores["m"].readout.reasons)
    assert "nan" not in reasons.lower(), reasons
    assert "nearest-band d' undefined" in reasons and "farthest-band d' 2.42" in reasons, reasons
    md = render_markdown(scores)
    assert not [ln for ln in md.splitlines() if "nan" in ln.lower()], md
    # the far band's d' undefined: the same wording, whichever side is missing
    r = sdt.readout(0.3, float("nan"), 0.3, None, None)
    assert "farthest-band d' undefined" in "; ".join(r.reasons) and "nan" not in "; ".join(r.reasons).lower()
