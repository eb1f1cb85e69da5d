"""Re-score Table 11 (forced_chain checklist compliance) from a release's raw responses, with no model call and
no network: ``python -m geoagent.geohint.raw_import RELEASE_DIR OUT_DIR [--file NAME]``.

Source: the release ships the raw responses of the evidence-checklist condition as ``data/forced_chain_raw.jsonl``
("the raw forced_chain responses that Table 11 is computed from", seed 000, Reproducibility; Table 11 and
Sec. 6.3.2). One JSON object a line: ``path`` (``streetview\\<site>\\<id>.jpg``), ``location`` (the site id),
``condition`` (``day``/``night``: the light, not our condition), ``hour``, ``model``, ``lang``, ``repeat``,
``context`` (``<tier>_<band>_<QID>`` or ``none``), ``schema``, ``ts``, ``raw`` (the model's text), ``usage``
(token counts and the provider's ``stop_reason``) and ``error``.

* Each ``raw`` text is untrusted: it is parsed with the project's defensive parser
  (:func:`geoagent.geohint.parse.parse_answer`, never eval) and kept verbatim in ``extra["raw"]``.
* Rows follow :mod:`geoagent.geohint.judged`: ``condition`` is the schema, or ``<schema>_baseline`` when the
  context is ``none`` (:func:`~geoagent.geohint.judged.release_condition`); tier, band and QID come from the
  context label, the hint distance from the site's ladder (a QID missing from it is noted once; Table 11 still
  counts the answer, :class:`~geoagent.geohint.aggregate.GeoHintAggregator`); key ``release|<file>|<line>``.
* A line whose ``schema`` is not ``forced_chain`` is imported (tables ``parse`` and ``cutoff``) but is no checklist
  answer (:data:`~geoagent.geohint.aggregate.CHECKLIST_CONDITIONS`), so not in Table 11: each such schema is
  noted once, at its first line.
* ``usage.stop_reason`` is the finish reason (``extra["finish_reason"]``): the table ``cutoff`` counts the
  answers cut off at the output-token limit, and one cut off with nothing parsed is no answer
  (:mod:`geoagent.scoring.truncation`).
* No geocoding: ``hit`` and ``error_km`` are None and ``extra["not_geocoded"]`` says why
  (:data:`NOT_GEOCODED`). Such a row is never a miss: this route writes only Table 11, the parse accounting
  (table ``parse``) and the table ``cutoff``, and ``report.md`` says that the hit, echo and distance tables are
  withheld (:data:`WITHHELD`); the judged answers (:mod:`geoagent.geohint.judged`) give those.
* One request is one row, and a line whose ``path`` names another site (the folder holding the image) than its
  ``location`` is a bad line: the rules both re-score routes share (:mod:`geoagent.geohint.release_rows`). The
  request (:func:`~geoagent.geohint.release_rows.request_identity`) is site, image, model, schema, context,
  repeat, ``lang``, light ``condition`` and ``hour`` (``ts``, ``raw`` and ``usage`` are the outcome); an unreadable
  ``repeat`` is read as 0 but is not the request of repeat 0. A later line of a request is reported with its file
  and line and the line it repeats, and skipped, as a bad line is: the request counts once, at its first complete
  line (parsed, not cut off, no ``error`` logged), else its first that parsed, else its first; the note on the
  line given up says why (a failed call with no text is a bad line, so its retry counts).
* A bad line (not UTF-8, not JSON, not an object, a required field missing or of the wrong type, a bad
  site id, image path or context label, an API error with no text) is reported with file and line
  (:class:`~geoagent.data.importer.ImportReport`) and skipped, as :func:`geoagent.geohint.judged.iter_judged`
  skips a malformed row; a file with no usable line is refused (ValueError naming file and first bad line).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from geoagent import paths
from geoagent.data.importer import ImportReport, import_release
from geoagent.data.model import ContextLadder
from geoagent.geohint.aggregate import CHECKLIST_CONDITIONS
from geoagent.geohint.judged import (image_id_from_path, ladder_index, out_dir_error, parse_context_label,
                                     print_import_notes, release_condition, rescore_parser)
from geoagent.geohint.parse import ANSWER_PARSER_VERSION, finish_reason_text, parse_answer
from geoagent.geohint.release_rows import (check_model_name, check_path_site, one_per_request, read_repeat, release_lang,
                                           unreadable_repeat)
from geoagent.geohint.result import GeoHintResult

#: fields every line must hold (``raw`` may be null: an empty answer, unless ``error`` says the call failed)
REQUIRED = ("path", "location", "model", "context", "schema", "raw")
#: file names looked for in the release folder, in this order
DEFAULT_FILES = ("forced_chain_raw.jsonl", "forced_chain_raw_sample.jsonl")
#: ``extra["not_geocoded"]`` of every row of this route
NOT_GEOCODED = "not geocoded: re-scored from the raw text with no geocoder call, so no error distance and no hit"
#: the report's line on the tables this route does not write
WITHHELD = ("Withheld: Tables 1-10 and the table 'unresolved' (hit rate, echo, error distance, slopes, paired "
            "comparisons). This route re-parses the raw answers and makes no geocoder call, so no answer has an error "
            "distance or a hit (they are not geocoded, not misses); those tables are left out rather than shown as 0 %. "
            "The judged answers give them: python -m geoagent.geohint.judged RELEASE_DIR OUT_DIR.")


def _text_field(d: Mapping[str, Any], name: str) -> str:
    """A required text field, stripped (raises ValueError when not a non-empty string, or when it holds a lone
    UTF-16 surrogate: JSON's ``"\\ud800"`` decodes to a ``str`` that no UTF-8 table or report can be written
    with, so such a line is a bad line, not a failed route)."""
    v = d.get(name)
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"field {name!r} is not a non-empty string: {v!r:.60}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"field {name!r} is not UTF-8 text (a lone surrogate escape): {v!r:.60}") from None
    return v.strip()


def _finish_reason(usage: Any) -> str | None:
    """The line's ``usage.stop_reason`` (or ``finish_reason``), cleaned as the parser reads and stores it
    (:func:`geoagent.geohint.parse.finish_reason_text`; crawl43 #3), None when absent or no text."""
    if not isinstance(usage, dict):
        return None
    return finish_reason_text(usage.get("stop_reason", usage.get("finish_reason")))


def _row(d: Mapping[str, Any], path: Path, line: int) -> GeoHintResult:
    """One line's object as a result (raises ValueError with the reason for a line to skip)."""
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise ValueError(f"missing field(s) {missing}")
    raw = d["raw"]
    if raw is None and d.get("error"):
        raise ValueError(f"the API call failed ({str(d['error'])[:80]}): no response, not an answer")
    if raw is not None and not isinstance(raw, str):
        raise ValueError(f"field 'raw' is not text: {type(raw).__name__}")
    site = paths.safe_name(_text_field(d, "location"), what="site id")
    image_path = _text_field(d, "path")
    image_id = image_id_from_path(image_path)
    check_path_site(image_path, site, site_field="location")
    schema = _text_field(d, "schema")
    ctx = parse_context_label(_text_field(d, "context"))
    finish = _finish_reason(d.get("usage"))
    ans = parse_answer(raw, finish)
    res = GeoHintResult(
        key=f"release|{path.name}|{line}",
        site=site,
        image_id=image_id,
        model=check_model_name(_text_field(d, "model")),
        condition=release_condition(schema, ctx is not None),
        schema=schema,
        repeat=read_repeat(d.get("repeat")),
        city=ans.city,
        area=ans.area,
        building=ans.building,
        confidence_area=ans.confidence_area,
        confidence_building=ans.confidence_building,
        parse_ok=ans.ok,
        evidence=ans.evidence,
        hit=None,
        source="release",
        extra={"line": line, "lang": release_lang(d.get("lang")), "finish_reason": finish,
               "parse_method": ans.method, "parser_version": ANSWER_PARSER_VERSION, "evidence_slots": ans.evidence_slots, "parse_error": ans.error, "truncated": ans.truncated,
               "not_geocoded": NOT_GEOCODED, "light": d.get("condition"), "hour": d.get("hour"), "raw": ans.raw},
    )
    bad_repeat = unreadable_repeat(d.get("repeat"))
    if bad_repeat is not None:
        res.extra["repeat_unreadable"] = bad_repeat
    if d.get("error"):  # text and an error both logged: an answer, but not a complete one (a retry is preferred)
        res.extra["api_error"] = str(d["error"])[:200]
    if ctx:
        res.tier, res.band, res.ref_qid = ctx
    return res


def iter_raw(path: str | Path, ladders: Mapping[str, ContextLadder], report: ImportReport | None = None
             ) -> Iterator[GeoHintResult]:
    """Yield one :class:`GeoHintResult` per usable line of a raw-responses JSONL file (module doc).

    Parameters
    ----------
    path : path of ``forced_chain_raw*.jsonl``
    ladders : mapping site_id -> ContextLadder (hint distance ``dist_km`` and reference name by QID)
    report : ImportReport, optional
        Collects skipped lines (file, 1-based line, reason) and QIDs not in their site's ladder (once each).

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    """
    path = Path(path)
    rep = report if report is not None else ImportReport()
    index = ladder_index(ladders)
    rep.files.append(str(path))
    first_note = len(rep.issues)
    unknown: set[tuple[str, str]] = set()
    other_schemas: set[str] = set()
    for res in one_per_request(_usable_lines(path, rep), path, rep):  # a request logged again counts once
        line = res.extra["line"]
        if res.condition not in CHECKLIST_CONDITIONS and res.schema not in other_schemas:
            other_schemas.add(res.schema)  # counted in 'parse' and 'cutoff', never in Table 11: say so once
            rep.add(path, line, f"schema {res.schema!r} is not forced_chain: its answers are not in Table 11 (only "
                    "in the tables 'parse' and 'cutoff')")
        if res.ref_qid:
            point = index.get((res.site, res.ref_qid))
            if point is not None:
                res.ref_name, res.dist_km = point.name_en, point.dist_km
            elif (res.site, res.ref_qid) not in unknown:
                unknown.add((res.site, res.ref_qid))
                rep.add(path, line, f"reference point {res.ref_qid} is not in the ladder of {res.site!r}: no hint "
                        "distance (Table 11 still counts its answers)")
        rep.count(path)
        yield res
    rep.issues[first_note:] = sorted(rep.issues[first_note:], key=lambda i: i.line)  # this file's notes, by line


def _usable_lines(path: Path, rep: ImportReport) -> Iterator[GeoHintResult]:
    """Every usable line of the file as a result, in line order; each bad line is a note in ``rep``."""
    with path.open("rb") as fh:
        for line, data in enumerate(fh, start=1):
            try:
                text = data.decode("utf-8-sig" if line == 1 else "utf-8")
            except UnicodeDecodeError:
                rep.add(path, line, "line is not valid UTF-8 text")
                continue
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                rep.add(path, line, f"not valid JSON: {exc.msg} (column {exc.colno})")
                continue
            except RecursionError:  # nested past the interpreter's limit: still just a bad line
                rep.add(path, line, "not valid JSON: nested too deeply")
                continue
            if not isinstance(obj, dict):
                rep.add(path, line, f"not a JSON object: {type(obj).__name__}")
                continue
            try:
                res = _row(obj, path, line)
            except ValueError as exc:
                rep.add(path, line, str(exc))
                continue
            yield res


def import_raw(release_dir: str | Path, *, filename: str | None = None) -> tuple[list[GeoHintResult], ImportReport]:
    """Import a release folder's raw forced_chain responses (default :data:`DEFAULT_FILES`, the first present).

    Returns
    -------
    (list of GeoHintResult, ImportReport)
        The report holds the ladder import's issues and this file's skipped lines.

    Raises
    ------
    FileNotFoundError
        No such file in the folder (or no ``sites.csv``: not a release folder).
    ValueError
        The file holds no usable line (names the file and its first bad line).
    """
    rel = import_release(release_dir)
    root = rel.root
    if filename is None:
        filename = next((f for f in DEFAULT_FILES if (root / f).is_file()), None)
        if filename is None:
            raise FileNotFoundError(f"no {' or '.join(DEFAULT_FILES)} in {root}")
    path = root / filename
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    rows = list(iter_raw(path, rel.ladders, rel.report))
    if not rows:
        first = next((i for i in rel.report.issues if i.file == str(path)), None)
        raise ValueError(f"{path}:{first.line}: no usable line; first: {first.reason}" if first
                         else f"{path}: no response line")
    return rows, rel.report


def replicate_table11(release_dir: str | Path, out_dir: str | Path, *, filename: str | None = None):
    """Recompute Table 11 and the parse and cut-off accounting from the raw responses; write ``report.md``,
    ``table11.csv``, ``parse.csv`` and ``cutoff.csv`` under ``out_dir`` (:func:`geoagent.geohint.raw_report.write`).

    Returns
    -------
    (list of Table, ImportReport)
    """
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.raw_report import write

    rows, report = import_raw(release_dir, filename=filename)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    tables = write(agg, rows, report, out_dir)
    return tables, report


def main(argv: list[str] | None = None) -> int:
    """``python -m geoagent.geohint.raw_import RELEASE_DIR OUT_DIR [--file NAME]``.

    Returns 0 (the tables printed, then one ``note:`` line per import note, up to 20), or 2 after one ``error:``
    line on stderr naming the file when the folder or its raw file cannot be used (missing, no usable line).
    """
    import sys

    from geoagent.report.geohint import print_report

    from geoagent.paths import release_argument_error

    ap = rescore_parser("raw_import", "Recompute Table 11 from a release's raw forced_chain responses",
                        "forced_chain_raw*.jsonl", "report.md, table11.csv, parse.csv and cutoff.csv",
                        f"raw file name in RELEASE_DIR (default: {' or else '.join(DEFAULT_FILES)})")
    args = ap.parse_args(argv)
    args.file = getattr(args, "file", None)
    try:
        bad = release_argument_error(args.release_dir, args.file) or out_dir_error(args.out_dir, "raw_import")
        if bad is not None:
            raise bad
        tables, report = replicate_table11(args.release_dir, args.out_dir, filename=args.file)
    except (OSError, ValueError) as exc:  # a bad input or OUT_DIR is one line naming the file, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from geoagent.geohint.raw_report import terms_lines

    print_report(tables, legend=False)
    print("\n".join(terms_lines()))  # the cut-off table's note points here
    print(WITHHELD)
    print_import_notes(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
