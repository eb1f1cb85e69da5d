"""Site sampler (seed 000, Sec. 3.2.1): pick three sites per admitted city, reproducibly and not by fame.

Candidates are Wikidata items within 3 km of the city centre that are instances (or subclass instances)
of the 16 photographable types and have at most 60 sitelinks. They are put in a canonical order (by
QID), shuffled with a recorded seed (the shuffle is what keeps the batch from being "the most famous
eligible landmarks"), and walked in that order: a candidate within 250 m of an already chosen site is
skipped BEFORE any coverage call is spent on it; otherwise coverage is counted (perspective Mapillary
images within 150 m) and the candidate is taken when it has at least 8. The first three that pass
become sites. A candidate that is already a site of another city of the crawl (sampled before this one: two
cities whose 3 km discs overlap) is skipped before its coverage call, so a benchmark holds each landmark once. A
candidate without a label (WDQS names it by its bare QID) is skipped first, as the release's
site selection drops it (:func:`unnamed`). Output rows have the columns of the release's ``sites.csv``, in its
order, then one of the crawl's own: ``coverage_lower_bound`` (:data:`SITES_COLUMNS`).
"""

from __future__ import annotations

import csv
import random
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geoagent.clients.wdqs import WdEntity
from geoagent.crawl.settings import CitySpec, SamplerSettings
from geoagent.files import json_records
from geoagent.geo import haversine_km
from geoagent.paths import safe_name

#: Version of the sampling rules that can move a site, recorded in each city's sampling record
#: (``sampler_version``; :func:`recorded_versions`). 2 (2026-12-01): an item with several coordinates (one WDQS row
#: each) becomes a site at the smallest (lat, lon) of them, whatever the rows' order (:func:`merge_candidates`).
#: 1: at its first row in the answer's order, which the service chooses, so such a site could lie at another of
#: its coordinates. Records of crawls before this number was recorded have none ("unrecorded": version 1 before
#: commit d9e1c73, 2026-12-01 15:41 UTC, version 2 after it; the record cannot tell which). A resumed crawl keeps
#: the sampling of the cities it sampled before, so its summary says when they were sampled by another version.
#: 3 (2026-12-01): a candidate whose label is its bare QID (no label in the asked languages: WDQS names it by its
#: id) is skipped before its coverage call (walk decision ``skip_no_label``), as the release's site selection drops
#: it; versions 1 and 2 could take it as a site named ``Q123``.
#: 4 (2026-12-01): candidates are named in the release's label languages, ``en,mul,fr,es,de``
#: (:data:`geoagent.clients.wdqs.SITE_LABEL_LANGUAGES`); versions 1-3 asked ``en,mul``, so an item labelled only in
#: French, Spanish or German was a bare QID there (skipped by version 3, a site named ``Q123`` in 1 and 2) and can
#: be a site under its label now, which also moves the shuffled walk's later picks.
#: 5 (2026-12-02): a candidate already a site of another city of the crawl (two cities whose sampling discs overlap)
#: is skipped before its coverage call (walk decision ``skip_other_city``, naming that city): cities are sampled one
#: at a time and the city sampled first keeps the landmark (:func:`walk_candidates` ``claimed``). Versions 1-4
#: could take it again, and the landmark was then a site of both cities with the same photos; a resumed crawl keeps
#: such stored sites (they are not resampled) and its trials' hand-off warning names them.
SAMPLER_VERSION = 5

#: Columns of the release's ``data/sites.csv``, in order.
RELEASE_SITES_COLUMNS: tuple[str, ...] = (
    "site", "city", "country", "continent", "landmark", "qid", "wd_type", "lat", "lon", "sitelinks", "sv_perspective",
    "selection_method",
)
#: Columns of the crawl's ``sites.csv``: the release's (:data:`RELEASE_SITES_COLUMNS`), in its order, then
#: ``coverage_lower_bound`` (not in the release): ``True`` when ``sv_perspective`` is a lower bound ("at least N":
#: a Mapillary search box was still full, at the page limit, at the minimum box size, so more images may exist
#: there; the decision log has an ``event: "mapillary_box_full"`` record for it), ``False`` for an exact count,
#: empty for a site sampled before the column existed (unknown).
SITES_COLUMNS: tuple[str, ...] = RELEASE_SITES_COLUMNS + ("coverage_lower_bound",)


