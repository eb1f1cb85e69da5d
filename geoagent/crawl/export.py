"""Hand the crawl's results to the evaluations: sites, images and reference points as data-model records.

The crawl's state folder mirrors the release layout (``sites.csv``, ``ladders/<site>_ladder_*.csv``,
``image_audit.csv``, ``city_pool.csv``), so :func:`geoagent.data.importer.import_release` reads its
sites and ladders directly. What the release ships as a trial table, the crawl keeps as images with
camera coordinates and rated candidates with coordinates; :func:`crawl_records` turns them into
:class:`~geoagent.data.model.Image` and :class:`~geoagent.data.model.ReferencePoint` records (the
GeoVerify trial builder needs candidate coordinates; GeoHint needs the ladders), and
:func:`write_images_csv` writes ``images.csv``. :func:`export_crawl_tables` is ``run.py export`` of a
crawl: its tables as Parquet and CSV under ``state/<campaign>/export/``, the crawl's decision log
(``crawl_decisions.jsonl``, e.g. WDQS spatial splits) among them with a fixed column set
(:func:`crawl_decisions_frame`).
"""

from __future__ import annotations

import csv
import datetime as dt
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.crawl.fetcher import campaign_selections
from geoagent.crawl.image_audit import ImageAudit, human_verdicts_of
from geoagent.crawl.ladder import DIST_DECIMALS, band_for, hint_name, tier_for
from geoagent.data.model import Image, ReferencePoint, Site
from geoagent.files import atomic_open, iter_jsonl_objects

IMAGES_COLUMNS = ("image_id", "site", "lat", "lon", "captured_at", "compass_angle_deg", "path", "usable")


log = logging.getLogger(__name__)


def _log_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, record)`` of one of the crawl's JSONL logs, skipping records a crash cut short.

    The logs are appended with :func:`geoagent.files.append_jsonl`: a crash mid-append can leave a torn
    record, and the next append starts after it on a fresh line, so a torn line may sit anywhere in the file.
    It is skipped with a warning naming the file and line (its record was never complete); any other line
    that is not a JSON object raises ``ValueError`` naming ``path:line``.
    """
    torn: list[int] = []
    yield from iter_jsonl_objects(path, skip_torn=True, torn=torn)
    if torn:
        shown = ", ".join(map(str, torn[:10])) + (" ..." if len(torn) > 10 else "")
        log.warning("%s: skipped %d record(s) cut short by a crash mid-write (line %s)", path, len(torn), shown)


def _last_of_each_key(records: Iterable[tuple[int, dict[str, Any]]],
                      keyed: str | None) -> list[tuple[int, dict[str, Any]]]:
    """``(line, record)`` of a JSONL log (:func:`_log_records`) as the crawl reads it
    (:data:`CRAWL_KEYED_JSONL_TABLES`): ``keyed`` ``"log"`` or ``"review"``: one per key, the last record of the key
    at the place of the key's first line (a failure later rated is its decision, a record written twice is one row;
    chaos45 #1); a record without the key's fields (``qid``, ``model``), which the crawl does not read, is kept as it
    is. None: every record."""
    if keyed is None:
        return list(records)
    from geoagent.crawl.referenceability import JsonlLog, ReviewQueueLog

    key = ReviewQueueLog._key if keyed == "review" else JsonlLog._key
    out: dict[Any, tuple[int, dict[str, Any]]] = {}  # first place of each key, holding its last record
    for i, rec in records:
        out[key(rec) if "qid" in rec and "model" in rec else ("line", i)] = (i, rec)
    return list(out.values())


def _load(path: Path) -> Any | None:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _iso(ms: Any) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(int(ms) / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def usable_images(state_dir: str | Path, images_root: str | Path, human_verdicts: str | Path | None = None) -> list[dict[str, Any]]:
    """Kept images of every site of this campaign's selection (:func:`geoagent.crawl.fetcher.campaign_selections`:
    its own ``image_selection/<site>.json``, never another campaign's selection in the shared images root),
    sorted by site, with their audit outcome: ``usable`` follows the human verdict when one exists (the
    paper's policy), else the model audit (:attr:`geoagent.crawl.image_audit.ImageAudit.keeps_image`: its
    ``usable`` and App. A.4's rule); images without any audit are left out. ``human_verdicts``: the crawl's
    ``[crawl.image_audit] human_verdicts`` path (None: none), read by
    :func:`geoagent.crawl.image_audit.human_verdicts_of` (``FileNotFoundError`` when it names no file,
    ``ValueError`` naming file:line for a malformed one).

    One image is used under one site only: an image the fetcher kept under several sites (sites less than twice
    ``[crawl.fetcher] radius_m`` apart, or one landmark sampled as a site of two cities by a sampler before version
    5) is listed under the site nearest to it (``sites.csv`` coordinates; on a tie, or without coordinates, the first
    site id), so ``images.csv`` and ``verify_trials.csv`` never hold an image twice (:func:`image_owners`)."""
    state_dir, images_root = Path(state_dir), Path(images_root)
    human = human_verdicts_of(human_verdicts)
    selections = campaign_selections(state_dir, images_root)
    owner = image_owners(state_dir, selections)
    out = []
    for site, meta in selections.items():
        for k in meta.get("kept") or []:
            iid = k["image_id"]
            if owner.get(str(iid), site) != site:  # kept under a nearer site too: used there only
                continue
            rec = _load(state_dir / "image_audit" / site / f"{iid}.json")
            hv = human.get(iid, {}).get("human_verdict")
            if hv:
                usable = hv == "keep"
            elif rec and rec["audit"].get("parsed"):
                usable = bool(ImageAudit.from_json(rec["audit"]).keeps_image)  # App. A.4's rule holds too
            else:
                continue
            out.append({"image_id": iid, "site": site, "lat": k["lat"], "lon": k["lon"],
                        "captured_at": _iso(k.get("captured_at_ms")), "compass_angle_deg": k.get("compass_angle"),
                        "path": k.get("path") or f"{site}/{iid}.jpg", "usable": usable})
    return out


def image_owners(state_dir: str | Path, selections: dict[str, dict[str, Any]]) -> dict[str, str]:
    """image id -> the one site it is used under, for the images kept under more than one site of ``selections``
    (site -> selection record, :func:`geoagent.crawl.fetcher.campaign_selections`): the site whose ``sites.csv``
    coordinates lie nearest to the image (great-circle distance), on a tie (one landmark sampled as two sites) or
    without coordinates the first site id in sorted order. Images kept under one site are not listed."""
    from geoagent.geo import haversine_km

    under: dict[str, list[tuple[str, Any]]] = {}
    for site, meta in selections.items():
        for k in meta.get("kept") or []:
            under.setdefault(str(k["image_id"]), []).append((site, k))
    shared = {i: v for i, v in under.items() if len({s for s, _k in v}) > 1}
    if not shared:
        return {}
    coords: dict[str, tuple[float, float]] = {}
    sites_csv = Path(state_dir) / "sites.csv"
    if sites_csv.is_file():
        with sites_csv.open(encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                try:
                    coords[r["site"]] = (float(r["lat"]), float(r["lon"]))
                except (KeyError, TypeError, ValueError):
                    continue

    def distance(site: str, k: dict[str, Any]) -> float:
        try:
            return haversine_km(float(k["lat"]), float(k["lon"]), *coords[site])
        except (KeyError, TypeError, ValueError):
            return float("inf")

    return {i: min(v, key=lambda sk: (round(distance(*sk), 9), sk[0]))[0] for i, v in shared.items()}


def write_images_csv(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write ``images.csv`` (:data:`IMAGES_COLUMNS`)."""
    path = Path(path)
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(IMAGES_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in IMAGES_COLUMNS})
    return path


