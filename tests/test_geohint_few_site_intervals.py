"""GeoHint site-bootstrap intervals from few sites (fresh-user walkthrough, session 10): the release's judged
answers gave gemini-flash a hit rate of 68.7 % with a 95 % CI of [65.2, 71.4] from 2 sites and n = 150, narrower
than a plain binomial interval (about +-7.4 points), with no warning; a bootstrap over 2 sites has only 3
distinct resamples. Below :data:`geoagent.scoring.sdt.BOOT_MIN_SITES` (5) sites the interval is withheld with the
reason; from 5 to :data:`geoagent.scoring.sdt.BOOT_FEW_SITES` - 1 (9) sites it is given and flagged few-cluster.
The rule holds for Table 1 (hit and echo), Fig. 2's points and GeoVerify's intervals (table and d' figure)."""

from __future__ import annotations

import csv
import io
import math

import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report import geohint as GH
from geoagent.scoring import sdt

from _geohint_synth import synth_results


def _agg(n_sites: int) -> GeoHintAggregator:
    a = GeoHintAggregator()
    a.add_many(synth_results(seed=4, n_sites=n_sites))
    return a


def test_rule_constants():
    assert sdt.BOOT_MIN_SITES == 5 and sdt.BOOT_FEW_SITES == 10


@pytest.mark.parametrize("n_sites", [2, 3, 4])
def test_table1_withholds_below_five_sites(n_sites):
    t1 = GH.table1(_agg(n_sites), "forced", n_boot=100, seed=1)
    col = t1.columns.index
    assert "CI flag" in t1.columns
    for row in t1.rows:
        assert row[col("sites")] == n_sites
        assert row[col("Hit rate 95 % CI")] is None and row[col("Echo rate 95 % CI")] is None
        assert f"withheld: {n_sites} sites" in row[col("CI flag")]
    note = " ".join(t1.notes_lines())
    assert "fewer than 5 sites" in note and "Cameron and Miller" in note
    md = t1.to_markdown()
    assert f"withheld: {n_sites} sites" in md
    head, *rows = list(csv.reader(io.StringIO(t1.to_csv())))
    assert "CI flag" in head
    for r in rows:
        assert r[head.index("Hit rate 95 % CI lo (fraction)")] == "" == r[head.index("Echo rate 95 % CI hi (fraction)")]
        assert r[head.index("CI flag")].startswith("withheld")
    text = GH.render_text(t1.to_rich())
    assert "withheld" in text and "fewer than 5 sites" in text


def test_table1_flags_five_to_nine_sites_and_not_ten():
    t1 = GH.table1(_agg(7), "forced", n_boot=100, seed=1)
    col = t1.columns.index
    for row in t1.rows:
        assert row[col("Hit rate 95 % CI")] is not None
        assert row[col("CI flag")].startswith("few sites: 7")
    assert "few-cluster" in " ".join(t1.notes_lines())
    t1 = GH.table1(_agg(10), "forced", n_boot=100, seed=1)
    assert all(row[t1.columns.index("CI flag")] == "" for row in t1.rows)


def test_fig2_points_withhold_below_five_sites():
    a = _agg(4)
    pts = GH.hit_by_band_points(a, "forced", "baseline", n_boot=100, seed=3)
    for per_band in pts.values():
        for p in per_band:
            if p["n"]:
                assert math.isnan(p["lo"]) and math.isnan(p["hi"])
                assert p["ci_flag"].startswith("withheld")


def test_legend_explains_the_rule():
    legend = " ".join(GH.legend_for())
    assert "fewer than 5 sites" in legend and "few-cluster" in legend


# --- GeoVerify: the same rule for its site-bootstrap intervals (table brackets and the d' figure) ---------------
_GV_BANDS = ("0.15-0.3km", "0.3-0.7km", "0.7-1.5km", "1.5-3.0km", "3.0-6.0km")


def _gv_cells(n_sites: int):
    import polars as pl

    rows = []
    for i in range(n_sites):
        site = f"s{i}"
        rows.append(("m", site, "main", "signal", "yes", 6 + i % 3, 4 - i % 3, 0))
        rows += [("m", site, "main", b, "no", 1 + (i + j) % 4, 7, 0) for j, b in enumerate(_GV_BANDS)]
    return pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"],
                        orient="row")


