"""Adversarial review s7b: dry run read-only, export schema types, idle hand-off, secrets, GeoVerify small-n."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from geoagent.cli import main

CONFIG = """
[campaign]
name = "{name}"
kind = "generic"
seed = 2
[budget]
cap_usd = {cap}
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 2.0
max_output_tokens = 100
[generic]
n_requests = {n}
"""


def _config(tmp: Path, name: str, *, cap: float = 1.0, n: int = 5) -> str:
    p = tmp / f"{name}.toml"
    p.write_text(CONFIG.format(name=name, cap=cap, n=n), encoding="utf-8")
    return str(p)


def _dump(db: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_dry_run_does_not_write_its_cap_into_the_campaign_ledger(isolated_roots, capsys):
    """A dry run with a changed [budget] cap_usd (to see what a bigger cap would buy) must not store that cap:
    the ledger of a campaign running in another process reads its cap from the file at every reservation, so a
    dry run that writes it raises (or lowers) the cap of the live run. The dry run is documented read-only."""
    cfg = _config(isolated_roots, "capped", cap=1.0)
    assert main(["run", cfg, "--no-live"]) == 0
    db = isolated_roots / "state" / "capped" / "campaign.sqlite"
    before = _dump(db)
    capsys.readouterr()
    bigger = _config(isolated_roots, "capped", cap=500.0, n=8)
    assert main(["run", bigger, "--simulate", "--no-live"]) == 0
    assert "cap $500.0000" in capsys.readouterr().out  # the dry run did use the new cap for its estimate
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cap_nusd = conn.execute("SELECT cap_nusd FROM ledger_totals WHERE id = 1").fetchone()[0]
    finally:
        conn.close()
    assert cap_nusd == 1_000_000_000  # $1 in nano-USD, as the run stored it
    assert _dump(db) == before  # nothing at all written (no owner row, no cap)


def _sites_csv(path: Path, sitelinks: list[str], sv: list[str]) -> None:
    from geoagent.crawl.sampler import SITES_COLUMNS

    lines = [",".join(SITES_COLUMNS)]
    for i, (sl, p) in enumerate(zip(sitelinks, sv)):
        row = {c: "" for c in SITES_COLUMNS}
        row.update(site=f"s{i}", city="Paris", country="FR", continent="Europe", landmark=f"L{i}", qid=f"Q{i + 1}",
                   lat="48.85", lon="2.35", sitelinks=sl, sv_perspective=p, selection_method="top")
        lines.append(",".join(row[c] for c in SITES_COLUMNS))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_old_crawl_sites_export_keeps_declared_types(tmp_path):
    """A crawl from before session 7 wrote sites.csv sitelinks as '58.0' and may have no sv_perspective value at
    all. Its export must still have the declared types (Int64 counts), as a new crawl's has, so the two exports
    concatenate (README: Parquet types never depend on the data); the fallback read by inference turned the
    counts into Float64 and an all-empty declared column into String."""
    import polars as pl

    from geoagent.crawl.export import export_crawl_tables

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    _sites_csv(old / "sites.csv", ["58.0", "7.0"], ["", ""])
    _sites_csv(new / "sites.csv", ["58", "7"], ["3", ""])
    export_crawl_tables(old)
    export_crawl_tables(new)
    a = pl.read_parquet(old / "export" / "sites.parquet")
    b = pl.read_parquet(new / "export" / "sites.parquet")
    assert a.schema["sitelinks"] == pl.Int64 and a["sitelinks"].to_list() == [58, 7]
    assert a.schema["sv_perspective"] == pl.Int64 and a["sv_perspective"].to_list() == [None, None]
    assert a.schema == b.schema
    assert pl.concat([a, b]).height == 4


def test_old_crawl_fractional_count_is_kept_not_truncated(tmp_path):
    """A value that really does not fit the declared Int64 (58.5, hand-edited) is kept as it is, not cut to 58."""
    import polars as pl

    from geoagent.crawl.export import export_crawl_tables

    _sites_csv(tmp_path / "sites.csv", ["58.5", "7.0"], ["", "2"])
    export_crawl_tables(tmp_path)
    a = pl.read_parquet(tmp_path / "export" / "sites.parquet")
    assert a["sitelinks"].to_list() == [58.5, 7.0]
    assert a.schema["sv_perspective"] == pl.Int64 and a["sv_perspective"].to_list() == [None, 2]
