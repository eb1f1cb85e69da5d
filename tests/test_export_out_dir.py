"""``run.py export CONFIG --out DIR`` writes a campaign's exports to a folder the researcher chooses.

Before (noticed in session 19's walkthrough, carried since): the export always went to the campaign's state
folder (a crawl: ``state/<campaign>/export/``), so a researcher gathering several campaigns' tables had to copy
them by hand. Now ``--out DIR`` (created when missing) takes every file of the export, the note included; the
default stays where it was. A crawl refuses its own output folder, where the export's CSVs would replace the
crawl's tables of the same name, and any ``--out`` that is a file is refused; both exit 2 with nothing written.

Real runs through the CLI (the simulated provider of a generic campaign; the sandbox crawl).
"""

from __future__ import annotations


import polars as pl
import pytest

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from _sandbox_crawl import sandbox_crawl_config


def test_export_out_writes_every_file_there_and_leaves_the_default_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="outdir", n=6, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--no-live"]) == 0
    state = tmp_path / "state" / "outdir"
    default = {p.name: p.stat().st_mtime_ns for p in state.glob("*.parquet")}
    assert default, list(state.iterdir())
    # the run's summary names each table's CSV beside its Parquet file (walkthrough 21 #13: the Parquet only)
    ran = capsys.readouterr().out
    assert f"export: {state / 'model_responses.parquet'} (and model_responses.csv)" in ran, ran

    out = tmp_path / "results" / "outdir"  # not there yet: made
    assert main(["export", str(cfg), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    written = sorted(p.name for p in out.glob("*.parquet"))
    assert written == sorted(default), (written, default)
    assert all(f"-> {out / name}" in printed for name in written), printed
    assert pl.read_parquet(out / "model_responses.parquet").height == 6
    assert pl.read_csv(out / "model_responses.csv").height == 6
    # the default exports are not rewritten
    assert {p.name: p.stat().st_mtime_ns for p in state.glob("*.parquet")} == default


def test_export_out_refuses_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="outfile", n=3, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    target = tmp_path / "taken.txt"
    target.write_text("mine", encoding="utf-8")
    assert main(["export", str(cfg), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert str(target) in err and "not a folder" in err, err
    assert target.read_text(encoding="utf-8") == "mine"


@pytest.fixture(scope="module")
def crawl_cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("crawl-out")
    return root, sandbox_crawl_config(root, "crawlo")


def test_crawl_export_out(crawl_cfg, capsys):
    root, cfg = crawl_cfg
    out = root / "tables"
    assert main(["export", cfg, "--out", str(out)]) == 0
    capsys.readouterr()
    assert {"sites", "images", "ladders", "crawl_decisions"} <= {p.stem for p in out.glob("*.parquet")}
    assert not (root / "state" / "crawlo" / "export").exists()  # the default folder was not written


def test_crawl_export_refuses_the_crawls_own_folder(crawl_cfg, capsys):
    root, cfg = crawl_cfg
    sd = root / "state" / "crawlo"
    own = {p: p.read_bytes() for p in sd.glob("*.csv")}
    assert own
    assert main(["export", cfg, "--out", str(sd / "." / "")]) == 2
    err = capsys.readouterr().err
    assert "crawl's own" in err and str(sd) in err, err
    assert {p: p.read_bytes() for p in sd.glob("*.csv")} == own
    assert not list(sd.glob("*.parquet"))
