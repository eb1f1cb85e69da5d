"""Wikidata Query Service (SPARQL) client: one query at a time, a query-time budget, Retry-After honoured.

Sources: W3C SPARQL 1.1 Query Results JSON Format; WDQS User Manual ("Query limits"); Wikitech
"Wikidata Query Service/Technical interactions". Policy encoded here and in
:data:`geoagent.crawl.settings.DEFAULT_POLICIES` (``wdqs``):

* one query in flight per client (an ``asyncio.Lock``; WMF asks for one request at a time);
* a client gets 60 s of query processing per 60 s: :class:`QueryTimeBudget` delays the next query
  while the wall time of this client's queries in the last 60 s exceeds the budget;
* HTTP 429 carries ``Retry-After`` (seconds): the HTTP layer pauses the host for that long; if the
  retries run out the client raises :class:`WdqsThrottled` and refuses to send anything until the
  ``Retry-After`` has passed (60 s when absent): ignoring 429s gets a client banned for 24 h;
* a query timeout shows up as a non-JSON body (``java.util.concurrent.TimeoutException``) or as JSON
  that stops midway followed by a stack trace: both raise :class:`WdqsTimeout` at the FIRST such answer
  (:func:`_deadline_answer`, the HTTP layer's ``no_retry``): the same query would hit the same 60 s
  deadline again, and each repeat spends a minute of the client's processing budget and counts toward
  the 30 errors per minute WMF allows (api-notes, WDQS "Errors and limits"); other 5xx are retried;
* spatial-split fallback for the area queries (:meth:`WdqsClient.entities_around`,
  :meth:`WdqsClient.site_candidates`): when the ``wikibase:around`` query of a big or dense area
  times out, the circle's bounding box is split into four quadrants, each
  asked with ``wikibase:box`` plus the same distance limit (``geof:distance`` from the same centre, so the
  service applies the same radius rule), quadrants that time out are split again, down to
  ``max_split_depth``; rows are merged, de-duplicated (one row per item, coordinate and type, as the
  single query gives them) and put in the single query's order. Past the depth limit
  :class:`WdqsAreaTooDense` names the area. Each split is reported to an ``on_split`` callback (the crawl
  writes it to its decision log, once per split even when a stopped task repeats the query:
  :meth:`geoagent.crawl.stages.CrawlServices.decision_logger`);
* after a stop request (:meth:`~geoagent.runtime.http.HttpClient.stop_retries`) the area queries ask for no
  further page, box or split (:class:`~geoagent.runtime.http.RetriesStopped`, an ``Abandoned``: the task is
  released untouched; a partly paged answer is never returned).

Every binding value in the results is a string (numbers included), and unbound OPTIONAL variables are
absent from a binding; the parsers below never rely on ``datatype``.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from geoagent.clients.mapillary import bbox_around, normalise_bbox, quadrants
from geoagent.clients.overpass import _json_body, host_of
from geoagent.geo import haversine_km
from geoagent.qid import is_qid
from geoagent.runtime.errors import PicklableError
from geoagent.textfmt import label_text
from geoagent.runtime.http import HostPolicy, PermanentHTTPError, RetriesExhausted, RetriesStopped

#: marker of Blazegraph's query-deadline error in a WDQS answer body
DEADLINE_MARKER = b"TimeoutException"


def _deadline_answer(resp: Any) -> bool:
    """``no_retry`` hook of the WDQS queries: True for an answer that shows the 60 s query deadline was hit,
    so the HTTP layer does not send the same query again: a 5xx whose body names ``TimeoutException``, or a
    2xx whose body failed the JSON check (the result stream stopped midway: WDQS User Manual, "Query
    limits"; api-notes, WDQS "Errors and limits"). Other 5xx (a restarting server) are retried as usual, and
    so is every 429 (throttling, whatever its text: waited out by its ``Retry-After``) and 408/425."""
    if 200 <= resp.status < 300:
        return True
    return resp.status >= 500 and DEADLINE_MARKER in resp.body

ENTITY_PREFIX = "http://www.wikidata.org/entity/"

_EXCEPTION = re.compile(r"(\w+(?:Exception|Error)): (\S.*)")
_WRAPPED = re.compile(r"[\w.$]*?(\w+(?:Exception|Error)): (\S.*)")


def _rejection_reason(exc: PermanentHTTPError) -> str:
    """Why WDQS refused a query (HTTP 400), at most 300 characters: the first ``...Exception: <why>`` line of
    Blazegraph's answer (a wrapper such as ``ExecutionException: ...MalformedQueryException: <why>`` gives its
    cause). Blazegraph echoes the whole query first (``SPARQL-QUERY: queryStr=...``) and names the exception
    after it, so the HTTP layer's 300-character excerpt holds only our own query: the line is read from the
    error's kept ``body``. The excerpt when there is no such line."""
    body = getattr(exc, "body", None) or exc.body_excerpt
    for line in body.splitlines():
        m = _EXCEPTION.search(line)
        if m is None:
            continue
        name, why = m.groups()
        inner = _WRAPPED.match(why)
        if inner is not None:
            name, why = inner.groups()
        return f"{name}: {why}"[:300]
    return exc.body_excerpt[:300]