def crawl_records(state_dir: str | Path, images_root: str | Path, *, human_verdicts: str | Path | None = None,
                  only_usable: bool = True, review_verdicts: str | Path | None = None) -> dict[str, list[Any]]:
    """Sites, images and reference points of a finished (or partial) crawl as data-model records.

    Returns
    -------
    dict
        ``{"sites": [Site], "images": [Image], "reference_points": [ReferencePoint]}``; reference points are
        every usable, screened non-sensitive, rated candidate within 6 km of its site, with coordinates (the
        GeoVerify candidate pool, which includes the site's own landmark: it is a signal candidate for
        images taken at it), band and tier; ``dist_km`` is rounded to 3 decimals and the band is that of the
        rounded distance, as in the ladders. Ladders for GeoHint are the CSVs (own landmark excluded).
        ``images`` are those :func:`usable_images` calls usable under ``human_verdicts`` (the crawl's
        ``[crawl.image_audit] human_verdicts`` path: a human verdict decides over the model audit), all of
        them when ``only_usable`` is False; pass the crawl's path, or the images differ from ``images.csv``.
        ``review_verdicts``: the crawl's ``[crawl.referenceability] review_verdicts`` path (None: none): a
        candidate's human-corrected rating replaces the model's (:func:`geoagent.crawl.review.apply_decisions`),
        as in the ladders; ``FileNotFoundError``/``ValueError`` as :func:`geoagent.crawl.review.review_verdicts_of`.
    """
    from geoagent.crawl.review import review_verdicts_of

    decisions = review_verdicts_of(review_verdicts)
    state_dir = Path(state_dir)
    sites = []
    sites_csv = state_dir / "sites.csv"
    conts: dict[str, str] = {}
    if sites_csv.is_file():
        with sites_csv.open(encoding="utf-8") as f:
            for r in csv.DictReader(f):
                conts[r["site"]] = r["continent"]
                sites.append(Site(site_id=r["site"], city=r["city"], country=r["country"], continent=r["continent"],
                                  lat=float(r["lat"]), lon=float(r["lon"]), landmark=r["landmark"], qid=r["qid"] or None,
                                  type=r["wd_type"] or None, sitelinks=float(r["sitelinks"] or 0),
                                  sv_perspective=float(r["sv_perspective"] or 0), selection_method=r["selection_method"]))
    images = [Image(image_id=r["image_id"], site_id=r["site"], lat=float(r["lat"]), lon=float(r["lon"]),
                    captured_at=r["captured_at"], compass_angle_deg=r["compass_angle_deg"], path=r["path"],
                    continent=conts.get(r["site"]))
              for r in usable_images(state_dir, images_root, human_verdicts) if r["usable"] or not only_usable]
    points = []
    for p in sorted((state_dir / "rated").glob("*.json")) if (state_dir / "rated").is_dir() else []:
        rec = _load(p)
        if not rec:
            continue
        sid = rec["site"]["site"]
        coords = rec.get("coords", {})
        for r in rec["rated"]:
            d = decisions.get((str(sid), str(r["qid"])))
            if d and d.get("familiarity") is not None:
                r = {**r, "familiarity": d["familiarity"]}
            name = hint_name(r.get("name_en"), r.get("label_raw"), r.get("name_zh"), qid=r.get("qid"))
            # sensitive None: the screen failed, unscreened (referenceability module doc); a record without the key
            # was written with no screen asked for
            if not r.get("ok") or r.get("sensitive", False) is not False or tier_for(r.get("familiarity")) is None or not name:
                continue
            lat, lon = coords.get(r["qid"], (None, None))
            dist = round(float(r["dist_km"]), DIST_DECIMALS)  # the band of the distance shown (the ladders' rule)
            points.append(ReferencePoint(qid=r["qid"], name_en=name, name_zh=r.get("name_zh"), lat=lat, lon=lon,
                                         dist_km=dist, referenceability=int(r["familiarity"]),
                                         band=band_for(dist), tier=tier_for(r["familiarity"]),
                                         pageviews=r.get("pageviews"), site_id=sid, label_raw=r.get("label_raw")))
    return {"sites": sites, "images": images, "reference_points": points}


