"""Local fake of the Wikidata Query Service SPARQL endpoint (JSON results), with its failure shapes.

It answers the two geo queries the project sends (:func:`geoagent.clients.wdqs.around_query` and
:func:`~geoagent.clients.wdqs.site_candidates_query`): it reads the ``wikibase:around`` centre
(``Point(LON LAT)``, longitude first) and radius (km), or, for one part of a split area, the
``wikibase:box`` corners (``cornerSouthWest``/``cornerNorthEast``, edges included) with
``BIND(geof:distance(CENTRE, ?coord) AS ?dist)`` and ``FILTER(?dist <= R)`` (the same haversine distance
and radius rule as ``around``), an optional ``VALUES ?type {...}`` with
``wdt:P31/wdt:P279*`` (instances of subclasses count), an optional ``FILTER(?links <= N)``, and
``LIMIT``/``OFFSET``; rows are ordered by item IRI (then type, then coordinate). Answers follow the W3C SPARQL 1.1 JSON results
format: every value a string, ``type`` uri/literal, ``datatype`` or ``xml:lang``, unbound OPTIONAL
variables absent. Content type ``application/sparql-results+json``.

Failure shapes (fields of :class:`WdqsFakeState` at ``app[WDQS_STATE]``): ``throttle_next`` answers
that many queries with 429 + ``Retry-After: retry_after_s``; with ``budget_s`` set, a User-Agent whose
queries took ``budget_s`` seconds within the last ``budget_window_s`` gets 429 (the 60 s/min budget); a second query arriving while one from
the same User-Agent is in flight also gets 429 (one query at a time); a query sent before a previous
429's ``Retry-After`` expired is counted in ``ignored_retry_after`` (the real service bans such clients);
``timeout_next`` answers with the Blazegraph TimeoutException as text/plain 500 (``timeout_mode="500"``)
or as JSON cut midway followed by a stack trace (``"truncated"``); a generic or contact-less User-Agent
gets 403 (Wikimedia User-Agent policy); unparseable queries get 400 with Blazegraph's text: the query echoed
(``SPARQL-QUERY: queryStr=...``), then ``...MalformedQueryException: <why>`` and a stack trace.
An item's English Wikipedia title (``?title``, ``schema:name`` of its ``en.wikipedia.org`` article) is answered
with spaces, as the real service names articles (:func:`article_name`), never in the URL's underscore form.
``timeout_above_km2`` (None: off) makes every query whose area is larger than that many km^2 (a circle:
pi r^2; a box: its width times height) time out in the ``timeout_mode`` shape, every time, as a real
query over a big or dense city does; ``area_timeouts`` counts them. ``ignore_offset`` answers every page as
the first (an endpoint that drops ``OFFSET``); ``FakeEntity.coord_wkt`` serves a ``?coord`` literal verbatim
(WKT variants and malformed ones).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from geoagent.geo import haversine_km
from geoagent.sandbox.faults import FaultConfig, fault_middleware
from geoagent.sandbox.overpass import ua_problem

ENTITY = "http://www.wikidata.org/entity/"
XSD = "http://www.w3.org/2001/XMLSchema#"
WKT = "http://www.opengis.net/ont/geosparql#wktLiteral"


@dataclass
class FakeEntity:
    """An item of the fake: coordinates in degrees, direct ``P31`` classes, sitelink count, enwiki title.

    ``label`` is the English label; ``labels`` maps other language codes to labels (``{"zh": ...}``). The label
    service answers the label in the first language of the query's ``wikibase:language`` chain the item has,
    tagged with that language; with none of them (``label`` empty, no ``labels`` in the chain) it answers the
    bare QID as ``?itemLabel``, a literal without a language tag (api-notes section 2, unconfirmed there; the
    release's ladders hold 4 rows whose raw label is such a QID)."""

    qid: str
    label: str
    lat: float
    lon: float
    sitelinks: int = 0
    instance_of: tuple[str, ...] = ()
    #: the English Wikipedia article's title, either as MediaWiki stores it ("Eiffel Tower") or in its URL form
    #: ("Eiffel_Tower", the form the pageviews fake's ``daily_views`` is keyed by); the fake answers it as WDQS's
    #: ``schema:name`` does, with spaces (:func:`article_name`)
    title: str | None = None
    #: served verbatim as the ``?coord`` literal instead of ``Point(LON LAT)`` (a WKT variant: ``POINT(...)``, a
    #: globe IRI before the point as WDQS writes coordinates on another globe, a malformed number); the fake's
    #: own distance and box tests still use ``lat``/``lon``
    coord_wkt: str | None = None
    #: served verbatim as the ``?links`` literal instead of ``sitelinks`` (a hostile value: "many", ""); the fake's
    #: own ``FILTER(?links <= N)`` still uses ``sitelinks``
    links_literal: str | None = None
    #: labels in other languages than English (language code -> label)
    labels: dict[str, str] = field(default_factory=dict)

    def label_in(self, langs: tuple[str, ...]) -> tuple[str, str] | None:
        """``(label, language)`` in the first of ``langs`` the item has a label in, or None."""
        for code in langs:
            text = self.label if code == "en" else self.labels.get(code, "")
            if text:
                return text, code
        return None


@dataclass
class WdqsFakeState:
    entities: list[FakeEntity] = field(default_factory=list)
    #: class QID -> its direct superclasses (``wdt:P279``)
    subclass_of: dict[str, tuple[str, ...]] = field(default_factory=dict)
    class_labels: dict[str, str] = field(default_factory=dict)
    latency_s: float = 0.0
    throttle_next: int = 0
    retry_after_s: int = 2
    timeout_next: int = 0
    timeout_mode: str = "500"  # or "truncated"
    #: queries over an area larger than this (km^2) always time out (None: never)
    timeout_above_km2: float | None = None
    area_timeouts: int = 0
    queries: list[str] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    max_in_flight: int = 0
    blocked_until: dict[str, float] = field(default_factory=dict)
    ignored_retry_after: int = 0
    throttled: int = 0
    #: server-side query-time budget per User-Agent: at most ``budget_s`` s of query time per
    #: ``budget_window_s`` (WDQS: 60 s per 60 s); None disables the check
    budget_s: float | None = None
    budget_window_s: float = 60.0
    spent: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: answer every query as if it had no ``OFFSET`` (a proxy or endpoint that drops it): each page is the first
    ignore_offset: bool = False

    def used_s(self, ua: str, now: float) -> float:
        recs = [r for r in self.spent.get(ua, []) if r[0] > now - self.budget_window_s]
        self.spent[ua] = recs
        return sum(d for _, d in recs)


WDQS_STATE: web.AppKey[WdqsFakeState] = web.AppKey("wdqs_state", WdqsFakeState)

_CENTER = re.compile(r'wikibase:center\s+"Point\(\s*(-?[0-9.]+)\s+(-?[0-9.]+)\s*\)"')
_RADIUS = re.compile(r'wikibase:radius\s+"([0-9.]+)"')
_NUM = r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
_SW = re.compile(r'wikibase:cornerSouthWest\s+"Point\(\s*' + _NUM + r"\s+" + _NUM + r'\s*\)"')
_NE = re.compile(r'wikibase:cornerNorthEast\s+"Point\(\s*' + _NUM + r"\s+" + _NUM + r'\s*\)"')
_DIST_CENTER = re.compile(r'geof:distance\(\s*"Point\(\s*' + _NUM + r"\s+" + _NUM + r'\s*\)"\^\^geo:wktLiteral\s*,\s*\?coord\s*\)')
_DIST_FILTER = re.compile(r"FILTER\s*\(\s*\?dist\s*<=\s*" + _NUM + r"\s*\)")
_VALUES = re.compile(r"VALUES\s+\?type\s*\{([^}]*)\}")
_FILTER = re.compile(r"FILTER\s*\(\s*\?links\s*<=\s*([0-9]+)\s*\)")
_LIMIT = re.compile(r"LIMIT\s+([0-9]+)")
_OFFSET = re.compile(r"OFFSET\s+([0-9]+)")
_LANGS = re.compile(r'wikibase:language\s+"([^"]*)"')


def _closure(cls: str, sub: dict[str, tuple[str, ...]]) -> set[str]:
    seen, stack = set(), [cls]
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        stack.extend(sub.get(c, ()))
    return seen


def _lit(value: Any, dtype: str | None = None, lang: str | None = None) -> dict[str, str]:
    d = {"type": "literal", "value": str(value)}
    if dtype:
        d["datatype"] = dtype
    elif lang:
        d["xml:lang"] = lang
    return d


def article_name(title: str) -> str:
    """The ``schema:name`` WDQS gives a Wikipedia article: its title as MediaWiki stores it, spaces where the
    article's URL (``https://en.wikipedia.org/wiki/Eiffel_Tower``) has underscores ("Eiffel Tower"; the sitelink
    title of ``wbgetentities`` is the same string, api-notes section 3). A title never holds an underscore
    (MediaWiki normalises it to a space), so every underscore is replaced."""
    return title.replace("_", " ")


def query_area(query: str) -> tuple[float, float, float, tuple[float, float, float, float] | None]:
    """``(lat0, lon0, radius_km, box)`` of a supported geo query (``box`` west, south, east, north degrees for
    a ``wikibase:box`` query, else None); ``ValueError`` if the query is neither shape."""
    if "wdt:P625" not in query:
        raise ValueError("only geo queries over wdt:P625 are supported by this fake")
    if "wikibase:box" in query:
        sw, ne, c, r = _SW.search(query), _NE.search(query), _DIST_CENTER.search(query), _DIST_FILTER.search(query)
        if not sw or not ne or not c or not r:
            raise ValueError("a wikibase:box query needs both corners, BIND(geof:distance(CENTRE, ?coord) AS ?dist) "
                             "and FILTER(?dist <= R) in this fake")
        box = (float(sw.group(1)), float(sw.group(2)), float(ne.group(1)), float(ne.group(2)))
        return float(c.group(2)), float(c.group(1)), float(r.group(1)), box
    c = _CENTER.search(query)
    r = _RADIUS.search(query)
    if not c or not r:
        raise ValueError("only wikibase:around or wikibase:box geo queries are supported by this fake")
    return float(c.group(2)), float(c.group(1)), float(r.group(1)), None


def area_km2(query: str) -> float:
    """Area a supported geo query covers, in km^2: pi r^2 for ``around``, width x height for ``box``."""
    import math

    lat0, _lon0, radius, box = query_area(query)
    if box is None:
        return math.pi * radius * radius
    w, s, e, n = box
    return (n - s) * 111.195 * (e - w) * 111.195 * math.cos(math.radians((s + n) / 2))


def answer(st: WdqsFakeState, query: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Evaluate one supported query against the fake's entities; ``ValueError`` if unsupported."""
    lat0, lon0, radius, box = query_area(query)
    vm = _VALUES.search(query)
    types = re.findall(r"wd:(Q[0-9]+)", vm.group(1)) if vm else None
    fm = _FILTER.search(query)
    max_links = int(fm.group(1)) if fm else None
    lm, om = _LIMIT.search(query), _OFFSET.search(query)
    limit = int(lm.group(1)) if lm else None
    offset = int(om.group(1)) if om and not st.ignore_offset else 0
    lg = _LANGS.search(query)
    langs = tuple(x.strip() for x in lg.group(1).split(",") if x.strip()) if lg else ("en",)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for e in st.entities:
        if box is not None and not (box[0] <= e.lon <= box[2] and box[1] <= e.lat <= box[3]):
            continue
        d = haversine_km(lat0, lon0, e.lat, e.lon)
        if d > radius:
            continue
        if max_links is not None and e.sitelinks > max_links:
            continue
        b: dict[str, Any] = {
            "item": {"type": "uri", "value": ENTITY + e.qid},
            "itemLabel": _lit(found[0], lang=found[1]) if (found := e.label_in(langs)) else _lit(e.qid),
            "coord": _lit(e.coord_wkt if e.coord_wkt is not None else f"Point({e.lon} {e.lat})", WKT),
            "dist": _lit(f"{d:.3f}", XSD + "double"),
            "links": _lit(e.links_literal if e.links_literal is not None else e.sitelinks, XSD + "integer"),
        }
        if types is None:
            if e.title:
                b["title"] = _lit(article_name(e.title), lang="en")
            rows.append((ENTITY + e.qid, "", b))
            continue
        classes: set[str] = set()
        for c0 in e.instance_of:
            classes |= _closure(c0, st.subclass_of)
        for t in types:
            if t in classes:
                bt = dict(b)
                bt["type"] = {"type": "uri", "value": ENTITY + t}
                bt["typeLabel"] = _lit(st.class_labels.get(t, t), lang="en")
                rows.append((ENTITY + e.qid, ENTITY + t, bt))
    rows.sort(key=lambda x: (x[0], x[1], x[2]["coord"]["value"]))  # ORDER BY ?item [?type] ?coord
    sel = rows[offset: offset + limit if limit is not None else None]
    head = ["item", "itemLabel", "coord", "dist", "links"] + (["title"] if types is None else ["type", "typeLabel"])
    return head, [b for _, _, b in sel]


async def _sparql(request: web.Request) -> web.StreamResponse:
    st = request.app[WDQS_STATE]
    ua = request.headers.get("User-Agent", "")
    problem = ua_problem(ua, "wdqs")
    if problem:
        return web.Response(status=403, text=f"Forbidden. Please comply with the User-Agent policy: {problem}\n",
                            content_type="text/plain")
    if request.method == "GET":
        query = request.query.get("query", "")
    else:
        form = await request.post()
        query = str(form.get("query", ""))
    now = time.monotonic()
    if st.blocked_until.get(ua, 0.0) > now:
        st.ignored_retry_after += 1
    over_budget = st.budget_s is not None and st.used_s(ua, now) >= st.budget_s
    if st.in_flight.get(ua, 0) >= 1 or st.throttle_next > 0 or over_budget:
        if st.throttle_next > 0 and not over_budget:
            st.throttle_next -= 1
        st.throttled += 1
        st.blocked_until[ua] = now + st.retry_after_s
        return web.Response(status=429, text="Too Many Requests - Please retry in %d seconds.\n" % st.retry_after_s,
                            headers={"Retry-After": str(st.retry_after_s)}, content_type="text/plain")
    st.in_flight[ua] = st.in_flight.get(ua, 0) + 1
    st.max_in_flight = max(st.max_in_flight, st.in_flight[ua])
    t_start = time.monotonic()
    try:
        st.queries.append(query)
        if st.latency_s:
            await asyncio.sleep(st.latency_s)
        too_big = False
        if st.timeout_above_km2 is not None:
            try:
                too_big = area_km2(query) > st.timeout_above_km2
            except ValueError:
                too_big = False  # answered 400 below
            st.area_timeouts += too_big
        if st.timeout_next > 0 or too_big:
            if not too_big:
                st.timeout_next -= 1
            trace = ("SPARQL-QUERY: queryStr=" + query[:80] + "\njava.util.concurrent.TimeoutException\n"
                     "\tat java.util.concurrent.FutureTask.get(FutureTask.java:205)\n")
            if st.timeout_mode == "truncated":
                head, rows = answer(st, query)
                full = orjson.dumps({"head": {"vars": head}, "results": {"bindings": rows}}).decode()
                return web.Response(text=full[: max(40, len(full) // 2)] + "\n" + trace,
                                    content_type="application/sparql-results+json")
            return web.Response(status=500, text=trace, content_type="text/plain")
        try:
            head, rows = answer(st, query)
        except ValueError as e:
            # Blazegraph's shape: the whole query echoed first, the exception after it, then the stack
            return web.Response(status=400, text=(
                f"SPARQL-QUERY: queryStr={query}\njava.util.concurrent.ExecutionException: "
                f"org.openrdf.query.MalformedQueryException: {e}\n"
                "\tat java.util.concurrent.FutureTask.report(FutureTask.java:122)\n"
                "\tat java.util.concurrent.FutureTask.get(FutureTask.java:192)\n"), content_type="text/plain")
        body = orjson.dumps({"head": {"vars": head}, "results": {"bindings": rows}})
        return web.Response(body=body, content_type="application/sparql-results+json")
    finally:
        st.in_flight[ua] -= 1
        t_end = time.monotonic()
        st.spent.setdefault(ua, []).append((t_end, t_end - t_start))


def make_app(entities: list[FakeEntity] | None = None, *, subclass_of: dict[str, tuple[str, ...]] | None = None,
             class_labels: dict[str, str] | None = None, faults: FaultConfig | None = None,
             state: WdqsFakeState | None = None) -> web.Application:
    """Build the fake WDQS app serving ``/sparql`` (GET ``?query=`` or POST form ``query=``)."""
    app = web.Application(middlewares=[fault_middleware(faults)] if faults is not None else [])
    app[WDQS_STATE] = state or WdqsFakeState(entities=list(entities or []), subclass_of=dict(subclass_of or {}),
                                             class_labels=dict(class_labels or {}))
    app.router.add_route("*", "/sparql", _sparql)
    return app