class WdqsError(PicklableError, RuntimeError):
    """A WDQS request failed. Picklable (the attributes travel, :class:`~geoagent.runtime.errors.PicklableError`)."""


class WdqsTimeout(WdqsError):
    """The query hit the 60 s server deadline (non-JSON or truncated-JSON answer)."""


class WdqsAreaTooDense(WdqsTimeout):
    """An area query still timed out on a box after ``max_split_depth`` spatial splits.

    ``area`` names the city or site the query was for; ``box`` is ``(west, south, east, north)`` degrees of
    the part that kept failing; ``depth`` how many times it had been split.
    """

    def __init__(self, area: str, box: tuple[float, float, float, float], depth: int, detail: str = "") -> None:
        self.area, self.box, self.depth = area, box, depth
        w, s, e, n = box
        super().__init__(
            f"WDQS query for {area} still times out after {depth} spatial split(s) (box west {w:.5f}, south "
            f"{s:.5f}, east {e:.5f}, north {n:.5f}); raise the split depth or query a smaller radius {detail}".strip())


class WdqsThrottled(WdqsError):
    """429 persisted; do not query again for ``retry_after_s`` seconds."""

    def __init__(self, retry_after_s: float, detail: str = "") -> None:
        self.retry_after_s = retry_after_s
        super().__init__(f"WDQS throttled this client; retry after {retry_after_s:.0f} s {detail}".strip())


class WdqsQueryError(WdqsError):
    """400: malformed SPARQL (permanent)."""


