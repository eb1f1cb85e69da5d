"""Read again the stored GeoHint answers an earlier answer parser read (no model call, no spend).

Every scored row records the :data:`~geoagent.geohint.parse.ANSWER_PARSER_VERSION` whose rules read its answer
(``extra.parser_version``; a row without it was parsed before versions were recorded: version 0 here). When the rules
change, a campaign's stored rows would keep the earlier reading and a report would mix two parsers, with no sign of
it (fixreparse41; GeoVerify's counterpart is :mod:`geoagent.geoverify.reparse`). The answer text is kept in the
response store under the row's ``extra.request_key`` (a row whose answer failed to parse while the parser still put
the text on the queue holds it as ``extra.raw``), so a stale row is parsed again from it (:func:`reread`). What
follows depends on the place the new reading sends to the geocoder (:func:`place_of`: city, area, building, as
:meth:`geoagent.geohint.geocode.ParsedAnswer.from_payload` reads them):

* the same place (and the same no-answer status, :func:`geoagent.scoring.truncation.is_no_answer`): the geocoder
  would find the same point and the scorer the same hit, distance and echo, so only the parse fields and the version
  of the row change (:func:`updated_row`);
* another place: the answer is geocoded and scored again (:class:`Regeocoder`: the campaign's own
  :class:`~geoagent.geohint.geocode_stage.GeocodeStage`, on the run's rate-limited HTTP client and geocode cache,
  then :func:`geoagent.geohint.stages.score_located`), from the request the current plan holds under the row's key
  (its ``meta``: the site's coordinates, the reference point's names).

Where this happens:

* a run re-reads every stale row of its store before its workers start (:func:`refresh_stored_rows`, called by
  :meth:`geoagent.geohint.campaign.GeoHintCampaign.refresh_scored_rows`) and says how many answers were read again,
  how many changed and how many were geocoded again; each row is written only once its new reading is complete
  (the unchanged places in batches, each re-geocoded row on its own), so a run killed midway loses nothing and the
  next run finishes the refresh; the run's work-began mark is recorded before the first write, so ``status`` reads
  a run killed after it as cut short, not complete (review41a #2);
* ``run.py export`` exports the current reading of a stale row whose place is unchanged without writing the store,
  and says how many rows keep an earlier reading (another place, not geocoded yet; no stored text)
  (:func:`reparse_items`);
* the geocoder parses again an answer still queued by an earlier parser before it geocodes it, and the scorer one
  still queued for it when the place is unchanged (:func:`current_payload`).

The raw importer (:mod:`geoagent.geohint.raw_import`) keeps no store: it parses every raw text again at each run, so
its rows are always read by the current parser.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from geoagent import constants as C
from geoagent.geohint.geocode import ParsedAnswer as Place
from geoagent.geohint.parse import ANSWER_PARSER_VERSION, ParsedAnswer, finish_reason_text, parse_answer
from geoagent.geohint.result import GeoHintResult
from geoagent.runtime.stage import BudgetStop, Held, PermanentFailure
from geoagent.scoring.truncation import is_no_answer

#: rows written per batch by :func:`refresh_stored_rows` (those whose place is unchanged)
BATCH = 1000


def version_of(value: Any) -> int:
    """A recorded parser version as an int: the value when it is a positive integer, else 0 (none recorded: parsed
    before versions were recorded, or a hand-edited value: read again)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 0


def row_parser_version(row: Mapping[str, Any]) -> int:
    """The parser version that read ``row`` (a stored ``geohint_scored`` row): its ``extra.parser_version``, 0
    when it has none (:func:`version_of`)."""
    extra = row.get("extra")
    return version_of(extra.get("parser_version")) if isinstance(extra, Mapping) else 0