def slug(text: str) -> str:
    """ASCII lower-case letters and digits only (``"Mexico City"`` -> ``"mexicocity"``)."""
    t = unicodedata.normalize("NFKD", text)
    t = "".join(ch for ch in t if not unicodedata.combining(ch)).lower()
    return re.sub(r"[^a-z0-9]+", "", t)


#: leading articles skipped when naming a site ("The Morgan Library" -> morgan, "La Moneda" -> moneda)
_ARTICLES = frozenset({"the", "la", "le", "les", "el", "los", "las", "il", "lo"})


def _ascii_word(word: str) -> str:
    # the release keeps only ASCII letters/digits of each word (no transliteration: "Ópera" -> "pera")
    return re.sub(r"[^a-z0-9]+", "", word.lower())


def site_id(city: str, landmark: str, taken: Iterable[str] = ()) -> str:
    """A release-style site id: ``<city slug>_<first word of the landmark that is not an article and
    not a word of the city's name>``, keeping only ASCII letters and digits (e.g. ``"Barcelona Sants railway
    station"`` -> ``barcelona_sants``; ``"Ópera"`` -> ``madrid_pera`` as released), suffixed ``_2``,
    ``_3`` on a clash; checked by :func:`safe_name`."""
    city_words = {_ascii_word(w) for w in city.split()} | _ARTICLES
    words = [w for w in (_ascii_word(x) for x in landmark.split()) if w]
    head = next((w for w in words if w not in city_words), words[0] if words else "site")
    base = f"{slug(city) or 'city'}_{head}"[:100]
    taken = set(taken)
    sid, k = base, 2
    while sid in taken:
        sid = f"{base}_{k}"
        k += 1
    return safe_name(sid, what="site id")


@dataclass(frozen=True, slots=True)
class SiteCandidate:
    """One eligible Wikidata item (merged over its matching types)."""

    qid: str
    label: str
    lat: float
    lon: float
    sitelinks: int
    type_label: str
    dist_km: float | None


def merge_candidates(entities: Iterable[WdEntity], type_order: Sequence[str] = ()) -> list[SiteCandidate]:
    """One candidate per QID (an item matching several types keeps the first type in ``type_order``; an item
    with several coordinates, one row each, keeps the smallest (lat, lon) of that type's rows), sorted by QID
    number (the canonical order the shuffle starts from). The result does not depend on the order of the
    rows: SPARQL leaves the order of an item's rows unspecified, and the spatial-split fallback sorts them."""
    rank = {q: i for i, q in enumerate(type_order)}

    def preference(e: WdEntity) -> tuple[int, float, float]:
        return (rank.get(e.type_qid or "", 10**6), e.lat, e.lon)

    best: dict[str, WdEntity] = {}
    for e in entities:
        prev = best.get(e.qid)
        if prev is None or preference(e) < preference(prev):
            best[e.qid] = e
    out = [SiteCandidate(e.qid, e.label, e.lat, e.lon, int(e.sitelinks or 0), e.type_label or "", e.dist_km)
           for e in best.values()]
    out.sort(key=lambda c: int(c.qid[1:]))
    return out


def shuffled(cands: Sequence[SiteCandidate], seed: int) -> list[SiteCandidate]:
    """The candidates in the order ``random.Random(seed).shuffle`` gives from the canonical (QID) order."""
    order = sorted(cands, key=lambda c: int(c.qid[1:]))
    random.Random(seed).shuffle(order)
    return order


def city_seed(campaign_seed: int, city: str) -> int:
    """Per-city shuffle seed derived from the campaign seed (recorded with the result)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{campaign_seed}:{city}".encode()).digest()[:8], "big")


@dataclass
class SamplingResult:
    """Chosen sites plus the walk that led to them (every decision, for the audit trail)."""

    city: CitySpec
    seed: int
    n_candidates: int
    sites: list[dict[str, Any]] = field(default_factory=list)
    walk: list[dict[str, Any]] = field(default_factory=list)
    coverage_calls: int = 0
    #: configured site type name (``[crawl.sampler] site_types`` key) -> how many eligible candidates are of that
    #: type (an item of several types counts under each); None when not counted (:func:`walk_candidates` alone)
    candidates_by_type: dict[str, int] | None = None
    #: the ``[crawl.sampler]`` settings the city was sampled with (:meth:`SamplerSettings.model_dump`); None: unknown
    settings: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The city's sampling record (``sampling/<city key>.json``): these fields, ``candidates_by_type`` and
        ``settings`` only when known (records written before 2026-12-03 have neither), and ``sampler_version``."""
        out = {"city": self.city.model_dump(), "seed": self.seed, "n_candidates": self.n_candidates, "sites": self.sites,
               "walk": self.walk, "coverage_calls": self.coverage_calls, "sampler_version": SAMPLER_VERSION}
        if self.candidates_by_type is not None:
            out["candidates_by_type"] = dict(self.candidates_by_type)
        if self.settings is not None:
            out["settings"] = dict(self.settings)
        return out


