"""``run.py export`` of a crawl campaign writes the crawl's tables as Parquet and CSV (not an empty
responses table): city pool, sites, images, image audit, candidate referenceability, the per-site ladders as
one table, and the audit logs, under ``state/<campaign>/export/``; the crawl's own files stay as they were."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from geoagent.cli import main
from geoagent.crawl.demo import run_sandbox_crawl

CAMPAIGN = "crawlx"


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    root = tmp_path_factory.mktemp("crawl")
    asyncio.run(run_sandbox_crawl(root / "run"))
    state = root / "run" / "state"  # the crawl's output folder; the config below names it state/<campaign>
    (root / "state").mkdir()
    state.rename(root / "state" / CAMPAIGN)
    cfg = root / "crawl.toml"
    cfg.write_text(f'[campaign]\nname = "{CAMPAIGN}"\nkind = "crawl"\n[budget]\ncap_usd = 1.0\n'
                   f'[paths]\nstate = "{root / "state"}"\nqueues = "{root / "queues"}"\n'
                   '[crawl]\ncontact = "mailto:test@example.org"\n', encoding="utf-8")
    return root, root / "state" / CAMPAIGN, str(cfg)


def _same(value, text: str) -> bool:
    """A typed exported cell equals the source CSV's text cell."""
    if value is None:
        return text == ""
    if isinstance(value, bool):
        return text.lower() == str(value).lower()
    if isinstance(value, float):
        return float(text) == pytest.approx(value)
    return str(value) == text


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_export_writes_the_crawl_tables(crawled, capsys):
    root, sd, cfg = crawled
    own = {p: p.read_bytes() for p in sd.rglob("*") if p.is_file() and p.suffix in (".csv", ".jsonl")}
    assert main(["export", cfg]) == 0
    printed = capsys.readouterr().out
    out = sd / "export"
    want = ["city_pool", "sites", "images", "image_audit", "candidate_referenceability", "ladders",
            "audit_decisions", "audit_sensitive", "audit_review_queue"]
    assert sorted(p.stem for p in out.glob("*.parquet")) == sorted(want)
    assert all(f"{t}: " in printed for t in want) and "model_responses" not in printed
    for p, data in own.items():  # the crawl's own tables are only read
        assert p.read_bytes() == data, p

    for name in ("city_pool", "sites", "images", "image_audit", "candidate_referenceability"):
        src = _csv_rows(sd / f"{name}.csv")
        df = pl.read_parquet(out / f"{name}.parquet")
        assert df.columns == list(src[0]) and df.height == len(src), name
        for got, want in zip(df.iter_rows(named=True), src):  # every cell, against the crawl's own CSV text
            assert all(_same(got[c], want[c]) for c in want), (name, got, want)
        assert_frame_equal(pl.read_csv(out / f"{name}.csv", infer_schema_length=None), df, check_dtypes=False)
    sites = pl.read_parquet(out / "sites.parquet")
    src_sites = _csv_rows(sd / "sites.csv")
    assert sites["site"].to_list() == [r["site"] for r in src_sites]
    assert sites["lat"].to_list() == pytest.approx([float(r["lat"]) for r in src_sites])

    ladders = pl.read_parquet(out / "ladders.parquet")
    files = sorted((sd / "ladders").glob("*.csv"))
    expect = [(f.stem.split("_ladder_")[0], r["qid"], float(r["dist_km"])) for f in files for r in _csv_rows(f)]
    assert list(zip(ladders["site"], ladders["qid"], ladders["dist_km"])) == expect
    assert ladders.columns[:2] == ["site", "ladder"]

    for name in ("audit_decisions", "audit_sensitive", "audit_review_queue"):
        lines = [json.loads(x) for x in (sd / f"{name}.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
        df = pl.read_parquet(out / f"{name}.parquet")
        assert df.height == len(lines) and df["qid"].to_list() == [r["qid"] for r in lines], name
        assert pl.read_csv(out / f"{name}.csv").height == len(lines)


def test_bad_jsonl_line_is_named(crawled, tmp_path):
    from geoagent.crawl.export import export_crawl_tables

    (tmp_path / "audit_decisions.jsonl").write_text('{"qid": "Q1"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"audit_decisions.jsonl:2: expected a JSON object"):
        export_crawl_tables(tmp_path)
