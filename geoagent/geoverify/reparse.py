"""Parse again the stored GeoVerify answers an earlier verdict parser read (no model call, no spend).

Every scored row records the :data:`~geoagent.geoverify.parse.VERDICT_PARSER_VERSION` whose rules read its answer
(``parser_version``; a row written before the field existed was read by version 1). When the rules change, a
campaign's stored rows would keep the earlier reading and a report would mix two parsers, with no sign of it. The
answer text is kept in the response store under the row's ``request_key``, so a stale row is simply parsed and
scored again (:func:`reparsed_row`):

* a run re-reads every stale row of its store before its workers start (:func:`refresh_stored_rows`, called by
  :meth:`geoagent.geoverify.campaign.GeoVerifyCampaign.refresh_scored_rows`) and says how many verdicts changed;
* ``run.py export`` exports the current reading of a stale row without writing the store (:func:`reparse_items`);
* the scorer parses again an answer still queued by an earlier parser (:class:`geoagent.geoverify.stages.
  GeoVerifyScorerStage`).

A row whose answer text cannot be found (no stored response under its key, and no ``raw`` in the row) keeps its
reading and version, and is counted as such.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from geoagent.geoverify.aggregate import scored_row_problem
from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, parse_verdict
from geoagent.geoverify.score import scored_row
from geoagent.runtime.scope import ScoredScope
from geoagent.textfmt import finish_reason_text

#: rows written per batch by :func:`refresh_stored_rows`
BATCH = 1000


def row_parser_version(row: dict[str, Any]) -> int:
    """The parser version that read ``row`` (a stored scored row): its ``parser_version``, 1 when it has none (rows
    written before 2026-12-03) or when the value is not a positive integer (a hand-edited row: read again)."""
    v = row.get("parser_version", 1)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else 1


def is_stale(row: dict[str, Any]) -> bool:
    """Whether ``row`` was read by a parser older than :data:`VERDICT_PARSER_VERSION`."""
    return row_parser_version(row) < VERDICT_PARSER_VERSION


def reparsed_row(row: dict[str, Any], store: Any) -> dict[str, Any] | None:
    """``row`` (a stored ``geoverify_scored`` row) parsed and scored again by the current rules, or None when its
    answer text cannot be found.

    The text is the stored response's under ``row["request_key"]`` (the store's synchronous ``get``), else the
    row's own ``raw`` (kept with a parse failure). Every field of the row is kept except those
    :func:`geoagent.geoverify.score.scored_row` writes; a ``raw`` the row holds is kept (it may be the only copy of
    the text, and the export fills it in for every row: rev26 #4, #5), and a row that now fails to parse gets the
    text as ``raw``. A row without ``finish_reason`` gets the stored response's; either is read and stored cleaned
    (:func:`geoagent.textfmt.finish_reason_text`, verdict parser 11: a row stored by 10 may hold the reason as the
    server sent it, fixreason43 #1). Source of the rules:
    :func:`geoagent.geoverify.parse.parse_verdict`.
    """
    resp = None
    key = row.get("request_key")
    if isinstance(key, str) and key and store is not None and hasattr(store, "get"):
        resp = store.get(key)
    if resp is not None:
        text = resp.text
    elif "raw" in row:
        text = row["raw"]
    else:
        return None
    finish = finish_reason_text(row.get("finish_reason") if "finish_reason" in row or resp is None
                                else resp.finish_reason)
    new = {**row, **scored_row(row, row["model"], parse_verdict(text, finish), finish_reason=finish)}
    if not new["parse_ok"]:
        new["raw"] = text
    return new


def _reading(row: dict[str, Any]) -> tuple[Any, Any, Any]:
    return row.get("verdict"), row.get("conf"), bool(row.get("parse_ok"))


@dataclass(slots=True)
class Refreshed:
    """What :func:`refresh_stored_rows` did: ``stale`` rows read by an earlier parser, ``reparsed`` of them
    parsed again and written, ``changed`` of those whose verdict, confidence or parse success differs, and
    ``no_text`` left as they were (no answer text found); ``versions`` the earlier versions met."""

    stale: int = 0
    reparsed: int = 0
    changed: int = 0
    no_text: int = 0
    versions: tuple[int, ...] = ()

    def line(self, campaign: str) -> str | None:
        """The ``info:`` line a run prints, None when no row was stale."""
        if not self.stale:
            return None
        old = ", ".join(str(v) for v in self.versions)
        parts = []
        if self.reparsed:
            one = self.reparsed == 1
            parts.append(f"{self.reparsed} stored answer{'' if one else 's'} read by an earlier verdict parser (version "
                         f"{old}) {'was' if one else 'were'} parsed again by version {VERDICT_PARSER_VERSION} from the "
                         f"stored text (no model call): {self.changed} changed verdict, confidence or parse success")
        if self.no_text:
            one = self.no_text == 1
            parts.append(f"{self.no_text} stored answer{'' if one else 's'} read by an earlier verdict parser (version "
                         f"{old}) {'has' if one else 'have'} no stored text and keep{'s' if one else ''} that reading "
                         "(its parser_version in the export says so)")
        return f"info: campaign {campaign}: " + "; ".join(parts) + "."


def refresh_stored_rows(store: Any, table: str, *, before_write: Callable[[], None] | None = None) -> Refreshed:
    """Parse again, and write back, every row of results table ``table`` read by an earlier parser.

    One pass over the table (``store.iter_results``), rows written back in batches of :data:`BATCH`
    (``store.put_results``, overwrite). Rows read by the current parser are not written. ``before_write`` is
    called once before the first batch is written (the run's "work began" mark, review40b #5; not called when no
    row is written). Returns the :class:`Refreshed` counts.

    Raises
    ------
    geoagent.runtime.store.StoredRowError
        A row's JSON cannot be read, or a stale row is no scored row (a field missing or of the wrong type:
        :func:`geoagent.geoverify.aggregate.scored_row_problem`); the store names the file, table and key.
    """
    out = Refreshed()
    checker = ScoredScope(None, table=table, check=scored_row_problem)  # the report's row check and its error
    versions: set[int] = set()
    batch: list[tuple[str, dict[str, Any]]] = []
    for key, row in store.iter_results(table):
        if not isinstance(row, dict) or not is_stale(row):
            continue
        checker.checked(store, key, row)  # damaged outside geoagent: named as the report's reading would (rev26 #8)
        out.stale += 1
        versions.add(row_parser_version(row))
        new = reparsed_row(row, store)
        if new is None:
            out.no_text += 1
            continue
        out.reparsed += 1
        out.changed += _reading(new) != _reading(row)
        batch.append((key, new))
        if len(batch) >= BATCH:
            _put(store, table, batch, before_write)
            batch, before_write = [], None  # called before the first batch only
    if batch:
        _put(store, table, batch, before_write)
    out.versions = tuple(sorted(versions))
    return out


def _put(store: Any, table: str, batch: list[tuple[str, dict[str, Any]]], first: Callable[[], None] | None) -> None:
    """Write ``batch`` into results table ``table``, calling ``first`` (when given) before it."""
    if first is not None:
        first()
    store.put_results(table, batch)


def reparse_items(items: Iterable[tuple[str, dict[str, Any]]], store: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key, row)`` of ``items`` with each stale row replaced by its current reading (:func:`reparsed_row`; a
    row without a text found stays as it is); nothing is written. The export's view of a store not yet refreshed
    by a run."""
    for key, row in items:
        if isinstance(row, dict) and is_stale(row) and scored_row_problem(row) is None:
            new = reparsed_row(row, store)
            # a row without a text found keeps its reading, and says which parser read it (1 when it has no field)
            row = new if new is not None else {**row, "parser_version": row_parser_version(row)}
        yield key, row