class QueryTimeBudget:
    """Sliding-window budget of query wall time: at most ``budget_s`` seconds per ``window_s``.

    Parameters
    ----------
    budget_s : float
        Seconds of query time allowed per window (WDQS: 60 s per 60 s).
    window_s : float
        Window length in seconds.
    clock : callable
        Monotonic clock in seconds (injectable for tests).
    """

    def __init__(self, budget_s: float = 60.0, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s = budget_s
        self.window_s = window_s
        self.clock = clock
        self._spent: deque[tuple[float, float]] = deque()  # (end time, duration s)

    def record(self, start: float, end: float) -> None:
        """Account one query that ran from ``start`` to ``end`` (clock seconds)."""
        self._spent.append((end, max(0.0, end - start)))

    def used_s(self, now: float | None = None) -> float:
        """Query seconds spent in the window ending ``now``."""
        now = self.clock() if now is None else now
        while self._spent and self._spent[0][0] <= now - self.window_s:
            self._spent.popleft()
        return sum(d for _, d in self._spent)

    def delay_s(self, now: float | None = None) -> float:
        """Seconds to wait before the next query may start (0 when under budget)."""
        now = self.clock() if now is None else now
        used = self.used_s(now)
        if used < self.budget_s:
            return 0.0
        # wait until enough old queries leave the window to bring usage under budget
        excess = used - self.budget_s
        freed = 0.0
        for end, dur in self._spent:
            freed += dur
            if freed > excess:
                return max(0.0, end + self.window_s - now)
        return self.window_s


@dataclass(frozen=True, slots=True)
class WdEntity:
    """One Wikidata item from a geo query.

    ``dist_km`` is the service's distance from the query centre (km); ``sitelinks`` may be None when
    the query did not ask for it; ``type_qid``/``type_label`` are set by the site-candidate query.
    """

    qid: str
    label: str
    lat: float
    lon: float
    dist_km: float | None
    sitelinks: int | None = None
    type_qid: str | None = None
    type_label: str | None = None
    enwiki_title: str | None = None


#: a WKT point literal as WDQS writes ``wdt:P625`` values: ``Point(LON LAT)``, optionally preceded by the IRI of
#: a globe other than Earth (``<http://www.wikidata.org/entity/Q405> Point(...)``: the Moon); WKT keywords are
#: case-insensitive (``POINT(...)``)
_POINT = re.compile(r"^\s*(?:<([^>]*)>\s*)?Point\s*\(\s*([-+0-9.eE]+)\s+([-+0-9.eE]+)\s*\)", re.I)
#: the globe of a coordinate that names none, and of Earth when named
EARTH = ENTITY_PREFIX + "Q2"


def _value(binding: dict[str, Any], var: str) -> str | None:
    v = binding.get(var)
    if not isinstance(v, dict):
        return None
    val = v.get("value")
    return val if isinstance(val, str) else None


def qid_from_uri(uri: str | None) -> str | None:
    """``http://www.wikidata.org/entity/Q42`` -> ``Q42`` (None for anything else)."""
    if not uri or not uri.startswith(ENTITY_PREFIX):
        return None
    q = uri[len(ENTITY_PREFIX):]
    return q if is_qid(q) else None


def parse_point(wkt: str | None) -> tuple[float, float] | None:
    """WKT ``Point(LON LAT)`` (longitude first, keyword in any case) -> ``(lat, lon)`` in degrees.

    None, never an exception, for anything else: no point, a number that does not parse, a position outside
    [-90, 90] x [-180, 180], or a point on another globe than Earth (WDQS writes the globe's IRI before the
    point, ``<http://www.wikidata.org/entity/Q405> Point(...)``; no IRI, or Earth's, Q2, is Earth)."""
    if not isinstance(wkt, str) or not wkt:
        return None
    m = _POINT.match(wkt)
    if not m:
        return None
    globe, x, y = m.groups()
    if globe is not None and globe.strip() not in (EARTH, EARTH.replace("http://", "https://")):
        return None  # a coordinate on another globe is no place near a site on Earth
    try:
        lon, lat = float(x), float(y)
    except ValueError:  # "2.17e", "-", "1.2.3": the row is unusable, the rest of the answer is not
        return None
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):  # NaN fails too
        return None
    return lat, lon


#: the longest label Wikidata stores (characters; Wikibase's default ``string-limits``): a longer one is no label
WIKIDATA_LABEL_MAX_CHARS = 250


def entity_from_binding(b: dict[str, Any]) -> WdEntity | None:
    """Parse one binding of the geo queries below; None if it is not an object or lacks an item or a usable
    coordinate. A ``dist`` or ``links`` value that does not parse as a finite number is left None."""
    if not isinstance(b, dict):
        return None
    qid = qid_from_uri(_value(b, "item"))
    pt = parse_point(_value(b, "coord"))
    if qid is None or pt is None:
        return None
    dist = _value(b, "dist")
    links = _value(b, "links")
    # a label is data: no control or bidi characters reach a table or a prompt (crawl38 #2); one longer than
    # Wikidata allows (250 characters) is no label
    label = label_text(_value(b, "itemLabel"))
    label = label if label and len(label) <= WIKIDATA_LABEL_MAX_CHARS else qid
    try:
        dist_km = float(dist) if dist is not None else None
    except ValueError:
        dist_km = None
    if dist_km is not None and not math.isfinite(dist_km):
        dist_km = None
    try:
        n_links = int(float(links)) if links is not None else None
    except (ValueError, OverflowError):  # "1e400", "INF": no count
        n_links = None
    type_label, title = _value(b, "typeLabel"), _value(b, "title")
    return WdEntity(qid, label, pt[0], pt[1], dist_km, n_links, qid_from_uri(_value(b, "type")),
                    label_text(type_label) if type_label is not None else None,
                    label_text(title, collapse=False) if title is not None else None)


