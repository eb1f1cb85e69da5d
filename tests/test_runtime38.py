"""Runtime (session 38, runtime38).

Before (#1): a campaign database whose data lay in its ``-wal`` only (a run killed before a checkpoint) and whose
``-wal`` could not be used (damaged, or another database's) was taken as a campaign with a ledger: SQLite ignores
such a ``-wal``, the run's open made a new ledger at $0 over it, and the run resent the answered requests and said
"complete", the paid answers and their spend lost. Now the run is refused (exit 2) naming the file, and the
``-wal`` is left as it was.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from _model_harness import generic_campaign, model_table

from geoagent import constants as C
from geoagent.cli import main
from geoagent.config import load_config


def _wal_only_copy(db: Path) -> None:
    """Make ``db`` a crash snapshot whose data lies in its ``-wal`` only: a 1-page main file in WAL mode and every
    table and row in the ``-wal`` (copied while the writer is open, before any checkpoint)."""
    work = db.parent / "work"
    work.mkdir()
    new = work / db.name
    src = sqlite3.connect(db)
    dump = list(src.iterdump())
    src.close()
    conn = sqlite3.connect(new, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE IF NOT EXISTS _first(x)")  # the main file gets its header and WAL mode
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.executescript("\n".join(line for line in dump
                                  if line not in ("BEGIN TRANSACTION;", "COMMIT;") and "_first" not in line))
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(new, db)
    shutil.copyfile(f"{new}-wal", f"{db}-wal")  # the snapshot: the writer still open, nothing checkpointed
    conn.close()
    shutil.rmtree(work)


def test_a_damaged_wal_holding_the_ledger_refuses_the_run_and_keeps_the_file(tmp_path, capsys):
    cfgp = generic_campaign(tmp_path, name="wal38", n=6, models=model_table("sim"))
    assert main(["run", str(cfgp), "--no-live"]) == 0
    db = Path(load_config(cfgp).state_dir()) / C.CAMPAIGN_DB
    _wal_only_copy(db)
    wal = Path(f"{db}-wal")
    assert db.stat().st_size <= 8192 < wal.stat().st_size
    # intact: the ledger is read from the -wal, and the re-run resumes with no new call
    capsys.readouterr()
    assert main(["run", str(cfgp), "--no-live"]) == 0
    assert "this run: 0 new model calls" in capsys.readouterr().out
    _wal_only_copy(db)
    data = bytearray(wal.read_bytes())
    data[200:900] = b"\x5a" * 700  # the first frame's page: SQLite ignores the whole -wal
    wal.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["run", str(cfgp), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert f"its state {db}" in err and "-wal" in err and "restore the state folder" in err, err
    assert wal.read_bytes() == bytes(data)  # left as it was, for whoever restores it
