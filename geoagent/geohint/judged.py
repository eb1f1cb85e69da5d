"""Import a released GeoHint campaign (``answers_judged*.csv``) as scored results, with no model calls.

Seed 000 release, ``data/answers_judged.csv`` (issue 4 point 7). Columns: ``site, model, schema, lang,
context, path, city, area, place, conf_area, conf_fine, error_km, resolved_level, resolved_label, hit``.

* ``context`` is ``none`` (no hint) or ``<tier>_<band>_<QID>`` with band codes ``05_15km``,
  ``15_30km``, ``30_60km`` for 0.5-1.5, 1.5-3 and 3-6 km (Sec. 3.3);
* the hint distance ``d_ref`` and the names used for echo detection come from the site's ladder by QID
  (``ladders/<site>_ladder*.csv``); a QID missing from the ladder keeps ``dist_km``/``echo`` as None and
  is listed in the import report;
* echo is computed under every rule of :data:`geoagent.geohint.echo.ECHO_RULES` (kept in
  ``extra["echo_by_rule"]``); ``echo`` holds the chosen rule's verdict (``echo_rule``, default ``"name"``;
  ``"release_first_word"`` is the rule of the release's own analysis scripts) and ``extra["echo_rule"]``
  names it;
* ``resolved_level`` ``place`` is our ``building``, an empty level is ``none``;
* ``hit`` is recomputed from ``error_km`` and ``resolved_level`` (:func:`geoagent.scoring.geohint.is_hit`);
  the release's own value is kept in ``extra["release_hit"]``.
* ``condition``: the release's schema (``forced``, ``forced_warn``, ``forced_chain``, ``v1``), or
  ``baseline`` / ``<schema>_baseline`` when the context is ``none`` (:func:`release_condition`).
* One request is one row, and a row whose ``path`` names another site (the folder holding the image) than its
  ``site`` is a bad row: the rules of the raw route too (:mod:`geoagent.geohint.release_rows`). The request is
  site, image, model, schema, context, ``repeat`` (an unreadable one is not the request of repeat 0) and ``lang``.
  With a ``repeat`` column a later row of a request is reported with its line and the line it repeats, and
  skipped: the request counts once, at its first row that parsed (a place named), else its first; the note says
  when two parsed answers differ. The release's file has no ``repeat`` column: there rows sharing site, path,
  model, schema, context and ``lang`` are that request's successive repeats (0, 1, 2, ... in file order) and all
  count, as the release's analysis scripts count every row (``analysis/two_regimes.py`` ``load``,
  ``model_tables.py``); one note says how many rows were read so.

Table 11 (checklist compliance) needs the answers' evidence objects, which this file does not hold: its route is
:mod:`geoagent.geohint.raw_import` (the release's raw forced_chain responses).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from geoagent import paths
from geoagent.data.importer import ImportReport, import_release, is_missing_number
from geoagent.data.model import LADDER_BAND_LABELS, ContextLadder, ReferencePoint
from geoagent.geohint.echo import DEFAULT_ECHO_RULE, ECHO_RULES, check_echo_rule, describe_echo_rule, echo_by_rule
from geoagent.geohint.release_rows import (check_model_name, check_path_site, one_per_request, read_repeat, release_lang,
                                           request_identity, unreadable_repeat)
from geoagent.geohint.result import GeoHintResult
from geoagent.scoring.geohint import is_fine, is_hit, normalize_level

REQUIRED = ("site", "model", "schema", "context", "path", "error_km", "resolved_level")
BAND_CODES = {"05_15km": LADDER_BAND_LABELS[0], "15_30km": LADDER_BAND_LABELS[1], "30_60km": LADDER_BAND_LABELS[2]}
#: ASCII digits only (``\d`` also takes "٣"), the QID as :data:`geoagent.qid.QID_RE`; used with ``fullmatch``
_CONTEXT = re.compile(r"(?P<tier>high|mid|low)_(?P<band>[0-9][0-9]_[0-9][0-9]km)_(?P<qid>Q[1-9][0-9]*)")


def parse_context_label(label: str) -> tuple[str, str, str] | None:
    """``"high_05_15km_Q1069457" -> ("high", "0.5-1.5km", "Q1069457")``; ``"none"`` -> None.

    Raises
    ------
    ValueError
        A label of neither form, or an unknown band code.
    """
    text = (label or "").strip()
    if text.lower() in {"none", ""}:
        return None
    m = _CONTEXT.fullmatch(text)
    if not m:
        raise ValueError(f"context label {label!r} is neither 'none' nor tier_band_QID")
    band = BAND_CODES.get(m.group("band"))
    if band is None:
        raise ValueError(f"unknown band code {m.group('band')!r} in context label {label!r}")
    return m.group("tier"), band, m.group("qid")


def release_condition(schema: str, has_context: bool) -> str:
    """The condition of a released answer: its ``schema`` (``forced``, ``forced_warn``, ``forced_chain``, ``v1``)
    with a hint; without one (context ``none``) ``baseline`` for ``forced``, else ``<schema>_baseline``."""
    if has_context:
        return schema
    return "baseline" if schema == "forced" else f"{schema}_baseline"


def image_id_from_path(path: str) -> str:
    """``streetview\\site\\123.jpg`` -> ``"123"`` (validated as a Mapillary id)."""
    name = PurePosixPath(path.strip().replace("\\", "/")).name
    return paths.safe_image_id(name.rsplit(".", 1)[0])


def _float(text: str | None, *, finite: bool = False, column: str = "error_km") -> float | None:
    """``text`` as a float; None for an empty cell or a missing-number spelling ("NaN", "NA", "None", "null":
    :func:`~geoagent.data.importer.is_missing_number`, as pandas, R or ``str(None)`` write an empty cell; reports36
    #1: an unparsed answer's ``error_km`` written "NaN" refused the row, a miss, and raised the hit rates) and,
    unless ``finite``, for inf. Raises ValueError naming ``column`` for text that is no number, and with ``finite``
    for inf (an ``error_km`` of ``inf`` is no distance: break26 #8 read it as missing, a miss)."""
    if is_missing_number(text):
        return None
    assert text is not None
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"column {column!r}: not a number: {text.strip()!r}") from None
    if finite and not math.isfinite(x):
        raise ValueError(f"column {column!r}: not a finite number: {text.strip()!r}")
    return x if math.isfinite(x) else None


def _lenient_float(text: str | None) -> float | None:
    """A stated confidence: not a finite number (``"n/a"``, ``"high"``) is None, never a lost row."""
    try:
        return _float(text)
    except ValueError:
        return None


def _opt(text: str | None) -> str | None:
    return text.strip() if text and text.strip() else None


def ladder_index(ladders: Mapping[str, ContextLadder]) -> dict[tuple[str, str], ReferencePoint]:
    """(site_id, QID) -> reference point."""
    return {(site, p.qid): p for site, lad in ladders.items() for p in lad.points if p.qid}


def iter_judged(
    path: str | Path,
    ladders: Mapping[str, ContextLadder],
    report: ImportReport | None = None,
    *,
    aliases: Mapping[str, list[str]] | None = None,
    echo_rule: str = DEFAULT_ECHO_RULE,
    site_cities: Mapping[str, str] | None = None,
) -> Iterator[GeoHintResult]:
    """Yield one :class:`GeoHintResult` per well-formed row of a judged-answers CSV, one per request (module doc:
    a later row of a request is a note, as a malformed row is), in line order.

    Parameters
    ----------
    path : path of ``answers_judged*.csv``
    ladders : mapping site_id -> ContextLadder (from :func:`geoagent.data.importer.import_release`)
    report : ImportReport, optional
        Collects malformed rows, rows of a request already counted (file, line, reason) and unknown QIDs; such rows
        are skipped. This file's notes are in line order.
    aliases : mapping QID -> list of names, optional
        Wikidata aliases added to the echo names (``"name"`` rule only).
    echo_rule : str
        Which rule's verdict goes into ``echo`` (:data:`geoagent.geohint.echo.ECHO_RULES`); both are kept
        in ``extra["echo_by_rule"]``.
    site_cities : mapping site_id -> city, optional
        The sites' cities (``sites.csv``): a reference point's name qualified by its site's city ("Akasaka, Tokyo")
        is named by its form without it too (``"name"`` rule only;
        :func:`geoagent.geohint.echo.without_city_qualifier`).

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        A required column is missing (names the file and the column), or ``echo_rule`` is unknown.
    """
    check_echo_rule(echo_rule)
    path = Path(path)
    rep = report if report is not None else ImportReport()
    index = ladder_index(ladders)
    aliases = aliases or {}
    site_cities = site_cities or {}
    rep.files.append(str(path))
    first_note = len(rep.issues)
    unknown_refs: set[tuple[str, str]] = set()
    for res in one_per_request(_judged_rows(path, rep), path, rep):  # a request logged again counts once
        if res.ref_qid:
            site, qid = res.site, res.ref_qid
            point = index.get((site, qid))
            if point is None:
                if (site, qid) not in unknown_refs:
                    unknown_refs.add((site, qid))
                    rep.add(path, res.extra["line"], f"reference point {qid} is not in the ladder of {site!r}; d_ref and "
                            "echo left empty")
            else:
                res.ref_name = point.name_en
                res.dist_km = point.dist_km
                names = [point.name_en, point.label_raw, point.name_zh, *aliases.get(qid, [])]
                by_rule = echo_by_rule(res.area, res.building, names, name_en=point.name_en, name_zh=point.name_zh,
                                       cities=[site_cities.get(site)])
                res.echo = by_rule[echo_rule]
                res.extra["echo_rule"] = echo_rule
                res.extra["echo_by_rule"] = by_rule
        rep.count(path)
        yield res
    rep.issues[first_note:] = sorted(rep.issues[first_note:], key=lambda i: i.line)  # this file's notes, by line


def _judged_rows(path: Path, rep: ImportReport) -> Iterator[GeoHintResult]:
    """Every well-formed row of the file as a result (no ladder look-up yet), in line order; each malformed row is
    a note in ``rep``. Raises ValueError for a header that repeats or lacks a required column."""
    # bytes that are not UTF-8 are read as surrogate escapes so they cost only their row (reported)
    with path.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
        reader = csv.DictReader(fh)
        names = list(reader.fieldnames or [])
        repeated = sorted({n for n in names if n and names.count(n) > 1})
        if repeated:  # a row would silently take the last copy's value
            raise ValueError(f"{path}:1: header repeats column(s) {repeated}; keep one of each")
        missing = [c for c in REQUIRED if c not in names]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}")
        rows = iter(reader)
        last_end = reader.line_num
        # no repeat column (the release's file): rows sharing a request are its successive repeats, all counted
        has_repeat = "repeat" in names
        seen: dict[tuple[str, ...], int] = {}
        n_repeats, first_repeat_line = 0, 0
        n_hit_differs, first_hit_line = 0, 0
        while True:
            try:
                row = next(rows)
            except StopIteration:
                break
            except csv.Error as exc:  # e.g. a field over the csv module's size limit: skip that record
                rep.add(path, last_end + 1, f"CSV syntax error: {exc}")
                last_end = max(reader.line_num, last_end + 1)  # the failed record took at least its own line
                continue
            line = last_end = reader.line_num
            breaks = sum(v.count("\n") for v in row.values() if isinstance(v, str)) if None not in row else 0
            if breaks:  # one record over several lines: a stray quote merged rows (break26 #6); the file's fields
                # hold no line breaks, so the record is refused, not read with another row's values (a blank line,
                # which the reader skips, is no such record: rev26 #6)
                first = line - breaks
                rep.add(path, first, f"a quoted field runs from line {first} to line {line} (a stray quote mark?): "
                                     f"lines {first}-{line} left out")
                continue
            if None in row or any(v is None for v in row.values()):
                rep.add(path, line, f"expected {len(reader.fieldnames or [])} fields, got a row of another length")
                continue
            try:
                "".join(row.values()).encode("utf-8")
            except UnicodeEncodeError:
                rep.add(path, line, "row is not valid UTF-8 text")
                continue
            try:
                site = row["site"].strip()
                paths.safe_name(site, what="site id")
                ctx = parse_context_label(row["context"])
                level = normalize_level(row.get("resolved_level"))
                error_km = _float(row.get("error_km"), finite=True)
                if error_km is not None and error_km < 0:
                    raise ValueError(f"error_km is negative: {error_km}")
                if error_km is None and is_fine(level):
                    # resolved finer than the city, with no distance: neither a hit nor a miss can be read (it was a
                    # miss before); a city-level answer is a miss whatever its distance (censored), review36 #1
                    raise ValueError(f"column 'error_km' is missing ({(row.get('error_km') or '').strip()!r}) for an "
                                     f"answer resolved at {row.get('resolved_level', '').strip()!r}")
                if error_km is not None and level == "none":
                    # the mirror case (stats46 #1): a distance for an answer that resolved nothing was scored a miss
                    # yet entered the error-distance regression (Tables 6-7); the release's rule would call it a hit
                    raise ValueError(f"column 'error_km' is {error_km:g} km for an answer with no resolved level "
                                     f"({(row.get('resolved_level') or '').strip()!r}): which level it resolved "
                                     "is unknown")
                schema = row["schema"].strip()
                for column in ("model", "schema"):  # break26 #8: a blank one became model or condition ''
                    if not (row[column] or "").strip():
                        raise ValueError(f"column {column!r} is empty")
                check_model_name(row["model"].strip())
                image_id = image_id_from_path(row["path"])
                check_path_site(row["path"], site, site_field="site")
            except (ValueError, KeyError) as exc:
                rep.add(path, line, str(exc))
                continue
            conf_area, conf_fine = _lenient_float(row.get("conf_area")), _lenient_float(row.get("conf_fine"))
            area, building = _opt(row.get("area")), _opt(row.get("place") or row.get("building"))
            city = _opt(row.get("city"))
            res = GeoHintResult(
                key=f"release|{path.name}|{line}",
                site=site,
                image_id=image_id,
                model=row["model"].strip(),
                condition=release_condition(schema, ctx is not None),
                schema=schema,
                repeat=read_repeat(row.get("repeat")),
                city=city,
                area=area,
                building=building,
                confidence_area=conf_area,
                confidence_building=conf_fine,
                parse_ok=bool(city or area or building),
                resolved_level=level,
                resolved_label=_opt(row.get("resolved_label")),
                error_km=error_km,
                hit=is_hit(error_km, level),
                source="release",
                extra={"release_hit": (row.get("hit") or "").strip(), "lang": release_lang(row.get("lang")), "line": line},
            )
            stated = {"true": True, "1": True, "false": False, "0": False}.get(res.extra["release_hit"].lower())
            if stated is not None and stated != res.hit:
                n_hit_differs += 1
                first_hit_line = first_hit_line or line
            bad_repeat = unreadable_repeat(row.get("repeat"))
            if bad_repeat is not None:
                res.extra["repeat_unreadable"] = bad_repeat
            if ctx:
                res.tier, res.band, res.ref_qid = ctx
            if not has_repeat:
                # the duplicate rule's own request (parsed context: "none", "None" and "" are one), so a repeat
                # numbered here is never taken for a second copy of another row by one_per_request
                key = request_identity(res)
                res.repeat = seen.get(key, 0)
                seen[key] = res.repeat + 1
                if res.repeat:
                    n_repeats += 1
                    first_repeat_line = first_repeat_line or line
            yield res
        if n_hit_differs:
            rep.add(path, first_hit_line,
                    f"{n_hit_differs} rows' 'hit' column disagrees with their error_km and resolved_level (a hit is "
                    "an answer resolved finer than the city within 1 km; first at this line): the recomputed value is "
                    "used, the file's is kept as release_hit")
        if n_repeats:
            rep.add(path, first_repeat_line,
                    f"{n_repeats} rows repeat the request of an earlier row (same site, path, model, schema, context and "
                    "lang; first at this line): the file has no 'repeat' column, so they are read as that request's "
                    "successive repeats (1, 2, ... in file order) and all counted, as the release's analysis scripts "
                    "count every row")


