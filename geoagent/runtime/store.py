"""Response store and results tables, in the same ``campaign.sqlite`` as the ledger.

Issue 2 point 6 (exactly-once spend): every model response is stored under its request key *before* the
queue ack, in the same transaction that settles its ledger reservation, so a redelivered or re-run request
finds it (:meth:`ResponseStore.get`) and makes no second paid call; and the ledger can never show a paid
call without its stored answer, or a stored answer that was never paid for.

Downstream stages (parser, scorer, aggregator, crawl stages) keep their keyed outputs in generic *results
tables*: ``put_result("answers", key, row)`` writes one JSON row per key and table (a redelivered task
overwrites its own row with the same content). :mod:`geoagent.runtime.export` turns tables into Parquet/CSV.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.paths import safe_name, state_root
from geoagent.providers.base import ModelResponse
from geoagent.runtime.ledger import _SCHEMA as _LEDGER_SCHEMA, CampaignDB, Ledger, Reservation

_TABLE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT,
    request_meta TEXT NOT NULL,
    response TEXT NOT NULL,
    reservation_id INTEGER,
    cost_usd REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    tbl TEXT NOT NULL,
    key TEXT NOT NULL,
    row TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tbl, key)
);
"""


def _check_table(table: str) -> str:
    if not isinstance(table, str) or not _TABLE_RE.match(table):
        raise ValueError(f"results table name must be letters, digits and _ (max 64), got {table!r}")
    return table


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()