#: the :func:`recorded_versions` key of sampling records that carry no ``sampler_version``
UNRECORDED = "unrecorded"


def recorded_versions(sampling_dir: str | Path) -> dict[str, list[str]]:
    """Which sampler version (:data:`SAMPLER_VERSION`) sampled each city of a crawl: version (as text, or
    :data:`UNRECORDED` for a record without one) -> the cities' names (sorted), read from the sampling records
    ``<sampling_dir>/<city key>.json`` (the crawl's ``sampling/`` folder). Unreadable records are left out; no
    folder: ``{}``."""
    out: dict[str, list[str]] = {}
    folder = Path(sampling_dir)
    for p, rec in json_records(folder):
        city = rec.get("city")
        name = str(city.get("city")) if isinstance(city, dict) and city.get("city") else p.stem
        v = rec.get("sampler_version")
        out.setdefault(UNRECORDED if v is None else str(v), []).append(name)
    return {k: sorted(v) for k, v in sorted(out.items())}


def sampler_version_warning(versions: dict[str, list[str]]) -> str | None:
    """One line when some cities (:func:`recorded_versions`) were sampled by another sampler version than
    :data:`SAMPLER_VERSION`, or by one that recorded none, else None. A city whose record has no version is not
    called another version's: it is version 1, or 2 for a crawl of 2026-12-01 after commit d9e1c73 (the record
    cannot tell; :data:`SAMPLER_VERSION`); either differs from the current version 4."""
    other = {k: v for k, v in versions.items() if k != str(SAMPLER_VERSION)}
    if not other:
        return None
    known = {k: v for k, v in other.items() if k != UNRECORDED}
    parts = [f"version {k}: {', '.join(v)}" for k, v in known.items()]
    if UNRECORDED in other:
        parts.append(f"version {UNRECORDED} (version 1, or 2 if sampled on 2026-12-01 after 15:41 UTC; "
                     f"the record cannot tell): {', '.join(other[UNRECORDED])}")
    by = " or ".join(([f"another sampler version than this one (version {SAMPLER_VERSION})"] if known else [])
                     + (["a sampler that recorded no version"] if UNRECORDED in other else []))
    return (f"warning: site sampler: {sum(map(len, other.values()))} of {sum(map(len, versions.values()))} cities "
            f"were sampled by {by} and keep those sites ({'; '.join(parts)}): an item with several coordinates may "
            f"lie at another of them than version {SAMPLER_VERSION} chooses (smallest lat, lon; version 1), and a "
            "candidate without a label (named by its bare QID) may have been taken as a site (versions 1 and 2), "
            "and candidates were named in en,mul only (versions 1-3: one labelled only in fr,es,de was a bare QID, "
            "skipped by version 3, and the walk's other picks may differ), and a landmark already a site of another "
            "city could be taken again (versions 1-4); "
            "sampling/<city>.json sampler_version. Crawl again under a new campaign name for one rule throughout")


def unnamed(c: SiteCandidate) -> bool:
    """Whether a candidate's label is its bare QID (``Q123``): WDQS's label service names an item by its id when it
    has no label in the asked languages (:data:`geoagent.clients.wdqs.SITE_LABEL_LANGUAGES`: ``en,mul,fr,es,de``), so
    the item has no name to be a landmark by. The release's site selection drops such candidates
    (``scripts/00_select_sites.py``: ``df[~df.name.eq(df.qid)]``); :func:`walk_candidates` skips them."""
    return " ".join(str(c.label).split()) in ("", c.qid)


