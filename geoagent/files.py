"""Crash-safe file writes: atomic rewrites (reports, crawl tables, trial tables) and JSONL appends.

Every process of a scaled-out campaign writes the campaign report when it ends, and an aggregator rewrites
the live report in a worker thread meanwhile, so the same file can have several writers at the same
moment (likewise the crawl's tables when crawl stages run in several processes). Each write goes to a temporary file of its own in the target's folder (a unique name, created with
``O_EXCL``), which is then renamed over the target with :func:`os.replace`: a reader sees the old file or
a complete new one, never a half-written one, and concurrent writers never rename or delete each other's
temporary files (the last rename wins). A failed write removes its temporary file and leaves the target
as it was; a writer killed mid-write (SIGKILL) leaves it behind, and the next run removes it
(:func:`remove_stale_temp_files`).

A writer that produces its file piece by piece (the plan record, a batched export) uses the public
:func:`atomic_stream` (an open file; :meth:`AtomicStream.discard` to keep the old target) or
:func:`atomic_temp_path` (a path, for writers that take a file name); both lock the temporary file, ``fsync`` it
before the rename and the folder after it.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import orjson

from geoagent import constants as C

TMP_SUFFIX = ".tmp"
"""Suffix of the temporary files (named ``.<target name>.<pid>.<thread>.<random>.tmp``, hidden)."""

log = logging.getLogger(__name__)

#: names of the temporary files of :func:`atomic_open`, :func:`atomic_stream` and :func:`atomic_temp_path`
#: (``.<target>.<pid>.<thread>.<8 hex>.tmp``), of the run manifest's rewrite (``.manifest.json.<pid>.tmp``,
#: :mod:`geoagent.runtime.manifest`) and of the plan record before it used :func:`atomic_stream`
#: (``.plan_keys.tsv.<pid>.tmp``, left by an older version); group 1 is the pid
_TEMP_NAMES = (re.compile(r"^\..+\.(\d+)\.\d+\.[0-9a-f]{8}\.tmp$"), re.compile(r"^\.manifest\.json\.(\d+)\.tmp$"),
               re.compile(r"^\.plan_keys\.tsv\.(\d+)\.tmp$"))  # an older plan record's name


#: the companions SQLite keeps beside a database file, which a temporary one has too while it is made
_SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def _lock_temp(fd: int) -> None:
    """Hold an exclusive ``flock`` on temporary file ``fd`` (a fresh file: nobody else holds it) until it is
    closed; nothing where the platform or file system has no ``flock`` (the pid check alone applies then)."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):  # pragma: no cover - no flock (Windows, some network file systems)
        pass


