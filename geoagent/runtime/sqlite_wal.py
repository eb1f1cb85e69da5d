"""Switching a SQLite connection to WAL mode safely when several processes open a new file at once.

``PRAGMA journal_mode=WAL`` on a file still in rollback mode needs a moment of exclusive access. When
several processes open a new file at the same instant (the processes of one campaign started together,
``run.py run --stages``), SQLite can answer ``SQLITE_BUSY`` ("database is locked") for it at once,
without calling the busy handler, so ``busy_timeout`` alone does not help. Every opener of a shared
database file in this project goes through :func:`enable_wal`, which retries until a deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator


class DatabaseFileError(ValueError):
    """A file where this project keeps a SQLite database is not one, or is damaged (``SQLITE_NOTADB``,
    ``SQLITE_CORRUPT``). The message names the file and says what was written: nothing when the damage was met
    while opening it, else nothing by the step that met it (:func:`damaged_file_error`). A ``ValueError``: the CLI
    prints it as one ``error:`` line (exit 2) instead of a traceback."""


#: SQLite primary result codes that mean "this file is not a (sound) database"
_DAMAGED_CODES = (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT)
#: SQLite primary result codes of a file (or its ``-wal`` / ``-shm`` companions) that cannot be opened or written
_ACCESS_CODES = (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM)


class DatabaseAccessError(OSError):
    """A SQLite file of the campaign cannot be opened for writing because its folder or the file is read-only
    (``errno.EROFS``: a read-only file system; ``errno.EACCES``: this user may not write there); SQLite says
    ``unable to open database file`` (``SQLITE_CANTOPEN``: in WAL mode even a reader must make the ``-shm`` file
    beside it), ``attempt to write a readonly database`` or ``access permission denied``. The message names the
    file and why; nothing was written to it. An ``OSError`` of those errno values: the CLI prints it as one
    ``error:`` line with the ``[paths]`` hint (exit 2) instead of a traceback."""

    def __str__(self) -> str:
        return str(self.strerror)


def _not_writable(path: Path) -> tuple[int, str] | None:
    """``(errno, why)`` when ``path`` or its folder cannot be written here (a read-only file system, or no write
    permission for this user), else None."""
    folder = path.parent
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return errno.EROFS, f"its folder {folder} is on a read-only file system"
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return errno.EACCES, f"this user may not write in its folder {folder}"
    for companion in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if companion.exists() and not os.access(companion, os.W_OK):
            return errno.EACCES, f"{companion.name} is read-only for this user"
    return None


def _main_file(conn: sqlite3.Connection | None) -> str | None:
    """The path of ``conn``'s main database file (``PRAGMA database_list``), or None when it cannot be read."""
    if conn is None:
        return None
    try:
        return next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), None)
    except sqlite3.Error:
        return None


