"""GeoHint report rendering: Markdown, CSV, rich and PNG figures in the paper's table shapes (issue 4 point 6)."""

from __future__ import annotations

import csv
import io

import pytest
from _geohint_synth import synth_results
from PIL import Image as PILImage
from rich.console import Console

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.judged import import_judged
from geoagent.report.geohint import FloorP, build_tables, print_report, write_report


@pytest.fixture(scope="module")
def agg():
    a = GeoHintAggregator()
    a.add_many(synth_results(seed=7))
    return a


def test_paper_table_shapes(agg):
    tables = {t.name: t for t in build_tables(agg, n_flips=200, n_splits=10)}
    assert set(tables) >= {"table1", "table2", "table3", "table4", "table5", "table6", "table7", "table8", "table9", "table10", "table11"}
    t1 = tables["table1"]
    assert t1.columns == ["Model", "n", "Hit rate", "0.5-1.5km", "1.5-3.0km", "3.0-6.0km", "Echo rate",
                          "Hit rate 95 % CI", "Echo rate 95 % CI", "sites", "CI flag",
                          "Echo rate (release_first_word)"]  # stats43 #2: the paper's rule's echo rate, last
    assert len(t1.rows) == len(agg.models)
    assert [r[0] for r in tables["table4"].rows] == ["High (4-5)", "Mid (2-3)", "Low (0-1)", "Pooled: All"]
    assert len(tables["table4"].columns) == 5
    assert len(tables["table5"].rows) == 9  # (illegible, legible, all) x 3 bands
    assert [r[0] for r in tables["table6"].rows][-1] == "All"
    assert len(tables["table8"].rows) == 6  # (illegible, legible, all) x (control, treatment)
    assert len(tables["table10"].rows) == 6
    t3 = tables["table3"]
    assert len(t3.rows) == 2 * len(agg.models) and "splits" in t3.notes
    # table 8 rows: rates are fractions in [0, 1]
    for row in tables["table8"].rows:
        assert all(0 <= v <= 1 for v in row[3:7])


def test_written_files_agree_with_tables(agg, tmp_path):
    tables = write_report(agg, tmp_path, n_flips=200, n_splits=10)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    n_floor_cols = n_flags = 0
    for t in tables:
        assert t.title in md
        rows = list(csv.reader(io.StringIO((tmp_path / f"{t.name}.csv").read_text(encoding="utf-8"))))
        # an interval column (pctci) is two CSV columns, lo and hi, both fractions
        cols = [x for c, f in zip(t.columns, t.formats) for x in ((f"{c} lo", f"{c} hi") if f == "pctci" else (c,))]
        fmts = [x for f in t.formats for x in (("pct", "pct") if f == "pctci" else (f,))]
        values = [[x for v, f in zip(r, t.formats) for x in ((tuple(v) if v else (None, None)) if f == "pctci" else (v,))]
                  for r in t.rows]
        # (session 12) a text column of band labels adds "<name> label" at the end: the label as Markdown shows it
        labels = [f"{c} label" for c, f in zip(t.columns, t.formats)
                  if f == "text" and any(isinstance(r[t.columns.index(c)], str) and "km" in r[t.columns.index(c)]
                                         for r in t.rows)]
        # (session 15) a permutation p column (permp) adds "<name>_is_floor" after the labels: whether p is its
        # test's floor 1/(1+n_flips), shown "<..." in Markdown
        floors = [f"{c}_is_floor" for c, f in zip(t.columns, t.formats) if f == "permp"]
        n_floor_cols += len(floors)
        assert rows[0][len(cols):] == labels + floors
        assert len(rows[0]) == len(cols) + len(labels) + len(floors) and len(rows) == len(t.rows) + 1
        for r, got in zip(t.rows, rows[1:]):
            for c, f in zip(t.columns, t.formats):
                if f == "permp":
                    flag = got[rows[0].index(f"{c}_is_floor")]
                    p = r[t.columns.index(c)]
                    assert flag == ("" if not isinstance(p, float) or p != p else str(isinstance(p, FloorP)))
                    n_flags += flag != ""
        for name, col, f in zip(rows[0], cols, fmts):  # rates as fractions, named so
            assert name == (col if f not in ("pct", "pp", "pps") else col.removesuffix(" (%)").removesuffix(" (pp)")
                            + " (fraction)")
        for got, want in zip(rows[1:], values):
            for g, w, f in zip(got, want, fmts):
                if isinstance(w, float) and w == w:
                    assert float(g) == pytest.approx(w / 100 if f in ("pp", "pps") else w)
    assert n_floor_cols > 0 and n_flags > 0  # the permutation p columns and their flags were checked
    for fig in ("fig_hit_by_band.png", "fig_echo_heatmap.png"):
        with PILImage.open(tmp_path / fig) as im:
            assert im.format == "PNG" and im.size[0] > 300
    buf = io.StringIO()
    print_report(tables, Console(file=buf, width=200))
    assert "Table 1" in buf.getvalue() and "Table 8" in buf.getvalue()


def test_report_from_release_sample(release_dir, tmp_path):
    rows, _ = import_judged(release_dir)
    a = GeoHintAggregator()
    a.add_many(rows)
    tables = write_report(a, tmp_path, n_flips=100, n_splits=5)
    names = [t.name for t in tables]
    assert names[:7] == ["table1", "table2", "table3", "table4", "table5", "table6", "table7"]
    assert "table8" not in names  # the sample has only the permissive schema (v1)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "condition v1" in md
    t1 = tables[0]
    # every context row counts once, except those whose reference point is not in the ladder
    assert sum(r[1] for r in t1.rows) == len([r for r in rows if r.has_context and r.dist_km is not None])
    assert a.n_without_ladder_point == len([r for r in rows if r.has_context and r.dist_km is None]) > 0


def test_figure_with_rates_at_zero_and_one(tmp_path):
    from geoagent.geohint.result import GeoHintResult
    from geoagent.report.geohint import figure_hit_by_band

    a = GeoHintAggregator()
    for i in range(6):
        a.add(GeoHintResult(key=f"b{i}", site="s1", image_id="1", model="m", condition="baseline", schema="forced",
                            resolved_level="area", error_km=0.1, hit=True))
        a.add(GeoHintResult(key=f"c{i}", site="s1", image_id="1", model="m", condition="forced", schema="forced",
                            ref_qid=f"Q{i}", band="0.5-1.5km", tier="high", dist_km=1.0, resolved_level="area",
                            error_km=0.1, hit=True, echo=False))
    with PILImage.open(figure_hit_by_band(a, tmp_path / "f.png")) as im:
        assert im.format == "PNG"
