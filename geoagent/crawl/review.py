"""Human decisions on the referenceability review queue (seed 000 Sec. 3.3: where the model's rating and
Wikipedia pageviews disagree, the item goes to a human; "not an automatic override").

The crawl writes ``audit_review_queue.jsonl`` (:data:`geoagent.crawl.referenceability.REVIEW_QUEUE_FILE`). A
researcher resolves items in a CSV named by ``[crawl.referenceability] review_verdicts`` (:data:`REVIEW_VERDICTS_KEY`):
columns ``site``, ``qid``, ``decision`` (``keep``: the model's rating stands; or an integer 0-5: the corrected
referenceability), optionally ``reviewer`` and ``note``. The decisions are applied to the stored ratings, never to a
request, as ``[crawl.image_audit] human_verdicts`` are (:func:`geoagent.runtime.drift.is_applied_after_key`):
``rated/<site>.json`` keeps the model's record; the ladders and ``verify_trials.csv`` take the decided rating
(:func:`apply_decisions`); ``audit_review_resolved.csv`` lists every queue item with its status and decision and
``audit_review_log.jsonl`` logs each decision (who, what, when) once (:func:`write_resolution`).
"""

from __future__ import annotations

import csv
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from geoagent.crawl.ladder import RatedCandidate, tier_for
from geoagent.files import append_jsonl, atomic_open, csv_header, csv_rows, iter_jsonl_objects
from geoagent.qid import is_qid

_log = logging.getLogger(__name__)

#: the config key of the review-decision CSV, as named in messages
REVIEW_VERDICTS_KEY = "[crawl.referenceability] review_verdicts"
#: every queue item with its resolution (written into the crawl's folder)
RESOLVED_FILE = "audit_review_resolved.csv"
RESOLVED_COLUMNS = ("site", "qid", "label", "familiarity_model", "tier_llm", "pageviews", "tier_pageviews", "status",
                    "decision", "familiarity_final", "tier_final", "reviewer", "note")
#: one line per decision as first seen (or changed): site, qid, decision, familiarity_model, familiarity_final,
#: reviewer, note, source (file:line), ts (Unix time, s)
DECISION_LOG_FILE = "audit_review_log.jsonl"


#: a decision's rating as written: ASCII digits, optionally a decimal point and zeros (``4``, ``4.0``, ``4.00``; the
#: release writes ratings as ``4.0`` and a spreadsheet may save a number column so)
_RATING = re.compile(r"[0-9]+(?:\.0*)?")


def _rating_decision(raw: str) -> int | None:
    """The 0-5 rating a review decision's text names, or None when it names none: ASCII digits with an optional
    fractional part of zeros only (``"4"``, ``"4.0"``, ``"04"`` -> 4), as the crawl's tables read the release's
    ``4.0``; ``"4.5"``, ``"6"``, ``"-1"``, ``"nan"``, ``"1e0"``, ``"²"`` -> None."""
    if not _RATING.fullmatch(raw):
        return None
    value = int(raw.split(".", 1)[0])
    return value if 0 <= value <= 5 else None