def is_stale(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` was read by a parser older than :data:`ANSWER_PARSER_VERSION`."""
    return row_parser_version(row) < ANSWER_PARSER_VERSION


def place_of(fields: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """``(city, area, building)`` as the geocoder reads them from a parsed answer or a scored row (stripped text,
    None when absent or empty: :meth:`geoagent.geohint.geocode.ParsedAnswer.from_payload`)."""
    p = Place.from_payload({"parsed": dict(fields)})
    return p.city, p.area, p.building


@dataclass(slots=True)
class Reread:
    """One stored answer read again: the new ``parsed`` answer, the ``finish`` reason it was read with, the
    ``text`` and whether it came from the row itself (``from_row``: ``extra.raw``, the only copy), and whether the
    geocoder would get the same place with the same no-answer status (``same_place``)."""

    parsed: ParsedAnswer
    finish: str | None
    text: str
    from_row: bool
    same_place: bool


def _extra(row: Mapping[str, Any]) -> dict[str, Any]:
    extra = row.get("extra")
    return extra if isinstance(extra, dict) else {}


def reread(row: Mapping[str, Any], store: Any) -> Reread | None:
    """``row`` (a stored ``geohint_scored`` row) parsed again by the current rules, or None when its answer text
    cannot be found.

    The text is the stored response's under ``extra.request_key`` (the store's synchronous ``get``), else the row's
    own ``extra.raw``. The finish reason is the row's ``extra.finish_reason``, else the stored response's. Source of
    the rules: :func:`geoagent.geohint.parse.parse_answer`."""
    extra = _extra(row)
    key = extra.get("request_key")
    resp = store.get(key) if isinstance(key, str) and key and store is not None and hasattr(store, "get") else None
    if resp is not None and isinstance(resp.text, str):
        text, from_row = resp.text, False
    elif isinstance(extra.get("raw"), str):
        text, from_row = extra["raw"], True
    else:
        return None
    stored = extra.get("finish_reason")
    if stored is None and resp is not None:
        stored = resp.finish_reason
    # read and stored cleaned from answer parser 8 on (crawl43 #3); the row's no-answer status was judged on the
    # reason as it was stored, so a reason that reads otherwise cleaned is no same reading
    finish = finish_reason_text(stored)
    parsed = parse_answer(text, finish)
    same = (place_of(parsed.to_json()) == place_of(row)
            and is_no_answer(finish, parsed.ok) == is_no_answer(stored, bool(row.get("parse_ok"))))
    return Reread(parsed, finish, text, from_row, same)


def updated_row(row: Mapping[str, Any], got: Reread) -> dict[str, Any]:
    """``row`` with the parse fields of ``got`` (a :class:`Reread` of the same place) and the current version: what
    :func:`geoagent.geohint.stages.score_located` writes from them (city, area, building, confidences, ``parse_ok``,
    ``evidence``; ``extra`` ``parse_error``, ``parse_method``, ``evidence_slots``, ``parser_version``,
    ``finish_reason``). The geocoded fields, hit and echo are kept: the geocoder gets the same place. A ``raw``
    the row holds is kept (it may be the only copy of the text); none is added (the text is in the response store,
    where the export reads it, as for every row the scorer writes)."""
    p = got.parsed
    extra = dict(_extra(row))
    extra.update({"parse_error": p.error, "parse_method": p.method, "parser_version": ANSWER_PARSER_VERSION,
                  "finish_reason": got.finish})
    extra.pop("evidence_slots", None)
    if isinstance(p.evidence_slots, dict):
        extra["evidence_slots"] = p.evidence_slots
    return {**row, "city": p.city, "area": p.area, "building": p.building, "confidence_area": p.confidence_area,
            "confidence_building": p.confidence_building, "parse_ok": p.ok,
            "evidence": p.evidence if isinstance(p.evidence, dict) else None, "extra": extra}


def answer_payload(request: Mapping[str, Any], row: Mapping[str, Any], got: Reread) -> dict[str, Any]:
    """The ``answers`` message the parser would send for ``row`` read as ``got``: ``request`` is the planned
    ``requests`` payload under the row's key (``model``, ``image_id``, ``meta``), the parse without its verbatim text
    (as :class:`geoagent.geohint.stages.GeoHintParserStage` sends it)."""
    extra = _extra(row)
    return {"model": request.get("model"), "request_key": extra.get("request_key"),
            "image_id": request.get("image_id"), "meta": dict(request.get("meta") or {}),
            "parsed": {k: v for k, v in got.parsed.to_json().items() if k != "raw"},
            "parser_version": ANSWER_PARSER_VERSION, "finish_reason": got.finish}


def _reading(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (place_of(row), bool(row.get("parse_ok")), row.get("confidence_area"), row.get("confidence_building"),
            row.get("evidence"))


class Regeocoder:
    """Geocodes and scores again the answers whose place changed: a
    :class:`~geoagent.geohint.geocode_stage.GeocodeStage` on the process's one geocoder (started from the run's
    context at its first answer: :func:`~geoagent.geohint.geocode_stage.shared_geocoder`, the one the workers' stage
    takes after it: the ``[geohint.geocoder]`` settings, the rate-limited HTTP client, one geocode cache, one
    Nominatim request cap per process; a refusal met here stops the workers' geocoder too: review41a #1), then
    :func:`geoagent.geohint.stages.score_located` under ``echo_rule``.

    ``planned(keys)`` returns the current plan's ``requests`` payloads by key for those of ``keys`` it holds (a row
    whose task is not in the plan cannot be geocoded again: its request, and with it the site's coordinates and the
    reference point's names, is not known)."""

    def __init__(self, ctx: Any, planned: Callable[[set[str]], Mapping[str, Mapping[str, Any]]], *,
                 echo_rule: str) -> None:
        from geoagent.geohint.geocode_stage import GeocodeStage

        self.ctx, self.planned, self.echo_rule = ctx, planned, echo_rule
        self.stage = GeocodeStage()

    async def rescore(self, key: str, answer: dict[str, Any]) -> dict[str, Any]:
        """The scored row of ``answer`` (an ``answers`` payload) geocoded again. Raises what
        :meth:`GeocodeStage.handle` raises (a cap reached, a refusal, a lookup failed)."""
        from geoagent.geohint.stages import score_located
        from geoagent.runtime.queue import Task

        (_, located), = await self.stage.handle(Task(key, answer, 0, "reparse"), self.ctx)
        return score_located(key, located, echo_rule=self.echo_rule).to_json()


@dataclass(slots=True)
class Refreshed:
    """What :func:`refresh_stored_rows` did: ``stale`` rows read by an earlier parser; ``reparsed`` of them read
    again from their text; ``changed`` of those whose place, parse success, confidences or evidence differ;
    ``regeocoded`` of those, with another place, geocoded and scored again; ``pending`` with another place left as
    they were (``why``: the reason), ``no_text`` left as they were (no answer text found); ``versions`` the earlier
    versions met (0: none recorded)."""

    stale: int = 0
    reparsed: int = 0
    changed: int = 0
    regeocoded: int = 0
    pending: int = 0
    no_text: int = 0
    versions: tuple[int, ...] = ()
    why: list[str] = field(default_factory=list)

    def line(self, campaign: str) -> str | None:
        """The ``info:`` line a run prints, None when no row was stale."""
        if not self.stale:
            return None
        named = ", ".join(str(v) for v in self.versions if v)
        old = " or ".join(filter(None, (f"version {named}" if named else "",
                                        "no version recorded" if 0 in self.versions else "")))
        parts = []
        if self.reparsed:
            one = self.reparsed == 1
            parts.append(f"{self.reparsed} stored answer{'' if one else 's'} read by an earlier answer parser ({old}) "
                         f"{'was' if one else 'were'} read again by version {ANSWER_PARSER_VERSION} from the "
                         f"stored text (no model call): {self.changed} changed their reading, {self.regeocoded} of "
                         "them naming another place geocoded and scored again")
        if self.pending:
            one = self.pending == 1
            parts.append(f"{self.pending} naming another place {'keeps' if one else 'keep'} the earlier reading for "
                         f"now ({'; '.join(dict.fromkeys(self.why))})")
        if self.no_text:
            one = self.no_text == 1
            parts.append(f"{self.no_text} stored answer{'' if one else 's'} read by an earlier answer parser "
                         f"{'has' if one else 'have'} no stored text and keep{'s' if one else ''} that reading "
                         "(its extra.parser_version in the export says so)")
        return f"info: campaign {campaign}: " + "; ".join(parts) + "."


#: :attr:`Refreshed.why` of answers not geocoded again because their task is not in the current plan
NOT_PLANNED = "their task is not in the current plan, and the report does not count them"
#: :attr:`Refreshed.why` when this process does not run the geocoder (a ``--stages`` run without it)
#: (upgrade41 C: "whose run geocodes them" read as though re-running this command would; it never does)
GEOCODER_ELSEWHERE = ("this process does not run the geocoder (its --stages leave it out): the next run of the "
                      f"campaign whose stages include {C.STAGE_GEOCODER} (a plain `run.py run`) geocodes them")


def _once(hook: Callable[[], None] | None) -> Callable[[], None]:
    """``hook`` called at the first call only (nothing without one)."""
    left = [hook] if hook is not None else []

    def call() -> None:
        while left:
            left.pop()()

    return call


async def refresh_stored_rows(store: Any, table: str, regeocoder: Regeocoder | None, *,
                              before_write: Callable[[], None] | None = None) -> Refreshed:
    """Read again, and write back, every row of results table ``table`` read by an earlier parser.

    One pass over the table (``store.iter_results``): a row whose place is unchanged is written back with its new
    parse fields (:func:`updated_row`) in batches of :data:`BATCH` (``store.put_results``, overwrite); one naming
    another place is set aside by key. Then each of those is geocoded and scored again by ``regeocoder`` and written
    as soon as it is scored (a run killed midway loses nothing: the rows not written yet keep their earlier reading
    and version, and the next run reads them again). Without ``regeocoder`` (this process runs no geocoder) they are
    left as they are. A lookup that stops the geocoder (its Nominatim request cap, a refusal, a failure after its
    retries) leaves the rest as they are, with the reason in :attr:`Refreshed.why`; an answer the geocoder refuses
    for good (:class:`~geoagent.runtime.stage.PermanentFailure`) keeps its row too. Rows read by the current parser
    are not written. ``before_write`` is called once, before the first row is written (a batch or a row geocoded
    again; not called when no row is written): the run's "work began" mark (review41a #2, as GeoVerify's refresh,
    review40b #5: a run killed midway is then read as cut short, its report and export not yet rewritten). Returns
    the :class:`Refreshed` counts.

    Raises
    ------
    geoagent.runtime.store.StoredRowError
        A row's JSON cannot be read, or a stale row is no scored row
        (:meth:`geoagent.geohint.result.GeoHintResult.row_problem`); the store names the file, table and key.
    """
    from geoagent.runtime.scope import ScoredScope

    out = Refreshed()
    began = _once(before_write)
    checker = ScoredScope(None, table=table, check=GeoHintResult.row_problem)  # the report's row check and error
    versions: set[int] = set()
    batch: list[tuple[str, dict[str, Any]]] = []
    moved: list[str] = []  # keys only: each row is read again when its turn comes (memory: one str per answer)
    for key, row in store.iter_results(table):
        if not isinstance(row, dict) or not is_stale(row):
            continue
        checker.checked(store, key, row)  # damaged outside geoagent: named as the report's reading would
        out.stale += 1
        versions.add(row_parser_version(row))
        got = reread(row, store)
        if got is None:
            out.no_text += 1
            continue
        out.reparsed += 1
        if not got.same_place:
            out.changed += 1
            moved.append(key)
            continue
        new = updated_row(row, got)
        out.changed += _reading(new) != _reading(row)
        batch.append((key, new))
        if len(batch) >= BATCH:
            began()
            store.put_results(table, batch)
            batch = []
    if batch:
        began()
        store.put_results(table, batch)
    out.versions = tuple(sorted(versions))
    if moved:
        await _geocode_again(store, table, moved, regeocoder, out, began)
    return out


def _lookup_failed() -> tuple[type[BaseException], ...]:
    from geoagent.clients.wikidata import WikidataError
    from geoagent.runtime.http import HttpError

    return (HttpError, WikidataError, TimeoutError, ValueError)


_LOOKUP_FAILED = _lookup_failed()


async def _geocode_again(store: Any, table: str, moved: list[str], regeocoder: Regeocoder | None,
                         out: Refreshed, began: Callable[[], None]) -> None:
    """Geocode and score again the rows of keys ``moved``, each written once scored (``began`` called before)."""
    if regeocoder is None:
        out.pending += len(moved)
        out.why.append(GEOCODER_ELSEWHERE)
        return
    requests = regeocoder.planned(set(moved))
    for i, key in enumerate(moved):
        request = requests.get(key)
        row = store.get_result(table, key)
        # read again now: another process of the campaign may have brought it up to date meanwhile
        got = reread(row, store) if isinstance(row, dict) and is_stale(row) else None
        if row is None or got is None or got.same_place:
            continue
        if request is None:
            out.pending += 1
            out.why.append(NOT_PLANNED)
            continue
        try:
            new = await regeocoder.rescore(key, answer_payload(request, row, got))
        except (BudgetStop, Held) as exc:  # the geocoder's cap or a refusal: no later lookup would be answered
            left = moved[i:]
            out.pending += len(left)
            out.why.append(f"the geocoder stopped: {exc}; re-run the same command to go on")
            return
        except PermanentFailure as exc:  # this answer only (e.g. a Wikidata request refused as malformed)
            out.pending += 1
            out.why.append(f"the geocoder gave up on an answer: {exc}")
            continue
        except _LOOKUP_FAILED as exc:  # a lookup failed after its retries: the rest left for a re-run (the storage's
            # errors are not caught: the run ends on them as its workers' would, each row whole as it was)
            left = moved[i:]
            out.pending += len(left)
            out.why.append(f"a geocoder lookup failed ({type(exc).__name__}: {str(exc)[:160]}); re-run the same "
                           "command to go on")
            return
        if got.from_row:  # the row's raw is the only copy of the text: kept, whatever the new reading
            new["extra"]["raw"] = got.text
        began()
        store.put_results(table, [(key, new)])
        out.regeocoded += 1


@dataclass(slots=True)
class StaleView:
    """The export's reading of a store not yet refreshed by a run: counts of the stale rows it could not bring up
    to the current parser (``pending``: another place, not geocoded yet; ``no_text``: no answer text found)."""

    store: Any
    pending: int = 0
    no_text: int = 0

    def items(self, items: Iterable[tuple[str, dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
        """:func:`reparse_items` of ``items`` over this view's store, counting what it keeps."""
        return reparse_items(items, self.store, self)

    def warning(self, campaign: str, table: str) -> str | None:
        """The ``warning:`` line the export prints when it exported rows of an earlier reading, else None."""
        n = self.pending + self.no_text
        if not n:
            return None
        why = []
        if self.pending:
            why.append(f"{self.pending} name{'s' if self.pending == 1 else ''} another place by version "
                       f"{ANSWER_PARSER_VERSION} and {'is' if self.pending == 1 else 'are'} geocoded again by the next "
                       f"run of the campaign whose stages include {C.STAGE_GEOCODER} (a plain `run.py run`; a "
                       "--stages run without it never does; no model call)")  # upgrade41 C
        if self.no_text:
            why.append(f"{self.no_text} {'has' if self.no_text == 1 else 'have'} no stored answer text")
        return (f"warning: campaign {campaign}: {n} row{'' if n == 1 else 's'} of {table} keep the reading of an "
                f"earlier answer parser (extra.parser_version below {ANSWER_PARSER_VERSION}): " + "; ".join(why))


def reparse_items(items: Iterable[tuple[str, dict[str, Any]]], store: Any, view: StaleView | None = None
                  ) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key, row)`` of ``items`` with each stale row whose place is unchanged replaced by its current reading
    (:func:`updated_row`); a stale row naming another place now, or whose text is not found, stays as it is (counted
    in ``view``). Nothing is written."""
    for key, row in items:
        if isinstance(row, dict) and is_stale(row) and GeoHintResult.row_problem(row) is None:
            got = reread(row, store)
            if got is None:
                if view is not None:
                    view.no_text += 1
            elif got.same_place:
                row = updated_row(row, got)
            elif view is not None:
                view.pending += 1
        yield key, row


async def current_payload(payload: Mapping[str, Any], ctx: Any, *, geocoded: bool) -> Mapping[str, Any]:
    """A queued ``answers`` (``geocoded`` False) or ``located`` (True) payload as the current parser reads it.

    A payload whose ``parser_version`` is the current one, or that records none, is returned as it is (one queued
    before versions were recorded: its row records none either, so the next run's refresh reads it again; a payload
    made by hand, as tests do, is taken as it says). One of an earlier version has its text (``parsed.raw`` where the
    payload carries it, else the stored response's under ``request_key``) parsed again: an answer not
    geocoded yet takes the new parse whatever it names; a located one only when the place and the no-answer status
    are unchanged (its geocoded point still stands), else it is returned as it is (the scorer writes its row with
    the earlier version, and the next run's refresh geocodes it again). Without a text found it is returned as is."""
    version = version_of(payload.get("parser_version"))
    if version == 0 or version >= ANSWER_PARSER_VERSION:
        return payload
    old = payload.get("parsed") if isinstance(payload.get("parsed"), Mapping) else {}
    text = old.get("raw") if isinstance(old.get("raw"), str) else None
    if text is None:
        key = payload.get("request_key")
        store = getattr(ctx, "services", {}).get("store")
        resp = await store.aget(key) if isinstance(key, str) and key and store is not None else None
        text = resp.text if resp is not None and isinstance(resp.text, str) else None
    if text is None:
        return payload
    finish = finish_reason_text(payload.get("finish_reason"))  # cleaned from answer parser 8 on (crawl43 #3)
    parsed = parse_answer(text, finish)
    if geocoded and (place_of(parsed.to_json()) != place_of(old) or is_no_answer(finish, parsed.ok)
                     != is_no_answer(payload.get("finish_reason"), bool(old.get("ok")))):
        return payload
    new = {k: v for k, v in parsed.to_json().items() if k != "raw"}
    if not parsed.ok and "raw" in old:
        new["raw"] = text  # it came with the payload: the only copy on the queue
    return {**payload, "parsed": new, "parser_version": ANSWER_PARSER_VERSION, "finish_reason": finish}


__all__ = [
    "BATCH",
    "Refreshed",
    "Regeocoder",
    "Reread",
    "StaleView",
    "answer_payload",
    "current_payload",
    "is_stale",
    "place_of",
    "refresh_stored_rows",
    "reparse_items",
    "reread",
    "row_parser_version",
    "updated_row",
]
