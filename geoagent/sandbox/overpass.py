"""Local fake of the Overpass API (``/api/interpreter`` JSON, ``/api/status`` text), with its failure shapes.

Speaks the wire format of the Overpass API (user manual): form-encoded ``data=<QL>`` (or the raw QL as the body,
as overpy sends it, or ``GET ?data=``); ``[out:json]`` answers with ``version``, ``generator``, ``osm3s``
and ``elements`` and ``Content-Type: application/json`` exactly. It understands the two query shapes
the project sends (place nodes around a point; named highways around a point) and answers others with
the HTML 400 parse-error page.

Failure modes, switchable at runtime through :class:`OverpassFakeState` (``app[OVERPASS_STATE]``):

* ``remark_mode = "timeout"``: HTTP 200 with partial ``elements`` and
  ``remark: "runtime error: Query timed out in \"query\" at line 2 after N seconds."`` (the silent
  failure clients must catch); ``"oom"`` gives the out-of-memory remark;
* more than ``slot_quota`` (2) queries in flight at once: 429 with the rate_limited page;
* ``slots_available = 0``: ``/api/status`` reports ``Slot available after: ..., in N seconds.`` and
  ``/api/interpreter`` answers 429 with the rate_limited HTML page (no Retry-After, as documented);
* a missing or generic User-Agent gets 403 (the fake enforces the courtesy rule loudly);
* ``passthrough``: elements appended verbatim to every place-node answer, unfiltered (malformed ones: a node
  without an id or coordinates, ``"lat": null``, ``tags`` that is no object, an element that is no object);
* the generic fault middleware (429/500/503/timeout/reset/malformed) when ``faults`` is given.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from geoagent.geo import haversine_km
from geoagent.sandbox.faults import FaultConfig, fault_middleware


@dataclass
class OverpassFakeState:
    """Live, mutable behaviour of the fake (tests flip fields between requests)."""

    elements: list[dict[str, Any]] = field(default_factory=list)
    #: appended verbatim to every place-node answer, unfiltered (malformed elements a client must survive: a node
    #: without coordinates or id, ``"lat": null``, ``tags`` that is not an object, an element that is no object)
    passthrough: list[Any] = field(default_factory=list)
    remark_mode: str | None = None  # None | "timeout" | "oom"
    remark_times: int = 1_000_000  # how many more queries get the remark before it clears
    slots_available: int = 2
    slot_wait_s: int = 3
    queries: list[str] = field(default_factory=list)
    user_agents: list[str] = field(default_factory=list)
    status_calls: int = 0
    #: per-IP slot quota enforced on concurrent queries (Overpass default: 2) and query latency (s)
    slot_quota: int = 2
    #: the status page's ``Rate limit:`` (0: an instance without a per-IP quota, whose status page then
    #: has no slot lines at all, and which enforces no slots)
    rate_limit: int = 2
    latency_s: float = 0.0
    in_flight: int = 0
    max_in_flight: int = 0
    rejected_busy: int = 0


OVERPASS_STATE: web.AppKey[OverpassFakeState] = web.AppKey("overpass_state", OverpassFakeState)

_AROUND = r"\(around:(?P<r>[0-9.]+),(?P<lat>-?[0-9.]+),(?P<lon>-?[0-9.]+)\)"
_PLACE_Q = re.compile(r'node\[place~"\^\((?P<vals>[^)]*)\)\$"\]' + _AROUND + r"\s*;")
_WAY_Q = re.compile(r"way\[highway\]\[name\]" + _AROUND + r"\s*;")
_SETTINGS = re.compile(r"^\s*\[out:json\](\[timeout:(?P<t>\d+)\])?(\[maxsize:\d+\])?\s*;")
_GENERIC_UA = re.compile(r"^(python-requests|python-urllib|aiohttp|curl|wget|Python)/", re.I)


#: a User-Agent whose contact names ``<service>-blocked.invalid`` (``overpass``, ``wdqs``, ``pageviews``) is refused by
#: that fake with HTTP 403 as a blocked client would be (a ``.invalid`` domain: RFC 2606, never a real contact), so
#: tests can exercise the crawl's stop on a refusal (:class:`geoagent.crawl.stages.OpenDataRefused`)
BLOCKED_CONTACT_DOMAIN = "{service}-blocked.invalid"


def ua_problem(ua: str | None, service: str | None = None) -> str | None:
    """Why a User-Agent breaks the descriptive-UA rule (None if it is fine); with ``service``, also when its contact
    names :data:`BLOCKED_CONTACT_DOMAIN` of that service (a blocked client)."""
    if service is not None and ua and BLOCKED_CONTACT_DOMAIN.format(service=service) in ua:
        return "this client is blocked (too many requests, or a User-Agent policy breach)"
    if not ua or _GENERIC_UA.match(ua):
        return "a descriptive User-Agent naming the tool and a contact is required"
    # contact details are an e-mail address or a URL (Wikimedia User-Agent policy): the word "contact" is not one
    if not re.search(r"(@|https?://)", ua, re.I):
        return "the User-Agent must carry a contact (URL or e-mail)"
    return None


def _html_error(status: int, messages: list[str]) -> web.Response:
    paras = "".join(f'<p><strong style="color:#FF0000">Error</strong>: {m}</p>\n' for m in messages)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html><head><meta http-equiv="content-type" '
        'content="text/html; charset=utf-8" lang="en"/><title>OSM3S Response</title></head>\n<body>\n'
        f"<p>The data included in this document is from www.openstreetmap.org.</p>\n{paras}</body></html>\n"
    )
    return web.Response(status=status, text=body, content_type="text/html")


def _json(obj: Any) -> web.Response:
    # exactly "application/json" (overpy compares the header string; no charset suffix)
    resp = web.Response(body=orjson.dumps(obj))
    resp.headers["Content-Type"] = "application/json"
    return resp


def _envelope(elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 0.6,
        "generator": "Overpass API 0.7.62 (geoagent sandbox)",
        "osm3s": {"timestamp_osm_base": "2026-01-01T00:00:00Z",
                  "copyright": "The data included in this document is from www.openstreetmap.org. The data is made available under ODbL."},
        "elements": elements,
    }


async def _query_text(request: web.Request) -> str:
    if request.method == "GET":
        return request.query.get("data", "")
    raw = await request.read()
    ctype = request.headers.get("Content-Type", "")
    if ctype.startswith("application/x-www-form-urlencoded"):
        form = await request.post()
        return str(form.get("data", ""))
    return raw.decode("utf-8", errors="replace")


async def _interpreter(request: web.Request) -> web.Response:
    st = request.app[OVERPASS_STATE]
    ua = request.headers.get("User-Agent")
    st.user_agents.append(ua or "")
    problem = ua_problem(ua, "overpass")
    if problem:
        return web.Response(status=403, text=f"403 Forbidden: {problem}\n", content_type="text/plain")
    if st.slots_available <= 0 and st.rate_limit != 0:
        return _html_error(429, ["runtime error: open64: 0 Success /osm3s_v0.7.62_osm_base "
                                 "Dispatcher_Client::request_read_and_idx::rate_limited. Please check /api/status for the quota of your IP address."])
    if st.in_flight >= st.slot_quota and st.rate_limit != 0:
        st.rejected_busy += 1
        return _html_error(429, ["runtime error: open64: 0 Success /osm3s_v0.7.62_osm_base "
                                 "Dispatcher_Client::request_read_and_idx::rate_limited. Please check /api/status for the quota of your IP address."])
    st.in_flight += 1
    st.max_in_flight = max(st.max_in_flight, st.in_flight)
    try:
        if st.latency_s:
            import asyncio

            await asyncio.sleep(st.latency_s)
        return await _answer(request, st)
    finally:
        st.in_flight -= 1


async def _answer(request: web.Request, st: OverpassFakeState) -> web.Response:
    ql = await _query_text(request)
    st.queries.append(ql)
    m = _SETTINGS.match(ql)
    if not m:
        return _html_error(400, ["line 1: parse error: this fake understands only [out:json] queries"])
    timeout_s = int(m.group("t") or 180)
    q = _PLACE_Q.search(ql)
    kind = "place"
    if not q:
        q = _WAY_Q.search(ql)
        kind = "way"
    if not q:
        return _html_error(400, ["line 2: parse error: Unknown type \"" + html_escape(ql.split(";")[1][:40] if ";" in ql else ql[:40]) + "\""])
    r_m, lat, lon = float(q.group("r")), float(q.group("lat")), float(q.group("lon"))
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return _html_error(400, ["line 2: parse error: latitude/longitude out of range"])
    out = []
    for el in st.elements:
        if kind == "place":
            if el.get("type") != "node":
                continue
            vals = set(q.group("vals").split("|"))
            if (el.get("tags") or {}).get("place") not in vals:
                continue
            pos = (el["lat"], el["lon"])
        else:
            if el.get("type") != "way" or "highway" not in (el.get("tags") or {}) or "name" not in (el.get("tags") or {}):
                continue
            c = el.get("center") or {}
            pos = (c.get("lat"), c.get("lon"))
            if pos[0] is None:
                continue
        if haversine_km(lat, lon, pos[0], pos[1]) * 1000.0 <= r_m:  # around: radius in m
            out.append(el)
    if kind == "place":
        out.extend(st.passthrough)
    if st.remark_mode and st.remark_times > 0:
        st.remark_times -= 1
        if st.remark_mode == "oom":
            remark = "runtime error: Query run out of memory using about 2048 MB of RAM."
        else:
            remark = f'runtime error: Query timed out in "query" at line 2 after {timeout_s} seconds.'
        body = _envelope(out[: len(out) // 3])
        body["remark"] = remark
        return _json(body)
    return _json(_envelope(out))


def html_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


async def _status(request: web.Request) -> web.Response:
    st = request.app[OVERPASS_STATE]
    st.status_calls += 1
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = ["Connected as: 2130706433", f"Current time: {now}", "Announced endpoint: none", f"Rate limit: {st.rate_limit}"]
    if st.rate_limit == 0:
        pass  # no quota: no slot lines
    elif st.slots_available > 0:
        lines.append(f"{st.slots_available} slots available now.")
    else:
        later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + st.slot_wait_s))
        lines.append(f"Slot available after: {later}, in {st.slot_wait_s} seconds.")
        lines.append(f"Slot available after: {later}, in {st.slot_wait_s + 5} seconds.")
    lines.append("Currently running queries (pid, space limit, time limit, start time):")
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def make_app(elements: list[dict[str, Any]] | None = None, *, faults: FaultConfig | None = None,
             state: OverpassFakeState | None = None) -> web.Application:
    """Build the fake Overpass app serving ``/api/interpreter`` and ``/api/status``.

    Parameters
    ----------
    elements : list of dict
        OSM elements in ``[out:json]`` form (nodes with lat/lon/tags; ways with ``center``).
    faults : FaultConfig, optional
        Generic fault injection.
    state : OverpassFakeState, optional
        Shared state object (else a new one holding ``elements``).
    """
    app = web.Application(middlewares=[fault_middleware(faults)] if faults is not None else [])
    st = state or OverpassFakeState(elements=list(elements or []))
    app[OVERPASS_STATE] = st
    app.router.add_route("*", "/api/interpreter", _interpreter)
    app.router.add_get("/api/status", _status)
    return app
