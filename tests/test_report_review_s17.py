"""Session 17 review of the GeoVerify and GeoHint reports as a paper's reviewer reads them.

GeoVerify's ``geoverify_dprime.png`` (the paper's Fig. 4) of the replayed release sample
(``geoagent/configs/geocontext_replay.toml``), before the fix:

- the caption under the axes (the replay line, the error-bar and † lines) ran across the x-axis label
  "decoy band (km)": the caption's top at y = 92 px, the label's bottom at y = 80 px (110 dpi);
- the legend (``loc="best"``) sat inside the axes over the data: claude-haiku-4-5's point at 1.5–3 km
  (d' -0.06) and the lower halves of several error bars were hidden under it; in the demo run
  (``run.py demo``) demo-large's error bar at 0.3–0.7 km ran under it.

Checked without pixels, as tests/test_report_figure_layout.py does: matplotlib measures each drawn artist's
window extent. The scores are built from the replay's own counts (trials answered yes / parsed trials per
model and band, geoverify_table.csv of the replay), spread over 9 sites (signal trials over 4); d' per band is then the replay's
(1.09, 0.71, 0.74, 0.71, 1.24 for qwen3-vl-8b, ...), since d' does not depend on the sites.
"""

from __future__ import annotations

import math

import polars as pl
import pytest
from matplotlib.container import ErrorbarContainer

from test_report_figure_layout import _drawn, _texts_inside

from geoagent.report.geoverify import psychometric_figure
from geoagent.scoring.sdt import score

BANDS = ("0.15-0.3km", "0.3-0.7km", "0.7-1.5km", "1.5-3.0km", "3.0-6.0km")

# (trials answered yes, parsed trials): signal, then each decoy band nearest first; the replay of the release's
# verify_raw_sample.jsonl (docs/geocontext-release.md, "Replaying GeoVerify from the release")
REPLAY_COUNTS = {
    "qwen3-vl-8b": [(1, 5), (0, 12), (1, 17), (1, 18), (1, 17), (0, 17)],
    "gemini-flash": [(3, 5), (10, 12), (8, 16), (3, 18), (2, 16), (2, 15)],
    "qwen3-vl-235b": [(2, 4), (7, 12), (8, 16), (3, 17), (4, 17), (3, 16)],
    "claude-haiku-4-5": [(3, 5), (8, 12), (9, 16), (9, 18), (11, 18), (8, 17)],
}

REPLAY_NOTE = ("Replay of recorded responses: release-replay from /work/shared/reference/geocontext/"
               "verify_raw_sample.jsonl (336 recorded responses). Every figure here is computed from these replayed "
               "responses only, a sample of the release, so none is the paper's (its tables, e.g. GeoVerify's "
               "Table 12, rest on the full data); no model was called.")


def _cells(counts: dict[str, list[tuple[int, int]]], n_sites: int = 9, n_signal_sites: int = 4) -> pl.DataFrame:
    """Cell table (model, site, arm, band, truth, n_yes, n_no, n_fail) with each model's decoy trials of a band
    dealt round-robin over ``n_sites`` sites and its signal trials over ``n_signal_sites`` of them, the yes
    answers first. As in the replay (signal trials of 3-4 sites per model), no per-model d' then has an
    interval: only the pooled line has error bars."""
    acc: dict[tuple, list[int]] = {}
    for model, per_band in counts.items():
        for (k, n), band in zip(per_band, ("signal",) + BANDS):
            truth = "yes" if band == "signal" else "no"
            sites = n_signal_sites if band == "signal" else n_sites
            for i in range(n):
                cell = acc.setdefault((model, f"s{i % sites}", "main", band, truth), [0, 0])
                cell[0 if i < k else 1] += 1
    rows = [(*key, y, no, 0) for key, (y, no) in acc.items()]
    return pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"],
                        orient="row")


def _replay_scores():
    return score(_cells(REPLAY_COUNTS), n_boot=200, seed=0)



def test_replay_counts_give_the_replay_dprimes():
    """The fixture is the replay: d' per band as the replay's geoverify_table.md prints them (2 decimals)."""
    sc = _replay_scores()
    assert [round(b.d_prime, 2) for b in sc["qwen3-vl-8b"].bands] == [1.09, 0.71, 0.74, 0.71, 1.24]
    assert [round(b.d_prime, 2) for b in sc["pooled"].bands] == [-0.11, 0.19, 0.68, 0.56, 0.76]


@pytest.mark.parametrize("note", [None, REPLAY_NOTE])
def test_dprime_caption_runs_across_no_axis_text(note):
    """The caption under the axes overlaps neither the x-axis label nor a tick label (before: with the replay
    line it covered "decoy band (km)")."""
    fig = psychometric_figure(_replay_scores(), note=note)
    r = _drawn(fig)
    ax = fig.axes[0]
    axis_texts = [ax.xaxis.label, *[t for t in ax.get_xticklabels() if t.get_text()]]
    clashes = []
    for cap in fig.texts:
        c = cap.get_window_extent(r)
        for t in axis_texts:
            e = t.get_window_extent(r)
            if c.overlaps(e):
                clashes.append(f"caption {c} over {t.get_text()!r} {e}")
    assert clashes == []


