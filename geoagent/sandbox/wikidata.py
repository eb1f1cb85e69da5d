"""Local fake of the Wikidata Action API (``/w/api.php``): ``wbsearchentities`` and ``wbgetentities``.

Speaks the real request and response shapes of the Wikidata Action API (Wikibase/API on mediawiki.org;
Manual:Maxlag parameter), ``format=json`` with formatversion 1, backed by a
:class:`~geoagent.sandbox.gazetteer.Gazetteer`:

* ``action=wbsearchentities&search=..&language=..&limit=..&continue=..``: case-, diacritic- and
  punctuation-insensitive prefix search over labels and aliases; ``search``/``searchinfo``/
  ``search-continue``/``success``; each hit has ``id, title, pageid, repository, url`` (scheme-less),
  ``concepturi, display, label, description, match, aliases``. Default limit 7, maximum 50.
* ``action=wbgetentities&ids=Q1|Q2&props=..&languages=..``: at most 50 ids (more ->
  ``toomanyvalues`` error); unknown ids -> ``{"id": .., "missing": ""}``; malformed ids ->
  ``no-such-entity`` error; claims P625 (``globe-coordinate``, numbers), P31 and, for entries that hold them,
  P131 (located in the administrative territorial entity) and P17 (country), all three ``wikibase-item``.
* Errors arrive as **HTTP 200** with an ``error`` object and ``servedby``.
* ``maxlag``: while the simulated replica lag (:class:`WikidataFakeState` ``lag_s``) exceeds the
  request's ``maxlag``, answer the ``maxlag`` error with ``Retry-After`` (default 5 s, what MediaWiki
  sends) and ``X-Database-Lag`` headers; ``lagged_requests`` counts down how many requests still see it.
* ``ratelimited``: the next ``ratelimited_requests`` requests get that error code (HTTP 200).
* User-Agent policy: a missing UA or a stock library UA (``Python/.. aiohttp/..``, ``python-requests``,
  ``curl``) gets **HTTP 403** with a plain-text body, as Wikimedia's edge answers.

Fault injection (429 + Retry-After, 5xx, timeouts, resets, malformed JSON) comes from
:func:`geoagent.sandbox.faults.fault_middleware` when ``faults`` is given.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from geoagent.sandbox.faults import FaultConfig, fault_middleware
from geoagent.sandbox.gazetteer import Gazetteer, GazetteerEntry, load_gazetteer

API_PATH = "/w/api.php"
SEARCH_DEFAULT_LIMIT = 7  # wbsearchentities default limit (our clients always send limit)
SEARCH_MAX_LIMIT = 50
GETENTITIES_MAX_IDS = 50
_STOCK_UA = re.compile(r"^(?:python|python-requests|aiohttp|curl|wget|go-http-client|java|okhttp|libwww)\b", re.IGNORECASE)
_QID = re.compile(r"^[QPL][1-9][0-9]*$")
_DOC_STAR = "See https://www.wikidata.org/w/api.php for API usage."


def ua_problem(user_agent: str | None) -> str | None:
    """Why a User-Agent breaks the Wikimedia policy (missing, stock library UA, no contact), or None."""
    ua = (user_agent or "").strip()
    if not ua:
        return "missing User-Agent"
    if _STOCK_UA.match(ua) or ua.casefold().startswith(("python/", "mozilla/5.0 (compatible; python")):
        return "stock library User-Agent"
    if "@" not in ua and "http" not in ua.casefold():
        return "User-Agent has no contact (URL or e-mail)"
    return None


@dataclass(slots=True)
class WikidataFakeState:
    """Mutable behaviour and request log of one fake (``app[WIKIDATA_STATE]``).

    Attributes
    ----------
    lag_s : float
        Simulated replica lag in seconds; requests whose ``maxlag`` is below it get the maxlag error.
    lagged_requests : int
        How many more maxlag-carrying requests see the lag (-1: all of them, until changed).
    retry_after_s : int or None
        ``Retry-After`` header of the maxlag error, whole seconds (MediaWiki sends 5); None sends no
        header (clients must then fall back to the ``lag`` field).
    ratelimited_requests : int
        How many more requests get the ``ratelimited`` error.
    requests : list of dict
        One record per API request: ``action``, ``params`` (dict), ``user_agent``, ``outcome``.
    """

    lag_s: float = 0.0
    lagged_requests: int = 0
    retry_after_s: int | None = 5
    ratelimited_requests: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: merged items: id -> the id it redirects to. ``wbgetentities`` answers a redirected id with the
    #: target's data under the REQUESTED id as key, ``"id"`` naming the target and
    #: ``"redirects": {"from", "to"}`` (Wikibase's ResultBuilder; public client fixtures show this shape).
    #: A redirected id that still has a gazetteer entry keeps turning up in search, like a lagging index.
    redirects: dict[str, str] = field(default_factory=dict)
    #: id -> keys written over that entity's ``wbgetentities`` object verbatim (hostile shapes a client must
    #: survive: ``labels`` as a list or a string, a ``mainsnak`` that is no object, an ``id`` that is no QID)
    entity_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def count(self, action: str | None = None, outcome: str | None = None) -> int:
        """Number of logged requests, optionally of one action and/or outcome."""
        return sum(
            1 for r in self.requests if (action is None or r["action"] == action) and (outcome is None or r["outcome"] == outcome)
        )


WIKIDATA_STATE: web.AppKey[WikidataFakeState] = web.AppKey("wikidata_state", WikidataFakeState)
WIKIDATA_GAZETTEER: web.AppKey[Gazetteer] = web.AppKey("wikidata_gazetteer", Gazetteer)


def _error(code: str, info: str, *, status: int = 200, headers: dict[str, str] | None = None, **extra: Any) -> web.Response:
    body = {"error": {"code": code, "info": info, **extra, "*": _DOC_STAR}, "servedby": "mw-fake-sandbox"}
    return web.json_response(body, status=status, headers=headers)


def _langs(entry: GazetteerEntry, languages: set[str] | None) -> list[str]:
    names = set(entry.labels) | set(entry.aliases)
    return sorted(names if languages is None else names & languages)


def _item_statements(qid: str, prop: str, values: tuple[str, ...]) -> list[dict[str, Any]]:
    """Statements of an item-valued property (P31, P131, P17) in the ``wbgetentities`` shape (formatversion 1): a
    ``value`` mainsnak of datatype ``wikibase-item`` whose ``datavalue`` is a ``wikibase-entityid`` (``entity-type``,
    ``numeric-id``, ``id``), rank ``normal``, one statement per value."""
    return [
        {
            "mainsnak": {
                "snaktype": "value",
                "property": prop,
                "datatype": "wikibase-item",
                "datavalue": {
                    "value": {"entity-type": "item", "numeric-id": int(v[1:]), "id": v},
                    "type": "wikibase-entityid",
                },
            },
            "type": "statement",
            "id": f"{qid}${prop.lower()}-{k}",
            "rank": "normal",
        }
        for k, v in enumerate(values)
    ]


def _entity_json(entry: GazetteerEntry, props: set[str], languages: set[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "item", "id": entry.qid}
    if "info" in props:
        out.update({"pageid": int(entry.qid[1:]) % 2_000_000_000, "ns": 0, "title": entry.qid, "lastrevid": 1})
    if "labels" in props:
        out["labels"] = {
            lang: {"language": lang, "value": text}
            for lang, text in entry.labels.items()
            if languages is None or lang in languages
        }
    if "descriptions" in props:
        out["descriptions"] = (
            {"en": {"language": "en", "value": entry.description}}
            if entry.description and (languages is None or "en" in languages)
            else {}
        )
    if "aliases" in props:
        out["aliases"] = {
            lang: [{"language": lang, "value": t} for t in texts]
            for lang, texts in entry.aliases.items()
            if languages is None or lang in languages
        }
    if "claims" in props:
        out["claims"] = {
            "P31": _item_statements(entry.qid, "P31", entry.classes),
            "P625": [
                {
                    "mainsnak": {
                        "snaktype": "value",
                        "property": "P625",
                        "datatype": "globe-coordinate",
                        "datavalue": {
                            "value": {
                                "latitude": entry.lat,
                                "longitude": entry.lon,
                                "altitude": None,
                                "precision": 0.0001,
                                "globe": "http://www.wikidata.org/entity/Q2",
                            },
                            "type": "globecoordinate",
                        },
                    },
                    "type": "statement",
                    "id": f"{entry.qid}$p625",
                    "rank": "normal",
                }
            ],
        }
        # a property with no statement is absent from ``claims``, as the real API answers
        for prop, values in (("P131", entry.located_in), ("P17", entry.country)):
            if values:
                out["claims"][prop] = _item_statements(entry.qid, prop, values)
    if "sitelinks" in props:
        # as many sitelinks as the entry has (the geocoder's most_sitelinks rule counts them): enwiki, then
        # placeholder wikis named by number
        sites = ["enwiki", *(f"x{i}wiki" for i in range(1, entry.sitelinks))][: max(0, entry.sitelinks)]
        out["sitelinks"] = {site: {"site": site, "title": entry.label_en, "badges": []} for site in sites}
    return out


def _search_hit(m: Any, language: str) -> dict[str, Any]:
    e: GazetteerEntry = m.entry
    label = e.labels.get(language) or e.label_en
    label_lang = language if language in e.labels else ("en" if "en" in e.labels else next(iter(e.labels)))
    hit: dict[str, Any] = {
        "id": e.qid,
        "title": e.qid,
        "pageid": int(e.qid[1:]) % 2_000_000_000,
        "repository": "wikidata",
        "url": f"//www.wikidata.org/wiki/{e.qid}",
        "concepturi": f"http://www.wikidata.org/entity/{e.qid}",
        "display": {"label": {"value": label, "language": label_lang}},
        "label": label,
        "match": {"type": m.match_type, "language": m.language, "text": m.text},
    }
    if e.description:
        hit["description"] = e.description
        hit["display"]["description"] = {"value": e.description, "language": "en"}
    if m.match_type == "alias":
        hit["aliases"] = [m.text]
    return hit


async def _api(request: web.Request) -> web.Response:
    state = request.app[WIKIDATA_STATE]
    gaz = request.app[WIKIDATA_GAZETTEER]
    params: dict[str, str] = dict(request.query)
    if request.method == "POST":
        params.update({k: str(v) for k, v in (await request.post()).items()})
    ua = request.headers.get("User-Agent")
    record: dict[str, Any] = {"action": params.get("action", ""), "params": params, "user_agent": ua, "outcome": "ok"}
    state.requests.append(record)

    problem = ua_problem(ua)
    if problem is not None:
        record["outcome"] = "403"
        return web.Response(
            status=403,
            text=f"Please set a user-agent and respect our robot policy https://w.wiki/4wJS. ({problem})\n",
            content_type="text/plain",
        )
    if params.get("format") != "json":
        record["outcome"] = "badformat"
        return _error("badvalue", 'Unrecognized value for parameter "format" (this fake serves only "json").')
    maxlag = params.get("maxlag")
    if maxlag is not None:
        try:
            maxlag_s = int(maxlag)
        except ValueError:
            record["outcome"] = "badinteger"
            return _error("badinteger", f'Invalid value "{maxlag}" for integer parameter "maxlag".')
        if state.lagged_requests != 0 and state.lag_s > maxlag_s:
            if state.lagged_requests > 0:
                state.lagged_requests -= 1
            record["outcome"] = "maxlag"
            lag = round(state.lag_s, 3)
            return _error(
                "maxlag",
                f"Waiting for db-replica-sandbox: {lag} seconds lagged.",
                headers={
                    "X-Database-Lag": str(int(state.lag_s)),
                    **({} if state.retry_after_s is None else {"Retry-After": str(int(state.retry_after_s))}),
                },
                host="db-replica-sandbox",
                lag=lag,
            )
    if state.ratelimited_requests > 0:
        state.ratelimited_requests -= 1
        record["outcome"] = "ratelimited"
        return _error("ratelimited", "You've exceeded your rate limit. Please wait some time and try again.")

    action = params.get("action")
    if action == "wbsearchentities":
        return _search(params, gaz, record)
    if action == "wbgetentities":
        return _getentities(params, gaz, record, state.redirects, state.entity_overrides)
    record["outcome"] = "badvalue"
    return _error("badvalue", f'Unrecognized value for parameter "action": {action}.')


def _search(params: dict[str, str], gaz: Gazetteer, record: dict[str, Any]) -> web.Response:
    text = params.get("search")
    language = params.get("language")
    if not text:
        record["outcome"] = "nosearch"
        return _error("missingparam", 'The "search" parameter must be set.')
    if not language:
        record["outcome"] = "nolanguage"
        return _error("missingparam", 'The "language" parameter must be set.')
    try:
        limit = int(params.get("limit", SEARCH_DEFAULT_LIMIT))
        offset = int(params.get("continue", 0))
    except ValueError:
        record["outcome"] = "badinteger"
        return _error("badinteger", 'Invalid value for integer parameter "limit" or "continue".')
    body: dict[str, Any] = {}
    if limit > SEARCH_MAX_LIMIT:
        body["warnings"] = {"wbsearchentities": {"*": f'"limit" may not be over {SEARCH_MAX_LIMIT} (set to {limit}) for users'}}
    limit = max(1, min(limit, SEARCH_MAX_LIMIT))
    strict = params.get("strictlanguage") is not None
    matches = gaz.search(text, language)
    if strict:
        matches = [m for m in matches if m.language == language or m.match_type == "entityId"]
    page = matches[offset : offset + limit]
    body.update({"searchinfo": {"search": text}, "search": [_search_hit(m, language) for m in page]})
    if offset + limit < len(matches):
        body["search-continue"] = offset + limit
    body["success"] = 1
    return web.json_response(body)


def _getentities(params: dict[str, str], gaz: Gazetteer, record: dict[str, Any],
                 redirects: dict[str, str] | None = None,
                 overrides: dict[str, dict[str, Any]] | None = None) -> web.Response:
    raw_ids = params.get("ids")
    if not raw_ids:
        record["outcome"] = "noids"
        return _error("param-missing", 'Either provide the item "ids" or pairs of "sites" and "titles".')
    ids = [i.strip() for i in raw_ids.split("|") if i.strip()]
    if len(ids) > GETENTITIES_MAX_IDS:
        record["outcome"] = "toomanyvalues"
        return _error(
            "toomanyvalues",
            f'Too many values supplied for parameter "ids". The limit is {GETENTITIES_MAX_IDS}.',
            limit=GETENTITIES_MAX_IDS,
            lowlimit=GETENTITIES_MAX_IDS,
            highlimit=500,
        )
    bad = [i for i in ids if not _QID.match(i.upper())]
    if bad:
        record["outcome"] = "no-such-entity"
        return _error("no-such-entity", f'Could not find an entity with the ID "{bad[0]}".', id=bad[0])
    props = set((params.get("props") or "info|sitelinks|aliases|labels|descriptions|claims|datatype").split("|"))
    languages = set(params["languages"].split("|")) if params.get("languages") else None
    entities: dict[str, Any] = {}
    for qid in ids:
        qid = qid.upper()
        target = (redirects or {}).get(qid) if params.get("redirects", "yes") != "no" else None
        if target is not None and gaz.get(target) is not None:
            entities[qid] = {**_entity_json(gaz.get(target), props, languages), "redirects": {"from": qid, "to": target}}
            continue
        entry = gaz.get(qid)
        entities[qid] = {"id": qid, "missing": ""} if entry is None else _entity_json(entry, props, languages)
        if entry is not None and qid in (overrides or {}):
            entities[qid] = {**entities[qid], **(overrides or {})[qid]}
    return web.json_response({"entities": entities, "success": 1})


def make_app(
    gazetteer: Gazetteer | str | os.PathLike[str],
    *,
    faults: FaultConfig | None = None,
    state: WikidataFakeState | None = None,
) -> web.Application:
    """Build the fake Wikidata Action API application.

    Parameters
    ----------
    gazetteer : Gazetteer or path
        The places it knows, or a JSONL file / release folder to build them from (:func:`load_gazetteer`).
    faults : FaultConfig, optional
        Transport faults to inject (429 + Retry-After, 5xx, timeouts, resets, malformed JSON).
    state : WikidataFakeState, optional
        Behaviour switches and request log (a fresh one by default); reachable as ``app[WIKIDATA_STATE]``.

    Returns
    -------
    aiohttp.web.Application
        Serving ``GET``/``POST`` ``/w/api.php``.
    """
    middlewares = [fault_middleware(faults)] if faults is not None else []
    app = web.Application(middlewares=middlewares)
    app[WIKIDATA_STATE] = state if state is not None else WikidataFakeState()
    app[WIKIDATA_GAZETTEER] = load_gazetteer(gazetteer)
    app.router.add_get(API_PATH, _api)
    app.router.add_post(API_PATH, _api)
    return app