#: columns that hold identifiers in the crawl's tables: always text, also when every value is digits (Mapillary
#: image ids, a numeric batch label), so an id keeps its leading zeros and any length (:func:`read_crawl_csv`)
ID_COLUMNS = frozenset({"image_id", "image", "image_ref", "site", "site_id", "qid", "cand_qid", "city", "country",
                        "continent", "sequence", "sequence_id", "batch", "key", "request_key", "ladder", "model",
                        "auditor", "creator_id"})


def is_id_column(name: str) -> bool:
    """Whether a crawl-table column holds identifiers (:data:`ID_COLUMNS`, or a name ending in ``_id``/``_qid``,
    also after a ``prefix.`` from flattening), which are read and exported as text."""
    base = name.rsplit(".", 1)[-1]
    return base in ID_COLUMNS or base.endswith(("_id", "_qid"))


def read_crawl_csv(path: str | Path) -> Any:
    """Read one of the crawl's CSV tables (state folder or ``export/``) with Polars, ids as text.

    Column types are inferred from the whole file, except the id columns (:func:`is_id_column`), which are
    read as ``String``: a CSV has no types, and a reader that guesses reads an all-digit ``image_id`` as an
    integer (dropping a leading zero, failing past 2^63). The same rule the exported Parquet files follow.
    A column that is empty in every row, which inference makes ``String``, gets its declared type when the file
    is a table with declared columns (named by its stem: :func:`crawl_table_schemas`, ``crawl_decisions``'
    :func:`_decision_columns`, ``<site>_ladder_<ladder>.csv`` as ``ladders``), so the geometry columns of a
    ``crawl_decisions.csv`` without a WDQS split read as ``Float64``, as in its Parquet file; list columns
    (``parts``) stay JSON text, as they are in the CSV.

    Returns
    -------
    polars.DataFrame
        One row per CSV data line.
    """
    import polars as pl

    path = Path(path)
    header = pl.read_csv(path, n_rows=0).columns
    df = pl.read_csv(path, infer_schema_length=None,
                     schema_overrides={c: pl.String for c in header if is_id_column(c)})
    declared = _declared_of(path.stem)
    empty = [c for c in df.columns if c in declared and df.schema[c] == pl.String and declared[c] != pl.String
             and not isinstance(declared[c], (pl.List, pl.Array, pl.Struct)) and df[c].null_count() == df.height]
    return df.with_columns(pl.lit(None, dtype=declared[c]).alias(c) for c in empty) if empty else df


def _declared_of(stem: str) -> dict[str, Any]:
    """Declared column -> Polars type of the crawl table a CSV file stem names ({} for none)."""
    if stem == CRAWL_DECISIONS_TABLE:
        return _decision_columns()
    schemas = crawl_table_schemas()
    if stem in schemas:
        return schemas[stem]
    return schemas["ladders"] if "_ladder_" in stem else {}


def ids_as_text(df: Any) -> Any:
    """``df`` with every id column (:func:`is_id_column`) cast to ``String`` (nulls stay null)."""
    import polars as pl

    cols = [c for c, t in df.schema.items() if is_id_column(c) and t != pl.String
            and not isinstance(t, (pl.List, pl.Array, pl.Struct))]
    return df.with_columns(pl.col(c).cast(pl.String) for c in cols) if cols else df


#: the crawl's CSV tables under its state folder, in data-flow order (``<name>.csv``)
#: (``candidate_referenceability_by_city``: every city's rating of a QID, the release-layout table keeps one)
CRAWL_CSV_TABLES = ("city_pool", "sites", "images", "image_audit", "candidate_referenceability",
                    "candidate_referenceability_by_city", "audit_review_resolved")
#: its JSONL logs: audit decisions, sensitive-place flags, the human review queue and the log of the human decisions
#: on it (``<name>.jsonl``; :mod:`geoagent.crawl.review`)
CRAWL_JSONL_TABLES = ("audit_decisions", "audit_sensitive", "audit_review_queue", "audit_review_log")
#: the JSONL tables exported one row per key, the last record of each key, as the crawl reads them
#: (:class:`geoagent.crawl.referenceability.JsonlLog`: ``"log"`` keyed by (model, QID, city);
#: :class:`~geoagent.crawl.referenceability.ReviewQueueLog`: ``"review"`` by (site, QID)); chaos45 #1: two crawl
#: processes wrote a screening batch twice and the export had both copies. ``audit_review_log`` is not here: it is
#: append-only by design (one line per human decision, a changed one logged again), every line exported, as
#: ``crawl_decisions``
CRAWL_KEYED_JSONL_TABLES = {"audit_decisions": "log", "audit_sensitive": "log", "audit_review_queue": "review"}
#: the crawl's own decision log (:data:`geoagent.constants.CRAWL_DECISIONS_FILE`) as an exported table
CRAWL_DECISIONS_TABLE = "crawl_decisions"


