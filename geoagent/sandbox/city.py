"""A synthetic sandbox city for the offline crawl: OSM place nodes, Wikidata entities, Mapillary images.

:func:`build_world` makes a deterministic world (seeded) around one or more city centres:

* **Sandbox City** (admitted): ~0.45 km spaced neighbourhood/suburb/quarter nodes within 6 km, plus a
  few Japanese-style "N-chome" addressing units that the screener must drop; dense Mapillary coverage
  in the core; entities of the 16 photographable types within 3 km (some over the 60-sitelink ceiling,
  some without street-level coverage), and a few hundred other entities within 6 km for the context
  ladders (stations, squares, churches, plaques, districts, ...), with English Wikipedia titles and
  pageviews for some.
* **Sprawl Town** (rejected): few, far-apart place nodes (L_district ~ 1 km) and thin coverage.

Images carry a brightness (some under the filter's 90), some are panoramas, and some pairs share a
render (near-duplicates). :func:`serve_world` serves the four fakes on loopback and yields the
``[crawl.endpoints]`` base URLs, so the crawl runs end to end over real HTTP.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from geoagent.crawl.settings import DEFAULT_SITE_TYPES
from geoagent.sandbox import mapillary as mly
from geoagent.sandbox import overpass as ovp
from geoagent.sandbox import pageviews as pv
from geoagent.sandbox import wdqs as wd
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.server import serve

KM_PER_DEG_LAT = 111.195


@dataclass
class SandboxWorld:
    """Everything the sandbox fakes serve, plus the city list for the crawl config."""

    cities: list[dict[str, Any]]
    overpass_elements: list[dict[str, Any]] = field(default_factory=list)
    entities: list[wd.FakeEntity] = field(default_factory=list)
    subclass_of: dict[str, tuple[str, ...]] = field(default_factory=dict)
    class_labels: dict[str, str] = field(default_factory=dict)
    images: list[mly.FakeImage] = field(default_factory=list)
    daily_views: dict[str, int] = field(default_factory=dict)


def _offset(lat: float, lon: float, dx_km: float, dy_km: float) -> tuple[float, float]:
    return lat + dy_km / KM_PER_DEG_LAT, lon + dx_km / (KM_PER_DEG_LAT * math.cos(math.radians(lat)))


_STREETS = ["Alder", "Birch", "Cedar", "Dove", "Elm", "Fern", "Grove", "Hazel", "Iris", "Juniper", "Kestrel", "Linden",
            "Maple", "Nettle", "Oak", "Poplar", "Quince", "Rowan", "Sorrel", "Thistle", "Umber", "Violet", "Willow",
            "Yarrow", "Zinnia", "Ash", "Bramble", "Clover", "Daisy", "Ember"]
_OTHER_KINDS = [("Station", 5), ("Square", 4), ("Bridge", 3), ("Market", 2), ("Church", 3), ("Museum", 3), ("Theatre", 1),
                ("Library", 1), ("School", 2), ("Plaque", 1), ("District", 1), ("Cafe", 2), ("House", 3), ("Garden", 2),
                ("Tower", 1), ("Hotel", 2), ("Cinema", 1), ("Hospital", 1), ("Bank", 1), ("Memorial Room", 1)]


def build_world(seed: int = 0, *, n_ladder_entities: int = 260) -> SandboxWorld:
    """Build the deterministic sandbox world (see module docstring)."""
    rng = random.Random(seed)
    c_lat, c_lon = 45.0702, 7.6869  # "Sandbox City"
    s_lat, s_lon = 44.30, 8.90  # "Sprawl Town"
    world = SandboxWorld(cities=[
        {"city": "Sandbox City", "country": "SB", "continent": "EU", "lat": c_lat, "lon": c_lon},
        {"city": "Sprawl Town", "country": "SB", "continent": "EU", "lat": s_lat, "lon": s_lon},
    ])
    # --- OSM place nodes ---------------------------------------------------------------------------
    nid = 1
    step = 0.45
    k = int(6.0 / step)
    for i in range(-k, k + 1):
        for j in range(-k, k + 1):
            x, y = i * step + rng.uniform(-0.05, 0.05), j * step + rng.uniform(-0.05, 0.05)
            if math.hypot(x, y) > 5.9:
                continue
            lat, lon = _offset(c_lat, c_lon, x, y)
            world.overpass_elements.append({"type": "node", "id": nid, "lat": lat, "lon": lon, "tags": {
                "place": rng.choice(["neighbourhood", "neighbourhood", "suburb", "quarter"]),
                "name": f"{_STREETS[(i + j) % len(_STREETS)]} {['Heights', 'Vale', 'Rise', 'End', 'Gate'][abs(i * 7 + j) % 5]}"}})
            nid += 1
    for n in range(60):  # addressing units squeezed between real neighbourhoods (must be excluded)
        lat, lon = _offset(c_lat, c_lon, rng.uniform(-4, 4), rng.uniform(-4, 4))
        world.overpass_elements.append({"type": "node", "id": nid, "lat": lat, "lon": lon,
                                        "tags": {"place": "neighbourhood", "name": f"Sakura {n % 9 + 1}-chome" if n % 2 else f"桜{'一二三四五六七八九'[n % 9]}丁目"}})
        nid += 1
    for n in range(14):  # Sprawl Town: sparse
        ang = 2 * math.pi * n / 14
        lat, lon = _offset(s_lat, s_lon, 4.0 * math.cos(ang) + rng.uniform(-0.3, 0.3), 4.0 * math.sin(ang) + rng.uniform(-0.3, 0.3))
        world.overpass_elements.append({"type": "node", "id": nid, "lat": lat, "lon": lon, "tags": {"place": "suburb", "name": f"Outer {n}"}})
        nid += 1
    # --- Wikidata: class hierarchy, site candidates, ladder entities -----------------------------
    world.class_labels = {q: name for name, q in DEFAULT_SITE_TYPES.items()}
    world.subclass_of = {"Q207694": ("Q33506",), "Q1970365": ("Q33506",), "Q2977": ("Q16970",), "Q928830": ("Q55488",)}
    world.class_labels.update({"Q207694": "art museum", "Q1970365": "natural history museum", "Q2977": "cathedral",
                               "Q928830": "metro station"})
    qid = 5_000_000
    type_items = list(DEFAULT_SITE_TYPES.items()) + [("art museum", "Q207694"), ("cathedral", "Q2977"), ("metro station", "Q928830")]
    site_cands = []
    for n in range(48):
        tname, tq = type_items[n % len(type_items)]
        r = 3.0 * math.sqrt(rng.random()) * 0.95
        ang = rng.uniform(0, 2 * math.pi)
        lat, lon = _offset(c_lat, c_lon, r * math.cos(ang), r * math.sin(ang))
        label = f"{_STREETS[n % len(_STREETS)]} {tname.title()}"
        links = rng.choice([0, 2, 5, 9, 14, 22, 35, 58, 75, 140])
        e = wd.FakeEntity(f"Q{qid}", label, lat, lon, links, (tq,), label.replace(" ", "_") if links > 4 else None)
        world.entities.append(e)
        site_cands.append(e)
        qid += 1
    for n in range(n_ladder_entities):
        kind, w = rng.choice(_OTHER_KINDS)
        r = 6.0 * math.sqrt(rng.uniform(0.004, 1.0))
        ang = rng.uniform(0, 2 * math.pi)
        lat, lon = _offset(c_lat, c_lon, r * math.cos(ang), r * math.sin(ang))
        label = f"{rng.choice(_STREETS)} {kind}" if kind != "District" else f"{n % 20 + 1}th District"
        links = int(rng.expovariate(1 / (8 * w)))
        title = label.replace(" ", "_") if links > 2 else None
        world.entities.append(wd.FakeEntity(f"Q{qid}", label, lat, lon, links, ("Q43229",), title))
        if title:
            world.daily_views[title] = int(rng.expovariate(1 / (20 * w))) + (1 if rng.random() < 0.8 else 0)
        qid += 1
    world.entities.append(wd.FakeEntity(f"Q{qid}", "Admiral Slave Trader Statue", *_offset(c_lat, c_lon, 1.1, 0.4), 3, ("Q4989906",)))
    # --- Mapillary images -------------------------------------------------------------------------
    iid = 100_000_000_000
    def add_image(lat: float, lon: float, **kw: Any) -> None:
        nonlocal iid
        world.images.append(mly.FakeImage(image_id=str(iid), lat=lat, lon=lon, captured_at_ms=1_650_000_000_000 + iid % 10**9,
                                          compass_angle=round(rng.uniform(0, 360), 1), **kw))
        iid += 7
    for e in site_cands:  # about two thirds of the candidates have good street-level coverage
        if rng.random() < 0.35:
            n_img = rng.randint(0, 5)
        else:
            n_img = rng.randint(10, 18)
        twin_of = None
        for m in range(n_img):
            d = rng.uniform(0, 140) / 1000
            ang = rng.uniform(0, 2 * math.pi)
            lat, lon = _offset(e.lat, e.lon, d * math.cos(ang), d * math.sin(ang))
            pano = rng.random() < 0.12
            bright = rng.choice([45.0, 70.0, 110.0, 130.0, 150.0, 170.0, 190.0])
            pattern = None
            if m == 3 and twin_of:
                pattern = twin_of  # a near-duplicate of an earlier frame
            add_image(lat, lon, is_pano=pano, camera_type="equirectangular" if pano else "perspective",
                      brightness=bright, pattern_seed=pattern)
            if m == 0:
                twin_of = world.images[-1].image_id
    for m in range(60):  # core coverage for the city screener (within 1 km of the centre)
        d = 0.95 * math.sqrt(rng.random())
        ang = rng.uniform(0, 2 * math.pi)
        add_image(*_offset(c_lat, c_lon, d * math.cos(ang), d * math.sin(ang)), brightness=rng.choice([80.0, 140.0]))
    for m in range(12):  # Sprawl Town has a little coverage
        add_image(*_offset(s_lat, s_lon, rng.uniform(-0.6, 0.6), rng.uniform(-0.6, 0.6)))
    return world


#: a configured city with none of the world's place nodes, entities or images within this distance of its centre
#: (km) is outside the sandbox world (:func:`cities_outside_world`): 10 km covers the crawl's widest query around
#: a centre (the screener's 6 km place nodes, the referenceability auditor's 6 km around sites within 3 km)
WORLD_DATA_RADIUS_KM = 10.0


def cities_outside_world(cities: list[tuple[str, float, float]], world: SandboxWorld,
                         radius_km: float = WORLD_DATA_RADIUS_KM) -> list[str]:
    """The names of ``cities`` (``(name, lat, lon)``, degrees) with no data of ``world`` (no OSM place node,
    Wikidata entity or Mapillary image) within ``radius_km`` of their centre, in the given order: cities the sandbox
    fakes know nothing about (a crawl of them finds nothing; the screener does not admit them)."""
    from geoagent.geo import haversine_km

    points = ([(float(e["lat"]), float(e["lon"])) for e in world.overpass_elements]
              + [(e.lat, e.lon) for e in world.entities] + [(i.lat, i.lon) for i in world.images])
    out = []
    for name, lat, lon in cities:
        dlat = radius_km / KM_PER_DEG_LAT  # a cheap box first: the haversine for points near the centre only
        if not any(abs(p_lat - lat) <= dlat and haversine_km(lat, lon, p_lat, p_lon) <= radius_km
                   for p_lat, p_lon in points):
            out.append(name)
    return out


def make_apps(world: SandboxWorld, faults: FaultConfig | None = None) -> dict[str, Any]:
    """The four fake apps for ``world`` (fresh state each call)."""
    return {
        "overpass": ovp.make_app(world.overpass_elements, faults=faults),
        "wdqs": wd.make_app(world.entities, subclass_of=world.subclass_of, class_labels=world.class_labels, faults=faults),
        "pageviews": pv.make_app(world.daily_views, faults=faults),
        "mapillary": mly.make_app(world.images, faults=faults),
    }


@contextlib.asynccontextmanager
async def serve_world(world: SandboxWorld, faults: FaultConfig | None = None, *,
                      separate_cdn: bool = False) -> AsyncIterator[dict[str, Any]]:
    """Serve the world's fakes on loopback; yield ``{"endpoints": {...}, "apps": {...}, "cdn": ...}`` where
    endpoints are ``[crawl.endpoints]`` values (``overpass`` is the ``/api`` root, ``wdqs`` the ``/sparql``
    URL). With ``separate_cdn`` the Mapillary thumbnails come from a CDN fake on a host of its own, as the
    real API's do (:func:`geoagent.sandbox.mapillary.make_cdn_app`; its base URL is ``"cdn"``, else None:
    the Graph API fake's host serves them)."""
    apps = make_apps(world, faults)
    async with contextlib.AsyncExitStack() as stack:
        urls = {name: await stack.enter_async_context(serve(app)) for name, app in apps.items()}
        cdn = None
        if separate_cdn:
            state = apps["mapillary"][mly.MAPILLARY_STATE]
            cdn = await stack.enter_async_context(serve(mly.make_cdn_app(state, faults=faults)))
            state.cdn_base = cdn
        yield {"apps": apps, "cdn": cdn, "endpoints": {
            "overpass": urls["overpass"] + "/api",
            "wdqs": urls["wdqs"] + "/sparql",
            "pageviews": urls["pageviews"],
            "mapillary": urls["mapillary"],
        }}
