"""Local fake of the Wikimedia pageviews REST API (per-article daily views).

Route: ``/metrics/pageviews/per-article/{project}/{access}/{agent}/{article}/{granularity}/{start}/{end}``.
Answers ``{"items": [{project, article, granularity, timestamp "YYYYMMDD00", access, agent, views}]}``
with zero-view days omitted; 404 with a HyperSwitch problem JSON when the range has no data (unknown
article or all zero); 400 for bad dates/access/agent; 403 for a generic User-Agent. The fake's daily
views for an article are ``daily_views[title]`` on every day, except every ``zero_every``-th day.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass, field
from urllib.parse import unquote

from aiohttp import web

from geoagent.sandbox.faults import FaultConfig, fault_middleware
from geoagent.sandbox.overpass import ua_problem

ACCESS = {"all-access", "desktop", "mobile-app", "mobile-web"}
AGENTS = {"all-agents", "user", "spider", "automated"}
FIRST_DAY = dt.date(2015, 7, 1)  # the API's first day of data


@dataclass
class PageviewsFakeState:
    daily_views: dict[str, int] = field(default_factory=dict)  # title with underscores -> views/day
    zero_every: int = 7
    requests: list[str] = field(default_factory=list)
    #: title with underscores -> items appended verbatim to that article's answer (hostile shapes a client must
    #: survive: a day listed twice, negative views, a day outside the range asked for)
    extra_items: dict[str, list[dict[str, object]]] = field(default_factory=dict)


PAGEVIEWS_STATE: web.AppKey[PageviewsFakeState] = web.AppKey("pageviews_state", PageviewsFakeState)


def _date(s: str) -> dt.date:
    return dt.datetime.strptime(s[:8], "%Y%m%d").date()


def _problem(status: int, kind: str, title: str, detail: str, uri: str) -> web.Response:
    return web.json_response({"type": f"https://mediawiki.org/wiki/HyperSwitch/errors/{kind}", "title": title,
                              "method": "get", "detail": detail, "uri": uri}, status=status,
                             content_type="application/problem+json")


async def _per_article(request: web.Request) -> web.Response:
    st = request.app[PAGEVIEWS_STATE]
    if ua_problem(request.headers.get("User-Agent"), "pageviews"):
        return web.Response(status=403, text="Please set a user-agent and respect our robot policy", content_type="text/plain")
    m = request.match_info
    raw_path = request.raw_path.split("?")[0]
    article_raw = raw_path.split("/per-article/", 1)[1].split("/")[3]
    article = unquote(article_raw)
    st.requests.append(article)
    if m["access"] not in ACCESS or m["agent"] not in AGENTS or m["granularity"] not in ("daily", "monthly"):
        return _problem(400, "invalid_request", "Invalid parameters", "bad access, agent or granularity", raw_path)
    try:
        start, end = _date(m["start"]), _date(m["end"])
    except ValueError:
        return _problem(400, "invalid_request", "Invalid parameters", "start/end must be YYYYMMDD", raw_path)
    if end < start:
        return _problem(400, "invalid_request", "Invalid parameters", "start must be before end", raw_path)
    per_day = st.daily_views.get(article, 0)
    extra = st.extra_items.get(article, [])
    if not extra:  # the common answer: the same request gets the same bytes, built once per process
        text = _daily_json(m["project"], m["access"], m["agent"], article, start, end, per_day, st.zero_every)
        if text is None:
            return _not_found(raw_path)
        return web.json_response(text=text)
    items = _daily_items(m["project"], m["access"], m["agent"], article, start, end, per_day, st.zero_every)
    items.extend(extra)
    if not items:
        return _not_found(raw_path)
    return web.json_response({"items": items})


def _not_found(raw_path: str) -> web.Response:
    return _problem(404, "not_found", "Not found.", "The date(s) you used are valid, but we either do not have data "
                    "for those date(s), or the project you asked for is not loaded yet.", raw_path)


@functools.lru_cache(maxsize=64)
def _day_stamps(start: dt.date, end: dt.date) -> tuple[str, ...]:
    """``YYYYMMDD00`` of each day from ``start`` to ``end`` (inclusive); none when ``start`` is before the API's
    first day (2015-07-01), as the walk from ``start`` stops at once there."""
    out = []
    day = start
    while day <= end and day >= FIRST_DAY:
        out.append(day.strftime("%Y%m%d") + "00")
        day += dt.timedelta(days=1)
    return tuple(out)


def _daily_items(project: str, access: str, agent: str, article: str, start: dt.date, end: dt.date, per_day: int,
                 zero_every: int) -> list[dict[str, object]]:
    """The fake's items of one article over ``start``..``end``: ``per_day`` views on each day except every
    ``zero_every``-th (counted from ``start``; 0: none skipped); no item when ``per_day`` is 0."""
    if per_day <= 0:
        return []
    return [{"project": project, "article": article, "granularity": "daily", "timestamp": stamp, "access": access,
             "agent": agent, "views": per_day}
            for i, stamp in enumerate(_day_stamps(start, end))
            if not (zero_every and i % zero_every == zero_every - 1)]


@functools.lru_cache(maxsize=1024)
def _daily_json(project: str, access: str, agent: str, article: str, start: dt.date, end: dt.date, per_day: int,
                zero_every: int) -> str | None:
    """The JSON text ``web.json_response`` would send for :func:`_daily_items` (None: no item, a 404)."""
    items = _daily_items(project, access, agent, article, start, end, per_day, zero_every)
    return json.dumps({"items": items}) if items else None


def make_app(daily_views: dict[str, int] | None = None, *, zero_every: int = 7, faults: FaultConfig | None = None,
             state: PageviewsFakeState | None = None) -> web.Application:
    """Build the fake pageviews app (mount point is the API root, like ``/api/rest_v1``)."""
    app = web.Application(middlewares=[fault_middleware(faults)] if faults is not None else [])
    app[PAGEVIEWS_STATE] = state or PageviewsFakeState(dict(daily_views or {}), zero_every)
    app.router.add_get(
        "/metrics/pageviews/per-article/{project}/{access}/{agent}/{article}/{granularity}/{start}/{end}", _per_article)
    return app