async def walk_candidates(city: CitySpec, order: Sequence[SiteCandidate], coverage: Any, settings: SamplerSettings,
                          seed: int, *, n_candidates: int | None = None, taken_ids: Iterable[str] = (),
                          claimed: Mapping[str, str] | None = None) -> SamplingResult:
    """Walk shuffled candidates: a candidate without a label is skipped (:func:`unnamed`; decision
    ``skip_no_label``), then one already a site of another city (``claimed``; decision ``skip_other_city`` with
    that ``city``), then the spacing check (no API call), then coverage; the first N that pass are taken.

    Parameters
    ----------
    claimed : mapping QID -> city name, optional
        Landmarks that are sites of other cities of the crawl, sampled before this one (their sampling records):
        never taken again, so one landmark is never a site of two cities whose sampling discs overlap.
    coverage : async callable ``(lat, lon, radius_m) -> int | CoverageCount``
        Number of perspective images within ``radius_m`` (one Mapillary search per call): an int (an exact
        count), or a :class:`geoagent.clients.mapillary.CoverageCount` whose ``perspective`` is the count and
        ``lower_bound`` says it is "at least N" (the walk record's and the site row's ``coverage_lower_bound``).
    """
    res = SamplingResult(city, seed, len(order) if n_candidates is None else n_candidates)
    chosen: list[SiteCandidate] = []
    ids = set(taken_ids)
    for c in order:
        if len(chosen) >= settings.sites_per_city:
            break
        if unnamed(c):  # no label: nothing to call the site by (the release drops these too); no API call spent
            res.walk.append({"qid": c.qid, "decision": "skip_no_label", "label": c.label})
            continue
        if claimed and c.qid in claimed:  # a site of a city sampled before: one landmark, one site; no API call
            res.walk.append({"qid": c.qid, "decision": "skip_other_city", "city": claimed[c.qid]})
            continue
        near = [s for s in chosen if haversine_km(c.lat, c.lon, s.lat, s.lon) * 1000.0 < settings.min_spacing_m]
        if near:
            res.walk.append({"qid": c.qid, "decision": "skip_spacing", "near": near[0].qid})
            continue
        counted = await coverage(c.lat, c.lon, settings.coverage_radius_m)
        n_img, lower = (counted, False) if isinstance(counted, int) else (int(counted.perspective),
                                                                           bool(counted.lower_bound))
        res.coverage_calls += 1
        if n_img < settings.min_coverage:
            res.walk.append({"qid": c.qid, "decision": "skip_coverage", "sv_perspective": n_img,
                             "coverage_lower_bound": lower})
            continue
        chosen.append(c)
        sid = site_id(city.city, c.label, ids)
        ids.add(sid)
        res.walk.append({"qid": c.qid, "decision": "take", "sv_perspective": n_img, "site": sid,
                         "coverage_lower_bound": lower})
        res.sites.append({
            "site": sid, "city": city.city, "country": city.country, "continent": city.continent, "landmark": c.label,
            "qid": c.qid, "wd_type": c.type_label, "lat": c.lat, "lon": c.lon, "sitelinks": int(c.sitelinks),
            # counts as integers (the release's sites.csv writes them as floats, "17.0": every reader takes both)
            "sv_perspective": int(n_img), "selection_method": "algorithm",
            "coverage_lower_bound": lower,  # sv_perspective is "at least" (written True/False: write_sites_csv)
        })
    return res