def _loads_or_none(text: Any) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def same_answer(a: Any, b: Any) -> bool:
    """Whether results rows ``a`` and ``b`` (dicts; anything else is no row) hold the answer of one request: the same
    ``request_key``, a non-empty string in both. Rows without one (an error row, a row of before request keys)
    never count as the same answer (review41c #7)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    key = a.get("request_key")
    return isinstance(key, str) and key != "" and key == b.get("request_key")


def request_meta_source(meta: Any) -> tuple[str | None, str | None]:
    """``(provider, provider_kind)`` recorded in a stored response's ``request_meta`` (each None when absent or
    not a string; a ``provider_kind`` outside :data:`geoagent.constants.PROVIDER_KINDS` reads as None)."""
    from geoagent.constants import PROVIDER_KINDS, REQUEST_META_PROVIDER_KIND

    if not isinstance(meta, dict):
        return None, None
    provider, kind = meta.get("provider"), meta.get(REQUEST_META_PROVIDER_KIND)
    return (provider if isinstance(provider, str) else None, kind if kind in PROVIDER_KINDS else None)


def stored_response(response: dict[str, Any], meta: Any) -> ModelResponse:
    """The :class:`~geoagent.providers.base.ModelResponse` of a stored record: its JSON form ``response`` read
    back, marked :attr:`~geoagent.providers.base.ModelResponse.sandbox` when its ``request_meta`` (``meta``)
    recorded that geoagent's simulation answered (``provider_kind = "simulated"``: a sandbox fake on any address,
    or the simulated provider), with :attr:`~geoagent.providers.base.ModelResponse.recorded_kind` the kind recorded
    (None when none was). A caller that reuses a stored answer (a crawl audit after a restart) then records it as
    the call that paid for it did (:func:`geoagent.crawl.llmcall.answer_kind`). Both state backends read their
    records through this."""
    resp = ModelResponse.from_json(response)
    kind = request_meta_source(meta)[1]
    if kind is not None:
        resp = dataclasses.replace(resp, sandbox=kind == "simulated", recorded_kind=kind)
    return resp


#: the results tables a scorer writes one row per task of (``geoverify_scored``, ``geohint_scored``): a row deleted
#: there is scored again by the next run (:func:`geoagent.engine.rescore_lost_rows`), so a damaged one may simply go
RESCORED_TABLES = frozenset({"geoverify_scored", "geohint_scored"})
#: what the next run does with a deleted row of :data:`RESCORED_TABLES`, for the damaged-row messages
RESCORED_HINT = ("if its task is in the current plan, the next run of the campaign scores it again from its queued "
                 "answer (no new model call); a row of a task the plan no longer holds is not scored anyway")


class StoredRowError(ValueError):
    """A row of the campaign's SQLite file holds JSON that cannot be read (the file was edited or damaged outside
    geoagent). The message names the file, the table and the row's key; nothing was written. A ``ValueError``: the
    CLI prints it as one ``error:`` line (exit 2) instead of a traceback."""


class ResponseStore:
    """Response cache keyed by request key, plus keyed JSON results tables.

    Parameters
    ----------
    db : CampaignDB
        The campaign database shared with ``ledger``.
    ledger : Ledger, optional
        Settled inside :meth:`put`'s transaction when a reservation is given.
    """

    def __init__(self, db: CampaignDB, ledger: Ledger | None = None) -> None:
        self.db = db
        self.ledger = ledger
        db.executescript(_SCHEMA)

    def row_error(self, table: str, key: object, problem: str) -> StoredRowError:
        """The :class:`StoredRowError` for row ``key`` of ``table`` in this campaign's SQLite file: names the file,
        the table, the row and ``problem`` (what is wrong with it)."""
        fix = ""
        if table in RESCORED_TABLES:
            quoted = str(key).replace("'", "''")
            fix = (f", or delete that row (sqlite3: DELETE FROM results WHERE tbl = '{table}' AND key = '{quoted}';): "
                   + RESCORED_HINT)
        return StoredRowError(
            f"{getattr(self.db, 'path', 'campaign.sqlite')}: table {table!r}, row {key!r}: {problem}: the file was "
            f"changed or damaged outside geoagent; nothing stored was changed. Restore it from a backup{fix}")

    def _json(self, text: Any, table: str, key: object) -> Any:
        """``orjson.loads(text)`` of the stored row ``key`` of ``table``; :class:`StoredRowError` naming them and
        the file when it is not JSON."""
        try:
            return orjson.loads(text)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise self.row_error(table, key, f"the stored JSON cannot be read ({exc})") from None

    # -- responses ------------------------------------------------------------------------------------

    def has(self, key: str) -> bool:
        """Whether a response for request ``key`` is stored."""
        return bool(self.db.read("SELECT 1 FROM responses WHERE key = ?", (key,)))

    def has_many(self, keys: Sequence[str]) -> list[bool]:
        """:meth:`has` of each of ``keys``, in order (the shape of
        :meth:`geoagent.runtime.redis_state.RedisResponseStore.has_many`, which batches its round trips)."""
        return [self.has(k) for k in keys]

    def get(self, key: str) -> ModelResponse | None:
        """The stored response for request ``key``, or None."""
        rows = self.db.read("SELECT response, request_meta FROM responses WHERE key = ?", (key,))
        return stored_response(self._json(rows[0][0], "responses", key), self._json(rows[0][1], "responses", key)) \
            if rows else None

    def get_record(self, key: str) -> dict[str, Any] | None:
        """Stored response with its request metadata, cost (USD) and time, or None."""
        rows = self.db.read(
            "SELECT model, request_meta, response, reservation_id, cost_usd, created_at FROM responses WHERE key = ?",
            (key,),
        )
        if not rows:
            return None
        model, meta, resp, rid, cost, created = rows[0]
        return {
            "key": key,
            "model": model,
            "request_meta": self._json(meta, "responses", key),
            "response": self._json(resp, "responses", key),
            "reservation_id": rid,
            "cost_usd": cost,
            "created_at": created,
        }

    def put(
        self,
        key: str,
        request_meta: dict[str, Any],
        response: ModelResponse,
        reservation: Reservation | None,
        *,
        cost_usd: float = 0.0,
    ) -> bool:
        """Store ``response`` under ``key`` and settle ``reservation`` with its usage in ONE transaction.

        Parameters
        ----------
        key : str
            Request key (:func:`geoagent.providers.base.request_key`).
        request_meta : dict
            JSON-able description of the request (model, params, image id, prompt hash...). Never secrets
            and never image bytes.
        response : ModelResponse
        reservation : Reservation or None
            The ledger reservation of this call; settled at ``cost_usd`` with ``response.usage``.
        cost_usd : float
            Actual cost of the call (USD), from the usage and the model's prices.

        Returns
        -------
        bool
            True if stored now; False if a response was already stored under ``key`` (the first one is
            kept; the reservation is still settled, since this call was made and paid for).
        """
        meta_text = _dumps(request_meta)
        resp_text = _dumps(response.to_json())
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO responses (key, model, request_meta, response, reservation_id, cost_usd,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    request_meta.get("model_name") or request_meta.get("model"),
                    meta_text,
                    resp_text,
                    reservation.id if reservation is not None else None,
                    float(cost_usd),
                    time.time(),
                ),
            )
            if reservation is not None:
                if self.ledger is None:
                    raise RuntimeError("ResponseStore.put got a reservation but the store has no ledger")
                self.ledger.settle(reservation, response.usage, cost_usd)
            return cur.rowcount == 1

    def count_responses(self) -> int:
        return int(self.db.read("SELECT COUNT(*) FROM responses")[0][0])

    def count_responses_by_model(self) -> dict[str, int]:
        """Stored responses per model name (one per request key)."""
        return {str(m): int(n) for m, n in self.db.read("SELECT model, COUNT(*) FROM responses GROUP BY model")}

    def iter_response_meta(self, *, batch: int = 5000) -> Iterator[dict[str, Any]]:
        """Every stored response's ``key``, ``model`` and ``request_meta`` (no answer text): what was asked,
        e.g. for :func:`geoagent.runtime.drift.params_mix`."""
        last = -1
        while True:
            rows = self.db.read("SELECT rowid, key, model, request_meta FROM responses WHERE rowid > ? ORDER BY rowid"
                                " LIMIT ?", (last, batch))
            if not rows:
                return
            for rowid, key, model, meta in rows:
                last = rowid
                yield {"key": key, "model": model, "request_meta": self._json(meta, "responses", key)}

    def iter_responses(self, *, batch: int = 1000) -> Iterator[dict[str, Any]]:
        """Every stored response as a flat dict (key, model, cost_usd, created_at, request_meta, response fields)."""
        last = -1
        while True:
            rows = self.db.read(
                "SELECT rowid, key, model, request_meta, response, cost_usd, created_at FROM responses"
                " WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last, batch),
            )
            if not rows:
                return
            for rowid, key, model, meta, resp, cost, created in rows:
                last = rowid
                yield {
                    "key": key,
                    "model": model,
                    "cost_usd": cost,
                    "created_at": created,
                    "request_meta": self._json(meta, "responses", key),
                    **self._json(resp, "responses", key),
                }

    def _rows_by_key(self, keys: Iterable[str], columns: str, chunk: int) -> Iterator[tuple[Any, ...]]:
        """Rows ``(key, *columns)`` of the stored responses of ``keys`` (non-string keys and repeats ignored), one
        query per ``chunk`` keys (SQLite's parameter limit); ``columns`` is a fixed column list of this class."""
        wanted = list(dict.fromkeys(k for k in keys if isinstance(k, str)))
        for i in range(0, len(wanted), chunk):
            part = wanted[i:i + chunk]
            marks = ",".join("?" * len(part))
            yield from self.db.read(f"SELECT key, {columns} FROM responses WHERE key IN ({marks})", tuple(part))

    def response_texts(self, keys: Iterable[str], *, chunk: int = 500) -> dict[str, str]:
        """Request key -> stored answer text (:attr:`ModelResponse.text`, verbatim) for those of ``keys`` that
        have a stored response; one query per ``chunk`` keys (SQLite's parameter limit)."""
        out: dict[str, str] = {}
        for key, resp in self._rows_by_key(keys, "response", chunk):
            text = self._json(resp, "responses", key).get("text")
            if isinstance(text, str):
                out[key] = text
        return out

    def response_usage_reported(self, keys: Iterable[str], *, chunk: int = 500) -> dict[str, bool]:
        """Request key -> whether the stored response's usage counts are the provider's own (False where the
        answer was stored with ``"usage_reported": false``, a worst-case booking; True without the field), for
        those of ``keys`` that have a stored response; one query per ``chunk`` keys. Read by the export's
        ``usage_reported`` column of ``results`` rows written before it (:mod:`geoagent.runtime.export`)."""
        out: dict[str, bool] = {}
        for key, resp in self._rows_by_key(keys, "response", chunk):
            try:
                got = orjson.loads(resp)
            except orjson.JSONDecodeError:
                continue  # unreadable: no answer (the column stays null)
            out[key] = not (isinstance(got, dict) and got.get("usage_reported", True) is False)
        return out

    def response_sources(self, keys: Iterable[str], *, chunk: int = 500
                         ) -> dict[str, tuple[str | None, str | None, str | None]]:
        """Request key -> ``(model, provider, provider_kind)`` of the stored response: the ``[[models]]`` name that
        asked, the provider recorded with the request (``request_meta.provider``, e.g. ``"replay"``) and what
        answered it, recorded at call time (``request_meta.provider_kind``, :data:`geoagent.constants.PROVIDER_KINDS`;
        None for a response stored before it was recorded), each None when not recorded, for those of ``keys`` that
        have a stored response; one query per ``chunk`` keys. Read by the export's ``replayed`` and ``simulated``
        columns (:mod:`geoagent.runtime.export`)."""
        out: dict[str, tuple[str | None, str | None, str | None]] = {}
        for key, model, meta in self._rows_by_key(keys, "model, request_meta", chunk):
            try:
                rm = orjson.loads(meta)
            except orjson.JSONDecodeError:
                rm = None
            out[key] = (model if isinstance(model, str) else None, *request_meta_source(rm))
        return out

    # -- results tables ---------------------------------------------------------------------------

    def put_result(self, table: str, key: str, row: dict[str, Any], *, overwrite: bool = True) -> bool:
        """Write ``row`` (JSON-able dict) under ``(table, key)``; return True if written.

        ``overwrite=False`` keeps an existing row (first writer wins) and returns False for it.
        """
        return self.put_results(table, [(key, row)], overwrite=overwrite) == 1

    def put_results(self, table: str, items: Iterable[tuple[str, dict[str, Any]]], *, overwrite: bool = True) -> int:
        """Write many rows of one table in one transaction; return how many were written."""
        _check_table(table)
        verb = "INSERT OR REPLACE" if overwrite else "INSERT OR IGNORE"
        now = time.time()
        payload = [(table, str(k), _dumps(r), now) for k, r in items]
        with self.db.transaction() as conn:
            n = 0
            for params in payload:
                n += conn.execute(f"{verb} INTO results (tbl, key, row, updated_at) VALUES (?, ?, ?, ?)", params).rowcount
            return n

    def move_results(self, table: str, moves: Iterable[tuple[str, str, dict[str, Any]]]) -> tuple[int, int]:
        """Move rows of one table to other keys, in one transaction; ``moves``: ``(old_key, new_key, row)`` with
        ``row`` the row read under ``old_key``. Returns ``(moved, dropped)``.

        ``row`` is written under ``new_key`` only when that key has no row (``INSERT OR IGNORE``: a row another
        process stored there since ``row`` was read is kept; review41c #3), and ``old_key``'s row is deleted only
        when ``new_key`` now holds this answer: ``row`` as written here (moved), or a row of the same request
        (:func:`same_answer`, or the same JSON; dropped). Otherwise both rows stay. A row moved to another key is
        never lost nor stored twice, whenever the process dies."""
        _check_table(table)
        now = time.time()
        payload = [(str(old), str(new), _dumps(r), r) for old, new, r in moves]
        moved, gone = 0, []
        with self.db.transaction() as conn:
            for old, new, text, row in payload:
                if conn.execute("INSERT OR IGNORE INTO results (tbl, key, row, updated_at) VALUES (?, ?, ?, ?)",
                                (table, new, text, now)).rowcount:
                    moved += 1
                    gone.append((table, old))
                    continue
                there = conn.execute("SELECT row FROM results WHERE tbl = ? AND key = ?", (table, new)).fetchone()
                if there is not None and (there[0] == text or same_answer(_loads_or_none(there[0]), row)):
                    gone.append((table, old))
            conn.executemany("DELETE FROM results WHERE tbl = ? AND key = ?", gone)
        return moved, len(gone) - moved

    def put_result_unless_other(self, table: str, key: str, row: dict[str, Any], fallback_key: str) -> str:
        """Write ``row`` under ``key`` unless that key holds another answer, else under ``fallback_key``, deciding
        inside ONE transaction; returns the key written.

        ``key`` gets ``row`` when it has no row (``INSERT OR IGNORE``) or holds a row of the same request
        (:func:`same_answer`: overwritten, as a redelivered task overwrites its own row); a row of another answer
        stored there is kept, and ``row`` is written under ``fallback_key`` (overwrite). The scorer's write of a
        swapped-image task queued under its earlier key (:func:`geoagent.geoverify.stages._store_scored`): a look
        outside the write let another process's row stored between the look and the write be overwritten (fixgeohint42
        #3; as :meth:`move_results`, review41c #3).

        Raises
        ------
        ValueError
            ``table`` is no results table name (letters, digits and ``_``, at most 64: ``_check_table``), before
            anything is written.
        """
        _check_table(table)
        text, now = _dumps(row), time.time()
        with self.db.transaction() as conn:
            if conn.execute("INSERT OR IGNORE INTO results (tbl, key, row, updated_at) VALUES (?, ?, ?, ?)",
                            (table, str(key), text, now)).rowcount:
                return str(key)
            there = conn.execute("SELECT row FROM results WHERE tbl = ? AND key = ?", (table, str(key))).fetchone()
            at = str(key) if there is not None and same_answer(_loads_or_none(there[0]), row) else str(fallback_key)
            conn.execute("INSERT OR REPLACE INTO results (tbl, key, row, updated_at) VALUES (?, ?, ?, ?)",
                         (table, at, text, now))
            return at

    def get_result(self, table: str, key: str) -> dict[str, Any] | None:
        rows = self.db.read("SELECT row FROM results WHERE tbl = ? AND key = ?", (_check_table(table), key))
        return self._json(rows[0][0], table, key) if rows else None

    def count_results(self, table: str) -> int:
        return int(self.db.read("SELECT COUNT(*) FROM results WHERE tbl = ?", (_check_table(table),))[0][0])

    def result_tables(self) -> list[str]:
        """Names of the non-empty results tables, sorted."""
        return [r[0] for r in self.db.read("SELECT DISTINCT tbl FROM results ORDER BY tbl")]

    def result_keys(self, table: str, *, batch: int = 10000) -> Iterator[str]:
        """The keys of ``table``'s rows in key order, fetched in batches of ``batch`` (the rows are not read)."""
        _check_table(table)
        last = ""
        while True:
            rows = self.db.read("SELECT key FROM results WHERE tbl = ? AND key > ? ORDER BY key LIMIT ?",
                                (table, last, batch))
            if not rows:
                return
            for (key,) in rows:
                yield key
            last = rows[-1][0]

    def result_keys_among(self, table: str, keys: Iterable[str], *, chunk: int = 500) -> set[str]:
        """Those of ``keys`` that have a row in ``table`` (the rows are not read); one query per ``chunk`` keys."""
        _check_table(table)
        wanted = list(dict.fromkeys(keys))
        there: set[str] = set()
        for i in range(0, len(wanted), chunk):
            part = wanted[i:i + chunk]
            there.update(k for (k,) in self.db.read(
                f"SELECT key FROM results WHERE tbl = ? AND key IN ({','.join('?' * len(part))})", (table, *part)))
        return there

    def iter_results(self, table: str, *, batch: int = 1000) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(key, row)`` pairs of ``table`` in key order, fetched in batches (constant memory)."""
        _check_table(table)
        last: str | None = None
        while True:
            if last is None:
                sql, params = "SELECT key, row FROM results WHERE tbl = ? ORDER BY key LIMIT ?", (table, batch)
            else:
                sql = "SELECT key, row FROM results WHERE tbl = ? AND key > ? ORDER BY key LIMIT ?"
                params = (table, last, batch)
            rows = self.db.read(sql, params)
            if not rows:
                return
            for key, row in rows:
                last = key
                yield key, self._json(row, table, key)

    # -- async front-ends (run on the database thread) --------------------------------------------

    async def aget(self, key: str) -> ModelResponse | None:
        return await self.db.run(self.get, key)

    async def ahas(self, key: str) -> bool:
        return await self.db.run(self.has, key)

    async def aput(
        self, key: str, request_meta: dict[str, Any], response: ModelResponse, reservation: Reservation | None, *, cost_usd: float = 0.0
    ) -> bool:
        return await self.db.run(self.put, key, request_meta, response, reservation, cost_usd=cost_usd)

    def put_shielded(
        self, key: str, request_meta: dict[str, Any], response: ModelResponse, reservation: Reservation | None, *, cost_usd: float = 0.0
    ) -> "asyncio.Future[bool]":
        """:meth:`put` queued on the database thread NOW (group commit), awaited through ``asyncio.shield``.

        What ``await asyncio.shield(store.aput(...))`` does, without the task that shielding a coroutine starts:
        the job is queued before this returns, and cancelling the awaiting task does not cancel it (its
        transaction still commits; the caller just stops waiting). Call from a running event loop.

        Returns
        -------
        asyncio.Future of bool
            Resolves after the group's ``COMMIT`` with :meth:`put`'s result, or its exception.
        """
        return asyncio.shield(self.db.submit_async(partial(self.put, key, request_meta, response, reservation,
                                                           cost_usd=cost_usd)))

    async def aput_result(self, table: str, key: str, row: dict[str, Any], *, overwrite: bool = True) -> bool:
        return await self.db.run(self.put_result, table, key, row, overwrite=overwrite)

    async def aput_results(self, table: str, items: list[tuple[str, dict[str, Any]]], *, overwrite: bool = True) -> int:
        return await self.db.run(self.put_results, table, items, overwrite=overwrite)

    async def aget_result(self, table: str, key: str) -> dict[str, Any] | None:
        return await self.db.run(self.get_result, table, key)

    async def aput_result_unless_other(self, table: str, key: str, row: dict[str, Any], fallback_key: str) -> str:
        return await self.db.run(self.put_result_unless_other, table, key, row, fallback_key)


@dataclass
class CampaignState:
    """The opened campaign database with its ledger and store (close with :meth:`close`)."""

    db: CampaignDB
    ledger: Ledger
    store: ResponseStore

    @property
    def state_dir(self) -> Path:
        return self.db.path.parent

    def close(self) -> None:
        """Drop this process's ledger owner record (if nothing is open) and close the database."""
        try:
            self.ledger.retire()
        except Exception:  # noqa: BLE001 - closing must not fail on a busy or closed file
            pass
        self.db.close()

    def __enter__(self) -> "CampaignState":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_campaign_state(
    campaign: str,
    *,
    root: str | os.PathLike[str] | None = None,
    cap_usd: float | None = None,
    recover: bool = True,
    recover_all: bool = False,
    synchronous: str = "NORMAL",
    redis_url: str | None = None,
    make_state_dir: bool = True,
) -> Any:
    """Open ``<state root>/<campaign>/campaign.sqlite`` and return its ledger and store.

    Parameters
    ----------
    campaign : str
        Campaign name (a safe file name).
    root : path, optional
        State root (default :func:`geoagent.paths.state_root`: ``$GEOAGENT_STATE`` or ``state/``);
        pass ``cfg.state_root()`` to honour the config.
    cap_usd : float, optional
        The budget cap to record (None keeps the stored one).
    recover, recover_all : bool
        Crash recovery of open reservations, see :class:`geoagent.runtime.ledger.Ledger`.
    redis_url : str, optional
        Keep the ledger and the store on this Redis server instead (shared by machines,
        :func:`geoagent.runtime.redis_state.open_redis_campaign_state`; a secret, never logged); the state
        folder above stays this machine's (manifest, plan keys, progress).
    make_state_dir : bool
        With ``redis_url`` only: False leaves a missing state folder missing (``run.py export --out DIR``); the
        SQLite file always needs its folder.

    Returns
    -------
    CampaignState or geoagent.runtime.redis_state.RedisCampaignState
        Both have ``ledger``, ``store``, ``db`` (job thread: ``run``/``submit``), ``state_dir`` and ``close``.
    """
    directory = state_root(root) / safe_name(campaign, what="campaign name")
    if redis_url is not None:
        from geoagent.runtime.redis_state import open_redis_campaign_state

        return open_redis_campaign_state(redis_url, campaign, directory, cap_usd=cap_usd, recover=recover,
                                         recover_all=recover_all, make_state_dir=make_state_dir)
    # a new file is made whole, ledger and store tables in one step (race45: a look between them met no store)
    db = CampaignDB(directory / C.CAMPAIGN_DB, synchronous=synchronous, schema=(_LEDGER_SCHEMA, _SCHEMA))
    try:
        ledger = Ledger(db, cap_usd, recover=recover, recover_all=recover_all)
        store = ResponseStore(db, ledger)
    except BaseException:
        db.close()
        raise
    return CampaignState(db, ledger, store)
