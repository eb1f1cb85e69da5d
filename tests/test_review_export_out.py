"""Review of ``run.py export CONFIG --out DIR`` (2f98c8d): folders it must not write to, and a DIR it cannot make.

The refusal covered only the crawl's *own* output folder. A crawl exported into a folder holding another crawl's
tables, or a release folder (``sites.csv``, ``city_pool.csv``: what ``release_dir`` reads), replaced them with
the export's CSVs (another schema, a ``simulated`` column, the sandbox's sites). Any campaign exported into another
campaign's state folder replaced that campaign's exports (``model_responses.*``, its ``export_note.txt``) with its
own. And a DIR below a file stopped with an error blaming ``[paths]`` in the config.

Real runs through the CLI (the simulated provider of a generic campaign; the sandbox crawl).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from _sandbox_crawl import sandbox_crawl_config


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def crawl_cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("crawl-out-review")
    return root, sandbox_crawl_config(root, "crawlo")


def test_crawl_export_refuses_a_release_folder(crawl_cfg, capsys):
    """A folder of a release's (or a crawl's) own tables: sites.csv and city_pool.csv with no Parquet beside them."""
    root, cfg = crawl_cfg
    rel = root / "release"
    rel.mkdir()
    (rel / "sites.csv").write_text("site,city,lat,lon\nparis_eiffel,Paris,48.85,2.29\n", encoding="utf-8")
    (rel / "city_pool.csv").write_text("city,lat,lon\nParis,48.85,2.35\n", encoding="utf-8")
    before = _snapshot(rel)
    assert main(["export", cfg, "--out", str(rel)]) == 2
    err = capsys.readouterr().err
    assert str(rel) in err and "sites.csv" in err and "nothing was written" in err, err
    assert _snapshot(rel) == before


def test_crawl_export_refuses_another_crawls_folder(crawl_cfg, capsys):
    root, cfg = crawl_cfg
    other = root / "state" / "other-crawl"
    shutil.copytree(root / "state" / "crawlo", other, ignore=shutil.ignore_patterns("export"))
    before = _snapshot(other)
    assert main(["export", cfg, "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert str(other) in err and "nothing was written" in err, err
    assert _snapshot(other) == before


def test_crawl_export_out_into_an_earlier_export_is_fine(crawl_cfg, capsys):
    """Exporting again into a folder of an earlier export (CSV and Parquet side by side) replaces it, as documented."""
    root, cfg = crawl_cfg
    out = root / "tables-again"
    assert main(["export", cfg, "--out", str(out)]) == 0
    assert main(["export", cfg, "--out", str(out)]) == 0
    capsys.readouterr()
    assert (out / "sites.parquet").is_file() and (out / "sites.csv").is_file()


def test_export_refuses_another_campaigns_state_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    a = generic_campaign(tmp_path, name="camp-a", n=3, models=model_table("m"), cap_usd=1.0)
    b = generic_campaign(tmp_path, name="camp-b", n=5, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(a), "--no-live"]) == 0
    assert main(["run", str(b), "--no-live"]) == 0
    capsys.readouterr()
    b_state = tmp_path / "state" / "camp-b"
    before = _snapshot(b_state)
    assert main(["export", str(a), "--out", str(b_state)]) == 2
    err = capsys.readouterr().err
    assert str(b_state) in err and "another campaign" in err and "nothing was written" in err, err
    assert _snapshot(b_state) == before
    # its own state folder stays allowed (the default place)
    assert main(["export", str(a), "--out", str(tmp_path / "state" / "camp-a")]) == 0


def test_export_out_below_a_file_names_the_option(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="below", n=3, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    (tmp_path / "taken.txt").write_text("mine", encoding="utf-8")
    target = tmp_path / "taken.txt" / "sub"
    assert main(["export", str(cfg), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "taken.txt" in err and "[paths]" not in err, err
    assert (tmp_path / "taken.txt").read_text(encoding="utf-8") == "mine"


def test_two_campaigns_gathered_in_one_out_folder_keep_their_files(tmp_path, monkeypatch, capsys):
    """What ``--out`` was made for (gathering several campaigns' tables in one folder): every campaign kind writes
    ``model_responses.parquet/.csv`` and ``export_note.txt``, so the second export replaces the first's responses
    and note with no word (exit 0). Now refused (exit 2), by the campaign each Parquet file's metadata names."""
    monkeypatch.chdir(tmp_path)
    a = generic_campaign(tmp_path, name="gather-a", n=3, models=model_table("m"), cap_usd=1.0)
    b = generic_campaign(tmp_path, name="gather-b", n=5, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(a), "--no-live"]) == 0
    assert main(["run", str(b), "--no-live"]) == 0
    out = tmp_path / "all"
    assert main(["export", str(a), "--out", str(out)]) == 0
    first = (out / "model_responses.csv").read_bytes()
    capsys.readouterr()
    rc = main(["export", str(b), "--out", str(out)])
    said = capsys.readouterr()
    # refused, naming the file and whose it is; the first campaign's files are as they were
    assert rc == 2 and "model_responses.parquet, campaign 'gather-a''s export" in said.err, said
    assert (out / "model_responses.csv").read_bytes() == first
    # the same campaign exported there again replaces its own files
    assert main(["export", str(a), "--out", str(out)]) == 0
    # a Parquet file of such a name that no export of this campaign wrote is not replaced either
    foreign = tmp_path / "mine"
    foreign.mkdir()
    pl.DataFrame({"x": [1]}).write_parquet(foreign / "results.parquet")
    capsys.readouterr()
    assert main(["export", str(b), "--out", str(foreign)]) == 2
    assert "results.parquet, a file no export of this campaign wrote" in capsys.readouterr().err


