"""Release importer: a GeoContext release folder -> data-model records + an :class:`ImportReport`.

Reads ``sites.csv``, ``ladders/*.csv``, ``verify_trials*.csv`` and ``verify_raw*.jsonl`` (the full
files or our ``*_sample`` beginnings; a full file wins over its sample when both exist). Copes with
quoted CSV fields, a UTF-8 BOM, non-ASCII names, Windows backslash paths (``streetview\\site\\id.jpg``
becomes ``streetview/site/id.jpg``) and missing optional columns (they become None). A malformed row
is recorded in the report with file, line and reason and the import continues with the next row.

Source: the public release (``Yifan1209/geocontext``, see ``../shared/reference/geocontext/SOURCE.md``);
column meanings from seed 000 Sec. 3 and 5.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from geoagent import constants as C
from geoagent import paths
from geoagent.files import later_record_wins, loads_record, recorded_error
from geoagent.geo import continent_code
from geoagent.data.model import (
    ARM_MAIN,
    ARMS,
    BAND_SIGNAL,
    DECOY_BAND_LABELS,
    ContextLadder,
    Image,
    RawVerifyResponse,
    ReferencePoint,
    Site,
    VerifyTrial,
    is_decoy_band_label,
    ladder_band,
    make_trial_id,
    tier_of,
)
from geoagent.textfmt import first_few_text


class RowError(ValueError):
    """A row that cannot be imported (the message is the reason)."""


@dataclass(frozen=True, slots=True)
class ImportIssue:
    """One problem found while importing: ``file`` (path as given), 1-based physical ``line``, ``reason``."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass
class ImportReport:
    """Per-file row counts and every malformed row (file, line, reason)."""

    imported: dict[str, int] = field(default_factory=dict)
    issues: list[ImportIssue] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: files none of whose rows could be read (cannot open, no header, a header without a required column ...):
    #: path -> the issue, also in :attr:`issues`
    refused_files: dict[str, ImportIssue] = field(default_factory=dict)

    def add(self, file: Path | str, line: int, reason: str) -> None:
        self.issues.append(ImportIssue(str(file), int(line), reason))

    def refuse_file(self, file: Path | str, line: int, reason: str) -> None:
        """Record a problem that leaves the whole file unread (an issue, and the file in :attr:`refused_files`)."""
        self.add(file, line, reason)
        self.refused_files[str(file)] = self.issues[-1]

    def unusable(self, file: Path | str, n_read: int) -> str | None:
        """Why the table at ``file`` gives nothing to plan from, or None: the file was refused whole
        (:meth:`refuse_file`), or it has rows but none of them could be read (``n_read`` 0 and malformed rows of it
        reported). ``"<file>: line L: <reason>"`` / ``"<file>: none of its N row(s) could be read (line L: ...)"``;
        None for a file read with rows, or one with no row at all (a header only: an empty plan is for the kind
        to refuse or not)."""
        refused = self.refused_files.get(str(file))
        if refused is not None:
            return f"{refused.file}: line {refused.line}: {refused.reason}"
        if n_read:
            return None
        bad = [i for i in self.issues if i.file == str(file) and i.line > 1]
        if not bad:
            return None
        return (f"{file}: none of its {len(bad)} row(s) could be read (line {bad[0].line}: {bad[0].reason}"
                f"{'; ...' if len(bad) > 1 else ''})")

    def count(self, file: Path | str, n: int = 1) -> None:
        self.imported[str(file)] = self.imported.get(str(file), 0) + n

    @property
    def ok(self) -> bool:
        return not self.issues

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "imported": self.imported,
            "issues": [{"file": i.file, "line": i.line, "reason": i.reason} for i in self.issues],
        }

    def summary(self) -> str:
        lines = [f"{n:6d} rows  {f}" for f, n in self.imported.items()]
        lines.append(f"{len(self.issues)} malformed rows")
        lines += [f"  {i}" for i in self.issues[:50]]
        if len(self.issues) > 50:
            lines.append(f"  ... and {len(self.issues) - 50} more")
        return "\n".join(lines)


