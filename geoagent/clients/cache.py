"""Persistent HTTP response cache (SQLite) shared by the geocoding clients.

Both the OSMF Nominatim usage policy ("cache results") and Wikimedia's API
etiquette ask clients not to repeat identical requests. Responses are keyed by the
request's method, URL and canonicalised query parameters, so the same lookup made in a later process (a
resumed campaign, a re-run of the report) is answered from disk with no network call.

Only successful answers are stored: the clients call :meth:`ResponseCache.put` after they have checked
that the body is not an error envelope (a Wikidata ``maxlag`` error arrives as HTTP 200 and must never
be cached). Entries may expire after ``ttl_s`` seconds; ``ttl_s=None`` keeps them forever.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from geoagent.runtime.sqlite_wal import enable_wal

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key        TEXT PRIMARY KEY,
    method     TEXT NOT NULL,
    url        TEXT NOT NULL,
    params     TEXT NOT NULL,
    status     INTEGER NOT NULL,
    body       BLOB NOT NULL,
    stored_at  REAL NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class CachedResponse:
    """A stored response: HTTP ``status``, raw ``body`` bytes and ``stored_at`` (unix seconds)."""

    status: int
    body: bytes
    stored_at: float

    def json(self) -> Any:
        return orjson.loads(self.body)


def canonical_params(params: Mapping[str, Any] | None, ignore: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Sorted ``(name, value)`` pairs with values as strings, leaving out the names in ``ignore``.

    Parameters
    ----------
    params : mapping or None
        Query parameters as sent (values of any scalar type; ``None`` values are dropped, like aiohttp).
    ignore : iterable of str
        Names that do not change the answer (e.g. Wikidata's ``maxlag``) and so stay out of the key.

    Returns
    -------
    list of (str, str)
        Pairs sorted by name then value.
    """
    skip = set(ignore)
    pairs = [(str(k), str(v)) for k, v in (params or {}).items() if v is not None and k not in skip]
    return sorted(pairs)


def cache_key(method: str, url: str, params: Mapping[str, Any] | None, ignore: Iterable[str] = ()) -> str:
    """SHA-256 hex key of (upper-cased method, URL, canonical params); see :func:`canonical_params`."""
    blob = orjson.dumps([method.upper(), url, canonical_params(params, ignore)])
    return hashlib.sha256(blob).hexdigest()


def _stable_url(url: str) -> str:
    from geoagent.sandbox.launch import as_written_url

    return as_written_url(url)


class ResponseCache:
    """A SQLite file of responses keyed by request; safe to share between coroutines and threads.

    Parameters
    ----------
    path : str or PathLike
        The SQLite file (created with its parent folder if absent). ``":memory:"`` for a throwaway cache.
    ttl_s : float or None
        Age in seconds after which an entry counts as absent (and is replaced on the next ``put``);
        ``None`` (default) never expires entries.
    ignore_params : iterable of str
        Parameter names left out of every key (default: ``maxlag``, which only tells the server how
        much replica lag the client tolerates and does not change the answer).

    Raises
    ------
    ValueError
        If ``ttl_s`` is not positive.
    sqlite3.DatabaseError
        If ``path`` exists but is not a SQLite database (the message names the file).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl_s: float | None = None,
        ignore_params: Iterable[str] = ("maxlag",),
    ) -> None:
        if ttl_s is not None and not ttl_s > 0:
            raise ValueError(f"ResponseCache ttl_s must be positive or None, got {ttl_s!r}")
        self.path = str(path)
        self.ttl_s = ttl_s
        self.ignore_params = tuple(ignore_params)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
            enable_wal(self._db, timeout_s=30.0)  # several crawl processes may open a new cache at once
            # WAL + NORMAL: a commit is durable across a process crash (SIGKILL) and the file stays
            # consistent on power loss; only the last entries may be lost then, which a cache can afford.
            # FULL (SQLite's default) synced the WAL on every put: one fdatasync per geocoder request,
            # on the event loop (6,370 of them in a 109-site GeoHint sandbox run).
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise sqlite3.DatabaseError(f"response cache {self.path}: {exc}") from exc
        self.hits = 0
        self.misses = 0
        #: (event loop id, cache key) -> [asyncio.Lock, holders and waiters] (:meth:`flight`)
        self._flights: dict[tuple[int, str], list[Any]] = {}

    @contextlib.asynccontextmanager
    async def flight(self, method: str, url: str, params: Mapping[str, Any] | None = None) -> AsyncIterator[None]:
        """``async with cache.flight(...)``: one caller at a time for this request (its cache key) in this event
        loop. A client holds it from its cache look-up to its ``put``, so requests for the same key at the same
        time are sent once, the others finding the first one's stored answer when their turn comes (geocode38 #3:
        4 geocoder tasks naming "Jinnan" sent 4 identical Nominatim queries, 1.1 s apart, against the usage
        policy's "no repeated query"). Keys of other requests are not held up. A key's lock lives while someone
        holds or waits for it (no memory per key asked); locks are per event loop, so threads with loops of their
        own do not share one (review38b #6). Processes sharing the file find each other's answers after the first
        ``put``."""
        import asyncio

        k = (id(asyncio.get_running_loop()), self.key(method, url, params))
        entry = self._flights.get(k)
        if entry is None:
            entry = self._flights[k] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._flights.get(k) is entry:
                del self._flights[k]

    def key(self, method: str, url: str, params: Mapping[str, Any] | None) -> str:
        """The cache key of a request (see :func:`cache_key`); a URL of a sandbox fake served in this process is
        keyed as the config wrote it (:func:`geoagent.sandbox.launch.as_written_url`), not by its local port,
        which changes with every run."""
        return cache_key(method, _stable_url(url), params, self.ignore_params)

    def get(self, method: str, url: str, params: Mapping[str, Any] | None = None) -> CachedResponse | None:
        """Return the stored response of this request, or None if absent or older than ``ttl_s``."""
        k = self.key(method, url, params)
        with self._lock:
            row = self._db.execute("SELECT status, body, stored_at FROM responses WHERE key = ?", (k,)).fetchone()
        if row is None or (self.ttl_s is not None and time.time() - float(row[2]) > self.ttl_s):
            self.misses += 1
            return None
        self.hits += 1
        return CachedResponse(status=int(row[0]), body=bytes(row[1]), stored_at=float(row[2]))

    def put(self, method: str, url: str, params: Mapping[str, Any] | None, status: int, body: bytes) -> None:
        """Store (or replace) the response of this request."""
        k = self.key(method, url, params)
        canon = orjson.dumps(canonical_params(params, self.ignore_params)).decode()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, method, url, params, status, body, stored_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (k, method.upper(), _stable_url(url), canon, int(status), bytes(body), time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
