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
    assert main(["status", str(cfgp)]) == 2  # status says the same (review38 #6: it said "is empty")
    err = capsys.readouterr().err
    assert "holds no ledger SQLite can read: its data lay in campaign.sqlite-wal" in err, err
    assert wal.read_bytes() == bytes(data)


# --- #2: open reservations of a process of another boot, container or pid namespace -------------------------------

def _foreign_owner(db_path: Path, lease: str | None, host: str = "otherbox|boot-x/pidns:1") -> tuple[int, str]:
    """A ledger owner with one open reservation ($0.10), written as a process elsewhere would leave it (killed):
    its row names another host (pid namespace) and the lease owner id ``lease``; returns (reservation id, token)."""
    from geoagent.runtime.ledger import CampaignDB, Ledger

    db = CampaignDB(db_path)
    try:
        ledger = Ledger(db, cap_usd=1.0)
        res = ledger.reserve("req-1", 0.10)
        with db.transaction() as conn:
            conn.execute("UPDATE ledger_owners SET host = ?, pid = 999999, lease_owner = ? WHERE token = ?",
                         (host, lease, ledger.owner))
        return res.id, ledger.owner
    finally:
        db.close()


def _reopen(db_path: Path):
    from geoagent.runtime.ledger import CampaignDB, Ledger

    db = CampaignDB(db_path)
    return db, Ledger(db, cap_usd=1.0)


def test_a_foreign_owner_whose_lock_is_free_or_gone_is_recovered_and_one_holding_it_is_not(tmp_path):
    import fcntl

    state = tmp_path / "state"
    locks = state / "leases"
    locks.mkdir(parents=True)
    cases = {"freed": "a1a1a1a1a1a1", "held": "b2b2b2b2b2b2", "removed": "c3c3c3c3c3c3", "unrecorded": None}
    for name, lease in cases.items():
        db_path = state / f"{name}.sqlite"
        _foreign_owner(db_path, lease)
        if name in ("freed", "held"):
            (locks / f"{lease}.lock").write_bytes(b"1")
        holder = open(locks / f"{lease}.lock", "rb") if name == "held" else None
        try:
            if holder is not None:
                fcntl.flock(holder, fcntl.LOCK_EX)  # its process alive (another open file: flock conflicts)
            db, ledger = _reopen(db_path)
            try:
                summary = ledger.summary()
                got = (ledger.recovered, round(summary.unknown_usd, 9), round(summary.reserved_usd, 9))
            finally:
                db.close()
        finally:
            if holder is not None:
                holder.close()
        want = (0, 0.0, 0.1) if name in ("held", "unrecorded") else (1, 0.1, 0.0)
        assert got == want, (name, got)


def test_a_run_records_its_owner_lock_and_an_old_file_gains_the_column(tmp_path):
    import sqlite3

    from geoagent.engine import run_lock
    from geoagent.runtime.ledger import CampaignDB, Ledger
    from geoagent.runtime.sqlite_queue import lease_owner
    from geoagent.runtime.sqlite_wal import reading_only

    state = tmp_path / "state"
    with run_lock(state, owner=True):
        db, ledger = _reopen(state / "campaign.sqlite")
        try:
            (lease,) = db.read("SELECT lease_owner FROM ledger_owners WHERE token = ?", (ledger.owner,))[0]
        finally:
            db.close()
    assert lease == lease_owner()
    # a file written before the column: a look reads it as it is, a run adds the column
    old = tmp_path / "old.sqlite"
    db, ledger = _reopen(old)
    db.close()
    conn = sqlite3.connect(old)
    conn.execute("CREATE TABLE lo2 AS SELECT token, host, pid, proc_start, started_at FROM ledger_owners")
    conn.execute("DROP TABLE ledger_owners")
    conn.execute("ALTER TABLE lo2 RENAME TO ledger_owners")
    conn.commit()
    conn.close()
    with reading_only():
        db = CampaignDB(old)
        try:
            assert Ledger(db).gone_open() == (0.0, 0)
        finally:
            db.close()
    db, ledger = _reopen(old)
    try:
        assert "lease_owner" in {r[1] for r in db.read("PRAGMA table_info(ledger_owners)")}
        assert ledger.gone_open() == (0.0, 0)
    finally:
        db.close()
