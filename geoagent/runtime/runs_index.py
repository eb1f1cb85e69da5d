"""Where each campaign config was run from: a small per-user index, so that a config run from another folder
than before is caught.

With data roots relative to the working directory (the defaults ``queues/`` and ``state/``), a campaign's queues,
ledger and stored answers lie under the folder it was run from. :func:`geoagent.status.ran_in_another_folder` finds
that folder when it is the config file's folder or one above it; a config kept elsewhere (``~/configs/x.toml``
run from the project folder) was found by nothing, and running it from a second folder started a second copy of
the campaign that sent and paid every call again (walkthrough 25, item 2). Each run therefore appends one line
to this index: the config file (resolved), the campaign name and the folder it ran from; a later run, ``status``,
``dead`` or ``export`` from another folder reads it back.

The index is a JSON-lines file under the user's state folder: ``$GEOAGENT_RUNS_INDEX`` when set (an empty value
turns the index off), else ``$XDG_STATE_HOME/geoagent/runs_index.jsonl`` (default ``~/.local/state``, the XDG
Base Directory specification). It holds paths only: no config content, key or result. Writing it is best effort
(a read-only home folder loses only this check); lines that cannot be read are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from geoagent.constants import ENV_RUNS_INDEX
#: the index's file name under ``$XDG_STATE_HOME/geoagent/``
RUNS_INDEX_FILE = "runs_index.jsonl"
#: the index is read from its last this many bytes (the newest lines: a long-lived index never slows a start)
READ_TAIL_BYTES = 4 * 1024 * 1024


def index_path() -> Path | None:
    """The index file (see the module docstring), or None when ``$GEOAGENT_RUNS_INDEX`` is set to "" or no home
    folder can be found (``HOME`` unset and no passwd entry). A relative ``$GEOAGENT_RUNS_INDEX`` is taken from the
    working directory (each folder would then have its own index: give an absolute path)."""
    env = os.environ.get(ENV_RUNS_INDEX)
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    if base and Path(base).is_absolute():
        root = Path(base)
    else:
        try:
            root = Path.home() / ".local" / "state"
        except RuntimeError:  # no HOME and no passwd entry: no index (rev25 #7: a traceback from run and status)
            return None
    return root / "geoagent" / RUNS_INDEX_FILE


def _config_key(cfg: Any) -> str | None:
    """The config file as the index names it (resolved, symlinks followed), or None for a config not read from a
    file (``source`` empty or ``<...>``)."""
    source = str(getattr(cfg, "source", "") or "")
    if not source or source.startswith("<"):
        return None
    try:
        return str(Path(source).expanduser().resolve())
    except (OSError, RuntimeError):
        return None


def record_run_folder(cfg: Any, folder: Path | None = None) -> None:
    """Append ``{config, campaign, folder}`` for campaign ``cfg`` run from ``folder`` (default the working
    directory, resolved) to the index; nothing for a config not read from a file or with the index off. Never
    raises (an unwritable index loses only the check it serves)."""
    key = _config_key(cfg)
    path = index_path()
    if key is None or path is None:
        return
    here = str((folder or Path.cwd()).resolve())
    line = orjson.dumps({"config": key, "campaign": str(cfg.name), "folder": here}) + b"\n"
    if not _is_index_file(path, key):  # config38 #8: $GEOAGENT_RUNS_INDEX naming the campaign file was appended to
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:  # one short write: lines of concurrent runs do not interleave
            fh.write(line)
    except OSError:
        return


def _is_index_file(path: Path, config_key: str) -> bool:
    """Whether ``path`` may take index lines: missing or empty, or a file whose first line is an index record (a
    JSON object with ``config``); never the campaign file itself. Another file (a config, notes) is left alone."""
    try:
        if str(path.expanduser().resolve()) == config_key:
            return False
        if not path.exists() or path.stat().st_size == 0:
            return True
        with open(path, "rb") as fh:
            first = fh.readline(65536)
        rec = orjson.loads(first)
    except (OSError, RuntimeError, orjson.JSONDecodeError):
        return False
    return isinstance(rec, dict) and "config" in rec


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - READ_TAIL_BYTES))
            data = fh.read()
    except OSError:
        return
    for raw in data.splitlines():
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a line cut by the tail read, or damaged
        if isinstance(rec, dict):
            yield rec


def run_folders(cfg: Any) -> list[Path]:
    """The folders campaign ``cfg`` (its config file and ``[campaign] name``) was run from, newest first, each once;
    [] with the index off, absent or unreadable, or for a config not read from a file."""
    key = _config_key(cfg)
    path = index_path()
    if key is None or path is None:
        return []
    out: list[Path] = []
    for rec in _lines(path):
        if rec.get("config") == key and rec.get("campaign") == str(cfg.name) and isinstance(rec.get("folder"), str):
            folder = Path(rec["folder"])
            if folder in out:
                out.remove(folder)
            out.append(folder)
    return out[::-1]
