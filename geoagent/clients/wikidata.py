"""Wikidata Action API client: ``wbsearchentities`` (name -> candidate items) and ``wbgetentities``
(items -> labels, aliases, ``instance of`` P31, coordinates P625, ``located in the administrative territorial
entity`` P131 and ``country`` P17).

Wire format and etiquette follow the Wikidata Action API docs (Wikibase/API and Manual:Maxlag parameter on
mediawiki.org; API:Etiquette):

* every request sends ``format=json`` and ``maxlag=5`` (the recommended value for non-interactive
  clients; Pywikibot's default) and a descriptive ``User-Agent`` with contact details;
* errors arrive as HTTP 200 with an ``error`` object. ``maxlag`` -> wait the ``Retry-After`` header
  (else the reported lag, never less than ``maxlag_min_wait_s``), pause the host for every caller of
  the shared :class:`~geoagent.runtime.http.HttpClient`, and retry (at most ``maxlag_max_retries``
  times); ``ratelimited`` -> exponential backoff and retry; any other code raises
  :class:`WikidataError`;
* ``wbgetentities`` takes at most 50 ids per request, so larger id lists are split into batches of 50;
* requests go one at a time (:data:`DEFAULT_WIKIDATA_POLICY`, concurrency 1), answers are cached
  (:class:`~geoagent.clients.cache.ResponseCache`), error envelopes never are.

Transport failures (429, 5xx, timeouts, resets, malformed JSON) are retried by the HttpClient and
surface as its errors (``RetriesExhausted``, ``PermanentHTTPError``) when they persist.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from geoagent.clients.cache import ResponseCache
from geoagent.runtime.errors import PicklableError
from geoagent.runtime.http import HostPolicy, HttpClient, HttpResponse, host_key
from geoagent.textfmt import label_text

WIKIDATA_API_URL = "https://www.wikidata.org/w/api.php"
#: Maximum ids per ``wbgetentities`` request for a client without the bot flag.
GETENTITIES_MAX_IDS = 50
#: Recommended ``maxlag`` for non-interactive requests, seconds (Manual:Maxlag parameter).
DEFAULT_MAXLAG_S = 5
#: One request at a time (API:Etiquette: "make requests in series"); no hard read limit is documented,
#: so 5 per second is our own conservative ceiling.
DEFAULT_WIKIDATA_POLICY = HostPolicy(rate=5.0, period_s=1.0, concurrency=1, max_attempts=5, timeout_s=60.0)


class WikidataError(PicklableError, RuntimeError):
    """An ``error`` envelope from the API that is not retryable (or whose retries ran out). Picklable (the
    attributes travel, :class:`~geoagent.runtime.errors.PicklableError`).

    Attributes
    ----------
    code : str
        The API error code (``maxlag``, ``ratelimited``, ``toomanyvalues``, ``no-such-entity``, ...).
    info : str
        The API's human-readable explanation.
    """

    def __init__(self, code: str, info: str, url: str) -> None:
        self.code = code
        self.info = info
        self.url = url
        super().__init__(f"Wikidata API error {code!r} from {url}: {info}")


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ``wbsearchentities`` result.

    Attributes
    ----------
    qid : str
        Item id.
    label : str
        Label in the requested language (or the display label).
    description : str
        Description, ``""`` if none.
    match_type : str
        ``label``, ``alias`` or ``entityId``.
    match_text : str
        The label or alias text that matched.
    aliases : tuple of str
        Aliases returned with the hit (usually only the matching one).
    """

    qid: str
    label: str
    description: str = ""
    match_type: str = "label"
    match_text: str = ""
    aliases: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """Label, matched text and aliases (the names this hit is known by)."""
        return tuple(n for n in (self.label, self.match_text, *self.aliases) if n)


