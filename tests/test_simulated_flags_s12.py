"""Simulated answers are flagged wherever replayed ones are (session 12 walkthrough).

Before, a run answered by geoagent's simulator (``provider = "simulated"``, or a local ``*.sandbox.invalid`` model
fake) said so only in the text reports: its figures, the report's CSV tables, the exports (``model_responses``
showed ``request_meta.provider = openai``) and the manifest looked like a real model's. Real CLI runs over the
sandbox crawl: GeoVerify with the simulated provider, GeoHint with the OpenAI-compatible fake. The figures' text
artists are read from the figures the reports build (a spy that returns them unchanged), no pixel comparison.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import orjson
import polars as pl
import pytest

from geoagent.cli import main

MODEL_FAKE = """
[[models]]
name = "fake-gpt"
provider = "openai"
model = "sandbox-gpt"
base_url = "http://openai.sandbox.invalid/v1"
max_output_tokens = 300
concurrency = 16
rate = { requests = 1000, period_s = 1.0 }
"""
SIMULATED = """
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
"""


def _toml(root: Path, name: str, kind: str, models: str, section: str) -> Path:
    p = root / f"{name}.toml"
    p.write_text(f'[campaign]\nname = "{name}"\nkind = "{kind}"\nseed = 7\ncontact = "mailto:x@example.org"\n'
                 f'[paths]\nrelease_dir = "{root / "state" / "crawl-sandbox"}"\n[budget]\ncap_usd = 1.0\n'
                 f"{models}\n[{kind}]\n{section}\n", encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import geoagent.report.geohint as gh_report
    import geoagent.report.geoverify as gv_report

    from tests._crawl_once import sandbox_crawl

    mp = pytest.MonkeyPatch()
    texts: dict[str, list[str]] = {}

    def spy(name, build):
        def wrapped(*a, **kw):
            fig = build(*a, **kw)
            texts.setdefault(name, []).append("\n".join(t.get_text() for t in fig.texts))
            return fig
        return wrapped

    mp.setattr(gv_report, "psychometric_figure", spy("dprime", gv_report.psychometric_figure))
    mp.setattr(gh_report, "hit_by_band_figure", spy("hit_by_band", gh_report.hit_by_band_figure))
    mp.setattr(gh_report, "echo_heatmap_figure", spy("echo_heatmap", gh_report.echo_heatmap_figure))
    outs = {}
    try:
        # the shipped crawl (the session's one, restored under its root; the data roots pointed there)
        root, _ = sandbox_crawl(tmp_path_factory, mp)
        images = root / "state" / "images"
        gv = _toml(root, "gv-sim", "geoverify", SIMULATED, f'trials = "release"\nimage_root = "{images}"\nn_boot = 0')
        gh = _toml(root, "gh-fake", "geohint", MODEL_FAKE,
                   f'conditions = ["forced"]\nimages = "release"\nimage_root = "{images}"\n'
                   '[geohint.geocoder]\nwikidata_url = "http://wikidata.sandbox.invalid/w/api.php"\n'
                   'nominatim_url = "http://nominatim.sandbox.invalid"\nnominatim_max_requests = 1000000')
        for name, cfg in (("gv", gv), ("gh", gh)):
            buf = io.StringIO()
            with redirect_stdout(buf):
                code = main(["run", str(cfg), "--no-live"])
            outs[name] = (code, buf.getvalue())
        buf = io.StringIO()
        with redirect_stdout(buf):
            outs["gh-export"] = (main(["export", str(gh)]), buf.getvalue())
    finally:
        mp.undo()
    return root / "state", outs, texts


@pytest.mark.parametrize("campaign, table, model", [("gv-sim", "geoverify_scored", "sim"),
                                                    ("gv-sim", "model_responses", "sim"),
                                                    ("gh-fake", "geohint_scored", "fake-gpt"),
                                                    ("gh-fake", "model_responses", "fake-gpt")])
def test_exports_carry_a_simulated_column_and_metadata(runs, campaign, table, model):
    state, outs, _ = runs
    assert all(code == 0 for code, _ in outs.values()), outs
    folder = state / campaign
    df = pl.read_parquet(folder / f"{table}.parquet")
    assert df.height > 0 and df.schema["simulated"] == pl.Boolean
    assert df["simulated"].to_list() == [True] * df.height
    assert df["replayed"].to_list() == [False] * df.height  # simulated, not replayed
    meta = pl.read_parquet_metadata(folder / f"{table}.parquet")
    assert f"Simulated answers: {model} answered from geoagent's simulator" in meta["geoagent.simulated_note"]
    assert "geoagent.replay_note" not in meta
    csv = pl.read_csv(folder / f"{table}.csv", infer_schema_length=None)  # no banner: the header is line 1
    assert csv["simulated"].to_list() == [True] * df.height
    note = (folder / "export_note.txt").read_text(encoding="utf-8")
    assert f"Simulated answers: {model} answered" in note and f"{table}.csv" in note
    assert "the column `simulated` is true" in note


def test_cli_export_says_the_rows_are_simulated(runs):
    state, outs, _ = runs
    code, out = outs["gh-export"]
    assert code == 0 and "fake-gpt hold simulated answers" in out and "column simulated" in out


@pytest.mark.parametrize("figure, model", [("dprime", "sim"), ("hit_by_band", "fake-gpt"),
                                           ("echo_heatmap", "fake-gpt")])
def test_figures_carry_the_simulator_caption(runs, figure, model):
    _, _, texts = runs
    assert texts.get(figure), f"no {figure} figure was built"
    assert f"Simulated answers: {model} answered from geoagent's simulator" in texts[figure][-1]


@pytest.mark.parametrize("campaign, model, csvs", [("gv-sim", "sim", ["geoverify_table.csv"]),
                                                   ("gh-fake", "fake-gpt", ["table1.csv", "missing.csv"])])
def test_report_csv_tables_get_a_note_beside_them(runs, campaign, model, csvs):
    state, _, _ = runs
    report = state / campaign / "report"
    note = (report / "report_note.txt").read_text(encoding="utf-8")
    assert f"Simulated answers: {model} answered from geoagent's simulator" in note
    for name in csvs:
        assert (report / name).is_file() and name in note
    # the tables themselves stay plain CSV: their first line is the header
    first = (report / csvs[0]).read_text(encoding="utf-8").splitlines()[0]
    assert "Simulated" not in first


@pytest.mark.parametrize("campaign, models", [("gv-sim", ["sim"]), ("gh-fake", ["fake-gpt"])])
def test_manifest_names_the_simulated_models(runs, campaign, models):
    state, _, _ = runs
    manifest = orjson.loads((state / campaign / "manifest.json").read_bytes())
    assert manifest["simulated_models"] == models