def _data_points_px(ax, step_px: float = 2.0) -> list[tuple[float, float, str]]:
    """Display coordinates of every plotted point and of points every ``step_px`` along each error bar and each
    line between points, with the line's label, leaving out what has no value (NaN: Fig. 2's bands or regimes
    without answers)."""
    def along(seg, what):
        if len(seg) < 2:  # a line without intervals has empty error-bar segments
            return []
        (x0, y0), (x1, y1) = ax.transData.transform(seg)
        if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
            return []
        n = max(1, int(max(abs(x1 - x0), abs(y1 - y0)) / step_px))
        return [(x0 + (x1 - x0) * i / n, y0 + (y1 - y0) * i / n, what) for i in range(n + 1)]

    pts = []
    for cont in ax.containers:
        if not isinstance(cont, ErrorbarContainer):
            continue
        label = cont.get_label()
        line = cont.lines[0]
        xy = list(zip(line.get_xdata(), line.get_ydata()))
        pts += [(float(x), float(y), f"{label}: point") for x, y in ax.transData.transform(xy)
                if math.isfinite(x) and math.isfinite(y)]
        for a, b in zip(xy, xy[1:]):
            pts += along((a, b), f"{label}: line")
        for coll in cont.lines[2]:
            for seg in coll.get_segments():
                pts += along(seg, f"{label}: error bar")
    return pts


@pytest.mark.parametrize("note", [None, REPLAY_NOTE])
def test_dprime_legend_covers_no_point_or_error_bar(note):
    """No d' point, line or error bar runs under the legend (before: claude-haiku-4-5's 1.5–3 km point and
    the lower parts of several bars did)."""
    fig = psychometric_figure(_replay_scores(), note=note)
    r = _drawn(fig)
    ax = fig.axes[0]
    leg = ax.get_legend().get_window_extent(r)
    covered = sorted({what for x, y, what in _data_points_px(ax) if leg.contains(x, y)})
    assert covered == []


def test_dprime_every_text_fits_inside_the_figure():
    fig = psychometric_figure(_replay_scores(), note=REPLAY_NOTE)
    assert _texts_inside(fig, _drawn(fig)) == []


# --- GeoHint figures ------------------------------------------------------------------------------------------------
# Before (the release's judged sample, `python -m geoagent.geohint.judged RELEASE_DIR OUT`, condition v1):
# - fig_hit_by_band.png, empty for want of no-context answers, sent the reader to "Table 5's 'all sites' rows" for
#   "the hit rate by band without the split"; Table 5 holds distances (n, d_ref, err, median ratio), no hit rate:
#   the hit rate by band over all sites is in Table 1's band columns (per model);
# - fig_echo_heatmap.png left the cell without answers (tier low, 0.5–1.5 km; Table 4's "—") blank: its "—" was
#   drawn white on the masked cell's white; and its colour bar had no label (what the colours measure, in %).


def _geohint_agg(drop=lambda r: False):
    from _geohint_synth import synth_results
    from geoagent.geohint.aggregate import GeoHintAggregator

    agg = GeoHintAggregator()
    agg.add_many([r for r in synth_results(seed=4, n_sites=6, models=("m-a", "m-b")) if not drop(r)])
    return agg


def test_empty_fig2_points_to_the_table_with_hit_rate_by_band():
    from geoagent.report import geohint as GH

    agg = _geohint_agg(lambda r: r.condition == "baseline")
    note = GH.empty_figure_note(agg, "baseline")
    assert note, "no regime, so Fig. 2 is empty and says so"
    assert "Table 5" not in note  # distances, not hit rates
    assert "Table 1" in note and "hit rate by band" in note


def test_echo_heatmap_marks_an_empty_cell_visibly_and_labels_its_colour_bar():
    from matplotlib.colors import to_rgb

    from geoagent.report import geohint as GH

    agg = _geohint_agg(lambda r: r.tier == "low" and r.band == "0.5-1.5km")
    fig = GH.echo_heatmap_figure(agg, "forced")
    ax = fig.axes[0]
    empty = [t for t in ax.texts if t.get_text().startswith(GH.DASH)]
    assert len(empty) == 1, [t.get_text() for t in ax.texts]
    assert to_rgb(empty[0].get_color()) != (1.0, 1.0, 1.0)  # a masked cell is drawn in the figure's white
    assert "n=0" in empty[0].get_text()
    cbar_axes = [a for a in fig.axes if a is not ax]
    assert cbar_axes and "echo rate (%)" in cbar_axes[0].get_ylabel()


# --- GeoHint raw route (python -m geoagent.geohint.raw_import RELEASE_DIR OUT) --------------------------------------
# Before: report.md and the terminal said under the cut-off table "cut off: defined under Terms (said once per
# report)." while neither had a Terms section (only the campaign report and `judged` print one).


