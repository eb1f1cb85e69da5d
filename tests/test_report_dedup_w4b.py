"""Notes said once (session 12 fresh-clone walkthrough of ``python run.py demo``).

Before, the GeoVerify notes gave one ``No interval (model): ...`` line per column, each with the same reasons word
for word (demo-large, demo-fast and pooled alike).
"""

from __future__ import annotations

import polars as pl

from geoagent.data.model import BAND_SIGNAL
from geoagent.report import geoverify as R
from geoagent.scoring import sdt

B0, B1 = "0.15-0.3km", "0.3-0.7km"


def _cells(models):
    rows = []
    for m in models:
        for i in range(6):
            rows += [(m, f"s{i}", "main", BAND_SIGNAL, "yes", 4, 1, 0), (m, f"s{i}", "main", B1, "no", 1, 4, 0)]
        rows += [(m, f"s{i}", "main", B0, "no", 2, 3, 0) for i in range(3)]
    return pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")


def test_identical_no_interval_lines_are_merged():
    scores = sdt.score(_cells(["a", "b"]), bands=(B0, B1), pooled=True, n_boot=200, seed=1)
    for text in (R.render_markdown(scores), R.render_terminal(scores)):
        lines = [ln for ln in text.splitlines() if "No interval (" in ln]
        assert len(lines) == 1, lines
        assert "No interval (a, b, pooled):" in lines[0]
        assert "decoy trials from 3 sites (fewer than 5: reason a)" in lines[0]


def _with_truncation(scores, n_cut=0):
    from geoagent.scoring.truncation import TruncationCount
    for s in scores.values():
        s.truncation = {"main": TruncationCount(n=40, n_truncated=n_cut), "ctrl_mismatch": TruncationCount(n=10),
                        "ctrl_noimage": TruncationCount(n=10)}
    return scores


def test_cut_off_block_is_one_line_when_nothing_was_cut_off():
    """Before: 10 all-zero rows (share per arm, cut off and unparsed per arm, ...) and the no-finish-reason row."""
    scores = _with_truncation(sdt.score(_cells(["a", "b"]), bands=(B0, B1), pooled=True, n_boot=0, seed=1))
    md = R.render_markdown(scores)
    rows = [ln for ln in md.splitlines() if ln.startswith("|") and "cut off" in ln]
    assert rows == ["| answers cut off (all arms) | 0 of 60 | 0 of 60 | 0 of 60 |"], rows
    assert "share cut off" not in R.render_terminal(scores)
    # the CSV keeps every row (numbers for machines)
    assert "share cut off, main arm" in R.render_csv(scores)
    # something cut off: every row is back
    scores = _with_truncation(sdt.score(_cells(["a"]), bands=(B0, B1), pooled=False, n_boot=0, seed=1), n_cut=2)
    md = R.render_markdown(scores)
    assert "| share cut off, main arm | 5.0 % (2 of 40) |" in md and "| cut off and unparsed | 0 of 60 |" in md



def _synth_agg():
    from _geohint_synth import synth_results

    from geoagent.geohint.aggregate import GeoHintAggregator
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=3, n_sites=6))
    return agg


def test_hit_by_band_title_says_no_error_bars_when_every_interval_is_withheld():
    """Before: "(error bars: 95 % site-bootstrap intervals ...)" over a figure with no error bar (every regime
    from fewer than 5 sites, so every interval withheld)."""
    import matplotlib.pyplot as plt

    from geoagent.report import geohint as G
    agg = _synth_agg()
    pts = G.hit_by_band_points(agg, "forced", "baseline", n_boot=50, seed=0)
    drawn = any(q["lo"] == q["lo"] and q["lo"] is not None for p in pts.values() for q in p)
    fig = G.hit_by_band_figure(agg, n_boot=50)
    title = fig.axes[0].get_title()
    plt.close(fig)
    assert not drawn  # the synthetic regimes have fewer than 5 sites each
    assert "no error bars: intervals withheld (< 5 sites" in title.replace("\n", " ")
    assert "error bars: 95 %" not in title


def test_echo_heatmap_title_names_the_rule_plainly():
    import matplotlib.pyplot as plt

    from geoagent.report import geohint as G
    fig = G.echo_heatmap_figure(_synth_agg())
    title = fig.axes[0].get_title().replace("\n", " ")
    plt.close(fig)
    assert "echo rule: name" in title and "rule name" not in title.replace("echo rule: name", "")


def test_dprime_caption_speaks_of_the_figure_not_of_the_tables_brackets():
    """Before: the caption of geoverify_dprime.png said "each is marked § after its brackets", a figure with
    neither brackets nor §."""
    scores = sdt.score(_cells(["a"]), bands=(B0, B1), pooled=False, n_boot=200, seed=1)
    assert "after its brackets" in R.few_cluster_text(scores)  # the table's wording, where it is true
    fig = R.psychometric_figure(scores)
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "flagged few-cluster" in caption  # the fact stays
    assert "after its brackets" not in caption and R.FEW_CLUSTER_MARK not in caption