@dataclass(frozen=True, slots=True)
class Entity:
    """The fields of one item the geocoder needs.

    Attributes
    ----------
    qid : str
        Item id.
    labels : dict of str to str
        Label by language.
    aliases : dict of str to tuple of str
        Aliases by language.
    description : str
        English description (``""`` if none).
    lat, lon : float or None
        Coordinate (P625) in degrees: the best-ranked statement (``preferred`` over ``normal``;
        ``deprecated`` and ``somevalue``/``novalue`` snaks skipped; only Earth, globe Q2). None if absent.
    classes : tuple of str
        ``instance of`` (P31) values, deprecated statements skipped.
    missing : bool
        True when the API reported the id as missing.
    sitelinks : int or None
        Number of sitelinks (Wikipedia and sister-project pages), when ``props`` asked for ``sitelinks``; None
        when not asked (or the part had another shape than the API's object).
    located_in : tuple of str
        ``located in the administrative territorial entity`` (P131, https://www.wikidata.org/wiki/Property:P131)
        values: the items that contain this one directly (Paris, Texas: Lamar County), best rank first, from every
        non-deprecated statement (a former container, kept at normal rank with an end date, too).
    countries : tuple of str
        ``country`` (P17, https://www.wikidata.org/wiki/Property:P17) values, the same way.
    """

    qid: str
    labels: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    description: str = ""
    lat: float | None = None
    lon: float | None = None
    classes: tuple[str, ...] = ()
    missing: bool = False
    sitelinks: int | None = None
    located_in: tuple[str, ...] = ()
    countries: tuple[str, ...] = ()

    @property
    def has_coordinates(self) -> bool:
        return self.lat is not None and self.lon is not None

    def label(self, language: str = "en") -> str:
        """Label in ``language``, else English, else any, else the QID."""
        return self.labels.get(language) or self.labels.get("en") or next(iter(self.labels.values()), self.qid)

    def names(self) -> tuple[str, ...]:
        """Every label and alias in every language."""
        out = list(self.labels.values())
        for texts in self.aliases.values():
            out.extend(texts)
        return tuple(out)


_EARTH = "http://www.wikidata.org/entity/Q2"
_RANK_ORDER = {"preferred": 0, "normal": 1}


def _best_statements(claims: Any, prop: str) -> list[dict[str, Any]]:
    """Statements of ``prop`` with a value snak, best rank first (deprecated dropped)."""
    if not isinstance(claims, dict):
        return []
    out = []
    for st in claims.get(prop) or []:
        if not isinstance(st, dict) or st.get("rank") not in _RANK_ORDER:
            continue
        snak = st.get("mainsnak")
        if not isinstance(snak, dict) or snak.get("snaktype") != "value" or not isinstance(snak.get("datavalue"), dict):
            continue
        out.append(st)
    out.sort(key=lambda st: _RANK_ORDER[st["rank"]])
    return out