Box = tuple[float, float, float, float]


def _geo_block(lat: float, lon: float, radius_km: float, box: Box | None) -> str:
    """The geo part of an area query: ``wikibase:around`` (centre, radius) or, for one part of a split area,
    ``wikibase:box`` (corners south-west and north-east, ``Point(LON LAT)``) with the same distance rule
    (``geof:distance`` from the centre, km, at most ``radius_km``). Sources: WDQS User Manual, "Search
    around point" / "Search within box"; ``geof:distance`` returns kilometres."""
    if box is None:
        return f"""  SERVICE wikibase:around {{
    ?item wdt:P625 ?coord .
    bd:serviceParam wikibase:center "Point({lon:.6f} {lat:.6f})"^^geo:wktLiteral .
    bd:serviceParam wikibase:radius "{radius_km:g}" .
    bd:serviceParam wikibase:distance ?dist .
  }}"""
    w, s, e, n = box
    return f"""  SERVICE wikibase:box {{
    ?item wdt:P625 ?coord .
    bd:serviceParam wikibase:cornerSouthWest "Point({w:.7f} {s:.7f})"^^geo:wktLiteral .
    bd:serviceParam wikibase:cornerNorthEast "Point({e:.7f} {n:.7f})"^^geo:wktLiteral .
  }}
  BIND(geof:distance("Point({lon:.6f} {lat:.6f})"^^geo:wktLiteral, ?coord) AS ?dist)
  FILTER(?dist <= {radius_km:g})"""


#: Label languages of the reference-point query (:func:`around_query`), in order of preference: English, then
#: the language-neutral ``mul``, then Chinese (the release's ladder query asked ``zh,en``), then the languages
#: of the release's cities and other common ones. Every item within 6 km goes to the auditor (Sec. 3.3), which
#: gives its canonical English name; an item labelled only in Chinese or only in its local language must reach
#: the auditor under that label, not as its bare QID (which only an item with none of these labels gets).
LABEL_LANGUAGES: tuple[str, ...] = (
    "en", "mul", "zh", "fr", "es", "de", "it", "pt", "nl", "ca", "sv", "da", "hu", "el", "cs", "pl", "ru", "ja",
    "ko", "vi", "he", "ar", "hi", "mr", "tr")


#: Label languages of the site-candidate query (:func:`site_candidates_query`), in order: the release's site query's
#: (``scripts/00_select_sites.py``: ``en,mul,fr,es,de``, widened there after a Marrakech stadium with only French and
#: Arabic names came back as its bare QID). A candidate with a label in none of them is named by its QID and skipped
#: by the sampler (:func:`geoagent.crawl.sampler.unnamed`), as the release drops it; one labelled only in French,
#: Spanish or German is a site under that label, as in the release. Until 2026-12-01 (sampler version 3) ``en,mul``.
SITE_LABEL_LANGUAGES: tuple[str, ...] = ("en", "mul", "fr", "es", "de")


def around_query(lat: float, lon: float, radius_km: float, *, limit: int, offset: int, lang: str = "en",
                 box: Box | None = None, label_langs: Sequence[str] = LABEL_LANGUAGES) -> str:
    """SPARQL for ALL items with coordinates within ``radius_km`` (Sec. 3.3), one page.

    Ordered by item IRI (a stable order unrelated to fame, so paging never truncates toward famous
    items), with sitelinks and the ``lang`` Wikipedia title when present. ``?itemLabel`` is the label in the
    first of ``label_langs`` the item has (:data:`LABEL_LANGUAGES`; the bare QID when it has none). With
    ``box`` (west, south, east, north degrees) only the part of the circle inside that box is asked (a
    spatial split, see :func:`_geo_block`). ``ValueError`` for a label language that is not a language code."""
    for code in label_langs:
        if not re.fullmatch(r"[a-z]{2,3}(-[a-z0-9]+)*", code):
            raise ValueError(f"not a language code: {code!r}")
    return f"""SELECT ?item ?itemLabel ?coord ?dist ?links ?title WHERE {{
{_geo_block(lat, lon, radius_km, box)}
  OPTIONAL {{ ?item wikibase:sitelinks ?links . }}
  OPTIONAL {{ ?article schema:about ?item ; schema:isPartOf <https://{lang}.wikipedia.org/> ; schema:name ?title . }}
  SERVICE wikibase:label {{ bd:serviceParam wikibase:language "{','.join(label_langs)}". }}
}} ORDER BY ?item ?coord LIMIT {int(limit)} OFFSET {int(offset)}"""


