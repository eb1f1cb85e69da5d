"""A full disk under the SQLite host-share board is reported as such, not as "cannot rollback".

Before (session 15 review): each board transaction (``_leave_db``, ``_tick_db``, ``_release_db``, ``_turn_db`` in
``geoagent/runtime/hostshare.py``) ran ``ROLLBACK`` in its ``except``; on SQLITE_FULL SQLite has already rolled
the transaction back, so that ROLLBACK raised ``cannot rollback - no transaction is active``, which replaced the
real error in what was raised and in the run's warning. Now each rollback runs only while a transaction is open.
The full disk is made deterministic with ``PRAGMA max_page_count`` (the file may not grow) and a host key too long
for the pages already there (a real ``hosts.sqlite``, no mocks).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import pytest

from geoagent.runtime.hostshare import HostShare
from geoagent.runtime.http import HttpClient

LONG_KEY = "http://" + "h" * 200_000  # needs overflow pages the capped file cannot add


def _full_board(tmp_path) -> HostShare:
    share = HostShare(tmp_path / "hosts.sqlite", http=None)
    share._open_db()
    n = share._conn.execute("PRAGMA page_count").fetchone()[0]
    share._conn.execute(f"PRAGMA max_page_count={n}")
    return share


@pytest.mark.parametrize("call", [
    lambda s: s._leave_db([1], {}, [(LONG_KEY, "tok", 1.0)]),
    lambda s: s._tick_db({"releases": [(LONG_KEY, "tok", 1.0)], "pauses": {}, "hosts": []}),
    lambda s: s._release_db([(LONG_KEY, "tok", 1.0)]),
    lambda s: s._turn_db(LONG_KEY, "tok", 1, 0.0),
], ids=["leave", "tick", "release", "turn"])
def test_each_board_transaction_raises_the_full_disk_error(tmp_path, call):
    share = _full_board(tmp_path)
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            call(share)
        # before: "cannot rollback - no transaction is active"
        assert "full" in str(info.value), info.value
        assert not share._conn.in_transaction
        share._release_db([("http://x", "tok2", None)])  # the board is usable again for what fits
    finally:
        share._close_db()


def test_the_warning_at_close_names_the_full_disk(tmp_path, caplog):
    async def go() -> None:
        async with HttpClient() as http:
            share = HostShare(tmp_path / "hosts.sqlite", http)
            async with share:
                await share._run(lambda: share._conn.execute(
                    "PRAGMA max_page_count=" + str(share._conn.execute("PRAGMA page_count").fetchone()[0])))
                share.pending_releases.append((LONG_KEY, "tok", 1.0))  # a release still to write at close

    with caplog.at_level(logging.WARNING, logger="geoagent.runtime.hostshare"):
        asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if "could not mark rows gone" in r.getMessage()]
    # before: "...: cannot rollback - no transaction is active"
    assert len(lines) == 1 and "database or disk is full" in lines[0] and "cannot rollback" not in lines[0], lines


def test_a_campaign_db_transaction_on_a_full_disk_raises_the_full_disk_error(tmp_path):
    """The same in the campaign database's transactions (``geoagent/runtime/ledger.py``: ledger and response store
    share them). Before: ``cannot rollback - no transaction is active``."""
    from geoagent.runtime.ledger import CampaignDB

    db = CampaignDB(tmp_path / "campaign.sqlite")
    try:
        db.executescript("CREATE TABLE t(x)")
        n = db.read("PRAGMA page_count")[0][0]
        db.read(f"PRAGMA max_page_count={n}")
        with pytest.raises(sqlite3.OperationalError) as info:
            with db.transaction() as c:
                c.execute("INSERT INTO t VALUES (?)", ("x" * 200_000,))
        assert "full" in str(info.value), info.value
        with db.transaction() as c:  # usable again for what fits
            c.execute("INSERT INTO t VALUES (1)")
        assert db.read("SELECT COUNT(*) FROM t") == [(1,)]
    finally:
        db.close()