def _decision_columns() -> dict[str, Any]:
    """Column -> Polars type of the ``crawl_decisions`` table, in order (:data:`CRAWL_DECISIONS_COLUMNS`)."""
    import polars as pl

    box = pl.List(pl.Float64)
    return {
        "ts": pl.Float64,          # unix time of the decision, s
        "stage": pl.String,        # the crawl stage that made it (sampler, referenceability auditor, ...)
        "event": pl.String,        # what was decided: "wdqs_split" (a WDQS area query split into boxes)
        "city": pl.String,         # the city (sampler decisions)
        "site": pl.String,         # the site id (per-site decisions)
        "query": pl.String,        # which WDQS query: "site_candidates" or "entities_around"
        "area": pl.String,         # the area the query was for, as named in errors ("city X", "site S (X)")
        "center_lat": pl.Float64,  # the query circle's centre, degrees
        "center_lon": pl.Float64,
        "radius_km": pl.Float64,   # the query circle's radius, km
        "depth": pl.Int64,         # split depth of the box (0: the whole circle's bounding box)
        "box_west": pl.Float64,    # the box that was split, degrees
        "box_south": pl.Float64,
        "box_east": pl.Float64,
        "box_north": pl.Float64,
        "box_km2": pl.Float64,     # its area, km^2
        "n_parts": pl.Int64,       # boxes it was split into
        "parts": pl.List(box),     # those boxes, each [west, south, east, north] (JSON text in the CSV)
        "reason": pl.String,       # the error that caused the decision (first 300 characters)
        "extra": pl.String,        # any other keys of the record, as a JSON object (null when none)
    }


#: columns of the exported ``crawl_decisions`` table, always all of them in this order (also when empty)
CRAWL_DECISIONS_COLUMNS = ("ts", "stage", "event", "city", "site", "query", "area", "center_lat", "center_lon",
                           "radius_km", "depth", "box_west", "box_south", "box_east", "box_north", "box_km2",
                           "n_parts", "parts", "reason", "extra")
_DECISION_KEYS = {"ts", "stage", "event", "city", "site", "query", "area", "center", "radius_km", "depth", "box",
                  "box_km2", "parts", "reason"}


def _decision_row(rec: dict[str, Any], where: str) -> dict[str, Any]:
    """One decision-log record as a :data:`CRAWL_DECISIONS_COLUMNS` row; ``where`` (``path:line``) names it in errors."""

    def num(key: str, v: Any, kind: type = float) -> Any:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()):
            raise ValueError(f"{where}: key {key!r} should be a{'n integer' if kind is int else ' number'}, got {v!r}")
        return kind(v)

    def text(key: str, v: Any) -> str | None:
        if v is None:
            return None
        if not isinstance(v, str):
            raise ValueError(f"{where}: key {key!r} should be text, got {v!r}")
        return v

    def pair(key: str, v: Any, n: int) -> list[float | None]:
        if v is None:
            return [None] * n
        if not isinstance(v, (list, tuple)) or len(v) != n:
            raise ValueError(f"{where}: key {key!r} should be a list of {n} numbers, got {v!r}")
        return [num(key, x) for x in v]

    parts = rec.get("parts")
    if parts is not None and not isinstance(parts, list):
        raise ValueError(f"{where}: key 'parts' should be a list of boxes, got {parts!r}")
    parts = None if parts is None else [pair("parts", b, 4) for b in parts]
    lat, lon = pair("center", rec.get("center"), 2)
    w, s, e, n = pair("box", rec.get("box"), 4)
    extra = {k: v for k, v in rec.items() if k not in _DECISION_KEYS}
    return {
        "ts": num("ts", rec.get("ts")), "stage": text("stage", rec.get("stage")), "event": text("event", rec.get("event")),
        "city": text("city", rec.get("city")), "site": text("site", rec.get("site")),
        "query": text("query", rec.get("query")), "area": text("area", rec.get("area")),
        "center_lat": lat, "center_lon": lon, "radius_km": num("radius_km", rec.get("radius_km")),
        "depth": num("depth", rec.get("depth"), int), "box_west": w, "box_south": s, "box_east": e, "box_north": n,
        "box_km2": num("box_km2", rec.get("box_km2")), "n_parts": None if parts is None else len(parts),
        "parts": parts, "reason": text("reason", rec.get("reason")),
        "extra": orjson.dumps(extra).decode() if extra else None,
    }


def crawl_decisions_frame(path: str | Path) -> Any:
    """The crawl's decision log (``crawl_decisions.jsonl``) as a table with the fixed columns
    :data:`CRAWL_DECISIONS_COLUMNS` (types in :func:`_decision_columns`), one row per line in file order.

    A missing file gives the empty table with the same columns (a crawl that made no decision, e.g. one whose
    WDQS never timed out). The record's ``center`` ``[lat, lon]`` and ``box`` ``[west, south, east, north]``
    (degrees) become one column per coordinate; ``parts`` (the boxes a split made) stays a list, with its count
    in ``n_parts``; keys outside the fixed set go, as a JSON object, to ``extra``, so a future kind of
    decision keeps its data without changing the columns. Source of the records:
    :meth:`geoagent.crawl.stages.CrawlServices.decision_logger` and the WDQS client's split records
    (:mod:`geoagent.clients.wdqs`).

    Returns
    -------
    polars.DataFrame
        Shape ``(n_records, len(CRAWL_DECISIONS_COLUMNS))``.

    Raises
    ------
    ValueError
        A line that is not a JSON object, or a key whose value has the wrong type (names ``path:line`` and key).
    """
    import polars as pl

    path = Path(path)
    schema = _decision_columns()
    rows = [_decision_row(rec, f"{path}:{i}") for i, rec in _log_records(path)] if path.is_file() else []
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