def parse_entity(qid: str, obj: Any) -> Entity:
    """Parse one value of a ``wbgetentities`` ``entities`` object (formatversion 1) into an :class:`Entity`.

    Unknown keys are ignored; a ``missing`` marker (``""`` or ``true``) gives ``missing=True``. Labels, aliases
    and the description are cleaned (:func:`_term`: no control or bidirectional formatting characters; a term
    blank once cleaned is absent).
    Coordinates are taken from the first usable P625 statement (see :class:`Entity`); values that are
    not finite numbers within [-90, 90] x [-180, 180] are skipped. P131 and P17 give the QIDs their non-deprecated
    statements name (:func:`_item_values`). Parts of another shape than the API's (``labels``
    as a list or a string, a term ``value`` that is not text, a ``mainsnak`` that is no object) count as absent;
    an ``id`` that is no QID leaves the requested ``qid``.
    """
    if not isinstance(obj, dict) or "missing" in obj:
        return Entity(qid=qid, missing=True)

    def mapping(key: str) -> dict[str, Any]:  # a part of another shape (a list, a string) counts as absent
        v = obj.get(key)
        return v if isinstance(v, dict) else {}

    def text(v: Any) -> str | None:  # a term's ``value``: non-empty text once cleaned (sec42 #3), else none
        value = v.get("value") if isinstance(v, dict) else None
        return (_term(value) or None) if isinstance(value, str) else None

    labels = {str(lang): t for lang, v in mapping("labels").items() if (t := text(v)) is not None}
    aliases: dict[str, tuple[str, ...]] = {}
    for lang, vs in mapping("aliases").items():
        if isinstance(vs, list):
            texts = tuple(t for v in vs if (t := text(v)) is not None)
            if texts:
                aliases[str(lang)] = texts
    description = text(mapping("descriptions").get("en")) or ""
    lat = lon = None
    for st in _best_statements(obj.get("claims"), "P625"):
        v = st["mainsnak"]["datavalue"].get("value") or {}
        try:
            la, lo = float(v["latitude"]), float(v["longitude"])
        except (KeyError, TypeError, ValueError):
            continue
        if v.get("globe", _EARTH) != _EARTH:
            continue
        if math.isfinite(la) and math.isfinite(lo) and abs(la) <= 90 and abs(lo) <= 180:
            lat, lon = la, lo
            break
    classes = []
    for st in _best_statements(obj.get("claims"), "P31"):
        v = st["mainsnak"]["datavalue"].get("value")
        if isinstance(v, dict) and isinstance(v.get("id"), str):
            classes.append(v["id"])
        elif isinstance(v, dict) and isinstance(v.get("numeric-id"), int):
            classes.append(f"Q{v['numeric-id']}")
    return Entity(
        qid=obj_id if isinstance(obj_id := obj.get("id"), str) and re.fullmatch(r"Q[0-9]+", obj_id) else qid,
        labels=labels,
        aliases=aliases,
        description=description,
        lat=lat,
        lon=lon,
        classes=tuple(dict.fromkeys(classes)),
        sitelinks=len(links) if isinstance(links := obj.get("sitelinks"), dict) else None,
        located_in=_item_values(obj.get("claims"), "P131"),
        countries=_item_values(obj.get("claims"), "P17"),
    )


def _item_values(claims: Any, prop: str) -> tuple[str, ...]:
    """The item ids (QIDs) named by the non-deprecated statements of an item-valued property (P131, P17), best rank
    first, each once: the ``datavalue`` ``value`` of a ``wikibase-entityid``, by its ``id`` or else its positive
    ``numeric-id``; a value of another shape is skipped."""
    out = []
    for st in _best_statements(claims, prop):
        v = st["mainsnak"]["datavalue"].get("value")
        if isinstance(v, dict) and isinstance(v.get("id"), str) and re.fullmatch(r"Q[0-9]+", v["id"]):
            out.append(v["id"])
        elif isinstance(v, dict) and type(v.get("numeric-id")) is int and v["numeric-id"] > 0:
            out.append(f"Q{v['numeric-id']}")
    return tuple(dict.fromkeys(out))


def _term(value: Any) -> str:
    """A label, alias, description or matched text of the API as data (:func:`geoagent.textfmt.label_text`; sec42 #3:
    control and bidirectional formatting characters of an entity's terms reached ``geohint_scored.csv``'s
    ``resolved_label``): those characters dropped, line breaks, tabs and runs of spaces one space (Wikibase itself
    saves terms so, trimmed and with whitespace collapsed); ``""`` for None."""
    return label_text(str(value)) if value is not None else ""


