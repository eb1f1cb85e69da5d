"""Report output a reader can use: tables printed to a file or pipe are never cut at 80 columns, tables split by
regime say why they are empty when the data have no no-context answers, and every report (GeoVerify table,
GeoHint report, the demo summary) carries a legend of its terms."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _geohint_synth import synth_results

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.judged import import_judged
from geoagent.report import geohint as GH
from geoagent.report import geoverify as GV

REPO = Path(__file__).resolve().parents[1]
REGIME_TABLES = ("table2", "table3", "table5", "table7")


@pytest.fixture(scope="module")
def release_agg(release_dir):
    rows, _ = import_judged(release_dir)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    return agg


def test_judged_output_to_a_pipe_keeps_whole_cells(release_dir, release_agg, tmp_path):
    """`python -m geoagent.geohint.judged ... > file`: no cell is cut (no ellipsis), every model name and every
    formatted cell of Tables 6 and 7 appears whole on its model's line, even with COLUMNS=80 set."""
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "geoagent.geohint.judged", str(release_dir), str(tmp_path / "out"),
                           "--flips", "50", "--splits", "5"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\u2026" not in out
    tables = {t.name: t for t in GH.build_tables(release_agg, n_flips=50, n_splits=5)}
    lines = out.splitlines()
    for name in ("table6", "table7"):
        for row in tables[name].display_rows():
            line = next(ln for ln in lines if f" {row[0]} " in ln and all(c in ln for c in row))
            assert line
    for m in release_agg.models:
        assert m in out
    assert out.count("No regime split") == len(REGIME_TABLES)
    assert "Terms:" in out and "hit: the answer lies under 1 km" in out


def test_regime_note_only_when_no_site_has_a_regime(release_agg, tmp_path):
    tables = {t.name: t for t in GH.build_tables(release_agg, n_flips=50, n_splits=5)}
    assert release_agg.regimes(condition=GH.default_conditions(release_agg)[1]) == {}
    for name in REGIME_TABLES:
        assert "No regime split" in tables[name].notes, name
        assert "no-context" in tables[name].notes
    for name in ("table1", "table4", "table6"):
        assert "No regime split" not in tables[name].notes
    GH.write_report(release_agg, tmp_path, n_flips=50, n_splits=5, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    for name in REGIME_TABLES:  # the note sits under its own table, before the next one
        section = md.split(f"### {tables[name].title}")[1].split("### ")[0]
        assert "No regime split" in section, name

    synth = GeoHintAggregator()
    synth.add_many(synth_results(seed=7))
    assert synth.regimes()
    for t in GH.build_tables(synth, n_flips=50, n_splits=5):
        assert "No regime split" not in t.notes, t.name


def test_geohint_report_and_terminal_carry_the_legend(tmp_path):
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=3))
    tables = GH.write_report(agg, tmp_path, n_flips=50, n_splits=5)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    for line in GH.LEGEND:
        assert f"- {line}" in md
    assert "error bars are 95 % site-bootstrap percentile intervals" in md
    buf = io.StringIO()
    GH.print_report(tables, GH.report_console(buf))
    text = buf.getvalue()
    assert text.rstrip().endswith(GH.LEGEND[-1])
    assert "\u2026" not in text  # not a terminal: natural width


def test_geoverify_table_carries_the_legend(release_dir, tmp_path):
    from geoagent.data.importer import import_release
    from geoagent.geoverify.aggregate import GeoVerifyAggregator
    from geoagent.geoverify.score import scored_rows_from_release

    agg = GeoVerifyAggregator()
    agg.update(scored_rows_from_release(import_release(release_dir)))
    scores = agg.scores()
    paths = GV.write_report(scores, tmp_path, plot=False)
    md = paths["md"].read_text(encoding="utf-8")
    txt = paths["txt"].read_text(encoding="utf-8")
    for term in ("H (hit rate)", "F (false-alarm rate)", "d' (sensitivity)", "c (criterion)", "delta_1 (discrimination radius)"):
        assert f"- {term}" in md
        assert f"  {term}" in txt
    assert "tau = 150 m" in md
    # the legend follows the table (and its notes), not the other way round
    assert md.index("Terms:") > md.index("Log-linear correction")


def test_demo_summary_terms_name_the_import_report_store(tmp_path):
    from geoagent.data.store import data_db_path
    from geoagent.demo import demo_config, summary_terms

    values = {"crawl_dir": str(tmp_path / "crawl"), "images_dir": str(tmp_path / "images")}
    cfg = demo_config("demo_geoverify", values)
    text = "\n".join(summary_terms(cfg))
    assert str(data_db_path(cfg.name, cfg.state_root())) in text
    for term in ("planned N requests", "candidate city", "import_report", "d'(nearest)", "delta_1 none", "regimes"):
        assert term in text, term