def test_geoverify_withholds_below_five_sites_and_flags_few():
    from geoagent.report.geoverify import bootstrap_note, psychometric_figure

    few = sdt.score(_gv_cells(3), n_boot=100, seed=0)
    assert few["m"].ci == {} and few["m"].delta_1_ci is None
    note = bootstrap_note(few)
    assert "fewer than 5 sites" in note and "Cameron and Miller" in note
    fig = psychometric_figure(few)
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "fewer than 5 sites" in caption
    mid = sdt.score(_gv_cells(7), n_boot=100, seed=0)
    assert "H" in mid["m"].ci and mid["m"].ci_sites["H"] == 7
    assert "from 7 sites (H, F, d', c), fewer than 10 sites, are given but flagged few-cluster:" in bootstrap_note(mid)
    assert "few-cluster" in " ".join(t.get_text() for t in psychometric_figure(mid).texts)
    many = sdt.score(_gv_cells(10), n_boot=100, seed=0)
    assert "flagged few-cluster:" not in bootstrap_note(many) and "H" in many["m"].ci


def test_report_md_fig2_caption_names_withheld_lines(tmp_path):
    GH.write_report(_agg(4), tmp_path, n_flips=20, n_splits=3, seed=1, n_boot=50, figures=True)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    cap = md.split("![hit rate by band](fig_hit_by_band.png)", 1)[1].split("\n\n")[1]
    assert "fewer than 5 sites" in cap and "legible: withheld: 3 sites (< 5)" in cap, cap


def test_geoverify_few_cluster_note_names_the_statistics_from_few_sites():
    """Walkthrough 23, item 8: "Here intervals from 9 sites (fewer than 10) are given but flagged few-cluster" read
    as every interval's, while F's came from 17 sites (and were rightly not marked). Now it names which."""
    import polars as pl

    from geoagent.report.geoverify import bootstrap_note

    rows = []
    for i in range(17):  # decoy trials at 17 sites, signal trials at the first 9 only
        site = f"s{i}"
        if i < 9:
            rows.append(("m", site, "main", "signal", "yes", 6 + i % 3, 4 - i % 3, 0))
        rows += [("m", site, "main", b, "no", 1 + (i + j) % 4, 7, 0) for j, b in enumerate(_GV_BANDS)]
    cells = pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"],
                         orient="row")
    s = sdt.score(cells, n_boot=100, seed=0)
    assert s["m"].ci_sites["H"] == 9 and s["m"].ci_sites["F"] == 17
    note = bootstrap_note(s)
    head = note.split("Here intervals from ", 1)[1].split(", fewer than 10 sites", 1)[0]
    assert head.startswith("9 sites (H") and "F" not in head.split("(", 1)[1], note


def test_geoverify_few_cluster_note_leaves_out_exact_intervals_the_table_does_not_mark():
    """Review rev23b (4): an exact (Clopper-Pearson) interval of a 0 % control rate from 8 sites is no site bootstrap
    and carries no mark, yet the note named it as flagged few-cluster."""
    from types import SimpleNamespace

    from geoagent.report.geoverify import few_cluster, few_cluster_text

    s = SimpleNamespace(ci={"H": (0.5, 0.9), "F[ctrl_noimage]": (0.0, 0.3), "F": (0.1, 0.3)},
                        ci_sites={"H": 17, "F[ctrl_noimage]": 8, "F": 7}, ci_exact={"F[ctrl_noimage]"},
                        delta_1_ci=None)
    assert not few_cluster(s, "F[ctrl_noimage]") and few_cluster(s, "F")
    assert few_cluster_text({"m": s}) == (" Here intervals from 7 sites (F), fewer than 10 sites, are given but flagged "
                                          "few-cluster: likely too narrow; each is marked \u00a7 after its brackets.")
    s.ci_exact = {"F[ctrl_noimage]", "F"}
    assert few_cluster_text({"m": s}) == ""