#: the schema of the paper's reported tables (seed 000 App. A.1: "forced is the schema all reported results use")
PAPER_SCHEMA = "forced"


def source_note(filename: str, condition: str) -> str:
    """The judged report's first line: the file read (``filename``, a name in the release folder), whether it is
    the release's sample (a ``*_sample.csv`` name: the beginning of ``answers_judged.csv``), and the reported
    ``condition`` against the paper's: only :data:`PAPER_SCHEMA` (forced) gives tables comparable with the paper's
    Tables 1-7 (seed 000 App. A.1; v1 is its permissive control schema, abstention allowed)."""
    parts = [f"Source: {filename}"]
    if filename.endswith("_sample.csv"):
        parts.append(" (a sample: the beginning of the release's answers_judged.csv, about 4 % of it, "
                     "not the whole file; no table here can reproduce the paper's numbers)")
    parts.append(f"; reported condition {condition}")
    if condition == PAPER_SCHEMA:
        parts.append(": the forced schema, the one the paper's reported tables use (App. A.1).")
    elif condition == "v1":
        parts.append(": v1 is the paper's permissive control schema (abstention allowed; App. A.1), not the forced "
                     "schema all its reported tables use, so Tables 1-7 here are not comparable with the paper's "
                     "Tables 1-7 (e.g. Table 1's hit rates with the paper's forced-schema ones).")
    else:
        parts.append(f": not the forced schema all the paper's reported tables use (App. A.1), so Tables 1-7 here are "
                     f"not comparable with the paper's Tables 1-7 (those are forced; {condition} enters the paper only "
                     "paired with forced, Tables 8-11).")
    return "".join(parts)


