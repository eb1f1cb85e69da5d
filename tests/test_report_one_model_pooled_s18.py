"""A campaign with one model shows no pooled copy of it (session 18 walkthrough).

Before: with a single model (the docs' ``my_verify.toml`` / ``my_hint.toml``, one model ``sandbox-gpt``), the
GeoVerify console summary printed a ``pooled:`` line identical to the model's and both ``Small n`` lines,
``geoverify_table.md`` / ``.txt`` a ``pooled`` column identical to the model's (with its own Small n, read-out and
``No interval`` lines), Fig. 4 (``geoverify_dprime.png``) a pooled line on top of the model's whose † marks
overlapped the model's, and GeoHint's Tables 6 and 7 (and the cut-off and unresolved tables, where the ``All``
row repeated the model's row) an ``All`` row equal to the model's.

The rule now, in both reports: with exactly one model, a pooled row, column or line that would repeat that model's
own is left out of Markdown, the terminal text, the console summary and the figures, and the tables say so once;
the CSV files keep their pooled rows and columns unchanged (a reader of several campaigns' CSVs may rely on them).
With two models or more nothing changes. Figures checked without pixels, by drawn extents
(tests/test_report_figure_text_s18.py).
"""

from __future__ import annotations

import csv
import io

from matplotlib.container import ErrorbarContainer

from test_report_figure_text_s18 import MODELS, _demo_agg, _drawn, _overlapping_texts, _verify_counts
from test_report_review_s17 import _cells
from test_report_truncation import _gh_result

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geoverify.campaign import GeoVerifyCampaign
from geoagent.report import geohint as GH
from geoagent.report import geoverify as GV
from geoagent.scoring.sdt import POOLED, score


def _scores(n_models: int):
    return score(_cells(_verify_counts(n_models)), n_boot=200, seed=0)


def _one():
    scores = _scores(1)
    (model,) = [m for m in scores if m != POOLED]
    return scores, model


# --- GeoVerify ------------------------------------------------------------------------------------------------------
def test_geoverify_markdown_with_one_model_has_no_pooled_column_and_says_so_once():
    scores, m = _one()
    md = GV.render_markdown(scores)
    assert md.splitlines()[0] == f"| | {m} |"
    assert "pooled |" not in md
    assert "Small n (pooled)" not in md and f"Small n ({m})" in md
    assert "- pooled:" not in md and f"- {m}:" in md
    assert f"No interval ({m}):" in md and "pooled)" not in md
    assert md.count(GV.one_model_note(scores)) == 1 and GV.one_model_note(scores)
    assert GV.TABLE_CSV in GV.one_model_note(scores)


def test_geoverify_terminal_with_one_model_has_no_pooled_column():
    scores, m = _one()
    txt = GV.render_terminal(scores)
    head = txt.splitlines()[2]  # the column names (title, top rule, names)
    assert m in head and POOLED not in head
    assert "- pooled" not in txt and "pooled)" not in txt
    assert " ".join(txt.split()).count(GV.one_model_note(scores)) == 1
    assert f"Small n ({m})" in txt


def test_geoverify_csv_keeps_the_pooled_columns_with_one_model():
    scores, m = _one()
    rows = list(csv.reader(io.StringIO(GV.render_csv(scores))))
    head = rows[0]
    assert [c for c in head if c.startswith(POOLED)] == [POOLED, *(POOLED + s for s in GV.CSV_MODEL_SUFFIXES)]
    i, j = head.index(m), head.index(POOLED)
    assert all(r[i:i + 4] == r[j:j + 4] for r in rows[1:])  # pooled is the model, value for value


def test_geoverify_two_models_keep_the_pooled_column_and_no_note():
    scores = _scores(2)
    md = GV.render_markdown(scores)
    assert md.splitlines()[0].endswith("| pooled |") and "- pooled:" in md
    assert GV.one_model_note(scores) == ""
    assert GV.render_terminal(scores).splitlines()[2].split()[-2] == POOLED


def test_geoverify_summary_with_one_model_prints_no_pooled_line():
    scores, m = _one()
    camp = GeoVerifyCampaign()
    camp._scores = scores
    lines = camp.summary_lines(None, None, None)
    assert not [ln for ln in lines if ln.strip().startswith(f"{POOLED}:")]
    assert len([ln for ln in lines if ln.strip().startswith(f"{m}:")]) == 1
    assert not [ln for ln in lines if "Small n (pooled)" in ln] and [ln for ln in lines if f"Small n ({m})" in ln]
    readout = [ln for ln in lines if "pre-registered read-out" in ln]
    assert len(readout) == 1 and readout[0].strip().startswith(f"pre-registered read-out ({m}; one model, so "
                                                               "pooled is the same):")


def test_geoverify_summary_with_two_models_keeps_the_pooled_line():
    camp = GeoVerifyCampaign()
    camp._scores = _scores(2)
    lines = camp.summary_lines(None, None, None)
    assert [ln for ln in lines if ln.strip().startswith(f"{POOLED}:")]
    assert [ln for ln in lines if ln.strip().startswith("pre-registered read-out (pooled):")]


def _series(fig) -> list[str]:
    return [c.get_label().split(" (")[0] for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]


def test_fig4_with_one_model_draws_no_pooled_line_and_its_small_n_marks_overlap_nothing():
    """Before, the pooled line's † marks sat on the model's (same d', next to it on the dodged log axis) and
    their drawn extents overlapped; tests/test_report_figure_text_s18.py had to ignore the mark."""
    scores, m = _one()
    assert GV.small_n_bands(scores[m])  # the replay's 5 signal trials: every band is marked
    fig = GV.psychometric_figure(scores)
    assert _series(fig) == [m]
    r = _drawn(fig)
    marks = [t for t in fig.axes[0].texts if t.get_text() == GV.SMALL_N_MARK]
    assert len(marks) == len(GV.small_n_bands(scores[m]))
    assert _overlapping_texts(fig, r) == []
    assert GV.ONE_MODEL_FIGURE_NOTE in "\n".join(t.get_text() for t in fig.texts)