def read_review_verdicts(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Read a review-decision CSV (UTF-8, a byte-order mark allowed).

    Returns
    -------
    dict
        ``(site, qid)`` -> ``{"decision": "keep" | "0".."5", "familiarity": int | None (None for keep),
        "reviewer": str, "note": str, "source": "file:line"}``.

    Raises
    ------
    ValueError
        Naming ``file:line``: a header that repeats a column, a missing ``site``/``qid``/``decision`` column, an
        empty site or qid, a QID not of the form ``Q<digits>`` (:func:`geoagent.qid.is_qid` after a lower-case
        ``q`` is raised: no leading zero, ASCII digits), a decision other than ``keep`` or a whole number 0-5 (ASCII
        digits, optionally a decimal point and zeros: ``4`` and ``4.0`` read as 4; ``4.5``, ``6``, ``-1`` are refused;
        :func:`_rating_decision`), the same (site, qid) twice with different decisions, or text that is not UTF-8.
    """
    path = Path(path)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f, strict=True)  # an unclosed quote must not swallow the later rows (csv_rows)
            names = [str(n).strip() for n in csv_header(reader, path, f"{REVIEW_VERDICTS_KEY}: ") or []]
            repeated = sorted({n for n in names if n and names.count(n) > 1})
            if repeated:  # a row would silently take the last copy's value
                raise ValueError(f"{path}:1: {REVIEW_VERDICTS_KEY}: header repeats column(s) {repeated}; keep one "
                                 "of each")
            for col in ("site", "qid", "decision"):
                if col not in names:
                    raise ValueError(f"{path}:1: {REVIEW_VERDICTS_KEY}: missing column {col!r} (have {names}); "
                                     "columns site,qid,decision[,reviewer,note]")
            reader.fieldnames = names
            for line, row in csv_rows(reader, path, f"{REVIEW_VERDICTS_KEY}: "):
                where = f"{path}:{line}"
                site, qid = (row.get("site") or "").strip(), (row.get("qid") or "").strip()
                raw = (row.get("decision") or "").strip().lower()
                if not site or not qid:
                    raise ValueError(f"{where}: {REVIEW_VERDICTS_KEY}: empty site or qid")
                qid = "Q" + qid[1:] if qid[:1] == "q" else qid
                if not is_qid(qid):  # the project's one rule: "Q042", "Q0", "Q²" are no id (and match no candidate)
                    raise ValueError(f"{where}: {REVIEW_VERDICTS_KEY}: qid must be a Wikidata id like Q123, got {qid!r}")
                if raw == "keep":
                    fam = None
                elif (fam := _rating_decision(raw)) is None:
                    raise ValueError(f"{where}: {REVIEW_VERDICTS_KEY}: decision must be keep (the model's rating "
                                     "stands) or a corrected referenceability, a whole number 0-5 (4 or 4.0), got "
                                     f"{row.get('decision')!r}")
                rec = {"decision": "keep" if fam is None else str(fam), "familiarity": fam,
                       "reviewer": (row.get("reviewer") or "").strip(), "note": (row.get("note") or "").strip(),
                       "source": where}
                prev = out.get((site, qid))
                if prev is not None and prev["decision"] != rec["decision"]:
                    raise ValueError(f"{where}: {REVIEW_VERDICTS_KEY}: site {site} qid {qid} has conflicting decisions "
                                     f"({prev['decision']} at {prev['source']}, {rec['decision']} here)")
                out[(site, qid)] = rec
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: {REVIEW_VERDICTS_KEY}: not UTF-8 text ({exc.reason} at byte {exc.start}); save "
                         "the file as UTF-8 (Excel: 'CSV UTF-8')") from None
    return out


def review_verdicts_of(path: str | Path | None) -> dict[tuple[str, str], dict[str, Any]]:
    """The review decisions of a crawl (:data:`REVIEW_VERDICTS_KEY`, :func:`read_review_verdicts`); ``{}`` when the
    key is unset.

    Raises
    ------
    FileNotFoundError
        The key names no file (a typo must not silently leave every rating to the model).
    ValueError
        As :func:`read_review_verdicts`.
    """
    if not path:
        return {}
    if not Path(path).is_file():
        what = "is not a file" if Path(path).exists() else "does not exist"
        raise FileNotFoundError(f"{REVIEW_VERDICTS_KEY} = {str(path)!r}: {path} {what} (the CSV of review decisions, "
                                "columns site,qid,decision[,reviewer,note]; a relative path is read from the working "
                                "folder); fix the path, or remove the key to let the model's ratings stand")
    return read_review_verdicts(path)


def apply_decisions(site: str, cands: Iterable[RatedCandidate],
                    decisions: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[RatedCandidate]:
    """``cands`` of ``site`` with each decided rating applied: a numeric decision replaces ``familiarity`` (0-5, so
    the tier follows), ``keep`` leaves the model's. The inputs are not changed (``rated/`` keeps the model's)."""
    out = []
    for c in cands:
        d = decisions.get((site, c.qid))
        out.append(replace(c, familiarity=d["familiarity"]) if d and d.get("familiarity") is not None else c)
    return out


#: the site under which a review-queue record is counted when no site can be read for it (:func:`queue_site`)
UNKNOWN_SITE = "(site not recorded)"


def queue_site(rec: Mapping[str, Any], rated_sites: Mapping[str, list[str]] | None = None) -> str:
    """The site of one ``audit_review_queue.jsonl`` record: its ``site`` field; else the site in its ``model``
    (``review|<site>``, as the first versions wrote it; the auditor's queue log reads it the same way,
    :class:`geoagent.crawl.referenceability.ReviewQueueLog`); else, with ``rated_sites`` (QID -> the sites whose
    ``rated/<site>.json`` lists it), the one rated site that lists the record's QID; else :data:`UNKNOWN_SITE`
    (never ``"None"``: such records are counted apart, and a decision naming a real site does not match them)."""
    site = rec.get("site")
    if site is not None and str(site).strip():
        return str(site)
    model = rec.get("model")
    if isinstance(model, str) and model.startswith("review|") and model[len("review|"):].strip():
        return model[len("review|"):]
    sites = (rated_sites or {}).get(str(rec.get("qid")), [])
    return sites[0] if len(sites) == 1 else UNKNOWN_SITE


def _rated_sites_by_qid(state_dir: Path) -> dict[str, list[str]]:
    """QID -> the site ids whose ``rated/<site>.json`` lists it (unreadable records are left out)."""
    import orjson

    out: dict[str, list[str]] = {}
    folder = state_dir / "rated"
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = orjson.loads(p.read_bytes())
            site = str(rec["site"]["site"])
            qids = {str(r["qid"]) for r in rec["rated"]}
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            continue
        for q in sorted(qids):
            out.setdefault(q, []).append(site)
    return out


def _queue(state_dir: Path) -> list[dict[str, Any]]:
    """The review queue's items, one per (site, QID) (the last record of each, as the export's
    ``audit_review_queue`` and :class:`~geoagent.crawl.referenceability.ReviewQueueLog` read it: review45b #3), sorted;
    each record's ``site``
    is the one :func:`queue_site` reads (a record without the field gets it, the file is not changed)."""
    from geoagent.crawl.referenceability import REVIEW_QUEUE_FILE

    path = state_dir / REVIEW_QUEUE_FILE
    items: dict[tuple[str, str], dict[str, Any]] = {}
    rated: dict[str, list[str]] | None = None
    if path.is_file():
        for _n, r in iter_jsonl_objects(path, skip_torn=True):  # a record cut short by a crash is skipped
            if r.get("site") is None and not str(r.get("model", "")).startswith("review|") and rated is None:
                rated = _rated_sites_by_qid(state_dir)  # read only when a record needs it
            site = queue_site(r, rated)
            items[(site, str(r.get("qid")))] = {**r, "site": site}
    return [items[k] for k in sorted(items)]


def write_resolution(state_dir: str | Path, decisions: Mapping[tuple[str, str], Mapping[str, Any]],
                     model_ratings: Mapping[tuple[str, str], int | None], *,
                     warn_unmatched: bool = True) -> dict[str, int]:
    """Write :data:`RESOLVED_FILE` (every item of the review queue: ``status`` ``resolved`` with the decision, or
    ``pending``; :data:`RESOLVED_COLUMNS`) and append to :data:`DECISION_LOG_FILE` each decision that differs
    (decision, reviewer or note) from the item's latest logged line (so a re-run logs nothing new, and a decision
    changed back is logged again). ``model_ratings``: (site, qid) -> the
    model's familiarity from ``rated/``. Without decisions and without an earlier table nothing is written. A
    decision on an item outside the queue is applied and logged too; one
    whose (site, qid) no rated candidate has changes nothing, is not logged, and is named (file:line) in one
    warning (:class:`geoagent.config.InputWarning`, a ``warning:`` line on the CLI's console; unless ``warn_unmatched`` is False: a second pass of the same run). Returns ``{"resolved": n, "pending": n, "logged": n, "unmatched": n}``."""
    state_dir = Path(state_dir)
    rows = []
    n_res = 0
    for it in _queue(state_dir):
        key = (str(it.get("site")), str(it.get("qid")))
        d = decisions.get(key)
        fam_final = it.get("familiarity") if not d or d["familiarity"] is None else d["familiarity"]
        n_res += d is not None
        rows.append({"site": key[0], "qid": key[1], "label": it.get("label", ""), "familiarity_model": it.get("familiarity"),
                     "tier_llm": it.get("tier_llm", ""), "pageviews": it.get("pageviews", ""),
                     "tier_pageviews": it.get("tier_pageviews", ""), "status": "resolved" if d else "pending",
                     "decision": d["decision"] if d else "", "familiarity_final": fam_final,
                     "tier_final": tier_for(fam_final) or "", "reviewer": d["reviewer"] if d else "",
                     "note": d["note"] if d else ""})
    if not decisions and not (state_dir / RESOLVED_FILE).exists():
        # no decision file and none before: nothing to resolve, no table (a crawl without review decisions writes
        # the same files on every run); with the key removed after a run, the table is rewritten all pending
        return {"resolved": 0, "pending": len(rows), "logged": 0, "unmatched": 0}
    # written whole and swapped in: a status beside it read 0 resolved mid-write, a crash left it cut (race45 #5)
    with atomic_open(state_dir / RESOLVED_FILE, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(RESOLVED_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    log = state_dir / DECISION_LOG_FILE
    last: dict[tuple[str, str], tuple[str, str, str]] = {}  # (site, qid) -> the latest logged decision
    if log.is_file():
        for _n, r in iter_jsonl_objects(log, skip_torn=True):
            last[(str(r.get("site")), str(r.get("qid")))] = (r.get("decision"), r.get("reviewer", ""), r.get("note", ""))
    new = []
    unmatched = [(k, d) for k, d in sorted(decisions.items()) if k not in model_ratings]
    if unmatched and warn_unmatched:
        shown = "; ".join(f"{d['source']}: site {site!r}, {qid}" for (site, qid), d in unmatched[:10])
        more = f"; and {len(unmatched) - 10} more" if len(unmatched) > 10 else ""
        import warnings

        from geoagent.config import InputWarning

        n = len(unmatched)  # a "warning: ..." line on the CLI's console, as its other warnings
        warnings.warn(f"{n} review decision{'' if n == 1 else 's'} match{'es' if n == 1 else ''} no rated candidate of "
                      f"this crawl (no site of that id rated that QID), so {'it changes' if n == 1 else 'they change'} "
                      f"nothing and {'is' if n == 1 else 'are'} not logged ({REVIEW_VERDICTS_KEY}): {shown}{more}",
                      InputWarning, stacklevel=2)
    for (site, qid), d in sorted(decisions.items()):
        if (site, qid) not in model_ratings:
            continue
        if last.get((site, qid)) == (d["decision"], d["reviewer"], d["note"]):
            continue  # as last logged (3 -> 0 -> 3 logs the return to 3: the log's last line is the decision in force)
        fam_model = model_ratings.get((site, qid))
        new.append({"site": site, "qid": qid, "decision": d["decision"], "familiarity_model": fam_model,
                    "familiarity_final": fam_model if d["familiarity"] is None else d["familiarity"],
                    "reviewer": d["reviewer"], "note": d["note"], "source": d["source"], "ts": round(time.time(), 3)})
    if new:
        append_jsonl(log, new)  # after a torn last line, on a fresh line
    return {"resolved": n_res, "pending": len(rows) - n_res, "logged": len(new), "unmatched": len(unmatched)}


def review_counts(state_dir: str | Path) -> dict[str, int]:
    """How many items of a crawl's review queue are settled, from its files: ``{"queued": n, "pending": n,
    "resolved": n}``. ``queued``: the (site, QID) items of ``audit_review_queue.jsonl`` (the auditor's append-only
    record of what it queued, each item ``status: "pending"`` as queued; a record torn by a crash is skipped);
    ``resolved``: those :data:`RESOLVED_FILE` (written by the last run that applied the decisions of
    :data:`REVIEW_VERDICTS_KEY`) marks ``resolved``; ``pending``: the others (an item queued after that table was
    written included). All zero without a queue."""
    state_dir = Path(state_dir)
    keys = {(str(it.get("site")), str(it.get("qid"))) for it in _queue(state_dir)}
    done: set[tuple[str, str]] = set()
    path = state_dir / RESOLVED_FILE
    if keys and path.is_file():
        try:
            with path.open(encoding="utf-8", newline="") as f:
                done = {(r.get("site") or "", r.get("qid") or "") for r in csv.DictReader(f)
                        if r.get("status") == "resolved"}
        except (OSError, UnicodeDecodeError, csv.Error):
            done = set()
    n_res = len(keys & done)
    return {"queued": len(keys), "pending": len(keys) - n_res, "resolved": n_res}


def review_counts_line(counts: Mapping[str, int]) -> str | None:
    """One summary / ``status`` line for :func:`review_counts` (None when nothing was queued):
    ``referenceability review: 12 items queued (audit_review_queue.jsonl): 10 pending, 2 resolved (decisions in
    force: audit_review_resolved.csv)``; while none is resolved it says how to settle them instead."""
    n = int(counts.get("queued", 0))
    if not n:
        return None
    from geoagent.crawl.referenceability import REVIEW_QUEUE_FILE

    head = (f"referenceability review: {n} item{'' if n == 1 else 's'} queued ({REVIEW_QUEUE_FILE}): "
            f"{counts.get('pending', 0)} pending, {counts.get('resolved', 0)} resolved")
    if counts.get("resolved"):
        return head + f" (decisions in force: {RESOLVED_FILE}; the queue file lists each item as it was queued)"
    return head + (f" (settle them with {REVIEW_VERDICTS_KEY}: a CSV of site,qid,decision; "
                   "docs/crawls.md, 'review queue')")
