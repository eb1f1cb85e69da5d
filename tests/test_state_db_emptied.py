"""An emptied or swapped ``campaign.sqlite`` is refused like a missing one (adversarial review 25, item 1).

``: > state/g5/campaign.sqlite`` after a budget stop let the next run open a new ledger at $0 and spend the cap
again (the fake billed $0.0184 against a $0.01 cap), with the first answers' results gone; a deleted file was
already refused. Now a file of 0 bytes, or a SQLite file without the ledger, is refused the same way while the
queues hold work, and nothing is written to it."""

from __future__ import annotations

import sqlite3

import pytest

from _model_harness import generic_campaign, model_table
from geoagent.cli import main


def _ran(tmp_path, monkeypatch, name: str, n: int):
    """A generic campaign of ``n`` calls run to the end from ``tmp_path``; ``(config, its campaign.sqlite)``, the
    database closed whole (no ``-wal`` or ``-shm`` beside it)."""
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name=name, n=n, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    db = tmp_path / "state" / name / "campaign.sqlite"
    for side in ("-wal", "-shm"):
        (db.parent / (db.name + side)).unlink(missing_ok=True)
    return cfg, db


@pytest.mark.parametrize("damage", ["emptied", "other sqlite file"])
def test_a_blank_state_database_is_refused_while_the_queues_hold_work(tmp_path, monkeypatch, capsys, damage):
    cfg, db = _ran(tmp_path, monkeypatch, "blank", 6)
    if damage == "emptied":
        db.write_bytes(b"")
    else:
        db.unlink()
        with sqlite3.connect(db) as conn:  # a SQLite file, but not a campaign's
            conn.execute("CREATE TABLE notes(x)")
        conn.close()
    before = db.read_bytes()
    capsys.readouterr()
    assert main(["run", str(cfg), "--no-live"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "hold work from an earlier run" in err and "is empty (no ledger in it" in err, err
    assert "paid again" in err, err
    # runtime36 #4: the queues' recorded state folder is this run's own: no "point it at" the folder it uses
    assert (tmp_path / "queues" / "blank" / "state_root.json").is_file() and "point it at" not in err, err
    assert db.read_bytes() == before  # nothing written to it


def test_a_state_database_damaged_inside_gives_one_error_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Adversarial review 25, item 3: a ``campaign.sqlite`` whose header is whole but whose pages are overwritten
    opened, and the ledger's schema script met the damage: ``run`` and ``export`` printed a traceback
    (``sqlite3.DatabaseError: database disk image is malformed``) and exited 1. Now one ``error:`` line naming the
    file, exit 2, as ``status`` and a truncated file already gave."""
    import os

    cfg, db = _ran(tmp_path, monkeypatch, "dmg", 60)
    size = db.stat().st_size
    assert size > 8192, size
    with open(db, "r+b") as fh:  # pages after the header overwritten (the header and schema page kept)
        fh.seek(4096)
        fh.write(os.urandom(min(size - 4096, 64 * 1024)))
    for command in (["run", str(cfg), "--no-live"], ["export", str(cfg)]):
        capsys.readouterr()
        code = main(command)
        err = capsys.readouterr().err
        assert code == 2, (command, code, err)
        assert "Traceback" not in err and f"{db}: cannot be read as a SQLite database" in err, (command, err)


def test_the_blank_check_leaves_a_wal_beside_an_emptied_file_alone(tmp_path):
    """Review rev25 (8): opening a 0-byte ``campaign.sqlite`` beside its ``-wal`` (which may hold every committed
    transaction) made SQLite delete the WAL; the check now judges such a file blank without opening it."""
    import subprocess
    import sys

    from geoagent.engine import _blank_state_db

    db = tmp_path / "campaign.sqlite"
    subprocess.run([sys.executable, "-c", (  # a process that wrote in WAL mode and died before a checkpoint
        "import os, sqlite3\n"
        f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "c.execute('PRAGMA journal_mode=WAL')\n"
        "c.execute('CREATE TABLE ledger_totals(id)')\n"
        "c.execute('INSERT INTO ledger_totals VALUES (1)')\n"
        "os._exit(0)\n")], check=True)
    wal = tmp_path / "campaign.sqlite-wal"
    assert wal.stat().st_size > 0
    db.write_bytes(b"")
    before = wal.read_bytes()
    assert _blank_state_db(db) is True
    assert wal.read_bytes() == before


def test_status_on_an_emptied_state_database_or_queue_file(tmp_path, monkeypatch, capsys):
    """runtime36 #2: ``status`` ended in a traceback (exit 1) on a 0-byte ``campaign.sqlite`` (``no such table:
    ledger_totals``) and on a 0-byte queue file (``attempt to write a readonly database``). Now the emptied
    database is the run's refusal (one ``error:`` line, exit 2) and an emptied queue file counts no task."""
    cfg, db = _ran(tmp_path, monkeypatch, "stblank", 6)
    qfile = tmp_path / "queues" / "stblank" / "requests.sqlite"
    assert qfile.is_file()
    for side in ("-wal", "-shm"):
        (qfile.parent / (qfile.name + side)).unlink(missing_ok=True)
    qfile.write_bytes(b"")
    capsys.readouterr()
    assert main(["status", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "Traceback" not in out and "requests" in out
    # review36 #2: never "complete" beside an emptied queue file (what it held is unknown)
    assert "campaign complete" not in out and "requests: its queue file is empty (0 bytes" in out, out
    assert qfile.read_bytes() == b""  # a look writes nothing
    db.write_bytes(b"")
    assert main(["status", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is empty (no ledger in it" in err and "Traceback" not in err, err
    assert db.read_bytes() == b""