async def sample_sites(city: CitySpec, wdqs: Any, mapillary: Any, settings: SamplerSettings, seed: int,
                       *, taken_ids: Iterable[str] = (), on_split: Any = None, on_note: Any = None,
                       claimed: Mapping[str, str] | None = None) -> SamplingResult:
    """Query candidates (WDQS), shuffle with ``seed``, and walk them with Mapillary coverage counts
    (:func:`walk_candidates`; ``claimed``: QID -> city of the landmarks that are sites of other cities already).

    A candidate query that times out is split spatially (``settings.wdqs_split_depth``); ``on_split``
    receives each split's record (the crawl's decision log), ``on_note`` the record of a coverage count that is a
    lower bound (:meth:`geoagent.clients.mapillary.CoverageCount.note`: a search box still full at the minimum
    size; the walk uses it as "at least N"). A candidate whose every row's sitelink count does not read as a number
    is left out before the shuffle (walk decision ``skip_no_sitelinks``, first in the walk). Raises
    :class:`geoagent.clients.wdqs.WdqsAreaTooDense` (naming the city) when that is not enough."""
    type_qids = list(settings.site_types.values())
    ents = await wdqs.site_candidates(city.lat, city.lon, settings.radius_km, type_qids, settings.max_sitelinks,
                                      page_size=settings.page_size, area=f"city {city.city}",
                                      max_split_depth=settings.wdqs_split_depth, on_split=on_split)
    # the candidate query binds ?links for every row (it filters on it): a row whose count did not read (None) is no
    # answer to the max_sitelinks rule, and merged as 0 it would pass it unchecked
    unreadable = sorted({e.qid for e in ents if e.sitelinks is None} - {e.qid for e in ents if e.sitelinks is not None},
                        key=lambda q: int(q[1:]))
    cands = [c for c in merge_candidates([e for e in ents if e.sitelinks is not None], type_qids)
             if c.sitelinks <= settings.max_sitelinks]

    async def coverage(lat: float, lon: float, radius_m: float) -> Any:
        counts = await mapillary.count_images_within(lat, lon, radius_m)
        note = counts.note() if hasattr(counts, "note") else None
        if note is not None and on_note is not None:  # "at least N" images: enough for the coverage check
            await on_note(note | {"lat": lat, "lon": lon, "radius_m": radius_m})
        return counts if hasattr(counts, "lower_bound") else int(counts.perspective)

    res = await walk_candidates(city, shuffled(cands, seed), coverage, settings, seed, n_candidates=len(cands),
                                taken_ids=taken_ids, claimed=claimed)
    res.walk[:0] = [{"qid": q, "decision": "skip_no_sitelinks"} for q in unreadable]
    eligible = {c.qid for c in cands}
    by_type: dict[str, set[str]] = {}
    for e in ents:
        if e.qid in eligible and e.type_qid:
            by_type.setdefault(e.type_qid, set()).add(e.qid)
    res.candidates_by_type = {name: len(by_type.get(q, ())) for name, q in settings.site_types.items()}
    res.settings = settings.model_dump(mode="json")
    return res


def _csv_value(v: Any) -> Any:
    """A cell as written: booleans as ``True``/``False``, as the crawl's other CSV flags (``city_pool.csv``,
    ``images.csv``) and the release write them (Polars, pandas and DuckDB read either spelling as booleans; a reader
    comparing text gets one spelling in every file)."""
    return ("True" if v else "False") if isinstance(v, bool) else v