def import_judged(
    release_dir: str | Path, *, filename: str | None = None, echo_rule: str = DEFAULT_ECHO_RULE
) -> tuple[list[GeoHintResult], ImportReport]:
    """Import ``answers_judged.csv`` (or ``answers_judged_sample.csv``) of a release folder.

    ``echo_rule`` chooses the rule behind each row's ``echo`` (see :func:`iter_judged`).

    Returns
    -------
    (list of GeoHintResult, ImportReport)
        The report holds the ladder import's issues and this file's.

    Raises
    ------
    FileNotFoundError
        No judged-answers file in the folder.
    ValueError
        Unknown ``echo_rule``.
    """
    check_echo_rule(echo_rule)
    rel = import_release(release_dir)
    root = rel.root
    if filename is None:
        for cand in ("answers_judged.csv", "answers_judged_sample.csv"):
            if (root / cand).is_file():
                filename = cand
                break
        else:
            raise FileNotFoundError(f"no answers_judged*.csv in {root}")
    rows = list(iter_judged(root / filename, rel.ladders, rel.report, echo_rule=echo_rule,
                            site_cities={sid: site.city for sid, site in rel.sites.items()}))
    return rows, rel.report


def replicate_report(
    release_dir: str | Path,
    out_dir: str | Path,
    *,
    filename: str | None = None,
    n_flips: int = 10_000,
    n_splits: int = 200,
    seed: int = 0,
    figures: bool = True,
    echo_rule: str = DEFAULT_ECHO_RULE,
    p_reference: str = "normal",
    regime_threshold: float = 0.5,
    n_boot: int | None = None,
    boot_seed: int | None = None,
    n_boot_source: str = "n_boot",
):
    """Recompute the GeoHint report from a released campaign, with no model calls.

    ``n_boot``: site-bootstrap resamples of Table 1's and Fig. 2's intervals (None: the report's default,
    :data:`geoagent.report.geohint.DEFAULT_N_BOOT`; 0 = none), drawn with ``boot_seed`` (None: ``seed``), as a
    campaign's ``[geohint] n_boot`` and ``boot_seed``; ``n_boot_source`` names where ``n_boot`` was set in the
    report's "no intervals" notes (the command line: ``"--n-boot"``).

    ``p_reference``: the slope tables' p-value reference, ``"normal"`` or ``"t"`` (G - 1 df).
    ``regime_threshold``: no-context hit rate (fraction) from which a site is legible (paper: 0.5).

    Imports ``answers_judged*.csv`` (see :func:`import_judged`), aggregates it and writes the report
    (:func:`geoagent.report.geohint.write_report`) under ``out_dir``. With the full released file the
    paper's Tables 1 and 4 come out of it; their echo columns follow the release's own rule only with
    ``echo_rule="release_first_word"`` (the report names the rule it used).

    Returns
    -------
    (list of Table, ImportReport)
    """
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.report.geohint import write_report

    from geoagent.report.geohint import default_conditions

    rows, report = import_judged(release_dir, filename=filename, echo_rule=echo_rule)
    path = report.files[-1] if report.files else str(filename)
    if not rows:  # nothing to report: refused before OUT_DIR is touched, so an earlier report there stays
        first = next((i for i in report.issues if i.file == path), None)
        raise ValueError(f"{path}:{first.line}: no usable row; first: {first.reason}" if first
                         else f"{path}: no answer row")
    agg = GeoHintAggregator(echo_rule=echo_rule, regime_threshold=regime_threshold)
    agg.add_many(rows)
    if agg.select().n == 0:
        ladder = next((i for i in report.issues if "ladder" in Path(i.file).name), None)
        raise ValueError(f"{path}: none of its {len(rows)} usable rows can be scored: each names a reference point that "
                         "no ladder holds" + (f" (the ladders' first import note: {ladder})" if ladder else ""))
    boot = {} if n_boot is None else {"n_boot": int(n_boot)}
    tables = write_report(agg, out_dir, n_flips=n_flips, n_splits=n_splits, seed=seed, figures=figures,
                          p_reference=p_reference, boot_seed=boot_seed, n_boot_source=n_boot_source,
                          source_note=source_note(Path(path).name, default_conditions(agg)[0]),
                          import_notes=[str(i) for i in report.issues], **boot)
    return tables, report


