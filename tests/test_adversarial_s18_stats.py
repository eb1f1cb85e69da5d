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


def test_campaign_summary_splits_regimes_on_the_baseline_the_report_uses():
    """Attack: a permissive-schema campaign (conditions ``v1`` and ``v1_baseline``, App. A.1's control). report.md
    splits its sites into regimes by their ``v1_baseline`` hit rate (``default_conditions``), but the console summary
    asked the aggregator for the regimes of the condition ``baseline``, which this campaign never ran, and said
    "regimes: 0 legible, 0 illegible" and "6 sites without a no-context answer have no regime" while every site has
    no-context answers and Table 2 splits them 2 illegible / 4 legible. The summary must give the report's split."""
    import dataclasses
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _geohint_synth import synth_results

    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.campaign import GeoHintCampaign
    from geoagent.report.geohint import _regime_sites, default_conditions

    rows = []
    for r in synth_results(seed=0, n_sites=6):
        if r.condition == "baseline":
            rows.append(dataclasses.replace(r, condition="v1_baseline", schema="v1"))
        elif r.condition == "forced":
            rows.append(dataclasses.replace(r, condition="v1", schema="v1"))
    agg = GeoHintAggregator()
    agg.add_many(rows)
    _cond, baseline = default_conditions(agg)
    assert baseline == "v1_baseline"
    groups = _regime_sites(agg, baseline)  # what report.md's Tables 2, 3, 5, 7 split by
    n_leg, n_ill = len(groups["legible"]), len(groups["illegible"])
    assert n_leg + n_ill == 6 and n_leg and n_ill
    camp = GeoHintCampaign()
    camp._agg = agg
    text = "\n".join(camp.summary_lines(None, None, None))
    assert f"regimes: {n_leg} legible, {n_ill} illegible" in text, text
    assert "without a no-context answer" not in text, text