@dataclass
class Release:
    """Everything imported from one release folder."""

    root: Path
    sites: dict[str, Site] = field(default_factory=dict)
    ladders: dict[str, ContextLadder] = field(default_factory=dict)
    images: dict[str, Image] = field(default_factory=dict)
    trials: list[VerifyTrial] = field(default_factory=list)
    raw: list[RawVerifyResponse] = field(default_factory=list)
    report: ImportReport = field(default_factory=ImportReport)
    #: the trial table read (``verify_trials.csv`` or its sample), and each imported trial's 1-based line
    #: in it by trial id, so that later checks (e.g. GeoVerify's one-request-per-trial) can name the row
    trials_file: Path | None = None
    trial_lines: dict[str, int] = field(default_factory=dict)
    #: trial ids (``image_id|arm|cand``) of trial-table rows refused as malformed (each has an import note): a replay
    #: must not rebuild such a trial from its raw records (reports36 #3: a row refused for an image latitude of 95
    #: was scored all the same)
    refused_trials: set[str] = field(default_factory=set)

    def records(self) -> Iterator[Any]:
        """All records, for :meth:`geoagent.data.store.DataStore.put_many`."""
        yield from self.sites.values()
        yield from self.ladders.values()
        for lad in self.ladders.values():
            yield from lad.points
        yield from self.images.values()
        yield from self.trials
        yield from self.raw


# --- field converters (raise RowError with a reason) -----------------------------------------


def _req(row: dict[str, Any], col: str) -> str:
    v = row.get(col)
    if v is None or str(v).strip() == "":
        raise RowError(f"missing value for required column {col!r}")
    return str(v).strip()


def _opt(row: dict[str, Any], col: str) -> str | None:
    v = row.get(col)
    if v is None:
        return None
    v = str(v).strip()
    return v or None


