"""Nominatim ``/search`` client (free-text geocoding on OpenStreetMap data), policy-abiding.

Wire format and policy follow the Nominatim docs (Nominatim "Place Output" docs; OSMF Nominatim
Usage Policy, https://operations.osmfoundation.org/policies/nominatim/):

* ``GET /search?q=..&format=jsonv2&limit=..``; the answer is a JSON array (``[]`` when nothing
  matches); ``lat``, ``lon`` and ``boundingbox`` entries are strings; ``place_id`` may be a number or a
  string and is not stable, so places are keyed by ``osm_type`` + ``osm_id``;
* **at most 1 request per second for the whole application** and a single thread: the default host
  policy :data:`DEFAULT_NOMINATIM_POLICY` (rate 1 per 1 s, concurrency 1) is installed on the shared
  :class:`~geoagent.runtime.http.HttpClient`, whose limiter spaces requests per host;
* an identifying ``User-Agent`` with contact details from config (stock library UAs are refused with
  403, which surfaces as ``PermanentHTTPError``);
* results are cached (:class:`~geoagent.clients.cache.ResponseCache`) and the client refuses bulk use:
  at most ``max_requests`` network requests per client (:class:`NominatimBudgetExceeded` beyond).
  GeoContext uses Nominatim only as a fallback for the labels Wikidata cannot resolve (seed 000
  Appendix B: about 100 labels), so the default cap of 1000 is an order of magnitude above need.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from geoagent.clients.cache import ResponseCache
from geoagent.qid import is_qid
from geoagent.runtime.http import HostPolicy, HttpClient, HttpResponse, host_key
from geoagent.textfmt import label_text

NOMINATIM_URL = "https://nominatim.openstreetmap.org"
#: OSMF policy: at most 1 request per second over the whole application, one at a time.
log = logging.getLogger(__name__)

#: the OSMF's public server, whose usage policy caps every application at 1 request/s, one at a time: a ``[hosts]``
#: entry for it may slow it down, never speed it up (geocode38 #1)
PUBLIC_NOMINATIM_HOST = "nominatim.openstreetmap.org"

DEFAULT_NOMINATIM_POLICY = HostPolicy(rate=1.0, period_s=1.0, concurrency=1, max_attempts=4, backoff_base_s=2.0, timeout_s=30.0)
#: Nominatim caps ``limit`` at 40 (default 10).
MAX_LIMIT = 40
DEFAULT_MAX_REQUESTS = 1000


class NominatimBudgetExceeded(RuntimeError):
    """More network requests than ``max_requests`` were asked of one client (the policy forbids bulk use)."""


@dataclass(frozen=True, slots=True)
class NominatimPlace:
    """One ``/search`` result (``format=jsonv2``; ``format=json`` parses too).

    Attributes
    ----------
    osm_type, osm_id : str, int
        Stable key of the OSM object (``node``/``way``/``relation``).
    lat, lon : float
        Coordinate in degrees (sent as strings by the API).
    name : str
        ``name`` (jsonv2) or the first part of ``display_name``.
    display_name : str
        Full display name.
    category, type : str
        OSM main tag (``category`` in jsonv2, ``class`` in json) and value.
    addresstype : str
        jsonv2 ``addresstype`` (``road``, ``neighbourhood``, ``city``, ...), ``""`` if absent.
    place_rank : int or None
        Search rank (jsonv2), lower is coarser.
    importance : float or None
        Importance, if present.
    boundingbox : tuple of 4 float or None
        ``(min_lat, max_lat, min_lon, max_lon)`` in degrees (the API's order).
    wikidata : str or None
        The ``wikidata`` extratag, when extratags were requested and it is a Wikidata item id
        (:func:`geoagent.qid.is_qid` once surrounding whitespace is taken off: ``"Q42"``); None when absent or
        anything else (OSM tag values are free text: ``"Q1;Q2"``, ``"q42"``, a URL, control characters), so the
        place counts as one without an item (crawl43 #2; :func:`wikidata_tag`).
    address : dict of str to str
        Address parts, with ``addressdetails=1``.
    """

    osm_type: str
    osm_id: int
    lat: float
    lon: float
    name: str
    display_name: str
    category: str
    type: str
    addresstype: str = ""
    place_rank: int | None = None
    importance: float | None = None
    boundingbox: tuple[float, float, float, float] | None = None
    wikidata: str | None = None
    address: dict[str, str] = field(default_factory=dict)
    #: every name of the object from ``namedetails`` (``name``, ``name:<lang>``, ``alt_name``, ``official_name``,
    #: ``short_name``, ``loc_name``; with ``namedetails=1``), ``()`` without them
    names: tuple[str, ...] = ()

    def has_name(self, key: str, fold: Any) -> bool:
        """Whether ``name`` or one of :attr:`names`, folded by ``fold`` (:func:`geoagent.geohint.placenames.fold`),
        is ``key``: "神南" names the place whose ``name`` the API localised to "Jinnan" (geocode38 #4)."""
        return fold(self.name) == key or any(fold(n) == key for n in self.names)

    @property
    def key(self) -> str:
        """Stable identifier ``"<osm_type>/<osm_id>"``."""
        return f"{self.osm_type}/{self.osm_id}"

    @property
    def is_linear(self) -> bool:
        """A road-like object (``highway`` category or ``road`` address type): a line, not a point."""
        return self.category == "highway" or self.addresstype == "road"


def parse_place(obj: Any) -> NominatimPlace | None:
    """Parse one element of a ``/search`` array; None if it lacks a usable coordinate or OSM id.

    Strings or numbers are accepted for ``lat``/``lon``/``place_id``/``osm_id``; unknown keys ignored. ``name``,
    ``display_name``, the address parts and the ``namedetails`` names are cleaned as labels
    (:func:`geoagent.textfmt.label_text`: no control or bidirectional formatting characters, whitespace one space;
    fixrev42 #3); a ``name`` blank once cleaned falls back to ``display_name``'s first part.
    """
    if not isinstance(obj, dict):
        return None
    try:
        lat, lon = float(obj["lat"]), float(obj["lon"])
        osm_id = int(obj["osm_id"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(lat) and math.isfinite(lon) and abs(lat) <= 90 and abs(lon) <= 180):
        return None
    bbox = None
    raw_bbox = obj.get("boundingbox")
    if isinstance(raw_bbox, list) and len(raw_bbox) == 4:
        try:
            b = tuple(float(v) for v in raw_bbox)
            bbox = (b[0], b[1], b[2], b[3])
        except (TypeError, ValueError):
            bbox = None
    # the API's names as data (fixrev42 #3, as Wikidata's terms since sec42 #3): no control or bidirectional
    # formatting characters reach a candidate's label (geohint_scored.csv resolved_label) or a name comparison
    display = label_text(str(obj.get("display_name") or ""))
    extratags = obj.get("extratags") if isinstance(obj.get("extratags"), dict) else {}
    address = obj.get("address") if isinstance(obj.get("address"), dict) else {}
    rank = obj.get("place_rank")
    imp = obj.get("importance")
    return NominatimPlace(
        osm_type=str(obj.get("osm_type") or ""),
        osm_id=osm_id,
        lat=lat,
        lon=lon,
        name=label_text(str(obj.get("name") or "")) or display.split(",")[0].strip(),
        display_name=display,
        category=str(obj.get("category") or obj.get("class") or ""),
        type=str(obj.get("type") or ""),
        addresstype=str(obj.get("addresstype") or ""),
        place_rank=int(rank) if isinstance(rank, (int, float)) else None,
        importance=float(imp) if isinstance(imp, (int, float)) else None,
        boundingbox=bbox,
        wikidata=wikidata_tag(extratags.get("wikidata")),
        address={str(k): label_text(str(v)) for k, v in address.items()},
        names=_names_of(obj.get("namedetails")),
    )


def wikidata_tag(value: Any) -> str | None:
    """The Wikidata item id a place's ``wikidata`` extratag names (``"Q42"``, also with surrounding whitespace, which
    is taken off), or None: no tag, a value that is no string, or one that is no single item id
    (:func:`geoagent.qid.is_qid`: ``"Q1;Q2"``, OSM's list form; ``"q42"``; ``"Q042"``; a URL; a value carrying control
    or bidirectional formatting characters). OSM tag values are free text; this one becomes a located answer's
    ``qid`` (a scored row's ``extra.qid``) and is compared with item ids, so only an id is taken
    (crawl43 #2); the place is then one without an item (its ``osm:<type>/<id>`` key stands in)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    return text if is_qid(text) else None


#: the ``namedetails`` keys (and ``name:<lang>`` keys) whose values name the object itself, ``;``-separated lists
#: allowed (OSM's convention for several names)
_NAME_KEYS = ("name", "alt_name", "official_name", "short_name", "loc_name", "int_name")
#: the language part of a ``name:<lang>`` key (``en``, ``ja``, ``zh-Hant``, ``sr-Latn``)
_LANG_SUFFIX = re.compile(r"[a-z]{2,3}(?:-[A-Za-z0-9]{2,8})*")


def _names_of(details: Any) -> tuple[str, ...]:
    """The names in a ``namedetails`` object (a value may list several, ``;``-separated), in order, each once, cleaned
    as labels (:func:`geoagent.textfmt.label_text`; a name of nothing but control characters is none)."""
    if not isinstance(details, dict):
        return ()
    out: list[str] = []
    for k, v in details.items():
        base, _, lang = str(k).partition(":")
        # name:<language> only (not name:etymology, the namesake's name)
        if base not in _NAME_KEYS or not isinstance(v, str) or (lang and not _LANG_SUFFIX.fullmatch(lang)):
            continue
        for part in v.split(";"):
            part = label_text(part)
            if part and part not in out:
                out.append(part)
    return tuple(out[:64])


def user_agent_for(contact: str, app: str = "geoagent/0.1") -> str:
    """Identifying User-Agent ``"<app> (+<contact>)"``.

    Raises
    ------
    ValueError
        If ``contact`` is empty or has neither an ``@`` nor a URL (the policy asks for contact details).
    """
    contact = (contact or "").strip()
    if not contact or ("@" not in contact and "://" not in contact):
        raise ValueError(
            "Nominatim needs an identifying User-Agent with contact details: set a contact e-mail or URL "
            f"in the geocoder config (got {contact!r})"
        )
    return f"{app} (+{contact})"


class NominatimClient:
    """Async ``/search`` client over the shared :class:`HttpClient`.

    Parameters
    ----------
    http : HttpClient
        The process-wide HTTP client; :data:`DEFAULT_NOMINATIM_POLICY` (or ``policy``) is installed
        for the Nominatim host on it.
    contact : str
        Contact e-mail or URL from config, put into the User-Agent (:func:`user_agent_for`).
    base_url : str
        Server root (default the public OSMF instance; a local fake in tests).
    cache : ResponseCache, optional
        Persistent cache; cached answers cost no request and do not count toward ``max_requests``.
    max_requests : int or None
        Network requests allowed over this client's life (None: no cap). Default 1000.
    policy : HostPolicy or None
        Host policy (default 1 request per second, one at a time); None keeps the policy the HttpClient
        already has for the host (e.g. a config ``[hosts]`` entry for a local instance).
    accept_language : str
        ``accept-language`` parameter (names in results).

    Raises
    ------
    ValueError
        If ``contact`` is not usable (see :func:`user_agent_for`).
    """

    def __init__(
        self,
        http: HttpClient,
        *,
        contact: str,
        base_url: str = NOMINATIM_URL,
        cache: ResponseCache | None = None,
        max_requests: int | None = DEFAULT_MAX_REQUESTS,
        policy: HostPolicy | None = DEFAULT_NOMINATIM_POLICY,
        accept_language: str = "en",
    ) -> None:
        self.http = http
        self.user_agent = user_agent_for(contact)
        self.base_url = base_url.rstrip("/")
        self.cache = cache
        self.max_requests = max_requests
        self.accept_language = accept_language
        self.host = host_key(self.base_url)
        self.requests_sent = 0
        if policy is not None:  # None: keep the policy the HttpClient already has for this host (config)
            http.set_policy(self.host, policy)
        elif self.host.rsplit(":", 1)[0].lower() == PUBLIC_NOMINATIM_HOST:
            have = http.policy_for(self.host)
            # the limiter is a sliding window: 60 per 60 s is a burst of 60, so the window may hold 1 request only
            # (review38b #2), at least 1 s long, and no longer per request than the entry asks
            if have.rate > 1.0 or have.period_s < 1.0 or have.concurrency > 1:
                capped = dataclasses.replace(have, rate=1.0, period_s=max(1.0, have.period_s / max(have.rate, 1e-9)),
                                             concurrency=1)
                http.set_policy(self.host, capped)
                log.warning("[hosts.\"%s\"] asks for %g request(s) per %g s, %d at a time: the public Nominatim's usage "
                            "policy allows 1 per second, one at a time, so that is used (a server of your own, set "
                            "as [geohint.geocoder] nominatim_url, may go faster)", PUBLIC_NOMINATIM_HOST, have.rate,
                            have.period_s, have.concurrency)

    async def search(
        self,
        q: str,
        *,
        limit: int = 5,
        viewbox: tuple[float, float, float, float] | None = None,
        bounded: bool = False,
        countrycodes: Sequence[str] | None = None,
        extratags: bool = True,
        addressdetails: bool = False,
        namedetails: bool = True,
    ) -> list[NominatimPlace]:
        """Free-text search.

        Parameters
        ----------
        q : str
            Query text (at most 250 characters).
        limit : int
            Results wanted, 1..40.
        viewbox : (lon1, lat1, lon2, lat2), optional
            Preferred box in degrees (``x1,y1,x2,y2``); with ``bounded`` results must lie inside it.
        bounded : bool
            Restrict results to ``viewbox``.
        countrycodes : sequence of str, optional
            ISO 3166-1 alpha-2 codes to restrict to.
        extratags, addressdetails, namedetails : bool
            Ask for extra tags (the ``wikidata`` QID), address parts and every name of each place (``namedetails``:
            :attr:`NominatimPlace.names`; the ``name`` field is localised by ``accept-language``, so a query in the
            local script matches a place by its names only).

        Returns
        -------
        list of NominatimPlace
            In the API's order; unparseable elements skipped.

        Raises
        ------
        NominatimBudgetExceeded
            If a network request would exceed ``max_requests``.
        PermanentHTTPError
            403 (blocked or unidentified UA), 400 (bad parameters), other 4xx.
        RetriesExhausted
            429/5xx/timeouts that persisted.
        """
        q = " ".join(str(q).split())[:250]
        if not q:
            return []
        params: dict[str, Any] = {
            "q": q,
            "format": "jsonv2",
            "limit": max(1, min(int(limit), MAX_LIMIT)),
            "accept-language": self.accept_language,
        }
        if extratags:
            params["extratags"] = 1
        if addressdetails:
            params["addressdetails"] = 1
        if namedetails:
            params["namedetails"] = 1
        if viewbox is not None:
            params["viewbox"] = ",".join(f"{v:.6f}" for v in viewbox)
            if bounded:
                params["bounded"] = 1
        if countrycodes:
            params["countrycodes"] = ",".join(c.lower() for c in countrycodes)
        url = f"{self.base_url}/search"
        body: Any = None
        # the same query asked by several tasks at once is sent once: the others wait for its stored answer
        flight = self.cache.flight("GET", url, params) if self.cache is not None else contextlib.nullcontext()
        async with flight:
            if self.cache is not None:
                hit = self.cache.get("GET", url, params)
                if hit is not None:
                    body = hit.json()
            if body is None:
                if self.max_requests is not None and self.requests_sent >= self.max_requests:
                    raise NominatimBudgetExceeded(
                        f"Nominatim request cap reached ({self.max_requests}); the usage policy forbids bulk geocoding"
                    )
                self.requests_sent += 1
                resp: HttpResponse = await self.http.request(
                    "GET", url, params=params, headers={"User-Agent": self.user_agent}, validate=_must_be_json_array
                )
                body = resp.json()
                if self.cache is not None:
                    self.cache.put("GET", url, params, resp.status, resp.body)
        places = [parse_place(p) for p in body]
        return [p for p in places if p is not None]


def _must_be_json_array(resp: HttpResponse) -> None:
    """HttpClient ``validate`` hook: the search answer must be a JSON array (else the attempt is retried)."""
    if not isinstance(resp.json(), list):
        raise ValueError("Nominatim /search answer is not a JSON array")
