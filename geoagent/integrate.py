"""Glue where the crawl meets the evaluations and the local fakes (used by ``run.py demo``, usable alone).

* :func:`write_verify_trials` turns a finished crawl's state folder into a complete release-form folder:
  the crawl already writes ``sites.csv``, ``ladders/`` and ``images.csv``; this builds GeoVerify trials
  (seed 000 Sec. 5.2 and 5.4: signal < 150 m, five decoy bands, both control arms) from the crawled
  images and the rated candidates *with their coordinates* (:func:`geoagent.crawl.export.crawl_records`)
  and writes them as ``verify_trials.csv`` in the release's column layout (plus ``image_ref`` and
  ``cand_qid``). :func:`geoagent.data.importer.import_release` then reads the folder like the public
  release, so a GeoVerify campaign (``[geoverify] trials = "release"``) and a GeoHint campaign
  (``[geohint] images = "release"``: the images of the main-arm trials, with their files) run on it
  unchanged.
* :func:`gazetteer_from_world` builds the gazetteer behind the local Wikidata and Nominatim fakes from a
  sandbox world (:mod:`geoagent.sandbox.city`): every Wikidata entity with its real (sandbox)
  coordinate, plus one ``city`` entry per city, so model answers naming sandbox places geocode.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.files import atomic_open
from geoagent.geo import haversine_km

#: ``verify_trials.csv`` columns: the release's (``verify_trials_sample.csv``) then our additions.
VERIFY_TRIALS_COLUMNS = ("image_id", "site", "path", "img_lat", "img_lon", "cand", "cand_lat", "cand_lon", "fam",
                         "d_km", "band", "truth", "arm", "cont", "image_ref", "cand_qid")
VERIFY_TRIALS_FILE = "verify_trials.csv"


def stale_trials_reason(folder: str | Path) -> str | None:
    """Why a campaign finds no trial table in ``folder`` when it is a crawl's folder whose ``verify_trials.csv`` was
    moved to ``verify_trials.stale.csv`` (:data:`geoagent.crawl.campaign.STALE_TRIALS_FILE`: the crawl ended, or
    went idle in ``--watch``, incomplete), with what to do; None when ``folder`` has a ``verify_trials.csv`` or
    no stale one. Campaigns never read the stale table (built from an earlier state of the crawl)."""
    from geoagent.crawl.campaign import STALE_TRIALS_FILE

    root = Path(folder)
    if (root / VERIFY_TRIALS_FILE).is_file() or not (root / STALE_TRIALS_FILE).is_file():
        return None
    return (f"it has no {VERIFY_TRIALS_FILE}: the crawl that writes this folder ended incomplete (dead-lettered or "
            f"queued work) and moved its earlier table to {STALE_TRIALS_FILE}, which campaigns never read (built from "
            f"an earlier state of the crawl; its report/crawl_summary.json says why); finish the crawl (`run.py dead "
            f"CRAWL_CONFIG --requeue` for dead-lettered work, then re-run `run.py crawl CRAWL_CONFIG`) and it writes "
            f"a new {VERIFY_TRIALS_FILE}")


def write_verify_trials(
    crawl_state_dir: str | Path,
    images_root: str | Path,
    *,
    seed: int = 0,
    n_per_band: int | None = 2,
    max_signal: int | None = None,
    n_control: int = 2,
    tau_km: float = C.GEOVERIFY_TAU_KM,
    out_dir: str | Path | None = None,
    human_verdicts: str | Path | None = None,
    review_verdicts: str | Path | None = None,
) -> tuple[Path, Any]:
    """Build GeoVerify trials from a crawl and write them as a release-form ``verify_trials.csv``.

    Parameters
    ----------
    crawl_state_dir : path
        The crawl campaign's state folder (``sites.csv``, ``rated/``, ``image_audit/``, ``ladders/``).
    images_root : path
        Folder of the crawled thumbnails (``<site>/<image_id>.jpg``); trial ``path`` values are relative
        to it, so evaluation campaigns use it as their ``image_root``.
    seed, n_per_band, max_signal, n_control, tau_km
        As in :func:`geoagent.geoverify.trials.build_trials` (tau in km; 0.15 = 150 m).
    out_dir : path, optional
        Where to write (default: ``crawl_state_dir``, which then imports as a complete release folder).
    human_verdicts : path, optional
        The crawl's ``[crawl.image_audit] human_verdicts`` CSV: an image a human excluded gets no trial (and so
        is no GeoHint image), as in ``images.csv`` (:func:`geoagent.crawl.export.usable_images`). None: the
        model audit decides.
    review_verdicts : path, optional
        The crawl's ``[crawl.referenceability] review_verdicts`` CSV: a candidate's corrected rating sets its tier
        (:func:`geoagent.crawl.review.read_review_verdicts`). None: the model's ratings stand.

    Returns
    -------
    (path, BuildReport)
        The written CSV (rewritten atomically; the same inputs give the same bytes) and the build counts.

    Raises
    ------
    FileNotFoundError
        The folder has no ``sites.csv`` (the crawl admitted no city or has not sampled yet), or
        ``human_verdicts`` or ``review_verdicts`` names no file.
    ValueError
        The crawl produced no usable image or no rated candidate with coordinates, or ``human_verdicts`` is
        malformed (file:line named).
    """
    from geoagent.crawl.export import crawl_records
    from geoagent.geoverify.trials import build_trials

    state = Path(crawl_state_dir)
    if not (state / "sites.csv").is_file():
        raise FileNotFoundError(f"{state / 'sites.csv'}: the crawl has no sites (no city admitted yet?)")
    recs = crawl_records(state, images_root, human_verdicts=human_verdicts, review_verdicts=review_verdicts)
    if not recs["images"]:
        raise ValueError(f"{state}: the crawl has no usable audited image to build GeoVerify trials from")
    pools: dict[str, list[Any]] = {}
    for p in recs["reference_points"]:
        if p.lat is not None and p.lon is not None:
            pools.setdefault(p.site_id, []).append(p)
    if not pools:
        raise ValueError(f"{state}: the crawl has no rated candidate with coordinates (rated/*.json)")
    continents = {s.site_id: s.continent for s in recs["sites"]}
    trials, report = build_trials(recs["images"], pools, seed=seed, n_per_band=n_per_band, max_signal=max_signal,
                                  n_control=n_control, tau_km=tau_km, continents=continents)
    out = Path(out_dir) if out_dir is not None else state
    out.mkdir(parents=True, exist_ok=True)
    path = out / VERIFY_TRIALS_FILE
    with atomic_open(path, "w", newline="") as f:  # a temporary file of its own, renamed over the target
        w = csv.writer(f)
        w.writerow(VERIFY_TRIALS_COLUMNS)
        for t in trials:
            w.writerow([t.image_id, t.site_id, t.path or "", repr(t.img_lat), repr(t.img_lon), t.cand,
                        "" if t.cand_lat is None else repr(t.cand_lat), "" if t.cand_lon is None else repr(t.cand_lon),
                        _rating_text(t.referenceability), "" if t.d_km is None else t.d_km,
                        t.band or "", t.truth, t.arm, t.continent or "", t.image_ref or "", t.cand_qid or ""])
    return path, report


def _rating_text(value: Any) -> str:
    """A ``fam`` cell: the 0-5 referenceability rating as an integer (``4``; the release writes ``4.0``, and
    every reader, :mod:`geoagent.data.importer` included, takes both); a non-integer value as written; empty
    when unknown."""
    if value is None:
        return ""
    f = float(value)
    return str(int(f)) if f.is_integer() else repr(f)


_DISTRICT = re.compile(r"(?i)\b(district|quarter|neighbourhood|neighborhood)\b")


def gazetteer_from_world(world: Any, *, city_qid_start: int = 4_990_001, city_radius_km: float = 8.0) -> Any:
    """The gazetteer of a sandbox world, for the local Wikidata and Nominatim fakes.

    Every entity of ``world.entities`` becomes an entry with its sandbox coordinate (degrees), its
    sitelink count and its P31 classes; kind ``area`` for district-like names, ``linear`` for street-like
    names, else ``building``; its city is the nearest city of ``world.cities`` within
    ``city_radius_km``. Each city becomes a ``city`` entry (QIDs from ``city_qid_start`` upward, which
    must not collide with entity QIDs; ranked first by a high sitelink count).

    Returns
    -------
    geoagent.sandbox.gazetteer.Gazetteer

    Raises
    ------
    ValueError
        A city QID collides with an entity QID.
    """
    from geoagent.geohint.placenames import is_linear_name
    from geoagent.sandbox.gazetteer import Gazetteer, GazetteerEntry

    cities = list(getattr(world, "cities", []))
    taken = {e.qid for e in world.entities}
    entries: list[Any] = []
    for i, c in enumerate(cities):
        qid = f"Q{city_qid_start + i}"
        if qid in taken:
            raise ValueError(f"city QID {qid} of {c['city']!r} collides with an entity of the world")
        entries.append(GazetteerEntry(qid=qid, labels={"en": c["city"]}, lat=float(c["lat"]), lon=float(c["lon"]),
                                      kind="city", city=c["city"], sitelinks=500,
                                      description=f"city ({c.get('country', '')}, sandbox world)"))

    def city_of(lat: float, lon: float) -> str:
        best = min(cities, key=lambda c: haversine_km(lat, lon, c["lat"], c["lon"]), default=None)
        if best is None or haversine_km(lat, lon, best["lat"], best["lon"]) > city_radius_km:
            return ""
        return best["city"]

    for e in world.entities:
        kind = "area" if _DISTRICT.search(e.label) else "linear" if is_linear_name(e.label) else "building"
        city = city_of(e.lat, e.lon)
        entries.append(GazetteerEntry(qid=e.qid, labels={"en": e.label}, lat=e.lat, lon=e.lon, kind=kind, city=city,
                                      sitelinks=int(e.sitelinks), classes=tuple(e.instance_of),
                                      description=f"place in {city}" if city else "place (sandbox world)"))
    return Gazetteer(entries)


#: the crawl's two auditors: ``[crawl.<section>]`` of a crawl's config, as named in messages
_AUDITOR_SECTIONS = (("image_audit", "image auditor ([crawl.image_audit] model)"),
                     ("referenceability", "referenceability auditor ([crawl.referenceability] model)"))


def _api_model_id(model: Any) -> str:
    """A model id as compared for :func:`auditor_overlap_warning`: lower case, without a router's ``vendor/``
    prefix (``deepseek/deepseek-v4-pro`` and ``deepseek-v4-pro`` are one model)."""
    return str(model or "").strip().lower().rsplit("/", 1)[-1]


def auditor_overlap_warning(folder: str | Path | None, models: Any) -> str | None:
    """A warning when an evaluated model of a GeoVerify or GeoHint campaign is one of the auditors of the crawl
    whose state folder ``folder`` is (the campaign's release folder), else None.

    Seed 000 Sec. 3.3, construction constraint 1: "The auditor must not be an evaluated model, else the benchmark
    sets its own exam." A crawl checks its own ``[crawl] evaluated_models`` list at load, but a campaign run later
    over its folder names its models anew. The crawl's ``manifest.json`` (its ``kind`` ``"crawl"``; the config as
    written) gives each auditor's ``[[models]]`` entry; an evaluated model (``models``: the campaign's
    :class:`geoagent.config.ModelConfig` entries) whose API model id (:func:`_api_model_id`) is an auditor's is
    named. A simulated auditor (``provider = "simulated"``) is no model and is never matched; a folder that is not
    a crawl's (the public release) or whose manifest cannot be read gives None."""
    from geoagent.runtime.manifest import read_manifest

    if folder is None:
        return None
    try:
        data = read_manifest(folder)
    except (OSError, ValueError):
        return None
    conf = data.get("config") if isinstance(data, dict) and data.get("kind") == "crawl" else None
    crawl = conf.get("crawl") if isinstance(conf, dict) else None
    if not isinstance(crawl, dict):
        return None
    entries = {str(m.get("name")): m for m in conf.get("models") or [] if isinstance(m, dict)}
    auditors: dict[str, list[str]] = {}
    for section, what in _AUDITOR_SECTIONS:
        sec = crawl.get(section)
        sec = sec if isinstance(sec, dict) else {}
        name = sec.get("model")
        if not name or str(sec.get("provider", "simulated")) == "simulated":
            continue
        entry = entries.get(str(name)) or {}
        api = _api_model_id(entry.get("model") or name)
        auditors.setdefault(api, []).append(f"the crawl's {what} {name!r}")
    hits = []
    for m in models or []:
        found = auditors.get(_api_model_id(getattr(m, "model", None)))
        if found and getattr(m, "provider", None) not in ("simulated", "replay"):
            hits.append(f"model {m.name!r} ({m.model}) is {' and '.join(found)}")
    if not hits:
        return None
    return (f"{'; '.join(hits)} of {folder}: seed 000 Sec. 3.3 requires that the auditor not be an evaluated model "
            "(\"else the benchmark sets its own exam\"): the images it kept or the reference points it rated were "
            "judged by that model; "
            "evaluate another model, or crawl with another auditor")
