"""Hand the crawl's results to the evaluations: sites, images and reference points as data-model records.

The crawl's state folder mirrors the release layout (``sites.csv``, ``ladders/<site>_ladder_*.csv``,
``image_audit.csv``, ``city_pool.csv``), so :func:`geoagent.data.importer.import_release` reads its
sites and ladders directly. What the release ships as a trial table, the crawl keeps as images with
camera coordinates and rated candidates with coordinates; :func:`crawl_records` turns them into
:class:`~geoagent.data.model.Image` and :class:`~geoagent.data.model.ReferencePoint` records (the
GeoVerify trial builder needs candidate coordinates; GeoHint needs the ladders), and
:func:`write_images_csv` writes ``images.csv``. :func:`export_crawl_tables` is ``run.py export`` of a
crawl: its tables as Parquet and CSV under ``state/<campaign>/export/``.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.crawl.fetcher import METADATA_FILE
from geoagent.crawl.image_audit import read_human_verdicts
from geoagent.crawl.ladder import band_for, tier_for
from geoagent.data.model import Image, ReferencePoint, Site
from geoagent.files import atomic_open, iter_jsonl_objects

IMAGES_COLUMNS = ("image_id", "site", "lat", "lon", "captured_at", "compass_angle_deg", "path", "usable")


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
    """Kept images of every site with their audit outcome: ``usable`` follows the human verdict when
    one exists (the paper's policy), else the model audit; images without any audit are left out."""
    state_dir, images_root = Path(state_dir), Path(images_root)
    human = read_human_verdicts(human_verdicts) if human_verdicts and Path(human_verdicts).is_file() else {}
    out = []
    for site_dir in sorted(p for p in images_root.iterdir() if p.is_dir()) if images_root.is_dir() else []:
        meta = _load(site_dir / METADATA_FILE)
        if not meta:
            continue
        for k in meta.get("kept", []):
            iid = k["image_id"]
            rec = _load(state_dir / "image_audit" / site_dir.name / f"{iid}.json")
            hv = human.get(iid, {}).get("human_verdict")
            if hv:
                usable = hv == "keep"
            elif rec and rec["audit"].get("parsed"):
                usable = bool(rec["audit"].get("usable"))
            else:
                continue
            out.append({"image_id": iid, "site": site_dir.name, "lat": k["lat"], "lon": k["lon"],
                        "captured_at": _iso(k.get("captured_at_ms")), "compass_angle_deg": k.get("compass_angle"),
                        "path": k.get("path") or f"{site_dir.name}/{iid}.jpg", "usable": usable})
    return out


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
                  only_usable: bool = True) -> dict[str, list[Any]]:
    """Sites, images and reference points of a finished (or partial) crawl as data-model records.

    Returns
    -------
    dict
        ``{"sites": [Site], "images": [Image], "reference_points": [ReferencePoint]}``; reference points are
        every usable, non-sensitive, rated candidate within 6 km of its site, with coordinates (the
        GeoVerify candidate pool, which includes the site's own landmark: it is a signal candidate for
        images taken at it), band and tier. Ladders for GeoHint are the CSVs (own landmark excluded).
    """
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
            if not r.get("ok") or r.get("sensitive") or tier_for(r.get("familiarity")) is None or not r.get("name_en"):
                continue
            lat, lon = coords.get(r["qid"], (None, None))
            points.append(ReferencePoint(qid=r["qid"], name_en=r["name_en"], name_zh=r.get("name_zh"), lat=lat, lon=lon,
                                         dist_km=round(float(r["dist_km"]), 3), referenceability=int(r["familiarity"]),
                                         band=band_for(float(r["dist_km"])), tier=tier_for(r["familiarity"]),
                                         pageviews=r.get("pageviews"), site_id=sid, label_raw=r.get("label_raw")))
    return {"sites": sites, "images": images, "reference_points": points}


#: the crawl's CSV tables under its state folder, in data-flow order (``<name>.csv``)
CRAWL_CSV_TABLES = ("city_pool", "sites", "images", "image_audit", "candidate_referenceability")
#: its JSONL logs: audit decisions, sensitive-place flags, the human review queue (``<name>.jsonl``)
CRAWL_JSONL_TABLES = ("audit_decisions", "audit_sensitive", "audit_review_queue")


def export_crawl_tables(state_dir: str | Path, out_dir: str | Path | None = None) -> list[Any]:
    """Export a crawl's tables as Parquet and CSV (``run.py export`` of a ``kind = "crawl"`` campaign).

    Each present file of :data:`CRAWL_CSV_TABLES` and :data:`CRAWL_JSONL_TABLES` becomes
    ``<out_dir>/<name>.parquet`` and ``<name>.csv``; the per-site context ladders
    (``ladders/<site>_ladder_<auditor>-<lang>.csv``) become one ``ladders`` table with leading ``site`` and
    ``ladder`` (``<auditor>-<lang>``) columns. Column types are inferred from the whole file (Polars);
    JSONL rows are flattened one level as in :func:`geoagent.runtime.export.rows_to_frame`. Tables the
    crawl has not written yet are left out. The crawl's own files are only read.

    Parameters
    ----------
    state_dir : path
        The crawl's output folder (``state/<campaign>/``).
    out_dir : path, optional
        Default ``<state_dir>/export`` (:data:`geoagent.constants.EXPORT_DIR`), so the exported CSVs never
        replace the crawl's own.

    Returns
    -------
    list of geoagent.runtime.export.ExportedTable
        One per table written, in the order above (ladders after the CSV tables).

    Raises
    ------
    ValueError
        A JSONL line that is not a JSON object (names the file and line).
    """
    import polars as pl

    from geoagent.runtime.export import ExportedTable, rows_to_frame, write_frame

    state_dir = Path(state_dir)
    out = Path(out_dir) if out_dir is not None else state_dir / C.EXPORT_DIR
    frames: list[tuple[str, pl.DataFrame]] = []
    for name in CRAWL_CSV_TABLES:
        path = state_dir / f"{name}.csv"
        if path.is_file():
            frames.append((name, pl.read_csv(path, infer_schema_length=None)))
    ladder_files = sorted((state_dir / "ladders").glob("*_ladder_*.csv")) if (state_dir / "ladders").is_dir() else []
    if ladder_files:
        parts = []
        for path in ladder_files:
            site, _, ladder = path.stem.partition("_ladder_")
            df = pl.read_csv(path, infer_schema_length=None)
            parts.append(df.select(pl.lit(site).alias("site"), pl.lit(ladder).alias("ladder"), pl.all()))
        frames.append(("ladders", pl.concat(parts, how="diagonal_relaxed")))
    for name in CRAWL_JSONL_TABLES:
        path = state_dir / f"{name}.jsonl"
        if not path.is_file():
            continue
        rows = [(str(i), row) for i, row in iter_jsonl_objects(path)]
        frames.append((name, rows_to_frame(rows).drop("key")))
    written = []
    for name, df in frames:
        parquet, csv_path = out / f"{name}.parquet", out / f"{name}.csv"
        write_frame(df, parquet, csv_path)
        written.append(ExportedTable(name, df.height, parquet, csv_path))
    return written