def _float(value: Any, col: str, *, lo: float | None = None, hi: float | None = None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise RowError(f"column {col!r}: not a number: {value!r}") from None
    if not math.isfinite(x):
        raise RowError(f"column {col!r}: not finite: {value!r}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise RowError(f"column {col!r}: {x} outside [{lo}, {hi}]")
    return x


#: spellings of a missing number that tables written by other tools hold in an empty cell's place (pandas'
#: ``na_rep``, R's ``write.csv`` "NA", ``str(None)``, SQL NULL), compared case-insensitively: an optional numeric
#: cell holding one is absent, as an empty cell is (reports36 #1, #2: R's "NA" in the unused ``pageviews`` column
#: refused every ladder point)
MISSING_NUMBER_SPELLINGS = frozenset({"na", "n/a", "nan", "-nan", "none", "null", "<na>", "#n/a", "#na", "nat"})


def is_missing_number(value: Any) -> bool:
    """Whether ``value`` is an empty cell or one of :data:`MISSING_NUMBER_SPELLINGS`."""
    return value is None or str(value).strip().casefold() in MISSING_NUMBER_SPELLINGS | {""}


def _opt_float(row: dict[str, Any], col: str, **kw: float) -> float | None:
    """An optional numeric cell: None when empty or a missing-number spelling (:func:`is_missing_number`), else
    :func:`_float` (RowError naming the column for text, inf or a value out of range)."""
    v = _opt(row, col)
    return None if v is None or is_missing_number(v) else _float(v, col, **kw)


def _opt_distance_km(row: dict[str, Any], col: str) -> float | None:
    """An optional distance column in km (a ladder's ``dist_km``, a trial's ``d_km``): absent, or a finite number
    in ``[0, constants.MAX_SURFACE_DISTANCE_KM]``. Raises RowError naming the column and the value otherwise (a
    corrupt 1e200 km overflowed the slope regression's X'X, whose fit then blamed "all hint distances equal")."""
    x = _opt_float(row, col, lo=0)
    if x is not None and x > C.MAX_SURFACE_DISTANCE_KM:
        raise RowError(f"column {col!r}: {_opt(row, col)} km is farther than any two points on Earth "
                       f"(at most {C.MAX_SURFACE_DISTANCE_KM:.1f} km, half the equatorial circumference)")
    return x


def _opt_int(row: dict[str, Any], col: str, **kw: float) -> int | None:
    x = _opt_float(row, col, **kw)
    return None if x is None else int(round(x))


def _image_id(value: Any) -> str:
    text = str(value).strip()
    if re.fullmatch(r"[0-9]+\.0", text):  # ids read back through a float column
        text = text[:-2]
    try:
        return paths.safe_image_id(text)
    except ValueError as exc:
        raise RowError(str(exc)) from None


def normalize_rel_path(value: str | None) -> str | None:
    """Release path -> relative POSIX path (backslashes to ``/``); rejects absolute paths and ``..``.

    Raises
    ------
    RowError
        The path is absolute or escapes its root.
    """
    if value is None or not value.strip():
        return None
    text = value.strip().replace("\\", "/")
    p = PurePosixPath(text)
    if p.is_absolute() or re.match(r"^[A-Za-z]:", text) or ".." in p.parts:
        raise RowError(f"unsafe image path {value!r}")
    return str(p)


# --- CSV reading with physical line numbers ---------------------------------------------------


def _not_utf8(values: list[str]) -> bool:
    """Whether any value holds bytes that were not UTF-8 (read as surrogate escapes)."""
    try:
        "".join(values).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _read_csv(
    path: Path,
    report: ImportReport,
    required: tuple[str, ...],
    convert: Callable[[dict[str, Any]], Any],
    key: Callable[[Any], Hashable] | None = None,
    lines: list[int] | None = None,
) -> Iterator[Any]:
    """Yield ``convert(row)`` for each good row; report bad rows (file, line, reason) and go on.

    Bytes that are not UTF-8 cost only the row holding them (the file is decoded with surrogate escapes
    and such rows are reported), never the rest of the file. With ``key``, a row whose key repeats an
    earlier row's is reported as a duplicate and skipped (the first is kept). With ``lines``, the 1-based
    first line of each yielded row is appended to it before the row is yielded.
    """
    seen: set[Hashable] = set()
    try:
        fh = path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="")
    except OSError as exc:
        report.refuse_file(path, 0, f"cannot open: {exc}")
        return
    report.files.append(str(path))
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            report.refuse_file(path, 1, "empty file (no header)")
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            report.refuse_file(path, 1, f"unreadable header: {exc}")
            return
        if _not_utf8(header):
            report.refuse_file(path, 1, "header is not valid UTF-8 text")
            return
        header = [h.strip() for h in header]
        repeated = sorted({h for h in header if h and header.count(h) > 1})
        if repeated:  # which copy holds the value is a guess (a row would take the last): refuse the file
            report.refuse_file(path, 1, f"header repeats column(s) {repeated}; keep one of each")
            return
        missing = [c for c in required if c not in header]
        if missing:
            report.refuse_file(path, 1, f"header lacks required column(s) {missing}; have {header}")
            return
        prev_end = reader.line_num
        while True:
            start = prev_end + 1
            try:
                values = next(reader)
            except StopIteration:
                break
            except (csv.Error, UnicodeDecodeError) as exc:
                report.add(path, start, f"CSV syntax error: {exc}")
                prev_end = reader.line_num
                continue
            prev_end = reader.line_num
            if not values or all(not v.strip() for v in values):
                continue
            if len(values) != len(header):
                span = f" (record spans lines {start}-{prev_end}: unbalanced quote?)" if prev_end > start else ""
                report.add(path, start, f"expected {len(header)} fields, got {len(values)}{span}")
                continue
            if _not_utf8(values):
                report.add(path, start, "row is not valid UTF-8 text")
                continue
            row = dict(zip(header, values))
            try:
                rec = convert(row)
            except RowError as exc:
                report.add(path, start, str(exc))
                continue
            if key is not None:
                k = key(rec)
                if k in seen:
                    report.add(path, start, f"duplicate row for {k!r}; kept the first")
                    continue
                seen.add(k)
            report.count(path)
            if lines is not None:
                lines.append(start)
            yield rec


# --- per-file converters ------------------------------------------------------------------------


def _continent(row: dict[str, Any], key: str) -> str:
    # one code per continent whatever the case (the swapped-image control pairs sites whose codes differ)
    try:
        return continent_code(_opt(row, key))
    except ValueError as exc:
        raise RowError(f"{key}: {exc}") from None


def _site(row: dict[str, Any]) -> Site:
    site_id = _req(row, "site")
    try:
        paths.safe_name(site_id, what="site id")
    except ValueError as exc:
        raise RowError(str(exc)) from None
    return Site(
        site_id=site_id,
        city=_req(row, "city"),
        country=_opt(row, "country") or "",
        continent=_continent(row, "continent"),
        lat=_float(_req(row, "lat"), "lat", lo=-90, hi=90),
        lon=_float(_req(row, "lon"), "lon", lo=-180, hi=180),
        landmark=_opt(row, "landmark"),
        qid=_opt(row, "qid"),
        type=_opt(row, "wd_type") or _opt(row, "type"),
        sitelinks=_opt_float(row, "sitelinks"),
        sv_perspective=_opt_float(row, "sv_perspective"),
        selection_method=_opt(row, "selection_method"),
    )


#: a ladder band label with its edges in km: the release's ``0.5-1.5km``, or ``3-6km`` written by hand
_BAND_KM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*km\s*$", re.I)
#: slack at a band's edges for a distance written to 3 decimals (the crawl bands the distance its row shows)
_BAND_SLACK_KM = 5e-4


def _check_band_distance(band: str | None, dist_km: float | None) -> None:
    """Refuse a ladder row whose ``dist_km`` lies outside its ``band`` label's edges (``lo <= d < hi``, give or take
    :data:`_BAND_SLACK_KM`): the band is where the row is scored, the distance what its slope regresses on, and a
    row with both cannot be right (stats38 #4: 0 km under ``3-6km``). Labels that name no edges pass."""
    m = _BAND_KM.match(band or "")
    if m is None or dist_km is None:
        return
    lo, hi = float(m.group(1)), float(m.group(2))
    if not lo - _BAND_SLACK_KM <= dist_km < hi + _BAND_SLACK_KM:
        raise RowError(f"column 'dist_km': {dist_km:g} km lies outside its band {band!r} ({lo:g} to {hi:g} km)")


def _ladder_point(site_id: str) -> Callable[[dict[str, Any]], ReferencePoint]:
    def convert(row: dict[str, Any]) -> ReferencePoint:
        fam = _opt_float(row, "familiarity", lo=0, hi=5)
        if fam is not None and fam != int(fam):
            # geohint39 #5: 3.5 gave tier "mid" (tier_of) and referenceability 4, a high-tier score
            raise RowError(f"column 'familiarity': {_opt(row, 'familiarity')} is not a whole number; the "
                           "referenceability rating is 0, 1, 2, 3, 4 or 5 (seed 000 Sec. 3.3)")
        tier = _opt(row, "tier")
        if tier is not None and fam is not None and tier != tier_of(fam):
            raise RowError(f"column 'tier': {tier!r} does not match familiarity {fam:g} (tier {tier_of(fam)!r}: 4-5 "
                           "high, 2-3 mid, 0-1 low, seed 000 Sec. 3.3)")
        dist_km = _opt_distance_km(row, "dist_km")
        band = _opt(row, "band")
        _check_band_distance(band, dist_km)
        if band is None and dist_km is not None:
            # a blank band cell is the band of the distance (None outside the bands: never planned, geohint39 #5:
            # a point 50 m from the site was asked about as "near" and paid, then fell out of every band table)
            band = ladder_band(dist_km)
        name_en = _opt(row, "name_en")
        qid = _opt(row, "qid")
        if name_en is None and qid is None:
            raise RowError("row has neither 'name_en' nor 'qid'")
        return ReferencePoint(
            qid=qid,
            name_en=name_en,
            name_zh=_opt(row, "name_zh"),
            lat=_opt_float(row, "lat", lo=-90, hi=90),
            lon=_opt_float(row, "lon", lo=-180, hi=180),
            dist_km=dist_km,
            referenceability=None if fam is None else int(fam),
            usable=True,
            band=band,
            tier=tier or tier_of(fam),
            pageviews=_opt_int(row, "pageviews", lo=0),
            site_id=site_id,
            label_raw=_opt(row, "label_raw"),
            n_in_cell=_opt_int(row, "n_in_cell", lo=0),
            n_taken=_opt_int(row, "n_taken", lo=0),
        )

    return convert


def _check_arm_band(arm: str, band: str | None) -> None:
    """Refuse a trial row whose ``arm`` or ``band`` the scorer cannot place (break26 #5: such trials were asked and
    paid for, then fell out of every rate): ``arm`` one of :data:`~geoagent.data.model.ARMS`; on the main arm
    ``band`` is ``signal``, a decoy band label (:data:`~geoagent.data.model.DECOY_BAND_LABELS`; seed 000
    Sec. 5.2; or, in a table built with another tau, a nearest band starting at tau such as ``0.1-0.3km`` or
    ``0.2-0.3km``: :func:`~geoagent.data.model.is_decoy_band_label`, fixverify42 #1, fixverify43 #1) or empty (an optional column: a signal trial, truth "yes", enters H; a decoy enters F and no band's F,
    d' or c: :func:`geoagent.scoring.sdt.placed_rows`); a control arm's band
    is free (the band of its main trial, or empty). Whether the band agrees with
    the truth label is the planner's check (:func:`geoagent.geoverify.plan.check_band_truth`), which refuses the
    table as :func:`~geoagent.geoverify.plan.check_tolerance` does.

    Raises
    ------
    RowError
        Naming the column, the value and what is expected (the caller adds the file and line).
    """
    if arm not in ARMS:
        raise RowError(f"column 'arm': expected one of {', '.join(ARMS)}, got {arm!r}")
    if arm == ARM_MAIN and band and band != BAND_SIGNAL and not is_decoy_band_label(band):
        raise RowError(f"column 'band': a main-arm trial's band is {BAND_SIGNAL}, one of "
                       f"{', '.join(DECOY_BAND_LABELS)} (a table built with another tau: its nearest band "
                       f"starts at tau, e.g. 0.1-0.3km or 0.2-0.3km) or empty, got {band!r}")


def _trial(row: dict[str, Any]) -> VerifyTrial:
    image_id = _image_id(_req(row, "image_id"))
    site_id = _req(row, "site")
    try:
        paths.safe_name(site_id, what="site id")
    except ValueError as exc:
        raise RowError(str(exc)) from None
    arm = _req(row, "arm")
    truth = _req(row, "truth").lower()
    if truth not in ("yes", "no"):
        raise RowError(f"column 'truth': expected yes/no, got {truth!r}")
    band = _opt(row, "band")
    _check_arm_band(arm, band)
    cand_lat = _opt_float(row, "cand_lat", lo=-90, hi=90)
    cand_lon = _opt_float(row, "cand_lon", lo=-180, hi=180)
    return VerifyTrial(
        image_id=image_id,
        site_id=site_id,
        arm=arm,
        cand=_req(row, "cand"),
        img_lat=_float(_req(row, "img_lat"), "img_lat", lo=-90, hi=90),
        img_lon=_float(_req(row, "img_lon"), "img_lon", lo=-180, hi=180),
        cand_lat=cand_lat,
        cand_lon=cand_lon,
        referenceability=_opt_float(row, "fam", lo=0, hi=5),
        d_km=_opt_distance_km(row, "d_km"),
        band=band,
        truth=truth,
        continent=_continent(row, "cont") or None,
        path=normalize_rel_path(_opt(row, "path")),
        image_ref=_opt(row, "image_ref") or (image_id if arm == "main" else None),
        cand_qid=_opt(row, "cand_qid") or _opt(row, "qid"),
    )


def _row_trial_id(row: dict[str, Any]) -> str | None:
    """The trial id a trial-table row names (``image_id|arm|cand``, the image id in its canonical form), whatever else
    in the row is wrong; None when one of the three is missing or the image id is unreadable."""
    cand, arm = _opt(row, "cand"), _opt(row, "arm")
    try:
        image_id = _image_id(_req(row, "image_id"))
    except RowError:
        return None
    return None if cand is None or arm is None else make_trial_id(image_id, arm, cand)


def _raw_record(d: Any) -> RawVerifyResponse:
    if not isinstance(d, dict):
        raise RowError(f"expected a JSON object, got {type(d).__name__}")
    trial_id = d.get("trial_id")
    model = d.get("model")
    if not isinstance(trial_id, str) or not trial_id:
        raise RowError("missing or non-string 'trial_id'")
    if not isinstance(model, str) or not model:
        raise RowError("missing or non-string 'model'")
    raw = d.get("raw")
    if raw is not None and not isinstance(raw, str):
        raise RowError(f"'raw' must be a string or null, got {type(raw).__name__}")
    usage = d.get("usage") or {}
    if not isinstance(usage, dict):
        raise RowError("'usage' must be an object")

    def tok(name: str) -> int:
        v = usage.get(name)
        if v is None:
            return 0
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise RowError(f"usage.{name}: not an integer: {v!r}") from None
        if n < 0:
            raise RowError(f"usage.{name}: negative: {n}")
        return n

    err = d.get("error")
    image_id = d.get("image_id")
    arm, band, truth = d.get("arm"), d.get("band"), d.get("truth")
    if arm is not None or band is not None:  # trial fields a replay may rebuild its trial from (rev26 #12)
        if not isinstance(arm, str) or not isinstance(band, (str, type(None))):
            raise RowError(f"'arm' must be a string and 'band' a string or null, got {arm!r} and {band!r}")
        _check_arm_band(arm, band)
    if truth is not None and truth not in ("yes", "no"):
        raise RowError(f"'truth': expected yes/no, got {truth!r}")
    return RawVerifyResponse(
        trial_id=trial_id,
        model=model,
        raw=raw,
        input_tokens=tok("input_tokens"),
        output_tokens=tok("output_tokens"),
        stop_reason=usage.get("stop_reason"),
        error=recorded_error(err),  # the replay provider's rule: false, 0, [] or blank are no failure
        ts=float(d["ts"]) if isinstance(d.get("ts"), (int, float)) else None,
        image_id=None if image_id is None else _image_id(image_id),
        site_id=d.get("site"),
        arm=arm,
        band=band,
        cand=d.get("cand"),
        truth=truth,
        d_km=float(d["d_km"]) if isinstance(d.get("d_km"), (int, float)) else None,
        referenceability=float(d["fam"]) if isinstance(d.get("fam"), (int, float)) else None,
    )


def read_raw_jsonl(path: Path, report: ImportReport) -> Iterator[RawVerifyResponse]:
    """Yield raw GeoVerify responses from a JSONL file, in first-seen order of (trial, model); bad lines go to
    ``report``. Of several records for one trial and model the first is kept, except that a recorded failure
    (``error`` set) gives way to a later record without one: :func:`geoagent.files.later_record_wins`, the rule the
    replay provider answers by, so the record the report names is the one replayed and scored."""
    report.files.append(str(path))
    kept: dict[tuple[str, str], RawVerifyResponse] = {}
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                d = loads_record(line)  # a lone surrogate escape (an emoji cut in half) is U+FFFD
            except orjson.JSONDecodeError as exc:
                report.add(path, lineno, f"invalid JSON: {exc}")
                continue
            try:
                rec = _raw_record(d)
            except RowError as exc:
                report.add(path, lineno, str(exc))
                continue
            old = kept.get((rec.trial_id, rec.model))
            if old is not None:
                if later_record_wins(old.error is not None, rec.error is not None):
                    kept[(rec.trial_id, rec.model)] = rec
                    report.add(path, lineno, f"duplicate record for trial {rec.trial_id!r} and model {rec.model!r}; "
                                             "kept this one (the earlier record is a recorded failure)")
                else:
                    report.add(path, lineno, f"duplicate record for trial {rec.trial_id!r} and model {rec.model!r}; "
                                             "kept the first")
                continue
            kept[(rec.trial_id, rec.model)] = rec
            report.count(path)
    yield from kept.values()


# --- folder-level import ------------------------------------------------------------------------


def _data_root(root: Path, state_root: str | Path | None = None) -> Path:
    if (root / "sites.csv").is_file():
        return root
    if (root / "data" / "sites.csv").is_file():  # a checkout of the release repository
        return root / "data"
    raise paths.missing_release_error(root, [root / "sites.csv", root / "data" / "sites.csv"], state_root_dir=state_root)


def _pick(root: Path, stem: str, suffix: str) -> Path | None:
    """``stem.suffix`` if present, else ``stem_sample.suffix``, else None."""
    for name in (f"{stem}{suffix}", f"{stem}_sample{suffix}"):
        if (root / name).is_file():
            return root / name
    return None


def trial_table_paths(root: str | Path) -> list[Path]:
    """The files :func:`import_release` may read the trial table of ``root`` from, existing or not, in the order
    it looks (``verify_trials.csv``, then ``verify_trials_sample.csv``, in ``root`` and in ``root/data``, a
    release checkout): what a watching campaign fingerprints to notice a crawl's hand-off replacing the table
    (or writing the first one)."""
    root = Path(root)
    return [d / f"verify_trials{x}.csv" for d in (root, root / "data") for x in ("", "_sample")]


_LADDER_NAME = re.compile(r"^(?P<site>.+?)_ladder(?:_.*)?\.csv$")


def check_plannable(release: Release, *, trials: bool, sites: bool = True) -> None:
    """Refuse to plan from a release folder whose ``sites.csv`` (``sites``: the plan is made from it), or
    (``trials``) trial table, gives nothing to plan from because of the file itself (:meth:`ImportReport.unusable`:
    refused whole, or rows none of which could be read); a folder whose trial table is simply absent or has a header
    only is the kind's to judge. A plan made from the trial table alone (GeoVerify's ``trials = "release"``) runs
    with an unusable ``sites.csv``: the run's summary shows the import problems.

    Before (break28 #4) such a file was one "N malformed" line of the import note: the run planned 0 requests,
    ended "complete" (exit 0) and rewrote the campaign's report as one of no data over the last good one.

    Raises
    ------
    ValueError
        Naming each unusable file, its line and the reason, and saying that nothing was run.
    """
    problems = []
    sites_csv = release.root / "sites.csv"
    why = release.report.unusable(sites_csv, len(release.sites)) if sites else None
    if why:
        problems.append(why)
    if trials and release.trials_file is not None:
        why = release.report.unusable(release.trials_file, len(release.trials))
        if why:
            problems.append(why)
    if problems:
        raise ValueError("; ".join(problems) + ": nothing to plan from it, so nothing was run (stored answers, "
                         "queues and the last report are kept); fix the file and re-run the same command")


def sites_without_images(release: Release, sites: Iterable[str] | None = None) -> list[str]:
    """The sites of ``release.sites`` (or of ``sites``, ids among them) that no image of the trial table belongs to
    (``release.images``: its main-arm rows), sorted: a GeoVerify or GeoHint plan has nothing to show for them. From a
    crawl's folder these are its sites left with no usable image (crawl40 #4: they dropped out of the plans without
    a word; the crawl's summary names them, ``usable images: 0``). ``[]`` for a trial table that is a release's
    sample (``verify_trials_sample.csv``), which covers a few sites by design."""
    if release.trials_file is not None and release.trials_file.name.endswith("_sample.csv"):
        return []  # the public release ships a sample of its trials (17 of 109 sites): a subset by design
    with_images = {im.site_id for im in release.images.values()}
    return sorted(s for s in (release.sites if sites is None else sites) if s not in with_images)


def sites_without_images_text(site_ids: list[str], sites_csv: str | Path, *, limit: int = 5) -> str | None:
    """The plan warning naming ``site_ids`` (:func:`sites_without_images`), the first ``limit`` of them, or None
    when there are none."""
    if not site_ids:
        return None
    named = first_few_text(site_ids, limit)
    n = len(site_ids)
    return (f"{n} site{'s' if n != 1 else ''} of {sites_csv} {'have' if n != 1 else 'has'} no image in the trial "
            f"table, so nothing is planned for {'them' if n != 1 else 'it'}: {named} (from a crawl: sites left with no "
            "usable image, which its summary names with 'usable images: 0')")


def import_release(root: str | Path, *, state_root: str | Path | None = None) -> Release:
    """Import a GeoContext release folder.

    Parameters
    ----------
    root : str or Path
        The folder holding ``sites.csv`` (or a release checkout with it under ``data/``), or a crawl's state
        folder (which it also is once the crawl has written it).
    state_root : str or Path, optional
        The campaign's state root (``CampaignConfig.state_root()``; default ``$GEOAGENT_STATE`` or ``state/``):
        a ``root`` directly in it is taken for a crawl's output folder when it lacks ``sites.csv``
        (:func:`geoagent.paths.missing_crawl_output_error`).

    Returns
    -------
    Release
        Sites, ladders, images (derived from the trial table), trials, raw responses and the
        :class:`ImportReport` listing every malformed row.

    Raises
    ------
    FileNotFoundError
        No ``sites.csv`` in the folder (worded for a crawl's folder or for the release,
        :func:`geoagent.paths.missing_release_error`).
    """
    root = _data_root(Path(root), state_root)
    rel = Release(root=root)
    rep = rel.report
    for site in _read_csv(root / "sites.csv", rep, ("site", "city", "lat", "lon"), _site):
        if site.site_id in rel.sites:
            rep.add(root / "sites.csv", 0, f"duplicate site id {site.site_id!r}; kept the first")
            continue
        rel.sites[site.site_id] = site

    ladder_dir = root / "ladders"
    orphans = 0  # ladders of sites sites.csv does not hold, while it holds none: one line, not one per ladder
    for path in sorted(ladder_dir.glob("*.csv")) if ladder_dir.is_dir() else []:
        m = _LADDER_NAME.match(path.name)
        if not m:
            rep.add(path, 0, "file name is not <site>_ladder*.csv; skipped")
            continue
        site_id = m.group("site")
        try:
            paths.safe_name(site_id, what="site id")
        except ValueError as exc:
            rep.add(path, 0, f"{exc} (from the ladder file name); skipped")
            continue
        if not rel.sites:
            orphans += 1
        elif site_id not in rel.sites:
            rep.add(path, 0, f"ladder for unknown site {site_id!r} (not in sites.csv); imported anyway")
        pts = tuple(_read_csv(path, rep, ("band", "dist_km"), _ladder_point(site_id)))
        rel.ladders[site_id] = ContextLadder(site_id=site_id, points=pts)
    if orphans:
        rep.add(ladder_dir, 0, f"{orphans} ladder(s) imported for sites sites.csv does not hold: it holds no site "
                               "(empty or header only?)")

    trials_path = _pick(root, "verify_trials", ".csv")
    if trials_path is not None:
        required = ("image_id", "site", "img_lat", "img_lon", "cand", "truth", "arm")
        rel.trials_file = trials_path
        lines: list[int] = []

        def trial_noting_refusals(row: dict[str, Any]) -> VerifyTrial:
            try:
                return _trial(row)
            except RowError:
                tid = _row_trial_id(row)
                if tid is not None:
                    rel.refused_trials.add(tid)
                raise

        for t in _read_csv(trials_path, rep, required, trial_noting_refusals, key=lambda t: (t.image_id, t.arm, t.cand),
                           lines=lines):
            rel.trials.append(t)
            rel.trial_lines[t.trial_id] = lines[-1]
            if t.arm == "main" and t.image_id not in rel.images:
                site = rel.sites.get(t.site_id)
                rel.images[t.image_id] = Image(
                    image_id=t.image_id,
                    site_id=t.site_id,
                    lat=t.img_lat,
                    lon=t.img_lon,
                    path=t.path,
                    continent=t.continent or (site.continent if site else None),
                )
    raw_path = _pick(root, "verify_raw", ".jsonl")
    if raw_path is not None:
        rel.raw.extend(read_raw_jsonl(raw_path, rep))
    return rel


def import_counts_text(rel: Release, *, raw_used: bool) -> str:
    """What an import read, one count per kind of file, for a campaign summary: ``"170 trials
    (verify_trials_sample.csv), 6 sites, 108 ladder points (6 ladder files)"``, plus ``", 336 recorded responses
    (verify_raw_sample.jsonl)"`` when ``raw_used`` (a replay model answers from them) and the folder has them. A
    sum of every file's rows read "453 rows" for a 339-trial table, and counted raw lines no model used.
    Counts are of imported records (malformed rows left out, :class:`ImportReport`)."""
    n_points = sum(len(lad.points) for lad in rel.ladders.values())
    parts = []
    if rel.trials_file is not None:
        parts.append(f"{len(rel.trials)} trial{'s' if len(rel.trials) != 1 else ''} ({rel.trials_file.name})")
    parts.append(f"{len(rel.sites)} site{'s' if len(rel.sites) != 1 else ''}")
    parts.append(f"{n_points} ladder point{'s' if n_points != 1 else ''} ({len(rel.ladders)} ladder "
                 f"file{'s' if len(rel.ladders) != 1 else ''})")
    raw_files = sorted({Path(f).name for f in rel.report.imported if Path(f).name.startswith("verify_raw")})
    if raw_used and rel.raw:
        parts.append(f"{len(rel.raw)} recorded response{'s' if len(rel.raw) != 1 else ''}"
                     + (f" ({', '.join(raw_files)})" if raw_files else ""))
    return ", ".join(parts)


def import_into_store(root: str | Path, store: Any) -> ImportReport:
    """Import a release folder into a :class:`geoagent.data.store.DataStore`; returns the report.

    The report is also stored under meta key ``import_report``.
    """
    rel = import_release(root)
    store.put_many(rel.records())
    store.set_meta("import_report", rel.report.to_json())
    store.set_meta("release_root", str(rel.root))
    return rel.report