def crawl_table_schemas() -> dict[str, dict[str, Any]]:
    """Declared column -> Polars type of each exported crawl table (besides ``crawl_decisions``, whose
    columns are :func:`_decision_columns`), so an export's types never depend on the data: a column that is
    empty in one crawl (``name_zh`` when no auditor gave a Chinese name) keeps its type and the exports of two
    crawls concatenate. Columns follow the writers (:data:`geoagent.crawl.screener.CITY_POOL_COLUMNS`,
    :data:`geoagent.crawl.sampler.SITES_COLUMNS`, :data:`IMAGES_COLUMNS`,
    :data:`geoagent.crawl.image_audit.IMAGE_AUDIT_COLUMNS`, the referenceability and ladder columns, the audit
    logs' records); units: ``lat``/``lon``/``*_deg`` degrees, ``*_km`` km, ``ts`` unix time in s."""
    import polars as pl

    S, F, I, B = pl.String, pl.Float64, pl.Int64, pl.Boolean
    return {
        "city_pool": {"city": S, "country": S, "continent": S, "lat": F, "lon": F, "sv_total": I,
                      "sv_perspective": I, "L_district": F, "ok_streetview": B, "ok_scale": B, "eligible": B,
                      "coverage_lower_bound": B},  # as sites.csv's (null: screened before the flag was kept)
        # counts, written as integers (a crawl from before session 7 wrote "58.0": read back by inference)
        # coverage_lower_bound: sv_perspective is "at least N" (a Mapillary search box still full at the minimum
        # size; null: a site sampled before the column existed); not in the release's sites.csv
        "sites": {"site": S, "city": S, "country": S, "continent": S, "landmark": S, "qid": S, "wd_type": S,
                  "lat": F, "lon": F, "sitelinks": I, "sv_perspective": I, "selection_method": S,
                  "coverage_lower_bound": B},
        "images": {"image_id": S, "site": S, "lat": F, "lon": F, "captured_at": S, "compass_angle_deg": F,
                   "path": S, "usable": B},
        "image_audit": {"image": S, "site": S, "batch": S, "usable": B, "ai_answer_overlay": B,
                        "ai_overlay_text": S, "ai_scene_type": S, "ai_through_glass": B,
                        "ai_tourist_infrastructure": B, "ai_quality": F, "ai_usable": B, "ai_why": S,
                        "human_verdict": S, "human_reason": S, "human_verified_by": S, "human_note": S},
        "candidate_referenceability": {"qid": S, "sitelinks": I, "familiarity": I},
        "candidate_referenceability_by_city": {"qid": S, "city": S, "sitelinks": I, "familiarity": I, "dist_km": F},
        "ladders": {"site": S, "ladder": S, "band": S, "tier": S, "name_zh": S, "name_en": S, "label_raw": S,
                    "qid": S, "dist_km": F, "familiarity": I, "pageviews": I, "n_in_cell": I, "n_taken": I},
        "audit_decisions": {"qid": S, "label": S, "model": S, "ok": B, "familiarity": I, "name_zh": S,
                            "name_en": S, "why": S, "ts": F, "city": S, "candidate_lines": I, "parser_version": I,
                            "error": S, "raw": S, "failure": S, "reasks": I},
        "audit_sensitive": {"qid": S, "label": S, "model": S, "auditor": S, "sensitive": B, "why": S, "ts": F,
                            "city": S, "candidate_lines": I, "parser_version": I, "error": S, "raw": S,
                            "failure": S, "reasks": I},
        "audit_review_queue": {"qid": S, "label": S, "model": S, "site": S, "familiarity": I, "tier_llm": S,
                               "pageviews": I, "tier_pageviews": S, "status": S, "ts": F},
        "audit_review_resolved": {"site": S, "qid": S, "label": S, "familiarity_model": I, "tier_llm": S,
                                  "pageviews": I, "tier_pageviews": S, "status": S, "decision": S,
                                  "familiarity_final": I, "tier_final": S, "reviewer": S, "note": S},
        "audit_review_log": {"site": S, "qid": S, "decision": S, "familiarity_model": I, "familiarity_final": I,
                             "reviewer": S, "note": S, "source": S, "ts": F},
    }


def _read_declared_csv(path: Path, schema: dict[str, Any]) -> Any:
    """A crawl CSV read with its declared types; a file whose values do not parse as declared (hand-edited)
    is read as :func:`read_crawl_csv` does (types inferred), so nothing is lost."""
    import polars as pl

    header = pl.read_csv(path, n_rows=0).columns
    over = {c: (pl.String if is_id_column(c) else schema.get(c)) for c in header if is_id_column(c) or c in schema}
    try:
        return pl.read_csv(path, infer_schema_length=None, schema_overrides=over)
    except (pl.exceptions.PolarsError, ValueError):
        return _coerce_declared(read_crawl_csv(path), schema)


def _coerce_declared(df: Any, schema: dict[str, Any]) -> Any:
    """``df`` (read by inference) with each declared column cast to its declared type where every value
    converts exactly: an all-empty column, whole decimals ("58.0", written by crawls before session 7) as
    ``Int64``, integers as ``Float64``; a column with a value that does not fit (58.5 declared ``Int64``) keeps
    its inferred type, so no value is changed or lost."""
    import polars as pl

    casts = []
    for c, t in schema.items():
        if c not in df.columns or df.schema[c] == t:
            continue
        col = df[c]
        if col.null_count() == col.len():
            casts.append(pl.col(c).cast(t))
        elif t == pl.Int64 and col.dtype.is_float():
            vals = col.drop_nulls()
            if bool((vals == vals.round(0)).all()) and bool((vals.abs() < 2.0 ** 53).all()):
                casts.append(pl.col(c).cast(pl.Int64))
        elif t == pl.Float64 and col.dtype.is_integer():
            casts.append(pl.col(c).cast(pl.Float64))
    return df.with_columns(casts) if casts else df


def _with_declared(df: Any, schema: dict[str, Any]) -> Any:
    """``df`` with every declared column (typed nulls where absent) first, in declared order, then the others;
    a remaining all-null (``Null``-typed) column becomes text."""
    import polars as pl

    cols = [pl.col(c) if c in df.columns else pl.lit(None, dtype=t).alias(c) for c, t in schema.items()]
    cols += [pl.col(c) for c in df.columns if c not in schema]
    out = df.select(cols)
    nulls = [c for c, t in out.schema.items() if t == pl.Null]
    return out.with_columns(pl.col(c).cast(pl.String) for c in nulls) if nulls else out