def main(argv: list[str] | None = None) -> int:
    """``python -m geoagent.geohint.judged RELEASE_DIR OUT_DIR [--file NAME] [--flips N] [--splits N] [--seed S]
    [--n-boot N] [--boot-seed S] [--echo-rule RULE] [--p-reference normal|t] [--regime-threshold F]``.

    Returns 0, or 2 after one ``error:`` line on stderr (naming the file) when the release folder or its
    judged-answers file cannot be used: missing, without the required columns, empty, no row usable or none that
    can be scored (OUT_DIR is then left as it was).
    """
    import sys

    try:
        return _main(argv)
    except (OSError, ValueError) as exc:  # a bad input or OUT_DIR is one line naming the file, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


#: the first line of each re-score command's ``report.md`` (:func:`out_dir_error` tells them apart)
REPORT_TITLES = {"judged": "# GeoHint report", "raw_import": "# GeoHint Table 11 from raw forced_chain responses"}


def out_dir_error(out_dir: str | Path, command: str) -> ValueError | None:
    """Why ``out_dir`` cannot take the report of re-score ``command`` (``"judged"`` or ``"raw_import"``), or None:
    it exists and is no folder; it holds a GeoContext release (``sites.csv``: the tables and figures would be
    written among the release's files); or its ``report.md`` is the other command's (the two write ``report.md`` and
    ``cutoff.csv`` alike, so one would replace the other's beside tables it does not describe; cli36 #3)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        return ValueError(f"OUT_DIR {out}: exists and is not a folder")
    if (out / "sites.csv").is_file() or (out / "data" / "sites.csv").is_file():
        return ValueError(f"OUT_DIR {out}: holds a GeoContext release (sites.csv): give the report a folder of its own")
    try:
        with (out / "report.md").open(encoding="utf-8", errors="replace") as fh:
            head = [fh.readline().strip() for _ in range(4)]
    except OSError:
        return None
    # whose report.md it is: each command's title; judged's names its source file under it ("**Source: ..."), a
    # GeoHint campaign's report (same title) does not (review36b #4)
    if head[0] == REPORT_TITLES["raw_import"]:
        producer = "raw_import"
    elif head[0] == REPORT_TITLES["judged"]:
        producer = "judged" if any(line.startswith("**Source: ") for line in head[1:]) else "campaign"
    else:
        return None
    if producer == command:
        return None
    whose = ("a GeoHint campaign's report (its report/ folder)" if producer == "campaign" else
             f"the report of `python -m geoagent.geohint.{producer}`")
    return ValueError(f"OUT_DIR {out}: holds {whose} (report.md), whose files this command's would replace: give "
                      "each report a folder of its own")


def _main(argv: list[str] | None) -> int:
    from geoagent.report.geohint import print_report

    from geoagent.paths import release_argument_error
    from geoagent.report.geohint import DEFAULT_N_BOOT

    ap = rescore_parser("judged", "Recompute the GeoHint report from a release's judged answers",
                        "answers_judged*.csv", "report.md, the tables' CSV files and the figures",
                        "judged-answers file name in RELEASE_DIR (default: answers_judged.csv, else "
                        "answers_judged_sample.csv)")
    ap.add_argument("--flips", type=int, default=10_000, help="permutation sign flips (Tables 8-10)")
    ap.add_argument("--splits", type=int, default=200, help="split-half correction splits (Table 3)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the splits and flips (and of the bootstrap "
                    "without --boot-seed), as a campaign's [campaign] seed")
    ap.add_argument("--n-boot", type=int, default=DEFAULT_N_BOOT,
                    help="site-bootstrap resamples of Table 1's and Fig. 2's intervals, 0 = none ([geohint] n_boot)")
    ap.add_argument("--boot-seed", type=int, default=argparse.SUPPRESS,
                    help="seed of those resamples ([geohint] boot_seed; default: --seed)")
    ap.add_argument("--echo-rule", choices=ECHO_RULES, default=DEFAULT_ECHO_RULE,
                    help="echo rule: 'name' (whole name) or 'release_first_word' (the release's scripts)")
    ap.add_argument("--p-reference", choices=("normal", "t"), default="normal",
                    help="slope p-values (Tables 6-7): 'normal' (statsmodels' default) or 't' (G - 1 df)")
    ap.add_argument("--regime-threshold", type=float, default=0.5,
                    help="no-context hit rate (fraction in (0, 1)) from which a site is legible (the paper's: 0.5)")
    args = ap.parse_args(argv)
    args.file, args.boot_seed = getattr(args, "file", None), getattr(args, "boot_seed", None)
    if not 0 < args.regime_threshold < 1:
        ap.error(f"--regime-threshold must be in (0, 1), got {args.regime_threshold}")
    if args.flips < 1:
        ap.error(f"--flips must be 1 or more, got {args.flips} (random sign flips behind the p of Tables 8-10)")
    if args.splits < 1:
        ap.error(f"--splits must be 1 or more, got {args.splits} (random splits behind Table 3's corrected column)")
    if args.n_boot < 0:
        ap.error(f"--n-boot must be 0 or more, got {args.n_boot}")
    if args.boot_seed is not None and args.boot_seed < 0:
        ap.error(f"--boot-seed must be 0 or more, got {args.boot_seed}")
    bad = release_argument_error(args.release_dir, args.file) or out_dir_error(args.out_dir, "judged")
    if bad is not None:
        raise bad
    tables, report = replicate_report(args.release_dir, args.out_dir, filename=args.file, n_flips=args.flips,
                                      n_splits=args.splits, seed=args.seed, echo_rule=args.echo_rule,
                                      p_reference=args.p_reference, regime_threshold=args.regime_threshold,
                                      n_boot=args.n_boot, boot_seed=args.boot_seed, n_boot_source="--n-boot")
    print(f"echo rule: {describe_echo_rule(args.echo_rule)}")
    print_report(tables, regime_threshold=args.regime_threshold)
    print_import_notes(report)
    return 0


def rescore_parser(module: str, what: str, files: str, outputs: str, file_help: str) -> argparse.ArgumentParser:
    """The argument parser both re-score commands start from (``python -m geoagent.geohint.<module>``): the
    positional ``RELEASE_DIR`` (holding ``files``) and ``OUT_DIR`` (for ``outputs``), and ``--file`` (absent from
    the namespace unless given, so its help shows no "(default: None)"); defaults shown in ``--help``."""
    ap = argparse.ArgumentParser(prog=f"python -m geoagent.geohint.{module}", allow_abbrev=False,
                                 description=f"{what} (no model calls, no geocoder).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("release_dir", metavar="RELEASE_DIR",
                    help=f"the GeoContext release folder (sites.csv, ladders/, {files}; or its data/ folder)")
    ap.add_argument("out_dir", metavar="OUT_DIR", help=f"folder for {outputs}")
    ap.add_argument("--file", default=argparse.SUPPRESS, help=file_help)
    return ap


def print_import_notes(report: ImportReport, *, limit: int = 20) -> None:
    """Print the first ``limit`` import notes of ``report`` as ``note:`` lines, then how many more there are (the
    console output of the re-score commands, this one and :mod:`geoagent.geohint.raw_import`)."""
    for issue in report.issues[:limit]:
        print(f"note: {issue}")
    if len(report.issues) > limit:
        print(f"note: ... {len(report.issues) - limit} more import notes")


if __name__ == "__main__":
    raise SystemExit(main())
