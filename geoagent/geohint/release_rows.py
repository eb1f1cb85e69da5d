"""What one request is in a released GeoHint file, and which of its lines counts: the rules both re-score routes
apply (:mod:`geoagent.geohint.raw_import`, the raw forced_chain responses; :mod:`geoagent.geohint.judged`, the
judged answers), so they read a release the same way.

* The request (:func:`request_identity`): site, image, model, schema, context (tier, band and QID, or none),
  repeat, prompt language (``lang``) and, where the file has them (the raw file), the light ``condition`` and
  ``hour``. The time stamp, the answer and its usage are the outcome, not the request.
* ``repeat`` (:func:`read_repeat`): an integer >= 0 or its ASCII decimal digits, or an integral float (``1.0``,
  ``"1.0"``: that integer); absent or empty is 0 (no repeats logged; the judged route numbers the rows of a request in a file with no
  ``repeat`` column 0, 1, 2, ... instead, :mod:`geoagent.geohint.judged`). Any other value (``"²"``, ``-1``, ``1.5``,
  ``NaN``, ``"abc"``) is read as 0, never dropping the answer, but is
  not the repeat 0: the request keeps the value as written (:func:`unreadable_repeat`), so such a line is never
  taken for a second copy of the line of repeat 0 (it is one of another line holding the same value).
* One request is one row (:func:`one_per_request`): a later line of a request already read is reported with its
  file and line and the line it repeats, and skipped, as a bad line is; the request counts once. The line kept is
  the first complete one (:func:`incomplete_reason`: an answer that parsed, was not cut off at the output-token
  limit and logged no API error), else the first that parsed, else the first: a retry logged after a cut-off, unparsed or failed answer is
  the request's answer, and the note on the line given up says why. Two complete lines: the first counts and the
  note says when the answers differ. Skipping, not refusing the file, is how the routes treat every line they
  cannot count, and keeps an answer logged twice from counting twice.
* A line whose image path names another site (the folder holding the image, :func:`path_site`) than its site
  field is a bad line (:func:`check_path_site`): which site the answer belongs to cannot be told.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from geoagent.data.importer import ImportReport
from geoagent.geohint.result import GeoHintResult
from geoagent.scoring.truncation import is_truncated

#: most digits a ``repeat`` is read from (a repeat index; also below the interpreter's int() limit of 4300)
_REPEAT_MAX_DIGITS = 18
#: the request's fields, as the duplicate notes name them
REQUEST_FIELDS = "site, image, model, schema, context, repeat, language, light and hour"


#: the text of an integral float as a JSON or CSV writer prints one: ``1.0``, ``1.``, ``2.00`` (ASCII digits only;
#: no sign, exponent or underscore, which ``float()`` would also read)
_INTEGRAL_FLOAT_TEXT = re.compile(r"([0-9]+)\.0*")


def _readable_repeat(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, float):  # an integral float (JSON 1.0, a pandas column that held a NaN): that integer
        # -0.0 is a signed form, unreadable as its text "-0.0" is on the judged route (copysign sees its sign)
        if math.isfinite(v) and v.is_integer() and math.copysign(1.0, v) > 0 and v < 10 ** _REPEAT_MAX_DIGITS:
            return int(v)
        return None
    if isinstance(v, str):
        t = v.strip()
        # ASCII digits only, as the integral-float text: "٣" (Arabic-Indic) or "３" is not a repeat index
        if t.isascii() and t.isdecimal() and len(t) <= _REPEAT_MAX_DIGITS:
            return int(t)
        m = _INTEGRAL_FLOAT_TEXT.fullmatch(t)
        if m and len(m.group(1)) <= _REPEAT_MAX_DIGITS:
            return int(m.group(1))
    return None


def release_lang(v: Any) -> str:
    """A row's prompt language ``lang`` as the release writes it: the text as is (case and spaces kept), ``""``
    when absent. The one spelling rule of the request identity (:func:`request_identity`), both import routes and
    the strict pairing (:func:`geoagent.geohint.aggregate.pair_lang`): the release's analysis scripts key
    ``[site, path, model, lang, context]`` on the column as read, so "EN", "en" and " en" are three languages
    there (seed 000 says only "same language")."""
    return "" if v is None else str(v)


def _absent(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def read_repeat(v: Any) -> int:
    """A release row's ``repeat`` field (judged answers, raw responses): an integer >= 0 (or its ASCII decimal digits, up
    to 18; other digits, e.g. Arabic-Indic "٣", are unreadable), or an integral finite float >= 0 (``1.0`` or its text ``"1.0"``: that integer), else 0 (absent, empty, or a value ``int()`` cannot read, e.g. a superscript "²": never drops the
    answer; :func:`unreadable_repeat` keeps such a value apart from a real 0)."""
    r = _readable_repeat(v)
    return 0 if r is None else r


def unreadable_repeat(v: Any) -> str | None:
    """``repr`` of a ``repeat`` value that is present but not a repeat index (:func:`read_repeat` reads it as 0),
    else None (a readable, absent or empty value). Kept in ``extra["repeat_unreadable"]`` so that
    :func:`request_identity` never takes the line for one of repeat 0."""
    if _absent(v) or _readable_repeat(v) is not None:
        return None
    return repr(v)[:80]


def path_site(image_path: str) -> str | None:
    """The site a release image path names: the folder holding the image (``streetview\\<site>\\<id>.jpg`` ->
    ``"<site>"``, either separator), or None when the path has no folder."""
    parts = [p for p in image_path.strip().replace("\\", "/").split("/") if p]
    return parts[-2] if len(parts) >= 2 else None


def check_path_site(image_path: str, site: str, *, site_field: str) -> None:
    """Raise ValueError when ``image_path`` names another site (:func:`path_site`) than ``site`` (the row's
    ``site_field``: ``location`` in the raw file, ``site`` in the judged answers); a path with no folder names
    none and passes."""
    folder = path_site(image_path)
    if folder is not None and folder != site:
        raise ValueError(f"field 'path' names site {folder!r} ({image_path!r:.80}) but field {site_field!r} names "
                         f"{site!r}: which site the answer belongs to cannot be told")


def request_identity(res: GeoHintResult) -> tuple[Any, ...]:
    """What makes a row one request (module doc): site, image, model, schema, context (tier, band and QID, or
    none), repeat (an unreadable one by its written value, :func:`unreadable_repeat`), prompt language, and the
    row's light ``condition`` and ``hour`` where the file has them (``repr``: ``12`` and ``"12"`` are told apart,
    never merged). The time stamp, the answer and its usage are the outcome, not the request."""
    extra = res.extra if isinstance(res.extra, dict) else {}
    bad = extra.get("repeat_unreadable")
    repeat: Any = res.repeat if bad is None else ("unreadable", bad)
    return (res.site, res.image_id, res.model, res.schema, res.tier, res.band, res.ref_qid, repeat,
            release_lang(extra.get("lang")), repr(extra.get("light")), repr(extra.get("hour")))


def incomplete_reason(res: GeoHintResult) -> str | None:
    """Why a row's answer is not complete, or None when it is: it logged an API error (``extra["api_error"]``),
    was cut off at the output-token limit (its finish reason, or a JSON object the parser had to close), or did not
    parse (``parse_ok`` False). :func:`one_per_request` prefers a complete line of a request."""
    extra = res.extra if isinstance(res.extra, dict) else {}
    if extra.get("api_error"):
        return f"logged an API error ({str(extra['api_error'])[:80]})"
    if is_truncated(extra.get("finish_reason")) or extra.get("truncated"):
        return "was cut off"
    if not res.parse_ok:
        return "did not parse"
    return None


def _answer(res: GeoHintResult) -> tuple[Any, ...]:
    """What a row answered (the verbatim text where the file has it, and the fields read from it)."""
    return (res.extra.get("raw"), res.city, res.area, res.building, res.error_km, res.resolved_level)


def _rank(why: str | None, res: GeoHintResult) -> tuple[bool, bool]:
    """Complete first, then parsed (:func:`one_per_request`)."""
    return (why is None, bool(res.parse_ok))


def one_per_request(rows: Iterable[GeoHintResult], path: str | Path, report: ImportReport) -> list[GeoHintResult]:
    """One row per request (:func:`request_identity`), in line order (module doc).

    Parameters
    ----------
    rows : iterable of GeoHintResult
        The usable rows of one file, in line order, each with its 1-based line in ``extra["line"]``.
    path : path of that file (named in the notes)
    report : ImportReport
        Gets one note per line given up: the line, the line that counts instead, and why.

    Returns
    -------
    list of GeoHintResult
        The first complete row of each request (:func:`incomplete_reason`), else its first row that parsed, else
        its first row.
    """
    kept: dict[tuple[Any, ...], GeoHintResult] = {}
    for res in rows:
        ident = request_identity(res)
        prev = kept.get(ident)
        if prev is None:
            kept[ident] = res
            continue
        line, first = res.extra["line"], prev.extra["line"]
        why_prev, why_res = incomplete_reason(prev), incomplete_reason(res)
        if _rank(why_res, res) > _rank(why_prev, prev):
            kept[ident] = res  # the complete (or at least parsed) answer counts, not the cut-off or failed one
            what = "the complete answer" if why_res is None else "an answer that parsed"
            report.add(path, first, f"same request as {path}:{line} ({REQUEST_FIELDS}): counted once, at line "
                       f"{line}, {what} (this line {why_prev})")
            continue
        differs = "; the answer differs, the first is kept" if _answer(prev) != _answer(res) else ""
        report.add(path, line, f"same request as {path}:{first} ({REQUEST_FIELDS}): counted once, at line "
                   f"{first}{differs}")
    return sorted(kept.values(), key=lambda r: r.extra["line"])


def check_model_name(name: str) -> str:
    """``name`` (a released row's model) when it can head a report row, else ValueError: the name of the reports'
    pooled row (:data:`geoagent.report.geohint.POOLED_ROW`, "All"), which a model's row would read like in Tables 6
    and 7 and the cut-off and unresolved tables (a campaign's ``[[models]]`` entry of that name is refused too:
    :func:`geoagent.geohint.plan.check_report_names`)."""
    from geoagent.report.geohint import POOLED_ROW

    if name == POOLED_ROW:
        raise ValueError(f"model {name!r} is the name of the report's pooled row (every model together), so its rows "
                         "would read like it: rename that model in the file")
    return name

