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