def test_fig4_with_two_models_keeps_the_pooled_line():
    fig = GV.psychometric_figure(_scores(2))
    assert _series(fig)[-1] == POOLED and len(_series(fig)) == 3
    assert GV.ONE_MODEL_FIGURE_NOTE not in "\n".join(t.get_text() for t in fig.texts)


def test_geoverify_write_report_with_one_model(tmp_path):
    scores, m = _one()
    paths = GV.write_report(scores, tmp_path)
    assert "| pooled" not in paths["md"].read_text(encoding="utf-8")
    assert f"{POOLED}_text" in paths["csv"].read_text(encoding="utf-8").splitlines()[0]


# --- GeoHint --------------------------------------------------------------------------------------------------------
def _md_rows(table: GH.Table) -> list[str]:
    return [ln.split("|")[1].strip() for ln in table.to_markdown().splitlines() if ln.startswith("| ")][1:]


def _csv_rows(table: GH.Table) -> list[str]:
    return [r[0] for r in csv.reader(io.StringIO(table.to_csv()))][1:]


def test_geohint_tables_6_and_7_with_one_model_show_no_all_row_but_keep_it_in_the_csv():
    agg = _demo_agg(MODELS[1])
    (m,) = agg.models
    for t in (GH.table6(agg), GH.table7(agg)):
        assert _md_rows(t) == [m], t.name
        assert _csv_rows(t) == [m, GH.POOLED_ROW], t.name
        md = t.to_markdown()
        assert md.count(GH.one_model_note(t.name, m)) == 1, t.name
        assert f"{GH.POOLED_ROW} beta" not in md  # no No-fit cell names the row left out
        assert " ".join(GH.render_text(t.to_rich()).split()).count(GH.one_model_note(t.name, m)) == 1


def test_geohint_tables_6_and_7_with_several_models_keep_the_all_row():
    agg = _demo_agg(MODELS[6])
    for t in (GH.table6(agg), GH.table7(agg)):
        assert _md_rows(t)[-1] == GH.POOLED_ROW and t.shown is None, t.name
        assert "One model" not in t.to_markdown()


def test_geohint_cutoff_table_with_one_model_shows_no_all_row_repeating_the_model():
    agg = GeoHintAggregator()
    for i in range(50):
        agg.add(_gh_result(i, "m-a", "baseline", "stop"))
        agg.add(_gh_result(i, "m-a", "forced", "length" if i < 4 else "stop"))
    t = GH.table_cutoff(agg)
    assert _md_rows(t) == ["m-a", "m-a", "m-a"]  # baseline, forced, all
    assert _csv_rows(t) == ["m-a", "m-a", "m-a", GH.POOLED_ROW]
    assert t.to_markdown().count(GH.one_model_note("cutoff", "m-a")) == 1
    one = GeoHintAggregator()
    for i in range(50):
        one.add(_gh_result(i, "m-a", "forced", "length" if i < 4 else "stop"))
    assert _md_rows(GH.table_cutoff(one)) == ["m-a"]
    # nothing cut off: the one collapsed row (every model and condition) stays as it was
    calm = GeoHintAggregator()
    for i in range(20):
        calm.add(_gh_result(i, "m-a", "forced", "stop"))
    assert _md_rows(GH.table_cutoff(calm)) == [GH.POOLED_ROW]


def test_geohint_unresolved_table_with_one_model_and_one_condition_shows_no_all_row():
    agg = GeoHintAggregator()
    for i in range(20):
        agg.add(_gh_result(i, "m-a", "forced", "stop", parse_ok=i > 2))
    t = GH.table_unresolved(agg)
    assert _md_rows(t) == ["m-a"] and _csv_rows(t) == ["m-a", GH.POOLED_ROW]
    assert t.to_markdown().count(GH.one_model_note("unresolved", "m-a")) == 1
    # two conditions: the All row is the model's total over them, a row of its own (kept)
    for i in range(20):
        agg.add(_gh_result(i, "m-a", "baseline", "stop"))
    t2 = GH.table_unresolved(agg)
    assert _md_rows(t2) == ["m-a", "m-a", GH.POOLED_ROW] and t2.shown is None


def test_geohint_report_with_one_model(tmp_path):
    agg = _demo_agg(MODELS[1])
    GH.write_report(agg, tmp_path, n_flips=20, n_splits=3, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"| {GH.POOLED_ROW} |" not in md.split("### Table 6")[1].split("### Answers cut off")[0]
    for name in ("table6", "table7"):
        with (tmp_path / f"{name}.csv").open(newline="", encoding="utf-8") as fh:
            assert [r["Model"] for r in csv.DictReader(fh)][-1] == GH.POOLED_ROW


def test_geohint_table6_with_one_model_names_no_cell_of_the_left_out_row_in_its_no_fit_line():
    """Every hint distance equal: no fit; the shown table's 'No fit' line names the model's cells only (before, the
    line named the All row's cells too, 'All beta, SE, p; ...')."""
    agg = GeoHintAggregator()
    for i in range(20):
        agg.add(_gh_result(i, "m-a", "forced", "stop"))
    t = GH.table6(agg)
    assert f"{GH.POOLED_ROW} beta" in t.notes  # the full table (as the CSV's rows) names both rows
    line = next(ln for ln in t.shown.notes_lines() if ln.startswith("No fit"))
    assert "m-a beta, SE, p" in line and f"{GH.POOLED_ROW} beta" not in line