def parse_search_hit(obj: Any) -> SearchHit | None:
    """Parse one element of a ``wbsearchentities`` ``search`` list (None if it has no id). Its texts are cleaned as
    labels (:func:`_term`: no control or bidirectional formatting characters)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        return None
    match = obj.get("match") if isinstance(obj.get("match"), dict) else {}
    label = obj.get("label")
    if not isinstance(label, str):
        disp = ((obj.get("display") or {}).get("label") or {}) if isinstance(obj.get("display"), dict) else {}
        label = str(disp.get("value") or "")
    aliases = obj.get("aliases") if isinstance(obj.get("aliases"), list) else []
    return SearchHit(
        qid=obj["id"],
        label=_term(label),
        description=_term(obj.get("description") or ""),
        match_type=str(match.get("type") or "label"),
        match_text=_term(match.get("text") or ""),
        aliases=tuple(t for a in aliases if isinstance(a, str) and (t := _term(a))),
    )


class WikidataClient:
    """Async client of the Wikidata Action API over a shared :class:`HttpClient`.

    Parameters
    ----------
    http : HttpClient
        The process-wide HTTP client (started); this client sets its host policy on it.
    user_agent : str
        Descriptive User-Agent with contact (URL or e-mail), sent on every request (Wikimedia policy).
    base_url : str
        The ``api.php`` endpoint (default :data:`WIKIDATA_API_URL`; a local fake in tests).
    cache : ResponseCache, optional
        Persistent cache of successful answers.
    maxlag_s : int
        ``maxlag`` sent with every request, seconds (default 5).
    maxlag_max_retries : int
        How many maxlag/ratelimited refusals one call waits out before raising :class:`WikidataError`.
    maxlag_min_wait_s : float
        Floor of the wait after a maxlag error when the server sends no ``Retry-After``, seconds.
        Manual:Maxlag says wait at least 5 s; a ``Retry-After`` header is honoured as sent up to one day
        (:data:`geoagent.runtime.http.RETRY_AFTER_MAX_S`).
    policy : HostPolicy or None
        Rate/concurrency policy installed for the API host (default :data:`DEFAULT_WIKIDATA_POLICY`);
        None keeps whatever policy the HttpClient already has for the host (e.g. from ``[hosts]``).
    sleep : callable
        ``await sleep(seconds)`` used for maxlag waits (``asyncio.sleep``).

    Raises
    ------
    ValueError
        If ``user_agent`` is empty.

    Attributes
    ----------
    maxlag_waits_s : list of float
        Every maxlag/ratelimited wait taken, in seconds (for status and tests).
    requests_sent : int
        API calls that went to the network (cache misses), counting retries after maxlag.
    """

    def __init__(
        self,
        http: HttpClient,
        *,
        user_agent: str,
        base_url: str = WIKIDATA_API_URL,
        cache: ResponseCache | None = None,
        maxlag_s: int = DEFAULT_MAXLAG_S,
        maxlag_max_retries: int = 5,
        maxlag_min_wait_s: float = 5.0,
        policy: HostPolicy | None = DEFAULT_WIKIDATA_POLICY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not user_agent or not user_agent.strip():
            raise ValueError("WikidataClient needs a descriptive user_agent with contact details (Wikimedia UA policy)")
        self.http = http
        self.user_agent = user_agent.strip()
        self.base_url = base_url
        self.cache = cache
        self.maxlag_s = int(maxlag_s)
        self.maxlag_max_retries = int(maxlag_max_retries)
        self.maxlag_min_wait_s = float(maxlag_min_wait_s)
        self.host = host_key(base_url)
        self._sleep = sleep
        self.maxlag_waits_s: list[float] = []
        self.requests_sent = 0
        if policy is not None:  # None: keep the policy the HttpClient already has for this host (config)
            http.set_policy(self.host, policy)

    async def _call(self, params: dict[str, Any], answer: tuple[str, type] | None = None) -> dict[str, Any]:
        """GET the API with ``params`` (+ format, maxlag); handle error envelopes; use the cache.

        ``answer``: the field a 200 answer of this action must carry and its JSON type (``("search", list)``,
        ``("entities", dict)``, as the API documents them). A body without it (``{}``, ``{"search": null}``, a
        plaintext-format ``{"errors": [...]}``) is a failed attempt, retried, and never cached: read as an empty
        answer it made a no-match, hence a scored miss, and the cache kept it for every later run (break33 #3)."""
        full = {**params, "format": "json", "maxlag": self.maxlag_s}
        if self.cache is None:
            return await self._call_uncached(full, answer)
        # the same query asked by several tasks at once is sent once: the others wait for its stored answer
        async with self.cache.flight("GET", self.base_url, full):
            hit = self.cache.get("GET", self.base_url, full)
            if hit is not None:
                cached = hit.json()
                if _answer_problem(cached, answer) is None:
                    return cached
                # a malformed body an earlier version cached: asked again
            return await self._call_uncached(full, answer)

    async def _call_uncached(self, full: dict[str, Any], answer: tuple[str, type] | None) -> dict[str, Any]:
        """:meth:`_call`'s request of ``full`` (its parameters, format and maxlag included) past the cache: sent,
        retried after maxlag and rate-limit refusals, and its answer stored in the cache."""
        refusals = 0

        def _validate(resp: HttpResponse) -> None:
            problem = _answer_problem(resp.json(), answer)
            if problem is not None:
                raise ValueError(problem)

        while True:
            self.requests_sent += 1
            resp: HttpResponse = await self.http.request(
                "GET",
                self.base_url,
                params=full,
                headers={"User-Agent": self.user_agent, "Accept": "application/json"},
                validate=_validate,
            )
            body = resp.json()
            err = body.get("error") if isinstance(body, dict) else None
            if not isinstance(err, dict):
                if self.cache is not None:
                    self.cache.put("GET", self.base_url, full, resp.status, resp.body)
                return body
            code, info = str(err.get("code") or ""), str(err.get("info") or "")
            if code not in ("maxlag", "ratelimited") or refusals >= self.maxlag_max_retries:
                raise WikidataError(code, info, self.base_url)
            refusals += 1
            wait_s = self._wait_after(code, err, resp.headers, refusals)
            self.maxlag_waits_s.append(wait_s)
            self.http.pause_host(self.host, wait_s)  # every caller of this host backs off, not just us
            await self._sleep(wait_s)

    def _wait_after(self, code: str, err: dict[str, Any], headers: dict[str, str], refusals: int) -> float:
        """Seconds to wait after a maxlag or ratelimited refusal (see class docstring); a ``Retry-After`` is read
        as every host's is (:func:`geoagent.runtime.http.parse_retry_after`: delta-seconds or an HTTP-date) and
        cut to the host's ``max_retry_after_s`` (its :class:`~geoagent.runtime.http.HostPolicy` in the HTTP client,
        default 900 s; :data:`geoagent.runtime.http.RETRY_AFTER_MAX_S`, 1 day, without a client) with a warning
        (:func:`geoagent.runtime.http.capped_retry_after`)."""
        from geoagent.runtime.http import capped_retry_after, header_value, parse_retry_after

        http = getattr(self, "http", None)
        cap = http.policy_for(self.host).max_retry_after_s if hasattr(http, "policy_for") else None
        retry_after = capped_retry_after(parse_retry_after(header_value(headers, "Retry-After")), self.host, max_s=cap)
        if code == "maxlag":
            if retry_after is not None:
                return retry_after
            lag = err.get("lag")
            lag_s = float(lag) if isinstance(lag, (int, float)) and math.isfinite(lag) else 0.0
            return max(self.maxlag_min_wait_s, lag_s)
        # ratelimited: exponential backoff from the floor, or Retry-After if the server sent one
        return retry_after if retry_after is not None else self.maxlag_min_wait_s * 2 ** (refusals - 1)

    async def search_entities(self, text: str, *, language: str = "en", limit: int = 10) -> list[SearchHit]:
        """``wbsearchentities``: items whose label or alias matches ``text`` (prefix search), best first.

        Parameters
        ----------
        text : str
            The name to look up (sent as is, at most 250 characters).
        language : str
            Search language (``language`` and ``uselang``).
        limit : int
            Results wanted, 1..50 (the API maximum).

        Returns
        -------
        list of SearchHit
            In the API's order; malformed elements are skipped.

        Raises
        ------
        WikidataError
            On a non-retryable error envelope; HTTP-layer errors propagate.
        """
        text = " ".join(str(text).split())[:250]
        if not text:
            return []
        body = await self._call(
            {
                "action": "wbsearchentities",
                "search": text,
                "language": language,
                "uselang": language,
                "type": "item",
                "limit": max(1, min(int(limit), 50)),
            },
            ("search", list),
        )
        hits = [parse_search_hit(h) for h in body.get("search") or []]
        return [h for h in hits if h is not None]

    async def get_entities(
        self,
        ids: Iterable[str],
        *,
        languages: Sequence[str] | None = None,
        props: Sequence[str] = ("labels", "aliases", "descriptions", "claims"),
    ) -> dict[str, Entity]:
        """``wbgetentities`` for any number of ids, in batches of at most 50 (sequential requests).

        Parameters
        ----------
        ids : iterable of str
            Item ids; duplicates are sent once; order of first appearance is kept in batching.
        languages : sequence of str, optional
            Restrict labels/aliases/descriptions to these languages (None: all).
        props : sequence of str
            ``props`` to request.

        Returns
        -------
        dict of str to Entity
            One entry per requested id (``missing=True`` for ids the API does not know). A merged item
            (redirect) comes back under the id asked for, with ``Entity.qid`` naming the target item.

        Raises
        ------
        WikidataError
            On a non-retryable error envelope (e.g. a malformed id: ``no-such-entity``).
        """
        unique = list(dict.fromkeys(str(i).strip().upper() for i in ids if str(i).strip()))
        out: dict[str, Entity] = {}
        for start in range(0, len(unique), GETENTITIES_MAX_IDS):
            batch = unique[start : start + GETENTITIES_MAX_IDS]
            params: dict[str, Any] = {"action": "wbgetentities", "ids": "|".join(batch), "props": "|".join(props)}
            if languages:
                params["languages"] = "|".join(languages)
            body = await self._call(params, ("entities", dict))
            entities = body.get("entities") if isinstance(body.get("entities"), dict) else {}
            by_source = {}  # a redirected id: under its own key (the API's form) or found by "redirects.from"
            for obj in entities.values():
                red = obj.get("redirects") if isinstance(obj, dict) else None
                if isinstance(red, dict) and isinstance(red.get("from"), str):
                    by_source[red["from"].upper()] = obj
            for qid in batch:
                out[qid] = parse_entity(qid, entities.get(qid) or by_source.get(qid))
        return out

    async def coordinates(self, ids: Iterable[str]) -> dict[str, tuple[float, float] | None]:
        """P625 coordinate ``(lat, lon)`` in degrees per id (None if the item has none or is missing)."""
        ents = await self.get_entities(ids, props=("claims",))
        return {q: ((e.lat, e.lon) if e.has_coordinates else None) for q, e in ents.items()}  # type: ignore[misc]


def _answer_problem(body: Any, answer: tuple[str, type] | None) -> str | None:
    """Why ``body`` is no answer of the action (:meth:`WikidataClient._call`), or None: not a JSON object (a truncated
    body), or, besides an ``error`` envelope (handled by the caller), without the action's ``answer`` field of its
    JSON type."""
    if not isinstance(body, dict):
        return "Wikidata API answer is not a JSON object"
    if answer is None or isinstance(body.get("error"), dict):
        return None
    name, kind = answer
    if not isinstance(body.get(name), kind):
        what = "a list" if kind is list else "an object"
        return f"Wikidata API answer has no {name!r} {what} (keys: {', '.join(sorted(map(str, body))[:8]) or 'none'})"
    return None