def unwritable_file_error(conn: sqlite3.Connection | None, exc: sqlite3.Error, path: Any = None
                          ) -> DatabaseAccessError | None:
    """A :class:`DatabaseAccessError` naming the file when ``exc`` is SQLite's refusal to open or write it
    (:data:`_ACCESS_CODES`) and the file or its folder is indeed not writable (read-only file system, or no
    permission: :func:`_not_writable`), else None (the caller's own error).

    Parameters
    ----------
    conn : sqlite3.Connection or None
        The connection that raised (its main file is looked up when ``path`` is not given).
    exc : sqlite3.Error
        The error SQLite raised.
    path : path-like, optional
        The file, when the caller knows it.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc).lower()
    refused = (code & 0xFF in _ACCESS_CODES) if code is not None else (
        "unable to open" in text or "readonly" in text or "permission" in text)
    if not refused:
        return None
    if path is None:
        path = _main_file(conn)
    if not path:
        return None
    why = _not_writable(Path(path))
    if why is None:
        return None
    return DatabaseAccessError(why[0], f"{path}: cannot be opened for writing ({exc}): {why[1]}; nothing was "
                                       "written to it. Run with a writable folder")


#: set by :func:`reading_only` (``run.py status``): :func:`connect` opens existing files read-only and never
#: creates one
_READ_ONLY: list[bool] = [False]


@contextlib.contextmanager
def reading_only() -> Iterator[None]:
    """Within the block, :func:`connect` opens the campaign's SQLite files read-only (URI ``mode=ro``; a file
    that is missing raises ``sqlite3.OperationalError`` instead of being created), and :func:`enable_wal` leaves
    the journal mode as it is. When the folder is read-only, SQLite cannot make the ``-shm`` file a WAL reader
    needs, and the file is then opened ``immutable=1``: read as it is on disk, without locks, so a run writing
    it at that moment may be read mid-way (a read-only folder has no such run). A file with no ``-wal`` beside
    it (closed cleanly: every write is in it) is opened ``immutable=1`` too, since a ``mode=ro`` reader would
    create the ``-wal`` and ``-shm`` files and leave them; so nothing is created (a run starting in the same
    instant may be read mid-way: the display is a snapshot). ``run.py status`` reads under it (its ``--help``
    says read-only): it shows an archived or shared read-only campaign."""
    before = _READ_ONLY[0]
    _READ_ONLY[0] = True
    try:
        yield
    finally:
        _READ_ONLY[0] = before


def is_reading_only() -> bool:
    """Whether the caller runs under :func:`reading_only` (openers then skip their schema scripts and
    registrations: the file is read as it is)."""
    return _READ_ONLY[0]


def connect_read_only(path: str | os.PathLike[str], **kwargs: Any) -> sqlite3.Connection:
    """:func:`connect` under :func:`reading_only`: ``mode=ro``, else ``mode=ro&immutable=1`` when SQLite cannot
    open the file for reading with locks (no writable folder for the WAL's ``-shm``)."""
    p = Path(path).absolute()
    if not p.is_file():
        raise sqlite3.OperationalError(f"unable to open database file: {p} does not exist (read-only: not created)")
    kwargs = {**kwargs, "uri": True}
    if p.with_name(p.name + "-wal").exists():
        conn = sqlite3.connect(f"{p.as_uri()}?mode=ro", **kwargs)
        try:
            return _checked_read_only(conn, p)
        except sqlite3.OperationalError:  # no -shm can be made here: read the file as it is
            pass
    # no WAL beside it: every write is in the file and no process has it open in WAL mode; a mode=ro reader
    # would make the -wal and -shm files and leave them, an immutable one creates nothing
    return _checked_read_only(sqlite3.connect(f"{p.as_uri()}?mode=ro&immutable=1", **kwargs), p)


def _checked_read_only(conn: sqlite3.Connection, path: Path) -> sqlite3.Connection:
    # the first read, at open: a file that is not a database (or is damaged) is one DatabaseFileError naming it
    # (a writer's sqlite3.connect defers this to the caller's first statement, which the caller already checks)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.DatabaseError as exc:
        conn.close()
        damaged = damaged_file_error(None, exc, path)
        if damaged is None:
            raise
        raise damaged from None


def connect(path: str | os.PathLike[str], **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect(path, **kwargs)``; a file that cannot be made or opened because its folder or the file is
    read-only raises :class:`DatabaseAccessError` (naming it) instead of SQLite's ``unable to open database file``.
    Under :func:`reading_only` the file is opened read-only (never created).
    """
    if _READ_ONLY[0]:
        return connect_read_only(path, **kwargs)
    try:
        return sqlite3.connect(path, **kwargs)
    except sqlite3.OperationalError as exc:
        refused = unwritable_file_error(None, exc, path)
        if refused is None:
            raise
        raise refused from None


def create_whole(path: str | os.PathLike[str], make: Callable[[sqlite3.Connection], None]) -> bool:
    """Make the SQLite file ``path`` in one step when there is none, so that another process finds either no file
    or a whole one, never one mid-way (race45, ci45: a look at a campaign whose first run was making
    ``campaign.sqlite`` met its ledger's tables without the store's and ended in a traceback, or took the file,
    still empty or without tables, for a damaged one; a queue file likewise).

    A temporary file beside it (``.<name>.<pid>.<thread>.<hex>.tmp``: hidden, and no ``*.sqlite`` listing matches
    it; one a killed process left is removed at a later run's start, :func:`geoagent.files.remove_stale_temp_files`)
    is switched to WAL, given its tables by ``make(conn)`` (an autocommit connection; ``make`` runs its own
    transactions), closed (which folds its WAL in and removes its ``-wal`` and ``-shm``) and linked into place with
    ``os.link``, which fails when the name exists: of two processes making the file at once the first to link
    wins and the other's file is dropped (both then open the winner's). The temporary files are removed in every
    case. Returns whether this call linked the file; False also when ``path`` exists, under :func:`reading_only`
    (nothing is made), when a ``-wal``, ``-shm`` or ``-journal`` file of that name lies there without it, and when
    this way fails (a file system without hard links, a read-only folder, a full
    disk): the caller then opens ``path`` as before, which makes it in place or raises its own error naming it.
    """
    target = Path(path)
    if _READ_ONLY[0] or target.exists() or any(Path(f"{target}{end}").exists() for end in ("-wal", "-shm", "-journal")):
        # a companion left beside a removed file (a crash left its -wal, then the file was deleted to start over):
        # SQLite would replay that WAL into a whole file linked here (review45a #1: a new campaign started with
        # the old one's spend, a new queue with its tasks); made in place, the file is empty and SQLite drops it
        return False
    # the name of geoagent.files' temporary files: a run's start removes one a killed process left (review45a #8)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}.tmp")
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            wal = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower() == "wal"
            if wal:
                make(conn)
        finally:
            conn.close()
        if not wal:
            return False
        os.link(tmp, target)
        return True
    except (OSError, sqlite3.Error):  # FileExistsError: another process linked first; else: the caller's way
        return False
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.unlink(f"{tmp}{suffix}")


def damaged_file_error(conn: sqlite3.Connection | None, exc: sqlite3.DatabaseError,
                       path: object = None, *, at_open: bool = True) -> DatabaseFileError | None:
    """A :class:`DatabaseFileError` naming the file when ``exc`` says the file is not a sound SQLite database
    (not a database, malformed), else None (busy, locked, a permission problem: the caller's own error).

    Parameters
    ----------
    conn : sqlite3.Connection or None
        The connection that raised (its main file is looked up when ``path`` is not given).
    exc : sqlite3.DatabaseError
        The error SQLite raised.
    path : path-like, optional
        The file, when the caller knows it.
    at_open : bool
        True (default): met while opening the file, before anything was written to it (the message says
        nothing was). False: met in use (a query reached a damaged page), when earlier steps of the run may have
        written to the file: the message says only the step that met the damage wrote nothing.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    damaged = (code & 0xFF in _DAMAGED_CODES) if code is not None else (
        "not a database" in str(exc) or "malformed" in str(exc))
    if not damaged:
        return None
    if path is None:
        path = _main_file(conn)
    written = ("nothing was written to it" if at_open or _READ_ONLY[0] else  # a read-only look writes nothing
               "the step that met the damage wrote nothing (earlier steps of this run may have written to it)")
    return DatabaseFileError(
        f"{path or 'a SQLite file'}: cannot be read as a SQLite database ({exc}): the file is damaged or is not "
        f"one of geoagent's; {written}. Restore it from a backup, or move it aside to have it "
        "made anew (a queue file then loses its tasks' states; campaign.sqlite its stored answers and ledger, and "
        "while the campaign's queues hold work a run then asks for them to be deleted too: it starts the campaign "
        "over, every call sent and paid again)")


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
    DatabaseFileError
        The file is not a SQLite database or is damaged (the message names it; nothing was written).
    DatabaseAccessError
        The file or its folder is read-only (a read-only file system, or no write permission): in WAL mode even
        a reader makes the ``-shm`` file (the message names the file; nothing was written).
    sqlite3.OperationalError
        Any other error than busy, or busy for longer than ``timeout_s``.
    """
    if _READ_ONLY[0]:
        # reading_only(): nothing is switched, and "wal" is returned whatever the file reports (an immutable
        # read reports "delete"), so callers read it as it is
        return "wal"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                refused = unwritable_file_error(conn, exc)
                if refused is not None:
                    raise refused from None
                raise
            time.sleep(retry_s)
        except sqlite3.DatabaseError as exc:  # not a database, malformed: name the file instead of a traceback
            damaged = damaged_file_error(conn, exc)
            if damaged is None:
                raise
            raise damaged from None
