"""Switching a SQLite connection to WAL mode safely when several processes open a new file at once.

``PRAGMA journal_mode=WAL`` on a file still in rollback mode needs a moment of exclusive access. When
several processes open a new file at the same instant (the processes of one campaign started together,
``run.py run --stages``), SQLite can answer ``SQLITE_BUSY`` ("database is locked") for it at once,
without calling the busy handler, so ``busy_timeout`` alone does not help. Every opener of a shared
database file in this project goes through :func:`enable_wal`, which retries until a deadline.
"""

from __future__ import annotations

import sqlite3
import time


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_BUSY`` ("database is locked"), by error code when available."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == sqlite3.SQLITE_BUSY
    return "locked" in str(exc) or "busy" in str(exc)


def enable_wal(conn: sqlite3.Connection, *, timeout_s: float, retry_s: float = 0.01) -> str:
    """Run ``PRAGMA journal_mode=WAL`` on ``conn``, retrying while the file is busy; return the mode.

    Parameters
    ----------
    conn : sqlite3.Connection
        An open connection (autocommit: ``isolation_level=None``).
    timeout_s : float
        Give up after this many seconds of ``SQLITE_BUSY`` (seconds; use the connection's busy timeout).
    retry_s : float
        Sleep between attempts (seconds).

    Returns
    -------
    str
        The journal mode SQLite reports afterwards (``"wal"`` unless the file system cannot do WAL);
        the caller decides whether anything else is an error.

    Raises
    ------
    sqlite3.OperationalError
        Any error other than busy, or busy for longer than ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(retry_s)
