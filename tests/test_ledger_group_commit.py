"""Group commit of the campaign database (``CampaignDB``): jobs queued while the database thread is busy
run in one transaction, each in its own savepoint.

Checked against the database itself: a job that raises is undone alone (its partial write is absent)
and gets its own exception, every other job's write is present and its future holds its own result,
and nothing is visible to a second connection before the futures resolve.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from geoagent.runtime.ledger import CampaignDB


def _insert(db: CampaignDB, i: int, fail: bool = False) -> int:
    with db.transaction() as conn:
        conn.execute("INSERT INTO t (i) VALUES (?)", (i,))
        if fail:
            raise ValueError(f"job {i} fails after writing")
    return i * 10


def test_group_commit_isolates_a_failing_job(tmp_path):
    db = CampaignDB(tmp_path / "c.sqlite")
    db.executescript("CREATE TABLE t (i INTEGER PRIMARY KEY)")
    gate = threading.Event()
    seen_in_group: list[bool] = []

    def blocker() -> None:
        gate.wait(10)

    first = db.submit_future(blocker)  # keeps the database thread busy while the others queue up
    futures = []
    for i in range(20):
        def job(i=i):
            seen_in_group.append(db._conn.in_transaction)  # inside the group's transaction already
            return _insert(db, i, fail=(i == 7))
        futures.append(db.submit_future(job))
    time.sleep(0.05)
    # nothing of the queued jobs is visible yet
    other = sqlite3.connect(tmp_path / "c.sqlite")
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0
    gate.set()
    first.result(10)
    results = {}
    for i, f in enumerate(futures):
        if i == 7:
            with pytest.raises(ValueError, match="job 7 fails"):
                f.result(10)
        else:
            results[i] = f.result(10)
    assert results == {i: i * 10 for i in range(20) if i != 7}
    rows = sorted(r[0] for r in other.execute("SELECT i FROM t"))
    assert rows == [i for i in range(20) if i != 7]
    assert all(seen_in_group) and len(seen_in_group) == 20  # they ran as one group
    other.close()
    db.close()


def test_cancelled_job_does_not_run(tmp_path):
    db = CampaignDB(tmp_path / "c.sqlite")
    db.executescript("CREATE TABLE t (i INTEGER PRIMARY KEY)")
    gate = threading.Event()
    first = db.submit_future(lambda: gate.wait(10))
    doomed = db.submit_future(lambda: _insert(db, 1))
    kept = db.submit_future(lambda: _insert(db, 2))
    assert doomed.cancel()
    gate.set()
    first.result(10)
    assert kept.result(10) == 20
    assert [r[0] for r in db.read("SELECT i FROM t")] == [2]
    db.close()
