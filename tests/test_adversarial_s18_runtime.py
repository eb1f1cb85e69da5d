"""Adversarial review, session 18: the runtime changes of the session (the SQLite queue's clock mark started at
the newest time a migrated file records). Cases found by trying to break them; each failed before its fix."""

from __future__ import annotations

import sqlite3

from geoagent.runtime.sqlite_queue import SQLiteQueue, queue_path

from test_queue_sqlite_clock_step import T0, FakeClock, _v2_file


def test_a_non_numeric_time_in_a_version_2_file_does_not_stop_its_migration(tmp_path):
    """A version-2 file with a time that is not a number (a ``created_at`` of 'garbage', a blob, a done task's
    ``not_before`` of 'abc': a repair by hand or another tool; REAL affinity keeps such text as text). SQLite's
    ``max()`` ranks text and blobs above every number, so the start of the mark (session 18) read 'garbage' as the
    newest time and every writer's open died with a bare ``ValueError: could not convert string to float``, naming
    no file; before session 18 the file migrated and worked. Such a value is no reading of the clock: it is
    skipped, and the mark starts at the wall clock (the newest numeric time, T0, is older)."""
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executemany("INSERT INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, 2, ?, ?)",
                     [("text", b"{}", T0, "garbage"), ("blob", b"{}", T0, b"\x00"), ("nb", b"{}", "abc", T0),
                      ("inf", b"{}", T0, float("inf"))])
    conn.execute("UPDATE counts SET n = n + 4 WHERE state = 2")
    conn.close()
    queue = SQLiteQueue(path, clock=FakeClock(T0 + 10.0))  # before the fix: ValueError
    try:
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("SELECT n FROM counts WHERE state = -1").fetchone()[0] == T0 + 10.0
        finally:
            conn.close()
        assert [t.key for t in queue.lease_sync(10, 60)] == ["r1", "r2"]
    finally:
        queue.close_sync()