#: the auditor each auditor table's rows come from (:data:`geoagent.sandbox.launch.CRAWL_AUDITOR_ROLES`): these
#: tables get the column ``simulated`` (:func:`export_crawl_tables`); a table with an ``auditor`` or ``model``
#: column is flagged by its rows' model instead
AUDITOR_TABLES = {"image_audit": "image_audit", "candidate_referenceability": "referenceability",
                  "candidate_referenceability_by_city": "referenceability", "ladders": "referenceability",
                  "audit_decisions": "referenceability", "audit_sensitive": "referenceability",
                  "audit_review_queue": "referenceability",
                  # the human review tables hold the referenceability auditor's ratings (familiarity_model)
                  "audit_review_resolved": "referenceability", "audit_review_log": "referenceability"}


def recorded_auditor_kinds(state_dir: str | Path) -> tuple[dict[str, set[str]], dict[str, str]]:
    """What answered the crawl's auditors, as recorded with each answer at call time
    (:func:`geoagent.crawl.llmcall.auditor_provider_kind`, :data:`geoagent.constants.PROVIDER_KINDS`).

    Reads the image audits (``image_audit/<site>/<image>.json``, ``provider_kind``) and the referenceability
    auditor's raw answer log (``audit_raw_answers.jsonl``, ``provider_kind``; one line in memory at a time; a
    torn or malformed line is skipped, as the auditor's own reader does). Answers stored before the kind was
    recorded (crawls before session 13) carry none and count for nothing here.

    Returns
    -------
    (dict, dict)
        Auditor model name -> the kinds recorded with its answers (a name answered by both the simulator and a
        model server under one config after another has two), and image path (``<site>/<image_id>.jpg``, the
        ``image`` column of ``image_audit.csv``) -> the kind recorded with its audit.
    """
    from geoagent.crawl.referenceability import RAW_ANSWERS_FILE

    state_dir = Path(state_dir)
    by_model: dict[str, set[str]] = {}
    by_image: dict[str, str] = {}
    root = state_dir / "image_audit"
    for path in sorted(root.glob("*/*.json")) if root.is_dir() else []:
        rec = _load(path)
        if not isinstance(rec, dict) or rec.get("provider_kind") not in C.PROVIDER_KINDS:
            continue
        kind = rec["provider_kind"]
        if isinstance(rec.get("model"), str):
            by_model.setdefault(rec["model"], set()).add(kind)
        image = rec.get("path") or f"{rec.get('site')}/{rec.get('image_id')}.jpg"  # as image_audit.csv's image
        by_image[str(image)] = kind
    raw = state_dir / RAW_ANSWERS_FILE
    if raw.is_file():
        with raw.open("rb") as f:
            for line in f:
                if b'"provider_kind"' not in line:  # most of an old log: no parse
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("model"), str) \
                        and rec.get("provider_kind") in C.PROVIDER_KINDS:
                    by_model.setdefault(rec["model"], set()).add(rec["provider_kind"])
    return by_model, by_image


def crawl_simulated(cfg: Any, state_dir: str | Path | None = None, *,
                    recorded: tuple[dict[str, set[str]], dict[str, str]] | None = None
                    ) -> tuple[dict[str, bool], dict[str, bool], str, list[str]]:
    """What the config as written says of the crawl's auditors, and which of them answered from the simulator.

    Returns ``(role -> answered by the simulator, model name -> answered by the simulator, the simulator's warning
    or "", the names the warning gives)``. The two mappings are the config's rule
    (:func:`geoagent.sandbox.launch.simulated_auditors`, :func:`~geoagent.sandbox.launch.simulated_models`; the
    model names are the auditors' and the ``[[models]]`` entries'; another model is not known), which the export
    falls back to for answers that recorded nothing. The warning
    (:func:`~geoagent.sandbox.launch.simulated_note`) names, with ``state_dir`` (the crawl's output folder), what
    the answers recorded (:func:`recorded_auditor_kinds`): each auditor an answer of which recorded
    ``simulated``, and each the config calls simulated that recorded no answer; without it, the config's names.
    ``recorded``: :func:`recorded_auditor_kinds` of ``state_dir`` when the caller has it (read once)."""
    from geoagent.sandbox.launch import CRAWL_AUDITOR_ROLES, simulated_auditors, simulated_models, simulated_note

    sim_roles = simulated_auditors(cfg)
    names = simulated_models(cfg)
    try:
        crawl = cfg.section("crawl")
    except Exception:
        crawl = None
    known = {m.name for m in getattr(cfg, "models", None) or []}
    known |= {getattr(getattr(crawl, r, None), "model", None) for r in CRAWL_AUDITOR_ROLES} - {None}
    told = list(names)
    if state_dir is not None or recorded is not None:
        by_model = (recorded if recorded is not None else recorded_auditor_kinds(state_dir))[0]
        told = [n for n in names if not by_model.get(n) or C.PROVIDER_KIND_SIMULATED in by_model[n]]
        told += sorted(n for n, kinds in by_model.items() if C.PROVIDER_KIND_SIMULATED in kinds and n not in told)
    return ({r: r in sim_roles for r in CRAWL_AUDITOR_ROLES}, {m: m in names for m in known},
            simulated_note(told, task="crawl") if told else "", told)


def _role_models(cfg: Any) -> dict[str, str]:
    """Auditor role -> its model's name in ``cfg`` (:data:`geoagent.sandbox.launch.CRAWL_AUDITOR_ROLES`)."""
    from geoagent.sandbox.launch import CRAWL_AUDITOR_ROLES

    try:
        crawl = cfg.section("crawl")
    except Exception:
        return {}
    out = {}
    for r in CRAWL_AUDITOR_ROLES:
        model = getattr(getattr(crawl, r, None), "model", None)
        if isinstance(model, str):
            out[r] = model
    return out


