"""Campaign data store: one SQLite file ``state/<campaign>/data/data.sqlite``.

Layout (deliberately simple): a single table ``records(kind TEXT, key TEXT, json TEXT, PRIMARY KEY
(kind, key))`` where ``kind`` is a record kind from :data:`geoagent.data.model.RECORD_TYPES` (``site``,
``image``, ``reference_point``, ``ladder``, ``verify_trial``, ``verify_raw``) and ``json`` the record's
``to_dict()``. Writes are upserts by (kind, key), so importing the same release twice is harmless, and
a re-import never deletes rows. Plus ``meta(key TEXT PRIMARY KEY, json TEXT)`` for the last import
report and provenance.

The crawl fills the same store, so an evaluation starts from either (ARCHITECTURE: release importer).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from geoagent import paths
from geoagent.data.model import RECORD_TYPES
from geoagent.runtime.sqlite_wal import enable_wal

DATA_DIR = "data"
DATA_DB = "data.sqlite"


def data_db_path(campaign: str, state_root: str | Path | None = None) -> Path:
    """Path of a campaign's data store: ``<state root>/<campaign>/data/data.sqlite``."""
    return paths.state_root(state_root) / paths.safe_name(campaign, what="campaign") / DATA_DIR / DATA_DB


class DataStore:
    """Record store over one SQLite file (WAL). Use as a context manager or call :meth:`close`.

    Parameters
    ----------
    path : str or Path
        SQLite file; parent folders are created.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60.0)
        enable_wal(self._db, timeout_s=60.0)  # every process of a campaign opens it while planning
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, key TEXT NOT NULL, json TEXT NOT NULL,"
            " PRIMARY KEY (kind, key))"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, json TEXT NOT NULL)")
        self._db.commit()

    @classmethod
    def for_campaign(cls, campaign: str, state_root: str | Path | None = None) -> "DataStore":
        """Open (creating) the store of ``campaign`` under the state root."""
        return cls(data_db_path(campaign, state_root))

    def __enter__(self) -> "DataStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def put_many(self, records: Iterable[Any]) -> int:
        """Upsert records (any kinds) in one transaction; returns how many were written."""
        rows = [(r.kind, r.key(), orjson.dumps(r.to_dict()).decode()) for r in records]
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO records (kind, key, json) VALUES (?, ?, ?)", rows)
        return len(rows)

    def get(self, kind: str, key: str) -> Any | None:
        """One record by kind and key, or None."""
        row = self._db.execute("SELECT json FROM records WHERE kind=? AND key=?", (kind, key)).fetchone()
        return None if row is None else RECORD_TYPES[kind].from_dict(orjson.loads(row[0]))

    def iter(self, kind: str) -> Iterator[Any]:
        """All records of one kind in key order.

        Raises
        ------
        KeyError
            Unknown kind.
        """
        cls = RECORD_TYPES[kind]
        for (text,) in self._db.execute("SELECT json FROM records WHERE kind=? ORDER BY key", (kind,)):
            yield cls.from_dict(orjson.loads(text))

    def count(self, kind: str) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM records WHERE kind=?", (kind,)).fetchone()[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO meta (key, json) VALUES (?, ?)", (key, orjson.dumps(value).decode()))

    def get_meta(self, key: str) -> Any | None:
        row = self._db.execute("SELECT json FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else orjson.loads(row[0])