def write_sites_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write site rows with :data:`SITES_COLUMNS` (atomic replace); a missing key (``coverage_lower_bound`` of a
    site sampled before the column existed) is written empty, a boolean as ``True``/``False``."""
    from geoagent.files import atomic_open

    path = Path(path)
    with atomic_open(path, "w", newline="") as f:  # a temporary file of its own: concurrent writers never share one
        w = csv.DictWriter(f, fieldnames=list(SITES_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r.get(k, "")) for k in SITES_COLUMNS})
    return path


#: why the walk skipped a candidate (its decision in ``sampling/<city>.json``), as the shortfall line says it;
#: ``{s}``: the record's ``[crawl.sampler]`` settings
_SKIP_WORDS = {
    "skip_coverage": "below min_coverage {min_coverage} Mapillary images within {coverage_radius_m:g} m",
    "skip_spacing": "within min_spacing_m {min_spacing_m:g} m of a site already taken",
    "skip_no_label": "without a label (named by the bare QID)",
    "skip_other_city": "already a site of another city of the crawl",
    "skip_no_sitelinks": "with an unreadable sitelink count",
}


def site_shortfalls(sampling_dir: str | Path, settings: SamplerSettings) -> list[dict[str, Any]]:
    """The sampled cities that got fewer sites than ``sites_per_city``, read from the sampling records
    ``<sampling_dir>/<city key>.json`` (the crawl's ``sampling/`` folder; sorted by file name; unreadable records
    are left out; no folder: ``[]``).

    Each: ``city`` (name), ``sites`` (taken), ``sites_per_city`` (asked), ``n_candidates`` (eligible Wikidata items
    the walk started from), ``skipped`` (walk decision -> count, e.g. ``{"skip_coverage": 7}``: every candidate the
    walk did not take; :func:`walk_candidates`), ``types_without_candidates`` (the configured site type names with no
    eligible candidate at all; None when the record predates ``candidates_by_type``, 2026-12-03) and ``settings``
    (the ``[crawl.sampler]`` settings the city was sampled with; those of ``settings`` for a record that predates
    them, ``settings_recorded`` False). The number of sites is the number of clusters behind every confidence
    interval of a campaign over the crawl, so a short city is said in the summary, ``crawl_summary.json``
    (``site_shortfall``) and ``run.py status`` (:func:`site_shortfall_lines`)."""
    return [s for p, rec in json_records(Path(sampling_dir)) if (s := site_shortfall(rec, settings, p.stem))]


def site_shortfall(rec: dict[str, Any], settings: SamplerSettings, name: str = "") -> dict[str, Any] | None:
    """One sampling record's shortfall (the dict :func:`site_shortfalls` lists), or None when the city got its
    ``sites_per_city``; ``name`` names a record without a city name (its file's stem)."""
    recorded = rec.get("settings") if isinstance(rec.get("settings"), dict) else None
    used = recorded or settings.model_dump(mode="json")
    asked = int(used.get("sites_per_city") or settings.sites_per_city)
    n_sites = len(rec.get("sites") or [])
    if n_sites >= asked:
        return None
    skipped: dict[str, int] = {}
    for w in rec.get("walk") or []:
        d = w.get("decision") if isinstance(w, dict) else None
        if isinstance(d, str) and d != "take":
            skipped[d] = skipped.get(d, 0) + 1
    by_type = rec.get("candidates_by_type")
    city = rec.get("city")
    return {
        "city": str(city.get("city")) if isinstance(city, dict) and city.get("city") else name,
        "sites": n_sites, "sites_per_city": asked, "n_candidates": int(rec.get("n_candidates") or 0),
        "skipped": skipped,
        "types_without_candidates": ([k for k, v in by_type.items() if not v] if isinstance(by_type, dict)
                                     else None),
        "settings": used, "settings_recorded": recorded is not None,
    }


def site_shortfall_lines(shortfalls: Sequence[dict[str, Any]], n_sampled: int, *, limit: int = 20) -> list[str]:
    """The summary's and ``run.py status``'s lines for :func:`site_shortfalls` (``[]`` when no city is short) of a
    crawl that sampled ``n_sampled`` cities (its sampling records): a
    head line, one line per city (at most ``limit``, the rest counted), e.g. ``Sandbox City: 1 of 4 sites (8
    candidates: 7 below min_coverage 8 Mapillary images within 150 m, 1 taken); no candidate of the configured site
    types church, square``, and one naming the settings to relax. Indented for the console (two spaces, four for
    the cities)."""
    if not shortfalls:
        return []
    asked = sorted({s["sites_per_city"] for s in shortfalls})
    lines = [f"  warning: site sampler: {len(shortfalls)} of {n_sampled} sampled cities got fewer sites than "
             f"sites_per_city {', '.join(map(str, asked))} (the sites are the clusters behind every confidence "
             "interval of a campaign over this crawl; sampling/<city>.json, crawl_summary.json site_shortfall):"]
    for s in shortfalls[:limit]:
        st = s["settings"]
        order = list(_SKIP_WORDS)
        parts = []
        for d in sorted(s["skipped"], key=lambda d: order.index(d) if d in order else len(order)):
            words = _SKIP_WORDS.get(d, d)
            try:
                words = words.format(**st)
            except (KeyError, ValueError):
                pass
            parts.append(f"{s['skipped'][d]} {words}")
        if s["sites"]:
            parts.append(f"{s['sites']} taken")
        line = (f"    {s['city']}: {s['sites']} of {s['sites_per_city']} sites ({s['n_candidates']} candidate"
                f"{'' if s['n_candidates'] == 1 else 's'}" + (f": {', '.join(parts)})" if parts else ")"))
        types = s["types_without_candidates"]
        if types is None:
            line += "; which site types gave no candidate was not recorded (sampled before 2026-12-03)"
        elif types:
            line += f"; no candidate of the configured site types {', '.join(types)}"
        lines.append(line)
    if len(shortfalls) > limit:
        lines.append(f"    and {len(shortfalls) - limit} more cities")
    st = shortfalls[0]["settings"]
    n_types = len(st.get("site_types") or {})
    lines.append(f"    relax [crawl.sampler] min_coverage ({st.get('min_coverage')} images), max_sitelinks "
                 f"({st.get('max_sitelinks')}), min_spacing_m ({float(st.get('min_spacing_m') or 0):g} m) or site_types "
                 f"({n_types} type{'' if n_types == 1 else 's'}) for more sites, and crawl under a new [campaign] name "
                 "(a city's stored sampling is kept when the crawl resumes)")
    return lines