def _with_simulated(df: Any, table: str, roles: dict[str, bool], models: dict[str, bool],
                    recorded: tuple[dict[str, set[str]], dict[str, str]] | None = None,
                    role_models: dict[str, str] | None = None) -> tuple[Any, int]:
    """``(df with the column simulated, rows whose flag came from the config)`` when ``table`` is an auditor table
    (:data:`AUDITOR_TABLES`), else ``(df, 0)``.

    Each row's flag is what answered it, as recorded at call time (``recorded``: :func:`recorded_auditor_kinds`):
    an ``image_audit`` row by its image's audit; a row of a table with an ``auditor`` or ``model`` column by the
    kinds recorded with that auditor's answers; another table's rows by those of the table's auditor (its model
    in ``role_models``, the config's). True when that is ``simulated``, False for ``model`` or ``replay``; null
    when the auditor recorded both the simulator and another kind (its rows cannot be told apart). Where nothing
    was recorded (answers stored before the crawl recorded it) the config decides as before (``models`` by the
    row's auditor, null for one the config does not name; ``roles`` by the table's auditor), and those rows
    are counted (the export note says so: :func:`geoagent.runtime.export.simulated_from_config_line`)."""
    import polars as pl

    role = AUDITOR_TABLES.get(table)
    if role is None:
        return df, 0
    by_model, by_image = recorded if recorded is not None else ({}, {})

    def of(name: Any) -> str | None:  # "" when the name recorded more than one kind
        kinds = by_model.get(name) if isinstance(name, str) else None
        return None if not kinds else (next(iter(kinds)) if len(kinds) == 1 else "")

    # audit_sensitive's ``model`` is its cache key (``sens|<auditor>``); its ``auditor`` is the model's name
    by = next((c for c in ("auditor", "model") if c in df.columns), None)
    if table == "image_audit" and "image" in df.columns:
        keys = df["image"].to_list()
        kinds = [by_image.get(k) if isinstance(k, str) else None for k in keys]
        fallback = [roles.get(role)] * len(keys)
    elif by is not None:
        keys = df[by].to_list()
        kinds = [of(k) for k in keys]
        fallback = [models.get(k) if isinstance(k, str) else None for k in keys]
    else:
        kind = of((role_models or {}).get(role))
        kinds, fallback = [kind] * df.height, [roles.get(role)] * df.height
    flags: list[bool | None] = []
    guessed = 0
    for kind, rule in zip(kinds, fallback):
        if kind:
            flags.append(kind == C.PROVIDER_KIND_SIMULATED)
        elif kind == "":
            flags.append(None)
        else:
            flags.append(rule)
            guessed += rule is not None
    return df.with_columns(pl.Series("simulated", flags, dtype=pl.Boolean)), guessed


