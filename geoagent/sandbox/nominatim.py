"""Local fake of Nominatim's ``/search`` (``format=jsonv2`` and ``json``), backed by a gazetteer.

Reproduces the Nominatim API (its "Place Output" docs; OSMF usage policy):

* ``GET /search?q=..&format=jsonv2&limit=..`` answers a JSON **array** (``[]`` with HTTP 200 when
  nothing matches). Each place has ``place_id`` (number), ``licence``, ``osm_type``, ``osm_id``, ``lat``
  and ``lon`` **as strings**, ``category`` (``class`` with ``format=json``), ``type``, ``place_rank``,
  ``importance``, ``addresstype``, ``name``, ``display_name``, ``boundingbox`` as four strings in the
  order ``[min_lat, max_lat, min_lon, max_lon]``; ``address`` with ``addressdetails=1``,
  ``extratags`` (with the ``wikidata`` tag) with ``extratags=1``, ``namedetails`` with
  ``namedetails=1``. ``limit`` defaults to 10 and is capped at 40; ``viewbox=x1,y1,x2,y2`` with
  ``bounded=1`` keeps only places inside the box. ``q`` is ``"name"`` or ``"name, city[, ...]"``: the
  first comma part must equal (folded) a label or alias, later parts must name the entry's city.
* Kinds map to OSM objects: ``linear`` -> way ``highway/residential`` (addresstype ``road``),
  ``area`` -> node ``place/neighbourhood``, ``city`` -> relation ``boundary/administrative``,
  ``building`` -> way ``tourism/attraction`` (addresstype ``tourism``).
* Errors: 400 ``{"error": {"code": 400, "message": ..}}`` for a missing ``q`` or bad ``format``;
  **403** (HTML body) for a missing or stock library User-Agent unless ``email=`` is given; **429**
  when a request arrives less than ``min_interval_s`` after the previous one (the 1 request/s policy,
  counted over the whole application, measured server-side on arrival).

Fault injection comes from :func:`geoagent.sandbox.faults.fault_middleware` when ``faults`` is given.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from geoagent.geohint.placenames import fold
from geoagent.sandbox.faults import FaultConfig, fault_middleware
from geoagent.sandbox.gazetteer import Gazetteer, GazetteerEntry, load_gazetteer
from geoagent.sandbox.wikidata import _STOCK_UA

SEARCH_PATH = "/search"
DEFAULT_LIMIT = 10
MAX_LIMIT = 40
LICENCE = "Data © OpenStreetMap contributors, ODbL 1.0. https://osm.org/copyright"

_KIND_OSM: dict[str, dict[str, Any]] = {
    "linear": {"osm_type": "way", "category": "highway", "type": "residential", "addresstype": "road", "place_rank": 26, "half_deg": 0.004},
    "area": {"osm_type": "node", "category": "place", "type": "neighbourhood", "addresstype": "neighbourhood", "place_rank": 20, "half_deg": 0.006},
    "city": {"osm_type": "relation", "category": "boundary", "type": "administrative", "addresstype": "city", "place_rank": 16, "half_deg": 0.15},
    "building": {"osm_type": "way", "category": "tourism", "type": "attraction", "addresstype": "tourism", "place_rank": 30, "half_deg": 0.0005},
}


@dataclass(slots=True)
class NominatimFakeState:
    """Mutable behaviour and request log of one fake (``app[NOMINATIM_STATE]``).

    Attributes
    ----------
    min_interval_s : float
        Smallest allowed gap between two requests' arrivals (policy: 1 request per second).
    tolerance_s : float
        Slack subtracted from ``min_interval_s`` before a gap counts as too short (timer jitter).
    retry_after_s : float or None
        ``Retry-After`` sent with the policy 429 (the real service does not document one: None).
    requests : list of dict
        One record per ``/search`` request: ``t_mono`` (arrival, ``time.monotonic()`` s), ``q``,
        ``params``, ``user_agent``, ``status``.
    blocked : bool
        The application is blocked (the OSMF's answer to one that broke the usage policy): every request gets the
        403 HTML page, whatever its User-Agent.
    wikidata_tags : dict of str to any
        The ``wikidata`` extratag sent for an entry, by the entry's QID, instead of that QID: OSM tag values are
        free text, so a place may carry ``"Q1;Q2"``, ``"q42"``, a URL, control characters, or (in a broken answer)
        no string at all (crawl43 #2).
    """

    min_interval_s: float = 1.0
    tolerance_s: float = 0.05
    retry_after_s: float | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    blocked: bool = False
    wikidata_tags: dict[str, Any] = field(default_factory=dict)
    _last_arrival: float | None = None

    def arrival_gaps_s(self) -> list[float]:
        """Gaps in seconds between consecutive request arrivals (all statuses)."""
        t = [r["t_mono"] for r in self.requests]
        return [b - a for a, b in zip(t, t[1:])]

    def count(self, status: int | None = None) -> int:
        """Number of logged requests, optionally with one status."""
        return sum(1 for r in self.requests if status is None or r["status"] == status)


NOMINATIM_STATE: web.AppKey[NominatimFakeState] = web.AppKey("nominatim_state", NominatimFakeState)
NOMINATIM_GAZETTEER: web.AppKey[Gazetteer] = web.AppKey("nominatim_gazetteer", Gazetteer)


def _osm_id(qid: str) -> int:
    return int.from_bytes(hashlib.sha256(qid.encode()).digest()[:5], "big")


def place_json(entry: GazetteerEntry, *, jsonv2: bool, address: bool, extratags: bool, namedetails: bool,
               wikidata: Any = None) -> dict[str, Any]:
    """One Nominatim place object for a gazetteer entry (strings for coordinates, as the real API); ``wikidata``:
    the ``wikidata`` extratag's value when it is not the entry's QID (None: the QID)."""
    osm = _KIND_OSM[entry.kind]
    h = osm["half_deg"]
    name = entry.label_en
    out: dict[str, Any] = {
        "place_id": _osm_id("place:" + entry.qid),
        "licence": LICENCE,
        "osm_type": osm["osm_type"],
        "osm_id": _osm_id(entry.qid),
        "lat": f"{entry.lat:.7f}",
        "lon": f"{entry.lon:.7f}",
        ("category" if jsonv2 else "class"): osm["category"],
        "type": osm["type"],
        "importance": round(min(0.95, 0.2 + entry.sitelinks / 200.0), 6),
        "display_name": name if entry.kind == "city" else f"{name}, {entry.city}",
        "boundingbox": [f"{entry.lat - h:.7f}", f"{entry.lat + h:.7f}", f"{entry.lon - h:.7f}", f"{entry.lon + h:.7f}"],
    }
    if jsonv2:
        out.update({"place_rank": osm["place_rank"], "addresstype": osm["addresstype"], "name": name})
    if address:
        addr: dict[str, str] = {}
        if entry.kind == "linear":
            addr["road"] = name
        elif entry.kind == "area":
            addr["neighbourhood"] = name
        elif entry.kind == "building":
            addr["tourism"] = name
        addr["city"] = entry.city
        out["address"] = addr
    if extratags:
        out["extratags"] = {"wikidata": entry.qid if wikidata is None else wikidata}
    if namedetails:
        nd = {"name": name}
        nd.update({f"name:{lang}": text for lang, text in entry.labels.items()})
        out["namedetails"] = nd
    return out


def _bad_request(message: str) -> web.Response:
    return web.json_response({"error": {"code": 400, "message": message}}, status=400)


async def _search(request: web.Request) -> web.Response:
    state = request.app[NOMINATIM_STATE]
    gaz = request.app[NOMINATIM_GAZETTEER]
    params = dict(request.query)
    now = time.monotonic()
    ua = request.headers.get("User-Agent")
    rec: dict[str, Any] = {"t_mono": now, "q": params.get("q"), "params": params, "user_agent": ua, "status": 200}
    state.requests.append(rec)
    previous, state._last_arrival = state._last_arrival, now

    ua_text = (ua or "").strip()
    if state.blocked or ((not ua_text or _STOCK_UA.match(ua_text)) and not params.get("email")):
        rec["status"] = 403
        return web.Response(
            status=403,
            text="<html><body><h1>Access blocked</h1><p>Missing or generic User-Agent. "
            "See https://operations.osmfoundation.org/policies/nominatim/</p></body></html>",
            content_type="text/html",
        )
    if previous is not None and now - previous < state.min_interval_s - state.tolerance_s:
        rec["status"] = 429
        headers = {} if state.retry_after_s is None else {"Retry-After": f"{state.retry_after_s:g}"}
        return web.Response(status=429, text="<html><body><h1>Too Many Requests</h1></body></html>", content_type="text/html", headers=headers)
    fmt = params.get("format", "jsonv2")
    if fmt not in ("jsonv2", "json"):
        rec["status"] = 400
        return _bad_request(f"Parameter 'format': must be one of jsonv2, json (this fake), got {fmt!r}")
    q = (params.get("q") or "").strip()
    if not q:
        rec["status"] = 400
        return _bad_request("Missing query: parameter 'q' is required by this fake")
    try:
        limit = max(1, min(int(params.get("limit", DEFAULT_LIMIT)), MAX_LIMIT))
    except ValueError:
        rec["status"] = 400
        return _bad_request("Parameter 'limit' must be an integer")
    box = None
    if params.get("viewbox"):
        try:
            x1, y1, x2, y2 = (float(v) for v in params["viewbox"].split(","))
        except ValueError:
            rec["status"] = 400
            return _bad_request("Parameter 'viewbox' must be x1,y1,x2,y2")
        box = (min(y1, y2), max(y1, y2), min(x1, x2), max(x1, x2))
    bounded = params.get("bounded") in ("1", "true")

    parts = [p.strip() for p in q.split(",") if p.strip()]
    name_key, context = fold(parts[0]), [fold(p) for p in parts[1:]]
    found: list[GazetteerEntry] = []
    for m in gaz.search(parts[0], None, prefix=False):
        e = m.entry
        if fold(m.text) != name_key:
            continue
        if context and not any(c == fold(e.city) or (e.kind == "city" and c == fold(e.label_en)) for c in context):
            continue
        if bounded and box is not None and not (box[0] <= e.lat <= box[1] and box[2] <= e.lon <= box[3]):
            continue
        found.append(e)
    found.sort(key=lambda e: -e.sitelinks)
    flags = {k: params.get(k) in ("1", "true") for k in ("addressdetails", "extratags", "namedetails")}
    body = [
        place_json(e, jsonv2=fmt == "jsonv2", address=flags["addressdetails"], extratags=flags["extratags"],
                   namedetails=flags["namedetails"], wikidata=state.wikidata_tags.get(e.qid))
        for e in found[:limit]
    ]
    return web.json_response(body)


def make_app(
    gazetteer: Gazetteer | str | os.PathLike[str],
    *,
    faults: FaultConfig | None = None,
    state: NominatimFakeState | None = None,
    min_interval_s: float = 1.0,
) -> web.Application:
    """Build the fake Nominatim application.

    Parameters
    ----------
    gazetteer : Gazetteer or path
        The places it knows (or a JSONL file / release folder, see
        :func:`geoagent.sandbox.gazetteer.load_gazetteer`).
    faults : FaultConfig, optional
        Transport faults to inject.
    state : NominatimFakeState, optional
        Behaviour and request log; reachable as ``app[NOMINATIM_STATE]``. Default: a fresh one with
        ``min_interval_s``.
    min_interval_s : float
        Smallest allowed gap between request arrivals in seconds (1.0: the OSMF policy).

    Returns
    -------
    aiohttp.web.Application
        Serving ``GET /search``.
    """
    middlewares = [fault_middleware(faults)] if faults is not None else []
    app = web.Application(middlewares=middlewares)
    app[NOMINATIM_STATE] = state if state is not None else NominatimFakeState(min_interval_s=min_interval_s)
    app[NOMINATIM_GAZETTEER] = load_gazetteer(gazetteer)
    app.router.add_get(SEARCH_PATH, _search)
    return app
