"""A ``campaign.sqlite`` damaged inside (a data page of its stored answers overwritten: a disk error, a bad copy)
still opens, since its header and schema are whole; the damage shows only when a query reaches the page. ``status``
and ``export`` then ended with a ``sqlite3.DatabaseError: database disk image is malformed`` traceback (exit 1),
and so did ``run`` at its end, after all its work, when it exported. Now a read that meets the damage names the
file and what to do in one ``error:`` line (exit 2), as a file damaged at its start already did when opened
(:func:`geoagent.runtime.sqlite_wal.damaged_file_error`). The same for a queue file damaged inside (``status``
read its task keys there)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from _sim_campaign import run_cli, sim_generic_config

REPO = Path(__file__).resolve().parents[1]


def _config(tmp: Path) -> Path:
    return sim_generic_config(tmp, "dmg", concurrency=8, n_requests=200)


_cli = run_cli


@pytest.mark.parametrize("where, table, commands", [
    ("state/dmg/campaign.sqlite", "responses", ("status", "export")),
    ("queues/dmg/requests.sqlite", "tasks", ("status",)),
])
def test_a_damaged_page_of_stored_answers_is_one_clear_error(tmp_path, where, table, commands):
    cfg = _config(tmp_path)
    first = _cli("run", str(cfg), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    db = tmp_path / where
    with sqlite3.connect(db) as conn:
        try:
            pages = conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'"
                                 " ORDER BY pageno", (table,)).fetchall()
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table to find a page of the stored answers")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    page = pages[len(pages) // 2][0]
    with open(db, "r+b") as f:  # one leaf page of the stored answers overwritten
        f.seek((page - 1) * page_size)
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    for command in commands:
        out = _cli(command, str(cfg))
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        assert out.returncode == 2, (command, out.returncode, out.stderr[-2000:])
        errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and str(db) in errors[0] and "damaged" in errors[0], out.stderr
        if command == "status":  # runtime36 #5: a read-only look was told it "may have written" to the file
            assert "may have written" not in errors[0] and "nothing was written to it" in errors[0], errors[0]


def test_run_that_meets_the_damage_after_writing_does_not_say_nothing_was_written(tmp_path):
    """Before (session 15 review): the error line said "nothing was written to it" also when ``run`` met the
    damage late, after it had stored this run's answers in the same file (here: 100 more requests answered and
    stored, then the run's export reads the damaged page). Now a damage met in use says what is true: the step
    that met it wrote nothing, earlier steps of the run may have written to the file."""
    cfg = _config(tmp_path)
    first = _cli("run", str(cfg), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    db = tmp_path / "state/dmg/campaign.sqlite"
    with sqlite3.connect(db) as conn:
        try:
            pages = conn.execute("SELECT pageno FROM dbstat WHERE name = 'responses' AND pagetype = 'leaf'"
                                 " ORDER BY pageno").fetchall()
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table to find a page of the stored answers")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    with open(db, "r+b") as f:  # the first leaf page of the stored answers overwritten
        f.seek((pages[0][0] - 1) * page_size)
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    cfg.write_text(cfg.read_text().replace("n_requests = 200", "n_requests = 300"))
    size0 = os.path.getsize(db) + (os.path.getsize(str(db) + "-wal") if os.path.exists(str(db) + "-wal") else 0)
    out = _cli("run", str(cfg), "--no-live")
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(db) in errors[0] and "damaged" in errors[0], out.stderr[-3000:]
    size1 = os.path.getsize(db) + (os.path.getsize(str(db) + "-wal") if os.path.exists(str(db) + "-wal") else 0)
    assert size1 > size0  # this run did write to the file before it met the damage
    # before: "...; nothing was written to it. Restore it ..."
    assert "nothing was written to it" not in errors[0], errors[0]
    assert "earlier steps of this run may have written to it" in errors[0], errors[0]