def export_crawl_tables(state_dir: str | Path, out_dir: str | Path | None = None, *,
                        cfg: Any = None, progress: str | None = None) -> list[Any]:
    """Export a crawl's tables as Parquet and CSV (``run.py export`` of a ``kind = "crawl"`` campaign).

    Each present file of :data:`CRAWL_CSV_TABLES` and :data:`CRAWL_JSONL_TABLES` becomes
    ``<out_dir>/<name>.parquet`` and ``<name>.csv``; the per-site context ladders
    (``ladders/<site>_ladder_<auditor>-<lang>.csv``) become one ``ladders`` table with leading ``site`` and
    ``ladder`` (``<auditor>-<lang>``) columns. Every table has declared columns and types
    (:func:`crawl_table_schemas`), present also when empty; columns beyond those are inferred from the whole
    file (Polars), and every id column (``image_id``, ``site``, ``qid``, ... :func:`is_id_column`) is text;
    JSONL rows are flattened one level as in :func:`geoagent.runtime.export.rows_to_frame`; the keyed logs
    (:data:`CRAWL_KEYED_JSONL_TABLES`) have one row per key, its last record, the human decision log every line.
    Tables the
    crawl has not written yet are left out, except the decision log: ``crawl_decisions`` (from
    ``crawl_decisions.jsonl``, :func:`crawl_decisions_frame`) is always written, last, with the columns
    :data:`CRAWL_DECISIONS_COLUMNS`, and has no rows when the crawl made no decision (no WDQS split). The
    crawl's own files are only read.

    Parameters
    ----------
    state_dir : path
        The crawl's output folder (``state/<campaign>/``).
    out_dir : path, optional
        Default ``<state_dir>/export`` (:data:`geoagent.constants.EXPORT_DIR`), so the exported CSVs never
        replace the crawl's own.
    cfg : CampaignConfig, optional
        The crawl's config as written (a sandbox model fake is known by its ``*.sandbox.invalid`` URL, which the
        running copy has replaced by a local port). With it, the auditor tables (:data:`AUDITOR_TABLES`) get the
        column ``simulated``: True where geoagent's simulator answered, as recorded with each auditor answer at
        call time (:func:`recorded_auditor_kinds`, :func:`_with_simulated`), so a config changed since does not
        change it; rows whose answers recorded nothing (a crawl before session 13) take the config's rule
        (:func:`crawl_simulated`) and are counted (``ExportedTable.simulated_from_config``, said in
        ``export_note.txt``). When an auditor answered from the simulator, every Parquet file carries the
        simulator's warning in its metadata (:data:`geoagent.runtime.export.PARQUET_SIMULATED_KEY`), and every
        Parquet file of a crawl not finished carries the interim-export line
        (:func:`geoagent.runtime.export.progress_note`, :data:`geoagent.runtime.export.PARQUET_PROGRESS_KEY`);
        ``export_note.txt`` is the caller's (:meth:`geoagent.crawl.campaign.CrawlCampaign.export`,
        :func:`write_crawl_export_note`).
    progress : str, optional
        The interim-export line as the caller read it (:func:`geoagent.runtime.export.progress_note`), so the
        queues are counted once for the tables and the note; None: read here (with ``cfg``).

    Returns
    -------
    list of geoagent.runtime.export.ExportedTable
        One per table written, in the order above (ladders after the CSV tables, ``crawl_decisions`` last).

    Raises
    ------
    ValueError
        A JSONL line that is not a JSON object (names the file and line); a decision-log value of the wrong
        type (names the file, line and key).
    """
    import polars as pl

    from geoagent.runtime.export import ExportedTable, rows_to_frame, write_frame

    state_dir = Path(state_dir)
    out = Path(out_dir) if out_dir is not None else state_dir / C.EXPORT_DIR
    schemas = crawl_table_schemas()
    frames: list[tuple[str, pl.DataFrame]] = []
    for name in CRAWL_CSV_TABLES:
        path = state_dir / f"{name}.csv"
        if path.is_file():
            frames.append((name, _with_declared(_read_declared_csv(path, schemas[name]), schemas[name])))
    ladder_files = sorted((state_dir / "ladders").glob("*_ladder_*.csv")) if (state_dir / "ladders").is_dir() else []
    if ladder_files:
        parts = []
        for path in ladder_files:
            site, _, ladder = path.stem.partition("_ladder_")
            df = _read_declared_csv(path, schemas["ladders"])
            parts.append(df.select(pl.lit(site).alias("site"), pl.lit(ladder).alias("ladder"), pl.all()))
        frames.append(("ladders", _with_declared(pl.concat(parts, how="diagonal_relaxed"), schemas["ladders"])))
    for name in CRAWL_JSONL_TABLES:
        path = state_dir / f"{name}.jsonl"
        if not path.is_file():
            continue
        rows = [(str(i), row) for i, row in _last_of_each_key(_log_records(path), CRAWL_KEYED_JSONL_TABLES.get(name))]
        frames.append((name, _with_declared(rows_to_frame(rows, schemas[name]).drop("key"), schemas[name])))
    frames.append((CRAWL_DECISIONS_TABLE, crawl_decisions_frame(state_dir / C.CRAWL_DECISIONS_FILE)))
    metadata = None
    guessed: dict[str, int] = {}  # table -> rows whose simulated flag came from the config
    if cfg is not None:
        from geoagent.runtime.export import PARQUET_CAMPAIGN_KEY, PARQUET_SIMULATED_KEY

        recorded, role_models = recorded_auditor_kinds(state_dir), _role_models(cfg)
        roles, models, note, _ = crawl_simulated(cfg, recorded=recorded)
        flagged = []
        for name, df in frames:
            df, guessed[name] = _with_simulated(df, name, roles, models, recorded, role_models)
            flagged.append((name, df))
        frames = flagged
        from geoagent.runtime.export import PARQUET_PROGRESS_KEY, progress_note

        if progress is None:  # a crawl not finished: its tables hold the cities and sites done so far
            progress = progress_note(cfg)
        metadata = {**({PARQUET_SIMULATED_KEY: note} if note else {}),
                    **({PARQUET_PROGRESS_KEY: progress} if progress else {}), PARQUET_CAMPAIGN_KEY: str(cfg.name)}
    written = []
    for name, df in frames:
        parquet, csv_path = out / f"{name}.parquet", out / f"{name}.csv"
        df = ids_as_text(df)
        write_frame(df, parquet, csv_path, metadata=metadata)
        written.append(ExportedTable(name, df.height, parquet, csv_path, simulated_from_config=guessed.get(name, 0)))
    return written


def write_crawl_export_note(out_dir: str | Path, tables: list[Any], cfg: Any,
                            state_dir: str | Path | None = None, *, progress: str | None = None) -> Path | None:
    """``out_dir/export_note.txt`` for a crawl's export (``tables``: every table written there, the crawl's and
    the response store's): the replay line, the simulator's warning when an auditor (or ``[[models]]`` entry)
    answered from the simulator (:func:`crawl_simulated`; with ``state_dir``, the crawl's output folder, as its
    answers recorded, else by the config), naming the tables with the column ``simulated``, and the line counting
    the rows whose flag came from the current config (answers stored before the crawl recorded what answered,
    :attr:`geoagent.runtime.export.ExportedTable.simulated_from_config`); written by
    :func:`geoagent.runtime.export.write_export_note`, after the interim-export line of a crawl not finished
    (:func:`geoagent.runtime.export.progress_note`; the crawl's own Parquet files carry it too,
    :func:`export_crawl_tables`). Without any of
    them a note left by an earlier export is removed. Returns the note's path, or None when none is written."""
    from geoagent.runtime.export import (EXPORT_NOTE_FILE, _replay_of, progress_note, remove_export_note,
                                         write_export_note)

    path = Path(out_dir) / EXPORT_NOTE_FILE
    _, _, sim_note, _ = crawl_simulated(cfg, state_dir)
    _, note = _replay_of(cfg)
    if progress is None:  # a crawl not finished: its tables hold the cities and sites done so far
        progress = progress_note(cfg)
    if not (sim_note or note or progress or any(getattr(t, "simulated_from_config", 0) for t in tables)):
        remove_export_note(path)
        return None
    if sim_note:
        flagged = [t.table for t in tables if t.table in AUDITOR_TABLES]
        sim_note += (f" The column `simulated` is in the auditor tables ({', '.join(flagged) or 'none'}); every "
                     "other table (sites, images, ...) was built from their answers too.")
    write_export_note(path, note, tables, simulated_note=sim_note, progress=progress)
    return path
