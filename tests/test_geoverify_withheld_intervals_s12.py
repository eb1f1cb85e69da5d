"""GeoVerify report: a value shown without brackets says why (session 12 walkthrough).

Before, the nearest-band d' read ``0.86 †`` and delta_1 ``none †`` with no interval because the nearest band's decoy
trials came from fewer than 5 sites (``sdt.CI_MIN_SITES``), but the only note near them, the † note, spoke of
"fewer than 20 trials". Hand-made cells: signal and the far band at 6 sites, the near band at 3 sites (15 trials,
so it is also †), scored with a site bootstrap.
"""

from __future__ import annotations

import polars as pl

from geoagent.data.model import BAND_SIGNAL
from geoagent.report import geoverify as R
from geoagent.scoring import sdt

B0, B1 = "0.15-0.3km", "0.3-0.7km"


def _scores(n_boot: int):
    rows = []
    for i in range(6):
        rows += [("m", f"s{i}", "main", BAND_SIGNAL, "yes", 4, 1, 0), ("m", f"s{i}", "main", B1, "no", 1, 4, 0)]
    rows += [("m", f"s{i}", "main", B0, "no", 2, 3, 0) for i in range(3)]
    cells = pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")
    return sdt.score(cells, bands=(B0, B1), pooled=False, n_boot=n_boot, seed=1)


def test_the_notes_say_why_the_near_band_has_no_interval():
    scores = _scores(200)
    s = scores["m"]
    assert f"d'[{B0}]" not in s.ci and f"d'[{B1}]" in s.ci and s.delta_1_ci is None  # the case of the walkthrough
    near = R._band_title(B0)
    for text in (R.render_markdown(scores), R.render_terminal(scores)):
        assert f"| {near} | {s.bands[0].d_prime:.2f} †" in text or f"{s.bands[0].d_prime:.2f} †" in text
        # every reason an interval is withheld, beside the † note, which points to it
        assert f"fewer than {sdt.CI_MIN_SITES} sites" in text and "undefined in every site resample" in text
        assert "n_boot = 0" in text
        assert "does not say why a value has no interval" in text
        # ... and which applies, per value: the near band's decoys come from 3 sites
        line = next(ln for ln in text.splitlines() if "No interval (m):" in ln)
        assert f"{near} (Sensitivity d'): {near} decoy trials from 3 sites (fewer than 5: reason a)" in line
        assert f"delta_1 range: {near} decoy trials from 3 sites" in line
        assert f"{R._band_title(B1)} (Sensitivity d')" not in line  # it has its interval
        assert "signal trials" not in line  # H has 6 sites


def test_no_withheld_line_without_a_bootstrap_or_when_every_interval_is_given():
    assert R.withheld_lines(_scores(0)) == []
    assert "No interval" not in R.render_markdown(_scores(0))


def test_console_summary_points_to_the_report_for_the_intervals_line():
    """Session 18 walkthrough: the run's console summary printed "the line 'Intervals' below names every reason
    one is withheld", but the summary has no such line (only the report's table does): it now names the report."""
    from geoagent.geoverify.campaign import GeoVerifyCampaign

    camp = GeoVerifyCampaign()
    camp._scores = _scores(200)
    lines = camp.summary_lines(None, None, None)
    note = next(ln for ln in lines if "does not say why a value has no interval" in ln)
    assert "'Intervals' below" not in note
    assert f"'Intervals' in the report ({R.TABLE_MD})" in note
    # the report's own note still points below, where its Intervals line is
    md = R.render_markdown(camp._scores)
    assert "the line 'Intervals' below" in md and "\nIntervals: " in md