def site_candidates_query(lat: float, lon: float, radius_km: float, type_qids: Sequence[str], max_sitelinks: int,
                          *, limit: int, offset: int, box: Box | None = None,
                          label_langs: Sequence[str] = SITE_LABEL_LANGUAGES) -> str:
    """SPARQL for items within ``radius_km`` that are instances (or subclass instances) of one of
    ``type_qids`` and have at most ``max_sitelinks`` sitelinks (Sec. 3.2.1), one page (``box``: one part
    of a split area, as in :func:`around_query`). ``?itemLabel`` is the label in the first of ``label_langs`` the
    item has (:data:`SITE_LABEL_LANGUAGES`, the release's; the bare QID when it has none). ``ValueError`` for a
    type that is not a QID or a label language that is not a language code."""
    for code in label_langs:
        if not re.fullmatch(r"[a-z]{2,3}(-[a-z0-9]+)*", code):
            raise ValueError(f"not a language code: {code!r}")
    for q in type_qids:
        if not is_qid(q):
            raise ValueError(f"not a QID: {q!r}")
    values = " ".join(f"wd:{q}" for q in type_qids)
    return f"""SELECT ?item ?itemLabel ?coord ?dist ?links ?type ?typeLabel WHERE {{
{_geo_block(lat, lon, radius_km, box)}
  VALUES ?type {{ {values} }}
  ?item wdt:P31/wdt:P279* ?type .
  ?item wikibase:sitelinks ?links .
  FILTER(?links <= {int(max_sitelinks)})
  SERVICE wikibase:label {{ bd:serviceParam wikibase:language "{','.join(label_langs)}". }}
}} ORDER BY ?item ?type ?coord LIMIT {int(limit)} OFFSET {int(offset)}"""


def _row_key(e: WdEntity) -> tuple[str, str, float, float]:
    """One row of an area query: item, type (site candidates) and coordinate (an item with two coordinates
    or two matching types gives two rows, in the single query as in the split one)."""
    return (e.qid, e.type_qid or "", e.lat, e.lon)


def _query_order(e: WdEntity) -> tuple[str, str, float, float]:
    """The single query's ``ORDER BY ?item ...``: item IRIs compare as strings (Q100 < Q1000 < Q101)."""
    return (ENTITY_PREFIX + e.qid, ENTITY_PREFIX + e.type_qid if e.type_qid else "", e.lat, e.lon)


def _box_reaches_circle(box: Box, lat: float, lon: float, radius_km: float) -> bool:
    """Whether any point of ``box`` may lie within ``radius_km`` of the centre (haversine to the box's
    nearest point, with a 1% + 50 m margin so a box is never skipped for a rounding difference with the
    service's distance)."""
    w, s, e, n = box
    near_lat = min(max(lat, s), n)
    if w <= lon <= e:
        near_lon = lon
    else:  # the nearer edge, across the antimeridian too (a centre at 179.9 is 0.1 deg from a box at -180)
        near_lon = min((w, e), key=lambda x: abs((lon - x + 180.0) % 360.0 - 180.0))
    return haversine_km(lat, lon, near_lat, near_lon) <= radius_km * 1.01 + 0.05


def within_circle(lat: float, lon: float, radius_km: float, p_lat: float, p_lon: float) -> bool:
    """Whether the point ``(p_lat, p_lon)`` lies within ``radius_km`` of the centre (haversine, degrees and km),
    with the 1% + 50 m margin of :func:`_box_reaches_circle` for the service's own distance rounding."""
    return haversine_km(lat, lon, p_lat, p_lon) <= radius_km * 1.01 + 0.05