def _temp_in_use(path: Path) -> bool:
    """Whether a live writer holds temporary file ``path`` (its ``flock`` is taken: :func:`_lock_temp`); False
    when it is free or cannot be checked (gone, unreadable: the caller's removal then fails or is harmless)."""
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except (ImportError, OSError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # pragma: no cover - no flock on this file system
        return False
    finally:
        os.close(fd)  # also lets go of the lock just taken
    return False


def _create_temp(path: Path) -> tuple[int, Path]:
    """Create and open (write-only, ``O_EXCL``) a new temporary file next to ``path``; mode 0o666 less the
    umask, as a plain ``open(path, "w")`` would give the target. The file is locked (exclusive ``flock``, where
    the file system has it) for as long as the descriptor stays open: :func:`remove_stale_temp_files` never
    removes a file whose lock is held, also when the pid in its name means nothing here (a writer in another
    pid namespace: a second container sharing the folder)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}{TMP_SUFFIX}")
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:  # pragma: no cover - 32 random bits on top of pid and thread
            continue
        _lock_temp(fd)
        return fd, tmp
    raise FileExistsError(f"no free temporary name next to {path}")  # pragma: no cover


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, encoding: str = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file for writing ``path``; on a clean exit rename it over ``path``.

    Parameters
    ----------
    path : str or Path
        The target file; its folder is created when missing.
    mode : str
        ``"w"`` (text, ``encoding``) or ``"wb"`` (bytes, e.g. for matplotlib's ``savefig``).
    encoding : str
        Text encoding for ``"w"``.
    newline : str or None
        As for :func:`open` in text mode (``""`` for the :mod:`csv` module).

    Yields
    ------
    file object
        Open on the temporary file (unique to this call, in the target's folder).

    Raises
    ------
    ValueError
        For a mode other than ``"w"`` or ``"wb"``.
    OSError
        When the folder or file cannot be written; the temporary file is removed and the target is left
        as it was. Any exception raised inside the ``with`` block likewise leaves the target unchanged.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": encoding, "newline": newline})) as fh:
            yield fh
            fh.flush()
            # renamed while still open, so its lock (held by the open descriptor) covers it up to the rename
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class AtomicStream:
    """The open temporary file of :func:`atomic_stream`: write to it, or :meth:`discard` it.

    Attributes
    ----------
    path : Path
        The target file (renamed onto at a clean exit).
    temp : Path
        The temporary file being written (``.<target>.<pid>.<thread>.<8 hex>.tmp`` in the target's folder,
        locked while open).
    file : file object
        Open on ``temp`` (text or bytes, as the mode asked).
    """

    __slots__ = ("path", "temp", "file", "discarded")

    def __init__(self, path: Path, temp: Path, file: IO[Any]) -> None:
        self.path, self.temp, self.file = path, temp, file
        self.discarded = False

    def write(self, data: Any) -> int:
        """Write ``data`` (``str`` in text mode, bytes in ``"wb"``) to the temporary file; returns what
        ``file.write`` returns (characters or bytes written)."""
        return self.file.write(data)

    def discard(self) -> None:
        """Keep the target as it was: at the end of the ``with`` block the temporary file is removed instead
        of renamed (what an exception does, without raising one)."""
        self.discarded = True


@contextmanager
def atomic_stream(path: str | Path, mode: str = "w", *, encoding: str = "utf-8", newline: str | None = None,
                  fsync: bool = True) -> Iterator[AtomicStream]:
    """Stream a file to ``path`` through a locked temporary file: written as it comes, made visible whole.

    The public helper for a writer that produces its file piece by piece over a long time (a plan record
    written as the plan streams past, a large export appended batch by batch). The steps:

    1. a temporary file of its own is created next to ``path`` (``O_EXCL``, a name with this process's pid,
       thread and 32 random bits: ``.<target>.<pid>.<thread>.<8 hex>.tmp``) and locked (exclusive ``flock``,
       held while it is open);
    2. the caller writes to it (:meth:`AtomicStream.write` or ``.file``);
    3. at a clean exit of the ``with`` block it is flushed, ``fsync``-ed (with ``fsync``: its data is on disk
       before the name points at it, so a power cut after the rename cannot leave an empty or short file
       under the target's name), renamed over ``path`` with :func:`os.replace` (atomic: a reader sees the old
       file or the whole new one), and the folder is ``fsync``-ed (best effort) so the rename itself is
       durable;
    4. on an exception inside the block, or after :meth:`AtomicStream.discard`, the temporary file is removed
       and ``path`` is left as it was.

    A process killed inside the block (SIGKILL, power cut) leaves ``path`` as it was and its temporary file
    behind; :func:`remove_stale_temp_files` (run by the next run of the campaign) removes it once its process
    is gone and its lock free, and never removes the temporary file of a live writer (its pid is alive here, or
    its lock is held: a writer in another pid namespace).

    Parameters
    ----------
    path : str or Path
        The target file; its folder is created when missing.
    mode : str
        ``"w"`` (text, ``encoding``, ``newline`` as for :func:`open`) or ``"wb"`` (bytes).
    encoding : str
        Text encoding for ``"w"``.
    newline : str or None
        As for :func:`open` in text mode.
    fsync : bool
        ``fsync`` the file before the rename and the folder after it (default True).

    Yields
    ------
    AtomicStream
        The temporary file (``.file``, ``.temp``, ``.path``, ``.write``, ``.discard``).

    Raises
    ------
    ValueError
        For a mode other than ``"w"`` or ``"wb"``.
    OSError
        When the folder or the file cannot be written (the temporary file is removed; ``path`` unchanged).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_stream: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    renamed = False
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": encoding, "newline": newline})) as fh:
            stream = AtomicStream(path, tmp, fh)
            yield stream
            if not stream.discarded:
                fh.flush()
                if fsync:
                    os.fsync(fh.fileno())
                # renamed while still open, so its lock covers it up to the rename
                os.replace(tmp, path)
                renamed = True
        if renamed and fsync:
            _fsync_folder(path.parent)
    finally:
        if not renamed:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


@contextmanager
def atomic_temp_path(path: str | Path, *, fsync: bool = True) -> Iterator[Path]:
    """:func:`atomic_stream` for a writer that takes a file name rather than an open file (Polars'
    ``write_parquet`` / ``sink_parquet``): yields the locked temporary file's path (created empty); the caller
    writes the whole file there by name. At a clean exit the file is ``fsync``-ed (with ``fsync``) and renamed
    over ``path``; on an exception it is removed and ``path`` is left as it was. The lock is held (the
    descriptor stays open) until the rename, so :func:`remove_stale_temp_files` leaves it alone meanwhile.

    Raises
    ------
    OSError
        The temporary file cannot be created, written or renamed (removed; ``path`` unchanged).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    renamed = False
    try:
        yield tmp
        if fsync:
            os.fsync(fd)  # the same inode the caller wrote by name
        os.replace(tmp, path)
        renamed = True
        if fsync:
            _fsync_folder(path.parent)
    finally:
        os.close(fd)
        if not renamed:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def _fsync_folder(folder: Path) -> None:
    """``fsync`` a folder so a rename in it is on disk; nothing where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - no directory descriptors on this platform
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


class StagedFiles:
    """Files written each to a temporary file of its own (locked, as :func:`atomic_temp_path`'s) and renamed over
    their targets together by :meth:`commit`, so that a set of files (an export's tables) is replaced as one: a
    process killed before :meth:`commit` leaves every target as it was (and hidden temporary files, which
    :func:`remove_stale_temp_files` sweeps later); :meth:`discard` removes the temporary files. The renames are
    separate calls, moments apart, not one atomic step: a caller that must say when the set is whole writes a mark
    of its own after :meth:`commit` (:func:`geoagent.runtime.export.export_together`). One thread uses an
    instance; the temporary files' descriptors stay open (their locks held) until :meth:`commit` or :meth:`discard`.
    """

    def __init__(self) -> None:
        #: target -> (descriptor, temporary file), in the order first staged
        self._staged: dict[Path, tuple[int, Path]] = {}

    @contextmanager
    def temp_path(self, path: str | Path) -> Iterator[Path]:
        """A new locked temporary file next to ``path`` (created empty) for the caller to write by name; at a clean
        exit it is ``fsync``-ed and kept for :meth:`commit` (replacing one staged earlier for the same ``path``);
        on an exception it is removed.

        Raises
        ------
        OSError
            The temporary file cannot be created or written (removed; ``path`` unchanged).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(path)
        kept = False
        try:
            yield tmp
            os.fsync(fd)  # the same inode the caller wrote by name
            kept = True
        finally:
            if not kept:
                os.close(fd)
                tmp.unlink(missing_ok=True)
        earlier = self._staged.pop(path, None)
        if earlier is not None:
            os.close(earlier[0])
            earlier[1].unlink(missing_ok=True)
        self._staged[path] = (fd, tmp)

    @property
    def targets(self) -> list[Path]:
        """The staged targets, in the order first staged."""
        return list(self._staged)

    def commit(self) -> None:
        """Rename every staged file over its target (in the order staged), then ``fsync`` their folders.

        Raises
        ------
        OSError
            A rename failed: the files not yet renamed are removed (their targets as they were).
        """
        folders = list(dict.fromkeys(p.parent for p in self._staged))
        try:
            for path, (_, tmp) in list(self._staged.items()):
                os.replace(tmp, path)
                os.close(self._staged.pop(path)[0])
        finally:
            self.discard()
        for folder in folders:
            _fsync_folder(folder)

    def discard(self) -> None:
        """Remove the staged temporary files not renamed yet (their targets stay as they were)."""
        for fd, tmp in self._staged.values():
            os.close(fd)
            tmp.unlink(missing_ok=True)
        self._staged.clear()


def remove_stale_temp_files(folder: str | Path, *, skip: tuple[str, ...] = (C.OWNER_LOCKS_DIR,),
                            recursive: bool = True) -> list[Path]:
    """Remove the temporary files that writers killed mid-write left under ``folder`` (recursively).

    A writer killed (SIGKILL, power cut) between creating its temporary file and the rename leaves the
    target as it was but the temporary file behind (up to a whole export or image in size), and nothing else
    would ever remove it. A file counts as left behind when its name is one this module's writers make
    (:func:`atomic_open`: ``.<target>.<pid>.<thread>.<random>.tmp``, and
    :func:`geoagent.runtime.sqlite_wal.create_whole`'s SQLite file of that name with its ``-wal``, ``-shm`` or
    ``-journal``; the manifest's ``.manifest.json.<pid>.tmp``; the plan record's ``.plan_keys.tsv.<pid>.tmp``)
    and the process whose pid it names no longer exists on this machine, and no writer holds its lock (each
    writer locks its file until the rename, :func:`_create_temp`; a killed one's lock is gone with it). Files of
    live processes (another process of the campaign writing right now, this process included, also one in
    another pid namespace: a second container sharing the folder, whose pid means nothing here) are left alone, as is every other name
    and the sub-folders named in ``skip`` (``leases/``: the owner files have their own clean-up,
    :func:`geoagent.engine.hand_back_dead_owners`). A pid reused since by another process keeps its file
    until a later call. ``recursive=False``: ``folder`` itself only (a folder the user named, e.g. ``export
    --out``, whose sub-folders are not ours).

    Returns
    -------
    list of Path
        The files removed (empty when ``folder`` does not exist). Errors on single files are ignored
        (removed meanwhile by another process, or not ours to remove).
    """
    from geoagent.runtime.procs import pid_alive

    root = Path(folder)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if d not in skip] if recursive else []
        for name in filenames:
            # a SQLite file made whole (geoagent.runtime.sqlite_wal.create_whole) has its companions beside it
            stem = next((name[:-len(end)] for end in _SQLITE_COMPANIONS if name.endswith(TMP_SUFFIX + end)), name)
            if not stem.endswith(TMP_SUFFIX):
                continue
            m = next((m for m in (rx.match(stem) for rx in _TEMP_NAMES) if m), None)
            if m is None:
                continue
            pid = int(m.group(1))
            if pid == os.getpid() or pid_alive(pid) is not False:
                continue
            path = Path(dirpath) / name
            if _temp_in_use(path):
                continue  # a live writer whose pid means nothing here (another pid namespace)
            try:
                path.unlink()
            except OSError:
                continue
            removed.append(path)
    if removed:
        log.info("removed %d temporary file(s) left by writers killed mid-write under %s", len(removed), root)
    return removed


def atomic_write_text(path: str | Path, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_open`); returns ``path`` as a Path."""
    with atomic_open(path, "w", encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`); returns ``path`` as a Path."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def atomic_savefig(fig, path: str | Path, **savefig_kwargs: Any) -> Path:
    """Save a matplotlib figure as PNG to ``path`` atomically (see :func:`atomic_open`).

    ``savefig_kwargs`` go to ``fig.savefig`` (e.g. ``dpi``); the format is always PNG. Returns ``path``.
    """
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", **savefig_kwargs)
    return Path(path)


@contextmanager
def _append_lock(f: Any) -> Iterator[None]:
    """An exclusive advisory lock (``fcntl.flock``) on the open file ``f`` for the block, where the platform has one
    (POSIX); elsewhere nothing. Appenders of one file in several processes (``--stages`` processes writing
    ``progress.jsonl``) take turns."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; an append is one write there too
        yield
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def rotated_jsonl_path(path: str | Path) -> Path:
    """Where :func:`rotate_jsonl` moves ``path``: the same name with ``.1`` added (``progress.jsonl.1``)."""
    path = Path(path)
    return path.with_name(path.name + ".1")


def rotate_jsonl(path: str | Path, max_bytes: int) -> bool:
    """Rename the JSONL file ``path`` to :func:`rotated_jsonl_path` (replacing the one there) once it holds
    ``max_bytes`` bytes or more; the next :func:`append_jsonl` starts a new file. Returns whether it rotated.

    Safe with several appending processes: the size is judged again under the appenders' lock on the file still
    at ``path`` (a process that rotated it meanwhile leaves a new, small file there, which stays). A record another
    process appended to the file just before the rename is in the rotated file, still readable. Made for streams
    that a long-running process appends to for ever (the progress stream: about 1-4 KB a second per process,
    idle or not), so one keeps at most about twice ``max_bytes`` on disk.

    Raises
    ------
    OSError
        The file cannot be opened or renamed (a missing file is no error: nothing to rotate).
    """
    path = Path(path)
    try:
        if path.stat().st_size < max_bytes:
            return False
        with path.open("ab") as f, _append_lock(f):
            held, there = os.fstat(f.fileno()), path.stat()
            if (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino) or held.st_size < max_bytes:
                return False  # another process rotated it between the look and the lock
            os.replace(path, rotated_jsonl_path(path))
    except FileNotFoundError:
        return False
    return True


def append_jsonl(path: str | Path, records: Any, *, fsync: bool = True) -> None:
    """Append ``records`` (an iterable of JSON-serialisable dicts) to ``path`` as JSON lines.

    A crash can leave a torn last line (bytes without their newline). Readers skip such a line, but an
    append that simply continued it would glue its first record onto the torn bytes and lose it with
    them on the next read; so when the file does not end with a newline, the new records start on a
    fresh line. The records are written in one ``write`` call; with ``fsync`` they are on disk when
    this returns (decision logs), without it they are left to the OS (the progress stream).

    Raises
    ------
    TypeError
        A record orjson cannot serialise (nothing is written).
    OSError
        The file cannot be opened or written.
    """
    path = Path(path)
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    if not data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab+") as f, _append_lock(f):
        _write_lines(f, data, fsync)


def _write_lines(f: Any, data: bytes, fsync: bool) -> tuple[int, int]:
    """Append the JSON lines ``data`` (non-empty) to ``f`` (opened ``ab+``, its append lock held) in one ``write``,
    on a fresh line after a torn last one (:func:`append_jsonl`); returns the byte offset of the first record's line
    and the file's end after the write."""
    first = f.seek(0, os.SEEK_END)
    # the look at the last byte and the write under one lock: another process appending between them made the
    # newline added here an empty line (progress37 #5: 195 of 12,000 lines from 4 writers of 20 KB records)
    if first > 0:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            data = b"\n" + data
            first += 1
    f.write(data)
    f.flush()
    if fsync:
        os.fsync(f.fileno())
    return first, f.tell()


@contextmanager
def jsonl_append_turn(path: str | Path, *, fsync: bool = True) -> Iterator[Callable[[Iterable[Any]], tuple[int, int]]]:
    """Hold ``path``'s append lock (the one :func:`append_jsonl` takes, so every appender of the file in any
    process waits) for the block, and yield ``write(records) -> (first, end)``: it appends the records as
    :func:`append_jsonl` does (on a fresh line after a torn last one, one ``write``, fsynced with ``fsync``)
    and returns the byte offset of the first record's line and of the file's end after it (both the file's end
    for no records). Lets a keyed log read what other processes appended and decide what to write under one
    lock (chaos45 #1: two crawl processes each appended the same screening batch to ``audit_sensitive.jsonl``).

    Raises
    ------
    TypeError
        A record orjson cannot serialise (nothing is written by that ``write``).
    OSError
        The file cannot be opened, locked or written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab+") as f, _append_lock(f):
        def write(records: Iterable[Any]) -> tuple[int, int]:
            data = b"".join(orjson.dumps(r) + b"\n" for r in records)
            if not data:
                end = f.seek(0, os.SEEK_END)
                return end, end
            return _write_lines(f, data, fsync)

        yield write


#: how a hand-written CSV with a broken quote is refused (:func:`csv_header`, :func:`csv_rows`)
CSV_QUOTE_HINT = ("a quote opened in this record is never closed, or text follows a closing quote; quote a field "
                  "that holds a comma, a quote or a line break whole, with its quotes doubled (\"\")")


def csv_header(reader: "csv.DictReader[str]", path: str | Path, prefix: str = "") -> list[str] | None:
    """The header of a hand-written CSV (``reader`` built with ``strict=True``), ``None`` for an empty file.

    Raises
    ------
    ValueError
        ``<path>:1: <prefix>CSV syntax error (...)``: the header breaks the CSV quoting rules.
    """
    try:
        return reader.fieldnames
    except csv.Error as exc:
        raise ValueError(f"{path}:1: {prefix}CSV syntax error ({exc}): {CSV_QUOTE_HINT}") from None


def csv_rows(reader: "csv.DictReader[str]", path: str | Path, prefix: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, row)`` of each record of a hand-written CSV (human verdicts, review decisions): ``line`` is the
    1-based line the record ends on (``reader.line_num``).

    Build ``reader`` with ``csv.DictReader(f, strict=True)``: Python's lenient default reads a quote that is never
    closed as the start of one field that swallows every later line (the rows after it vanish without a word) and
    a field past 128 KiB as a ``csv.Error``, which is no ``ValueError``; strict, both stop here.

    Raises
    ------
    ValueError
        ``<path>:<line>: <prefix>CSV syntax error (...)``, ``line`` being the first line of the broken record.
    """
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ValueError(f"{path}:{start}: {prefix}CSV syntax error ({exc}): {CSV_QUOTE_HINT}") from None
        yield reader.line_num, row


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(value: Any) -> Any:
    """``value`` (a decoded JSON value) with every lone UTF-16 surrogate in its strings, keys too, replaced by U+FFFD
    (the Unicode replacement character): such a string cannot be written as UTF-8 (SQLite, the exports)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in value.items()}
    return value


def json_records(folder: str | Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """``(path, record)`` for each ``*.json`` file directly in ``folder`` (file-name order) that holds a JSON object;
    a file that cannot be read or parsed (a torn write of a crash), other JSON and a missing folder are skipped.
    The crawl's per-city records (``screening/``, ``sampling/``) are read so."""
    folder = Path(folder)
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = orjson.loads(p.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(rec, dict):
            yield p, rec


#: the UTF-8 byte-order mark an editor may write at the start of a file
UTF8_BOM = b"\xef\xbb\xbf"


def recorded_error(value: Any) -> str | None:
    """The failure a recorded answer's ``error`` field states (a release's raw-answer JSONL, a replay file), or None.

    No failure: the field absent or null, ``false``, ``0``, an empty or blank string, an empty list or object (a
    writer that always fills the field). A failure: any other value, as text (a string as written, anything else
    as its JSON). The release importer and the replay provider read the field by this one rule, so a line the
    import counts as failed is never replayed as an answer, nor the other way round.
    """
    if isinstance(value, str):
        return value if value.strip() else None
    if not value:  # null, false, 0, [], {}
        return None
    if isinstance(value, (dict, list, bool)):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return str(value)


def later_record_wins(earlier_failed: bool, later_failed: bool) -> bool:
    """Of two records for one request in a recorded-answers file (a release's ``verify_raw*.jsonl``, a replay
    file): whether the later one replaces the earlier. The first is kept, except that a recorded failure gives way
    to a later answer (a retry that got one). The release importer and the replay provider answer by this one rule,
    so the record the import report names is the one replayed and scored (break32 #2)."""
    return earlier_failed and not later_failed


def loads_record(data: bytes) -> Any:
    """One JSON value of a recorded line (a release's raw-answer JSONL): ``orjson.loads``, except that a string
    holding a lone UTF-16 surrogate escape (``"\\ud83d"``: an emoji cut in half at the output-token limit, as
    Python's ``json.dumps`` writes one with its default ``ensure_ascii``), which orjson refuses, is read as
    ``json.loads`` reads it, each lone surrogate then replaced by U+FFFD (:func:`without_lone_surrogates`), as the
    providers read such an API body (:func:`geoagent.providers.http_base.lenient_json`). Refused, the line's answer
    was lost: the release importer dropped it as "invalid JSON", and one such line stopped a replay file at start.

    A UTF-8 byte-order mark at the start of the line (a file saved by an editor that writes one, break32 #7; TOML
    and CSV inputs already took it) is no part of the value.

    Raises
    ------
    orjson.JSONDecodeError
        The line is not JSON (or not UTF-8) for another reason (orjson's error, as before).
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        if bytes(data[:3]) == UTF8_BOM:
            data = data[3:]
    elif isinstance(data, str) and data.startswith("\ufeff"):
        data = data[1:]
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in str(exc):
            raise
        import json

        try:
            value = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError):
            raise exc from None
        return without_lone_surrogates(value)


def is_torn_record(line: bytes) -> bool:
    """Whether ``line`` is the beginning of a JSON object cut short, as a crash mid-append leaves it.

    True when the line starts with ``{`` and is not JSON only because its data ends too early (the parser
    and the UTF-8 decoder both report "unexpected end of data" at its end); text that is wrong before its
    end (garbage, a hand edit) is not torn.
    """
    body = line.rstrip(b"\r\n").strip()
    if not body.startswith(b"{"):
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:  # cut inside a multi-byte character: look at what precedes it
        if exc.reason != "unexpected end of data":
            return False
        body = body[: exc.start]
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return str(exc).startswith("unexpected end of data")
    return False


def iter_jsonl_objects(path: str | Path, *, skip_torn: bool = False,
                       torn: list[int] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of the JSONL file ``path`` (numbers from 1).

    Parameters
    ----------
    path : path
        The JSONL file.
    skip_torn : bool
        Skip a line that is a record cut short by a crash (:func:`is_torn_record`), last or not: the logs
        written by :func:`append_jsonl` can hold one, and the next append starts after it on a fresh line.
        Any other line that is not a JSON object still raises.
    torn : list of int, optional
        With ``skip_torn``, the numbers of the lines skipped are appended to it.

    Raises
    ------
    ValueError
        A line that is not JSON, or not a JSON object, naming ``path:line``.
    OSError
        The file cannot be read.
    """
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if lineno == 1 and line.startswith(UTF8_BOM):  # no part of the record
                line = line[len(UTF8_BOM):]
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                if skip_torn and is_torn_record(line):
                    if torn is not None:
                        torn.append(lineno)
                    continue
                raise ValueError(f"{path}:{lineno}: not JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj
