"""City screener (seed 000, Sec. 3.1 and 3.2.1): is a city's spatial granularity comparable to the others?

For a city centre, take the OSM ``place=neighbourhood|suburb|quarter`` point nodes within 6 km, drop
addressing units (Japanese X-chome street-numbering blocks, Mexican housing developments, plus configurable
numbered-unit patterns), and compute ``L_district``, the median nearest-neighbour haversine distance
between the remaining nodes (at least 3 needed). Coverage is the number of perspective (non-panorama)
Mapillary images within 1 km. A city is admitted when coverage >= 30 and 0.32 <= L_district <= 0.65 km (all configurable).

The output row has the columns of the release's ``city_pool.csv``, then ``coverage_lower_bound`` (:data:`CITY_POOL_COLUMNS`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from geoagent.crawl.geo import haversine_matrix_km
from geoagent.crawl.settings import CitySpec, ScreenerSettings
from geoagent.files import json_records

#: Columns of the release's ``data/city_pool.csv``, in order.
RELEASE_CITY_POOL_COLUMNS: tuple[str, ...] = (
    "city", "country", "continent", "lat", "lon", "sv_total", "sv_perspective", "L_district",
    "ok_streetview", "ok_scale", "eligible",
)
#: Columns of the crawl's ``city_pool.csv``: the release's (:data:`RELEASE_CITY_POOL_COLUMNS`), in its order, then
#: ``coverage_lower_bound`` (not in the release; as ``sites.csv``'s, :data:`geoagent.crawl.sampler.SITES_COLUMNS`):
#: ``True`` when ``sv_total`` / ``sv_perspective`` are lower bounds ("at least N": a Mapillary search box was still
#: full, at the page limit, at the minimum box size; the decision log has an ``event: "mapillary_box_full"`` record
#: for the city), ``False`` for exact counts, empty for a city screened before the screening record kept the flag
#: (unknown). Booleans are written ``True``/``False`` like the file's other flags (the release's form).
CITY_POOL_COLUMNS: tuple[str, ...] = RELEASE_CITY_POOL_COLUMNS + ("coverage_lower_bound",)


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


def is_addressing_unit(name: str | None, patterns: Sequence[str]) -> bool:
    """True if an OSM place name is an addressing unit rather than a neighbourhood.

    Parameters
    ----------
    name : str or None
        The node's ``name`` tag (a node without a name is kept: it is still a place node).
    patterns : sequence of str
        Regular expressions searched in the name (see
        :data:`geoagent.crawl.settings.CHOME_PATTERNS` for the Japanese X-chome forms).
    """
    if not name:
        return False
    # NFC first: "1-cho\u0304me" (o and a combining macron) is the same name as "1-chōme", which the patterns
    # spell composed (crawl36 #4)
    name = unicodedata.normalize("NFC", name)
    return any(p.search(name) for p in _compiled(tuple(patterns)))


@dataclass(frozen=True, slots=True)
class PlaceNode:
    """An OSM place node (lat/lon in degrees)."""

    osm_id: int
    lat: float
    lon: float
    name: str | None
    place: str | None


def _coordinate(v: Any, limit: float) -> float | None:
    """A JSON number (or numeric string) within [-limit, limit] as a float, else None (null, NaN, text)."""
    if isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if -limit <= x <= limit else None


def place_nodes_from_overpass(elements: Iterable[Any]) -> list[PlaceNode]:
    """Turn Overpass ``elements`` (``[out:json]``) into :class:`PlaceNode`s (degrees).

    Skipped, never raised on: elements that are not objects, non-nodes, nodes without an integer ``id`` or without
    a usable position (missing or null ``lat``/``lon``, not a number, outside [-90, 90] x [-180, 180]). ``tags`` may
    be absent (api-notes section 1: omitted when a node has none); one that is not an object counts as absent, and a
    ``name``/``place`` that is not text as missing. A node id seen before in the same answer (a mirror or proxy
    repeating elements) is skipped: a second copy would be its own nearest neighbour at 0 km."""
    out = []
    seen: set[int] = set()
    for el in elements:
        if not isinstance(el, dict) or el.get("type") != "node":
            continue
        osm_id, lat, lon = el.get("id"), _coordinate(el.get("lat"), 90.0), _coordinate(el.get("lon"), 180.0)
        if not isinstance(osm_id, int) or isinstance(osm_id, bool) or lat is None or lon is None or osm_id in seen:
            continue
        seen.add(osm_id)
        tags = el.get("tags")
        tags = tags if isinstance(tags, dict) else {}
        name, place = tags.get("name"), tags.get("place")
        out.append(PlaceNode(osm_id, lat, lon, name if isinstance(name, str) else None,
                             place if isinstance(place, str) else None))
    return out


def exclude_addressing_units(nodes: Sequence[PlaceNode], patterns: Sequence[str]) -> list[PlaceNode]:
    """Drop nodes whose name matches an addressing-unit pattern (Sec. 3.1, "addressing units must be
    excluded")."""
    return [n for n in nodes if not is_addressing_unit(n.name, patterns)]


def nearest_neighbour_km(lat_deg: Sequence[float], lon_deg: Sequence[float]) -> np.ndarray:
    """Nearest-neighbour haversine distance of each point to any other point.

    Parameters
    ----------
    lat_deg, lon_deg : array-like of shape (n,)
        Degrees; n >= 2.

    Returns
    -------
    ndarray of shape (n,)
        km. Coincident points give 0.
    """
    d = haversine_matrix_km(lat_deg, lon_deg)
    np.fill_diagonal(d, np.inf)
    return d.min(axis=1)


def l_district_km(lat_deg: Sequence[float], lon_deg: Sequence[float], *, min_points: int = 3) -> float | None:
    """``L_district``: the median nearest-neighbour haversine distance in km (Sec. 3.1).

    Returns None when fewer than ``min_points`` (default 3) points are given: the scale is undefined
    (the release leaves such cities' ``L_district`` empty, e.g. Krakow, Jakarta, Montreal).
    """
    n = len(lat_deg)
    if n != len(lon_deg):
        raise ValueError(f"lat and lon differ in length ({n} vs {len(lon_deg)})")
    if n < max(2, min_points):
        return None
    return float(np.median(nearest_neighbour_km(lat_deg, lon_deg)))


def l_district_mean_km(lat_deg: Sequence[float], lon_deg: Sequence[float], *, min_points: int = 3) -> float | None:
    """Mean nearest-neighbour distance in km (the release's ``district_scale.csv`` reports it too)."""
    if len(lat_deg) < max(2, min_points):
        return None
    return float(np.mean(nearest_neighbour_km(lat_deg, lon_deg)))


def nodes_per_km2(n_nodes: int, radius_km: float = 6.0) -> float:
    """Density of place nodes over the search disc, ``n / (pi * radius_km**2)`` (``district_scale.csv``)."""
    return n_nodes / (math.pi * radius_km**2)


def scale_ok(l_district: float | None, settings: ScreenerSettings) -> bool:
    """``l_min_km <= L_district <= l_max_km`` (both ends inclusive); False when undefined."""
    if l_district is None or (isinstance(l_district, float) and math.isnan(l_district)):
        return False
    return settings.l_min_km <= l_district <= settings.l_max_km


def streetview_ok(sv_perspective: int | None, settings: ScreenerSettings) -> bool:
    """Coverage rule: at least ``min_coverage`` (30) perspective images within ``coverage_radius_km``."""
    return sv_perspective is not None and sv_perspective >= settings.min_coverage


def admit(sv_perspective: int | None, l_district: float | None, settings: ScreenerSettings) -> bool:
    """The admission rule of Sec. 3.2.1: coverage >= 30 and L_district in [0.32, 0.65] km."""
    return streetview_ok(sv_perspective, settings) and scale_ok(l_district, settings)


@dataclass(frozen=True, slots=True)
class CityScreening:
    """One screened city: the measured quantities and the decisions."""

    city: CitySpec
    n_nodes_raw: int
    n_nodes_filtered: int
    l_district_km: float | None
    l_district_mean_km: float | None
    sv_total: int
    sv_perspective: int
    ok_streetview: bool
    ok_scale: bool
    eligible: bool
    #: the image counts are lower bounds: a Mapillary search box was still full at the minimum box size
    #: (:class:`geoagent.clients.mapillary.CoverageCount`); "at least N" is all the coverage check needs
    sv_lower_bound: bool = False

    def row(self) -> dict[str, Any]:
        """The ``city_pool.csv`` row, :data:`CITY_POOL_COLUMNS` (L_district rounded to 0.01 km as released; empty
        when undefined; ``coverage_lower_bound`` = :attr:`sv_lower_bound`)."""
        return {
            "city": self.city.city,
            "country": self.city.country,
            "continent": self.city.continent,
            "lat": self.city.lat,
            "lon": self.city.lon,
            "sv_total": self.sv_total,
            "sv_perspective": self.sv_perspective,
            "L_district": "" if self.l_district_km is None else round(self.l_district_km, 2),
            "ok_streetview": self.ok_streetview,
            "ok_scale": self.ok_scale,
            "eligible": self.eligible,
            "coverage_lower_bound": self.sv_lower_bound,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "city": self.city.model_dump(),
            "n_nodes_raw": self.n_nodes_raw,
            "n_nodes_filtered": self.n_nodes_filtered,
            "l_district_km": self.l_district_km,
            "l_district_mean_km": self.l_district_mean_km,
            "sv_total": self.sv_total,
            "sv_perspective": self.sv_perspective,
            "ok_streetview": self.ok_streetview,
            "ok_scale": self.ok_scale,
            "eligible": self.eligible,
            "sv_lower_bound": self.sv_lower_bound,
        }


def evaluate_city(city: CitySpec, nodes: Sequence[PlaceNode], sv_total: int, sv_perspective: int,
                  settings: ScreenerSettings) -> CityScreening:
    """Apply the screener to already-fetched place nodes and image counts (pure; no I/O)."""
    kept = exclude_addressing_units(nodes, settings.addressing_unit_patterns)
    lats = [n.lat for n in kept]
    lons = [n.lon for n in kept]
    l_med = l_district_km(lats, lons, min_points=settings.min_points)
    l_mean = l_district_mean_km(lats, lons, min_points=settings.min_points)
    ok_sv = streetview_ok(sv_perspective, settings)
    ok_sc = scale_ok(l_med, settings)
    return CityScreening(city, len(nodes), len(kept), l_med, l_mean, sv_total, sv_perspective, ok_sv, ok_sc, ok_sv and ok_sc)


def place_query(lat: float, lon: float, settings: ScreenerSettings) -> str:
    """Overpass QL for the place nodes around a centre (``around`` takes radius in m, then lat, lon)."""
    values = "|".join(re.escape(v) for v in settings.place_values)
    radius_m = int(round(settings.radius_km * 1000))
    return (
        f"[out:json][timeout:{settings.overpass_timeout_s}];\n"
        f'node[place~"^({values})$"](around:{radius_m},{lat:.6f},{lon:.6f});\n'
        "out body;"
    )


async def screen_city(city: CitySpec, overpass: Any, mapillary: Any, settings: ScreenerSettings,
                      *, on_note: Any = None) -> CityScreening:
    """Screen one city with the live clients.

    Parameters
    ----------
    overpass : geoagent.clients.overpass.OverpassClient
    mapillary : geoagent.clients.mapillary.MapillaryClient
    on_note : async callable, optional
        Receives the decision-log record (:meth:`geoagent.clients.mapillary.CoverageCount.note`) when the image
        counts are lower bounds (a search box still full at the minimum size); the screening then uses them
        as "at least" counts (``sv_lower_bound``).

    Raises
    ------
    geoagent.clients.overpass.OverpassError, geoagent.clients.mapillary.MapillaryError
        On API failures (a 200 with a runtime-error ``remark`` is one).
    """
    data = await overpass.interpreter(place_query(city.lat, city.lon, settings))
    nodes = place_nodes_from_overpass(data.get("elements", []))
    counts = await mapillary.count_images_within(city.lat, city.lon, settings.coverage_radius_km * 1000.0)
    res = evaluate_city(city, nodes, counts.total, counts.perspective, settings)
    note = counts.note() if hasattr(counts, "note") else None
    if note is not None:
        res = dataclasses.replace(res, sv_lower_bound=True)
        if on_note is not None:
            await on_note(note | {"ok_streetview": res.ok_streetview})
    return res


def city_pool_rows(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``city_pool.csv`` rows of stored screening records (``screening/<city key>.json``: :meth:`CityScreening.
    to_json` plus its ``row``), in the given order. A row stored before ``coverage_lower_bound`` existed takes it from
    the record's ``sv_lower_bound`` when the record has one (kept since the full-box change), else stays without it
    (written empty: unknown)."""
    out: list[dict[str, Any]] = []
    for rec in records:
        row = dict(rec["row"])
        if "coverage_lower_bound" not in row and isinstance(rec.get("sv_lower_bound"), bool):
            row["coverage_lower_bound"] = rec["sv_lower_bound"]
        out.append(row)
    return out


def write_city_pool_csv(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write ``city_pool.csv`` with :data:`CITY_POOL_COLUMNS` (atomic replace): a missing key is written empty
    (``coverage_lower_bound`` of a city screened before the flag was kept), booleans as ``True``/``False`` (the
    release's form of its flags)."""
    import csv

    from geoagent.files import atomic_open

    path = Path(path)
    with atomic_open(path, "w", newline="") as f:  # a temporary file of its own: concurrent writers never share one
        w = csv.DictWriter(f, fieldnames=list(CITY_POOL_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in CITY_POOL_COLUMNS})
    return path


#: Columns of the release's ``data/district_scale.csv``, in order.
DISTRICT_SCALE_COLUMNS: tuple[str, ...] = (
    "site", "n_nodes_filtered", "n_nodes_raw", "nodes_per_km2", "L_district_median_km", "L_district_mean_km",
)


def district_scale_row(site: str, nodes: Sequence[PlaceNode], settings: ScreenerSettings) -> dict[str, Any]:
    """Per-site granularity in the release's ``district_scale.csv`` form (Sec. 3.1: the hand-picked sites
    were measured individually; per-site verification of the automatic batch is listed as outstanding in
    Sec. 7, and this is how to run it). Medians/means rounded to 0.01 km, density to 0.001 per km^2."""
    kept = exclude_addressing_units(nodes, settings.addressing_unit_patterns)
    lats, lons = [n.lat for n in kept], [n.lon for n in kept]
    med = l_district_km(lats, lons, min_points=settings.min_points)
    mean = l_district_mean_km(lats, lons, min_points=settings.min_points)
    return {
        "site": site, "n_nodes_filtered": len(kept), "n_nodes_raw": len(nodes),
        "nodes_per_km2": round(nodes_per_km2(len(kept), settings.radius_km), 3),
        "L_district_median_km": "" if med is None else round(med, 2),
        "L_district_mean_km": "" if mean is None else round(mean, 2),
    }


async def measure_site_scale(site: str, lat: float, lon: float, overpass: Any, settings: ScreenerSettings) -> dict[str, Any]:
    """Fetch the place nodes around one site and return its :func:`district_scale_row`."""
    data = await overpass.interpreter(place_query(lat, lon, settings))
    return district_scale_row(site, place_nodes_from_overpass(data.get("elements", [])), settings)


def not_admitted_reasons(rec: dict[str, Any], settings: ScreenerSettings) -> list[str]:
    """Why a stored screening record (``screening/<city key>.json``: :meth:`CityScreening.to_json`) was not
    admitted, in the terms of seed 000 Sec. 3.1 / 3.2.1 with the measured values: ``L_district`` (km, the median
    nearest-neighbour distance of the neighbourhood points within ``radius_km``) outside
    [``l_min_km``, ``l_max_km``], or undefined with fewer than ``min_points`` points; Mapillary coverage
    (perspective images within ``coverage_radius_km``) below ``min_coverage``. The record's own ``ok_scale`` /
    ``ok_streetview`` decide which reasons apply (the decision made when it was screened; a stored screening is
    not redone), ``settings`` gives the thresholds named; a measured value that passes a threshold changed since
    (``l_min_km``/``l_max_km``, ``min_points``, ``min_coverage``) is named as failing the threshold in force when
    the city was screened, never as failing the current one. ``[]`` for an admitted city."""
    out: list[str] = []
    if rec.get("eligible"):
        return out
    n_raw, n_kept = rec.get("n_nodes_raw"), rec.get("n_nodes_filtered")
    dropped = (f", {n_raw - n_kept} addressing unit(s) left out of {n_raw} place nodes"
               if isinstance(n_raw, int) and isinstance(n_kept, int) and n_raw > n_kept else "")
    lo, hi = settings.l_min_km, settings.l_max_km
    if not rec.get("ok_scale", True):
        ld = rec.get("l_district_km")
        if not isinstance(ld, (int, float)) or isinstance(ld, bool) or math.isnan(ld):
            if isinstance(n_kept, int) and n_kept >= max(2, settings.min_points):  # min_points lowered since
                out.append(f"L_district undefined: {n_kept} neighbourhood points within {settings.radius_km:g} km"
                           f"{dropped}, fewer than the minimum in force when it was screened (now at least "
                           f"{settings.min_points}; the stored screening stands)")
            else:
                out.append(f"L_district undefined: {n_kept} neighbourhood points within {settings.radius_km:g} km"
                           f"{dropped} (at least {settings.min_points} needed)")
        elif lo <= ld <= hi:
            out.append(f"L_district {ld:.3f} km, outside the range in force when it was screened (now within "
                       f"[{lo:g}, {hi:g}] km; the stored screening stands)")
        else:
            # the side that failed, and three decimals (more while the value would print as the bound it failed):
            # Seville's 0.316 km was printed as "0.32 km outside [0.32, 0.65]"
            side = f"below the floor {lo:g} km" if ld < lo else f"above the ceiling {hi:g} km"
            digits = 3
            while digits < 6 and round(ld, digits) in (lo, hi):
                digits += 1
            out.append(f"L_district {ld:.{digits}f} km, {side} of [{lo:g}, {hi:g}] km (median nearest-neighbour distance of "
                       f"{n_kept} neighbourhood points within {settings.radius_km:g} km{dropped})")
    if not rec.get("ok_streetview", True):
        sv, total = rec.get("sv_perspective"), rec.get("sv_total")
        also = f" ({total} with panoramas)" if isinstance(total, int) and total != sv else ""
        if isinstance(sv, int) and not isinstance(sv, bool) and sv >= settings.min_coverage:  # min_coverage lowered since
            out.append(f"Mapillary coverage {sv} perspective images within {settings.coverage_radius_km:g} km{also}, "
                       f"below the minimum in force when it was screened (now at least {settings.min_coverage}; the "
                       "stored screening stands)")
        else:
            out.append(f"Mapillary coverage {sv} perspective images within {settings.coverage_radius_km:g} km{also}, "
                       f"below {settings.min_coverage}")
    if not out:  # a record without the flags (hand-edited): say what is known
        out.append("not eligible in its screening record")
    return out


#: the most cities :func:`not_admitted_lines` names one by one (the rest are counted)
NOT_ADMITTED_LINES_MAX = 20


def not_admitted_lines(state_dir: str | Path, settings: ScreenerSettings, *,
                       limit: int = NOT_ADMITTED_LINES_MAX) -> list[str]:
    """Lines for the crawl summary and ``run.py status``: the cities of the crawl's folder (``state_dir``) that
    the screener did not admit (``screening/*.json`` with ``eligible`` false, in file-name order, as
    ``city_pool.csv``), one line each with :func:`not_admitted_reasons`, after a header naming the rule (seed 000
    Sec. 3.1). At most ``limit`` cities are named; a last line counts the rest. ``[]`` when every screened city
    was admitted (or none was screened). Unreadable records are skipped."""
    folder = Path(state_dir) / "screening"
    recs: list[dict[str, Any]] = []
    n_screened = 0
    for p, rec in json_records(folder):
        n_screened += 1
        if not rec.get("eligible"):
            recs.append(rec)
    if not recs:
        return []
    s = settings
    lines = [f"  screener: {len(recs)} of {n_screened} screened cities not admitted (seed 000 Sec. 3.1: L_district "
             f"within [{s.l_min_km:g}, {s.l_max_km:g}] km, from at least {s.min_points} neighbourhood points within "
             f"{s.radius_km:g} km, and at least {s.min_coverage} Mapillary perspective images within "
             f"{s.coverage_radius_km:g} km; city_pool.csv, screening/<city>.json):"]
    for rec in recs[:limit]:
        city = rec.get("city") if isinstance(rec.get("city"), dict) else {}
        where = ", ".join(str(city[k]) for k in ("country", "continent") if city.get(k))
        name = f"{city.get('city', '?')}" + (f" ({where})" if where else "")
        lines.append(f"    not admitted: {name}: " + "; ".join(not_admitted_reasons(rec, s)))
    if len(recs) > limit:
        lines.append(f"    ... and {len(recs) - limit} more not admitted (city_pool.csv, column eligible)")
    return lines