def _box_km2(box: Box) -> float:
    """Approximate area of a box in km^2 (for the split log)."""
    w, s, e, n = box
    return (n - s) * 111.195 * (e - w) * 111.195 * math.cos(math.radians((s + n) / 2))


class WdqsClient:
    """Async WDQS client.

    Parameters
    ----------
    http : geoagent.runtime.http.HttpClient
    endpoint : str
        ``https://query.wikidata.org/sparql`` or a sandbox URL.
    user_agent : str
        Descriptive UA with contact (Wikimedia User-Agent policy).
    policy : HostPolicy, optional
        Installed for the host if given.
    budget_s, window_s : float
        Query-time budget (60 s of processing per 60 s).
    default_retry_after_s : float
        Wait after a 429 that carried no ``Retry-After`` (WMF advice: 60 s).
    """

    def __init__(self, http: Any, endpoint: str, user_agent: str, *, policy: HostPolicy | None = None,
                 budget_s: float = 60.0, window_s: float = 60.0, default_retry_after_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.http = http
        self.endpoint = endpoint
        self.user_agent = user_agent
        self.host = host_of(endpoint)
        self.budget = QueryTimeBudget(budget_s, window_s, clock)
        self.default_retry_after_s = default_retry_after_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._not_before = 0.0
        self.queries_sent = 0
        #: spatial splits made by the area queries' timeout fallback (whole circle and boxes)
        self.splits = 0
        #: area-query rows dropped because their point lies outside the circle asked for (a ``Point(LAT LON)``
        #: written latitude first, a mixed-up answer): the service filters by distance, so they are no answer
        self.outside_radius = 0
        #: the QIDs of those rows, in the order met
        self.outside_radius_qids: list[str] = []
        if policy is not None:
            http.set_policy(self.host, policy)

    async def select(self, query: str) -> list[dict[str, Any]]:
        """Run a SELECT query (POST, form field ``query``) and return ``results.bindings``.

        Raises
        ------
        WdqsThrottled
            429 outlived the retries; the client also refuses further queries until it has passed.
        WdqsTimeout
            Server deadline hit (non-JSON, truncated JSON, or a TimeoutException 5xx).
        WdqsQueryError
            400 (permanent).
        """
        async with self._lock:  # one query at a time per client
            wait = max(self._not_before - self._clock(), self.budget.delay_s())
            if wait > 0:
                await asyncio.sleep(wait)
            start = self._clock()
            deadline: list[int] = []  # status of a deadline answer that ended the request (the full body was seen)

            def no_retry(resp: Any) -> bool:
                if _deadline_answer(resp):
                    deadline.append(resp.status)
                    return True
                return False

            try:
                self.queries_sent += 1
                resp = await self.http.request(
                    "POST", self.endpoint, data={"query": query},
                    headers={"User-Agent": self.user_agent, "Accept": "application/sparql-results+json"},
                    validate=_json_body, no_retry=no_retry,
                )
            except PermanentHTTPError as e:
                if e.status == 400:
                    raise WdqsQueryError(f"WDQS rejected the query: {_rejection_reason(e)}") from None
                raise
            except RetriesExhausted as e:
                # the last answer's status, not "429" anywhere in its text: a deadline trace echoes the query,
                # whose coordinates or QIDs may hold those digits
                if e.retry_after_s is not None or e.last.startswith("http 429"):
                    ra = e.retry_after_s if e.retry_after_s is not None else self.default_retry_after_s
                    self._not_before = self._clock() + ra
                    raise WdqsThrottled(ra, f"({e.last})") from None
                # ``deadline``: the body named the deadline even where the error's 300-character excerpt does not
                # (Blazegraph's trace starts with the whole query and names the exception after it)
                if deadline or "TimeoutException" in e.last or e.last.startswith("invalid body"):
                    raise WdqsTimeout(f"WDQS query timed out: {e.last}") from None
                raise
            finally:
                self.budget.record(start, self._clock())
        try:
            data = orjson.loads(resp.body)
        except orjson.JSONDecodeError:
            excerpt = resp.text[:300]
            raise WdqsTimeout(f"WDQS answered non-JSON (query deadline hit?): {excerpt!r}") from None
        try:
            bindings = data["results"]["bindings"]
        except (KeyError, TypeError):
            raise WdqsError(f"WDQS JSON without results.bindings: {resp.text[:200]!r}") from None
        if not isinstance(bindings, list):
            raise WdqsError("WDQS results.bindings is not a list")
        return bindings

    def _no_split_after_stop(self, error: str) -> None:
        """After a stop request (:meth:`HttpClient.stop_retries`) a deadline answer is not followed by the
        spatial split's box queries (new queries of up to 60 s each, past the grace period, for a task that is
        cut off anyway): :class:`~geoagent.runtime.http.RetriesStopped`, an ``Abandoned`` (the task is released
        untouched; the next run splits)."""
        if getattr(self.http, "stopping", False):
            raise RetriesStopped(self.endpoint, 1, f"stop requested: no spatial split after {error}"[:300])

    async def _split_area(self, make_query: Callable[[int, int, Box | None], str], lat: float, lon: float,
                          radius_km: float, page_size: int, *, area: str, what: str, max_split_depth: int,
                          on_split: Callable[[dict[str, Any]], Any] | None) -> list[WdEntity]:
        """The area query with the spatial-split fallback (module docstring); ``make_query(limit, offset,
        box)`` builds one page (``box=None``: the whole circle). Rows whose point lies outside the circle are
        dropped and counted (:attr:`outside_radius`)."""
        found = await self._split_area_rows(make_query, lat, lon, radius_km, page_size, area=area, what=what,
                                            max_split_depth=max_split_depth, on_split=on_split)
        out = []
        for ent in found:
            if within_circle(lat, lon, radius_km, ent.lat, ent.lon):
                out.append(ent)
            else:
                self.outside_radius += 1
                self.outside_radius_qids.append(ent.qid)
        return out

    async def _split_area_rows(self, make_query: Callable[[int, int, Box | None], str], lat: float, lon: float,
                               radius_km: float, page_size: int, *, area: str, what: str, max_split_depth: int,
                               on_split: Callable[[dict[str, Any]], Any] | None) -> list[WdEntity]:
        try:
            return await self._paged(lambda lim, off: make_query(lim, off, None), page_size)
        except WdqsTimeout as e:
            first_error = str(e)
            self._no_split_after_stop(first_error)
        whole = bbox_around(lat, lon, radius_km * 1000.0)
        if max_split_depth < 1:
            raise WdqsAreaTooDense(area, whole, 0, f"(splitting is off; {first_error})")

        async def report(box: Box, depth: int, parts: list[Box], reason: str) -> None:
            """Count one split and hand its record to ``on_split`` (depth 0: the whole circle's box)."""
            self.splits += 1
            if on_split is None:
                return
            rec = {"event": "wdqs_split", "query": what, "area": area, "center": [lat, lon], "radius_km": radius_km,
                   "depth": depth, "box": list(box), "box_km2": round(_box_km2(box), 3),
                   "parts": [list(p) for p in parts], "reason": reason[:300]}
            res = on_split(rec)
            if asyncio.iscoroutine(res):
                await res

        stack: list[tuple[Box, int]] = []
        parts = [q for b in normalise_bbox(whole) for q in quadrants(b)]
        await report(whole, 0, parts, first_error)
        stack.extend((q, 1) for q in reversed(parts))
        rows: dict[tuple[str, str, float, float], WdEntity] = {}
        while stack:
            box, depth = stack.pop()
            if not _box_reaches_circle(box, lat, lon, radius_km):
                continue  # no point of this part lies within the radius: nothing to ask
            try:
                got = await self._paged(lambda lim, off, b=box: make_query(lim, off, b), page_size)
            except WdqsTimeout as e:
                self._no_split_after_stop(str(e))
                if depth >= max_split_depth:
                    raise WdqsAreaTooDense(area, box, depth, f"({e})") from None
                sub = quadrants(box)
                await report(box, depth, sub, str(e))
                stack.extend((q, depth + 1) for q in reversed(sub))
                continue
            for ent in got:
                rows.setdefault(_row_key(ent), ent)  # an item on a shared edge comes back from both parts
        return sorted(rows.values(), key=_query_order)

    async def _paged(self, make_query: Callable[[int, int], str], page_size: int) -> list[WdEntity]:
        """Every page of one area query (``make_query(limit, offset)``), until a page comes back short.

        After a stop request (:meth:`HttpClient.stop_retries`) no further page is asked for (nor a first
        one): the rows of the pages already read are an incomplete answer that must not be stored, and each
        page is a new query of up to 60 s, past the grace period, for a task cut off anyway.

        Raises
        ------
        geoagent.runtime.http.RetriesStopped
            A stop was requested before a page was sent (an ``Abandoned``: the task is released untouched,
            nothing of the query is kept; the next run asks it again from the first page).
        WdqsError
            A full page repeats the previous one: the endpoint ignores ``OFFSET`` (it would page for ever).
        """
        out: list[WdEntity] = []
        offset = 0
        previous: list[dict[str, Any]] | None = None
        while True:
            if getattr(self.http, "stopping", False):
                raise RetriesStopped(self.endpoint, 0, f"stop requested: no WDQS page at offset {offset} "
                                                       f"({len(out)} rows read so far are dropped)")
            rows = await self.select(make_query(page_size, offset))
            if previous is not None and rows and rows == previous:
                # the query is ordered, so a later page can never repeat an earlier full one: the endpoint dropped
                # OFFSET and would answer this page for ever (each copy held in memory)
                raise WdqsError(f"WDQS answered the page at OFFSET {offset} with the same {len(rows)} rows as the page "
                                f"at OFFSET {offset - page_size}: the endpoint ignores OFFSET ({self.endpoint})")
            previous = rows
            for b in rows:
                e = entity_from_binding(b)
                if e is not None:
                    out.append(e)
            if len(rows) < page_size:
                return out
            offset += page_size

    async def entities_around(self, lat: float, lon: float, radius_km: float, *, page_size: int = 500,
                              area: str | None = None, max_split_depth: int = 4,
                              on_split: Callable[[dict[str, Any]], Any] | None = None) -> list[WdEntity]:
        """Every item with a coordinate within ``radius_km`` (all pages; duplicates by QID possible when
        an item has several coordinates or articles).

        On a query timeout the area is split (module docstring): ``area`` names it in errors and split
        records (default: the centre), ``max_split_depth`` bounds the splits (0: none), ``on_split`` receives
        one dict per split (plain or async callable).

        Raises
        ------
        WdqsAreaTooDense
            A part still timed out at ``max_split_depth`` (a :class:`WdqsTimeout`).
        WdqsThrottled, WdqsQueryError, WdqsError
            As for :meth:`select`.
        """
        return await self._split_area(
            lambda lim, off, box: around_query(lat, lon, radius_km, limit=lim, offset=off, box=box),
            lat, lon, radius_km, page_size, area=area or f"the {radius_km:g} km around ({lat:.5f}, {lon:.5f})",
            what="entities_around", max_split_depth=max_split_depth, on_split=on_split)

    async def site_candidates(self, lat: float, lon: float, radius_km: float, type_qids: Sequence[str],
                              max_sitelinks: int, *, page_size: int = 1000, area: str | None = None,
                              max_split_depth: int = 4,
                              on_split: Callable[[dict[str, Any]], Any] | None = None) -> list[WdEntity]:
        """Items of the photographable types within ``radius_km`` with at most ``max_sitelinks``
        sitelinks (all pages; one row per matching type). Timeouts split the area as in
        :meth:`entities_around` (same parameters and errors)."""
        return await self._split_area(
            lambda lim, off, box: site_candidates_query(lat, lon, radius_km, type_qids, max_sitelinks, limit=lim,
                                                        offset=off, box=box),
            lat, lon, radius_km, page_size, area=area or f"the {radius_km:g} km around ({lat:.5f}, {lon:.5f})",
            what="site_candidates", max_split_depth=max_split_depth, on_split=on_split)