def test_raw_route_defines_cut_off_where_it_says_it_does(release_dir, tmp_path, capsys):
    from geoagent.geohint.raw_import import main
    from geoagent.scoring.truncation import LEGEND_LINE

    if not (release_dir / "forced_chain_raw_sample.jsonl").is_file():
        pytest.skip(f"forced_chain_raw_sample.jsonl not in {release_dir}")
    out = tmp_path / "out"
    assert main([str(release_dir), str(out)]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    printed = " ".join(capsys.readouterr().out.split())
    assert "defined under Terms" in md
    assert "\nTerms:\n" in md and f"- {LEGEND_LINE}" in md
    assert "Terms:" in printed and " ".join(LEGEND_LINE.split()) in printed


# --- terminal tables (geoverify_table.txt; the GeoHint routes' printed tables) ---------------------------------------
# Before: rich centres a table's caption, so the notes under the table were wrapped to the table's width and each
# line centred: in the demo's geoverify_table.txt the last line of the bootstrap note read
# "        the pooled count k/n shown after it (binomial: ...)", and raw_import's cut-off note came out as
# "cut off: defined under Terms (said once" / "             per report)." - ragged text a reader cannot paste.


def _caption_lines(text: str) -> list[str]:
    """The lines right under a rich table's bottom border up to the next blank-free block's end (its caption)."""
    lines = text.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("└"))
    out = []
    for line in lines[last + 1:]:
        if not line.strip() or line.startswith(("†", "Small n", "Intervals", "No interval", "Terms:", "In ")):
            break
        out.append(line)
    return out


def test_geoverify_terminal_notes_are_left_aligned():
    from geoagent.report.geoverify import render_terminal

    caption = _caption_lines(render_terminal(_replay_scores()))
    assert len(caption) > 1, caption  # wrapped to the table's width
    assert [line for line in caption if line.startswith(" ")] == []


def test_geohint_terminal_notes_are_left_aligned():
    import io

    from rich.console import Console

    from geoagent.report import geohint as GH

    t = GH.table_cutoff(_geohint_agg())
    console = Console(file=io.StringIO(), width=60, force_terminal=False, color_system=None)
    console.print(t.to_rich())
    caption = _caption_lines(console.file.getvalue())
    assert len(caption) > 1, caption
    assert [line for line in caption if line.startswith(" ")] == []


def test_dprime_band_ticks_read_as_the_table_bands():
    """Fig. 4's band ticks name the bands as the table rows do, without the unit the axis label gives (before:
    "1.5–3" and "3–6" under rows "1.5–3.0 km" and "3.0–6.0 km")."""
    fig = psychometric_figure(_replay_scores())
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert ticks == ["0.15–0.3", "0.3–0.7", "0.7–1.5", "1.5–3.0", "3.0–6.0"]
    assert "(km)" in fig.axes[0].get_xlabel()


def test_table5_distance_columns_carry_their_unit():
    """table5.csv, read alone, says its distances are km (before: columns "d_ref" and "err", the unit only in the
    Markdown title; every rate column of the CSVs carries its unit, "(fraction)")."""
    from geoagent.report import geohint as GH

    t = GH.table5(_geohint_agg(), "forced", "baseline")
    assert "d_ref (km)" in t.csv_columns() and "err (km)" in t.csv_columns()
    assert "| d_ref (km) | err (km) |" in t.to_markdown()


# --- GeoHint report: unparsed answers counted ------------------------------------------------------------------------
# Before: report.md defined "unparsed" (a finished answer with no JSON answer: a response and a miss) but never said
# how many there were; the count (Cell.n_parse_fail) reached no line or table, while GeoVerify counts its parse
# failures per model and lists them. A reader could not tell how many misses were answers that named no place.


def test_geohint_report_counts_unparsed_answers(tmp_path):
    from geoagent.report import geohint as GH

    agg = _geohint_agg()
    t = agg.select()
    assert t.n_parse_fail > 0  # the synthetic answers include some unparsed ones (parse_ok False)
    GH.write_report(agg, tmp_path, n_flips=20, n_splits=3, seed=1, n_boot=0, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    line = next((x for x in md.splitlines() if x.startswith("Unparsed answers")), None)
    assert line is not None, "no line counts the unparsed answers"
    assert f"{t.n_parse_fail} of {t.n}" in line and "miss" in line
    for m in agg.models:
        assert f"{m} {agg.select(model=m).n_parse_fail}" in line


def test_echo_heatmap_rows_read_as_table4_rows():
    """Fig. 3's tier ticks name the tiers as Table 4's rows do, referenceability range included (before: "high",
    "mid", "low" beside Table 4's "High (4-5)", "Mid (2-3)", "Low (0-1)")."""
    from geoagent.report import geohint as GH

    agg = _geohint_agg()
    fig = GH.echo_heatmap_figure(agg, "forced")
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    rows = [r[0] for r in GH.table4(agg, "forced").rows][:3]
    assert ticks == rows == ["High (4-5)", "Mid (2-3)", "Low (0-1)"]