def test_only_the_tables_this_export_writes_are_named(tmp_path, monkeypatch, capsys):
    """Walk26 D2: a GeoHint export into a folder with a GeoVerify campaign's export was refused naming
    geoverify_scored.parquet, a file a GeoHint export never writes, instead of the real clash (model_responses).
    Now only the tables this campaign's export writes count: another kind's scored table alone is no clash, and
    the refusal names the file that would be replaced."""
    monkeypatch.chdir(tmp_path)
    b = generic_campaign(tmp_path, name="gather-c", n=3, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(b), "--no-live"]) == 0
    other = tmp_path / "other-kind"
    other.mkdir()
    pl.DataFrame({"x": [1]}).write_parquet(other / "geoverify_scored.parquet")
    before = (other / "geoverify_scored.parquet").read_bytes()
    capsys.readouterr()
    assert main(["export", str(b), "--out", str(other)]) == 0, capsys.readouterr().err
    assert (other / "geoverify_scored.parquet").read_bytes() == before  # not this export's table: left alone
    clash = tmp_path / "clash"
    clash.mkdir()
    for name in ("geoverify_scored", "model_responses"):
        pl.DataFrame({"x": [1]}).write_parquet(clash / f"{name}.parquet")
    capsys.readouterr()
    assert main(["export", str(b), "--out", str(clash)]) == 2
    err = capsys.readouterr().err
    assert "it holds model_responses.parquet, a file no export of this campaign wrote" in err, err
    assert "geoverify_scored" not in err, err


def test_each_kinds_exported_tables_cover_what_its_export_writes(crawl_cfg, tmp_path, monkeypatch, capsys):
    """The clash check reads the names from the campaign kind (:meth:`CampaignKind.exported_tables`), not from a
    table of its own in the CLI: every Parquet file a real export of a kind writes is among them (the generic
    campaign's and the sandbox crawl's; GeoVerify's and GeoHint's scored tables are their ``results_tables``)."""
    from geoagent.engine import load_kind
    from geoagent.geohint.stages import SCORED_TABLE as GEOHINT_SCORED
    from geoagent.geoverify.stages import SCORED_TABLE as GEOVERIFY_SCORED

    root, cfg = crawl_cfg
    out = root / "kind-tables"
    assert main(["export", cfg, "--out", str(out)]) == 0
    written = {p.stem for p in out.glob("*.parquet")}
    assert "sites" in written and "spend" in written, written
    assert written <= load_kind("crawl").exported_tables(), written - load_kind("crawl").exported_tables()

    monkeypatch.chdir(tmp_path)
    g = generic_campaign(tmp_path, name="kind-tables", n=2, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(g), "--no-live"]) == 0
    gout = tmp_path / "generic-out"
    assert main(["export", str(g), "--out", str(gout)]) == 0
    written = {p.stem for p in gout.glob("*.parquet")}
    assert {"results", "model_responses", "spend"} <= written <= load_kind("generic").exported_tables(), written
    assert GEOVERIFY_SCORED in load_kind("geoverify").exported_tables()
    assert GEOHINT_SCORED in load_kind("geohint").exported_tables()
    assert GEOVERIFY_SCORED not in load_kind("geohint").exported_tables()
