"""The geocoder worker: ``answers`` -> [GeocodeStage] -> ``located`` (GeoHint only).

Input payload (parser, see :mod:`geoagent.geohint.stages`): ``model, request_key, image_id, meta,
parsed`` with ``parsed.city/area/building`` (model text) and ``meta.site``, ``meta.site_lat``,
``meta.site_lon`` (the truth, used only for ``error_km``) and optionally ``meta.ref_qid``.

Output payload: the input payload plus flat fields ``resolved_level`` (``building/area/city/none``),
``resolved_label`` (= ``label``), ``lat``, ``lon``, ``qid``, ``error_km``, ``anchor_qid``,
``anchor_label``, ``geocode_source``, ``geocoder_rules`` (the :data:`~geoagent.geohint.geocode.
GEOCODER_RULES_VERSION` that located it), ``linear``, ``geocode_trace`` (list of lookups) and
``ref_aliases`` (labels and aliases of the reference point ``meta.ref_qid`` from Wikidata, for echo
matching, issue 4 point 4). The message key is the input key (idempotent on redelivery).

Services (:class:`~geoagent.runtime.stage.StageContext`): ``geocoder`` (a ready
:class:`~geoagent.geohint.geocode.Geocoder`), else one is built there from ``http`` and the config's
``[geohint.geocoder]`` table (:class:`GeocoderSettings`) by the first stage that starts (:func:`shared_geocoder`:
one per process, shared by the run's refresh of stored answers and its workers; ``geocoder_refused``: a 403 met by
either stops both); ``sites`` (site id -> object or mapping with ``lat``/``lon``) is a fallback source of the truth;
``state_dir`` holds the default cache file.

Failures: a lookup whose retries are exhausted nacks the answer (retried, dead-lettered after the queue's
``max_attempts``); an endpoint that cannot be reached at all stops the stage after a few such requests in a
row, its answers left queued untouched (:mod:`geoagent.runtime.worker`, "Unreachable hosts";
:meth:`GeocodeStage.unreachable_hint` names the ``[geohint.geocoder]`` key). A stop request cancels lookups
in flight at once (``cancel_on_stop``: free GETs, nothing billed), releasing their answers untouched.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.clients.cache import ResponseCache
from geoagent.clients.nominatim import NOMINATIM_URL, NominatimBudgetExceeded, NominatimClient
from geoagent.clients.wikidata import WIKIDATA_API_URL, WikidataClient, WikidataError
from geoagent.config import expand_home
from geoagent.geohint.geocode import (CANDIDATE_RULES, DEFAULT_ANCHOR_RADIUS_KM, DEFAULT_CANDIDATE_RULE,
                                      GEOCODER_RULES_VERSION, Geocoder, LocatedAnswer, ParsedAnswer)
from geoagent.geohint.reparse import current_payload
from geoagent.qid import is_qid
from geoagent.runtime.http import PermanentHTTPError, host_key
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import BudgetStop, Held, Message, PermanentFailure, Stage, StageContext

class GeocoderCapStop(BudgetStop):
    """The geocoder reached ``[geohint.geocoder] nominatim_max_requests``, its cap on Nominatim requests per process
    (the public service's usage policy forbids bulk geocoding): a budget stop whose fix is no higher USD cap
    (docs audit 33: the summary said "raise [budget] cap_usd" and left the cap's own text out)."""

    fix = ("the geocoder's Nominatim request cap ([geohint.geocoder] nominatim_max_requests, per process) was "
           "reached: re-run the same command to geocode on (up to that many more requests; places already found "
           "come from the cache), or raise the cap for a server of your own")


class GeocoderRefused(Held):
    """Nominatim or Wikidata answered the geocoder with HTTP 403 (a blocked application, or a User-Agent it does not
    accept): every later request would be refused too, and keep breaking the usage policy. Like a model's refused
    key or the crawl's refused Mapillary token, the answer is held untouched (no attempt counted, never
    dead-lettered), the stage stops leasing (:meth:`GeocodeStage.runnable`) and the engine ends the run
    ``authentication failed`` (exit 5) with :meth:`GeocodeStage.auth_lines`; the answers wait, queued, for a re-run
    (geocode38 #2: each was dead-lettered and the requests went on; review38b #5: not a budget stop)."""


#: what to do about a refused geocoder (:class:`GeocoderRefused`)
GEOCODER_REFUSED_FIX = ("check [geohint.geocoder] contact (default: [campaign] contact; it goes into the User-Agent), "
                        "wait until the block is "
                        "lifted or point [geohint.geocoder] nominatim_url / wikidata_url at a server of your own")


#: Default cache file name under the campaign's state folder.
GEOCODE_CACHE_FILE = "geocode_cache.sqlite"


@dataclass(frozen=True, slots=True)
class GeocoderSettings:
    """The ``[geohint.geocoder]`` table of a campaign config.

    Attributes
    ----------
    contact : str or None
        Contact e-mail or URL for the User-Agents (Wikimedia and OSMF policies); defaults to
        ``[campaign] contact``. Required.
    wikidata_url : str
        Wikidata ``api.php`` endpoint.
    nominatim_url : str or None
        Nominatim root; empty or None disables the Nominatim fallback.
    anchor_radius_km : float
        Anchor radius in km (:data:`~geoagent.geohint.geocode.DEFAULT_ANCHOR_RADIUS_KM`).
    candidate_rule : str
        Which of several exact matches within the radius is taken: ``"nearest"`` (default: nearest the anchor, and
        none for a building whose matches lie 1 km or more apart), ``"first"`` (search order; the default before
        session 35) or ``"most_sitelinks"`` (the release's rule; with ``anchor_radius_km = 60`` as the release
        geocodes), :data:`~geoagent.geohint.geocode.CANDIDATE_RULES`.
    language : str
        Search language.
    cache_path : str or None
        SQLite response cache (a leading ``~`` is the home folder); default ``<state_dir>/geocode_cache.sqlite``
        (no cache without a state dir).
    cache_ttl_s : float or None
        Cache entry lifetime in seconds (None: forever).
    nominatim_max_requests : int or None
        Cap on Nominatim network requests per process (no bulk geocoding).
    ref_aliases : bool
        Whether to fetch the reference point's Wikidata labels and aliases into ``ref_aliases``.
    """

    contact: str | None = None
    wikidata_url: str = WIKIDATA_API_URL
    nominatim_url: str | None = NOMINATIM_URL
    anchor_radius_km: float = DEFAULT_ANCHOR_RADIUS_KM
    candidate_rule: str = DEFAULT_CANDIDATE_RULE
    language: str = "en"
    cache_path: str | None = None
    cache_ttl_s: float | None = None
    nominatim_max_requests: int | None = 1000
    ref_aliases: bool = True

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, where: str = "[geohint.geocoder]") -> GeocoderSettings:
        """Build from a plain table; unknown keys raise ``ValueError`` naming the key and ``where``."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            import difflib

            def hint(key: str) -> str:
                close = difflib.get_close_matches(str(key), sorted(names), n=1, cutoff=0.6)
                return f" (did you mean {close[0]!r}?)" if close else ""

            listed = ", ".join(f"{k!r}{hint(k)}" for k in unknown)
            raise ValueError(f"{where}: unknown key(s) {listed}; expected some of {sorted(names)}")
        s = cls(**dict(raw))
        problem = s._problem()
        if problem:
            key, expected = problem
            shown = "a string" if key.endswith("_url") else repr(getattr(s, key))  # a URL may carry a key
            raise ValueError(f"{where}.{key}: expected {expected}, got {shown}")
        return s

    def _problem(self) -> tuple[str, str] | None:
        """The first key whose value has the wrong type or range, with what was expected; None when all fit.

        Checked at load, before any model call: a value of the wrong type used to pass the dry run and fail
        in the geocoder, after the model calls of every answer were paid (e.g. ``language = 3``).
        """
        from geoagent.config import url_problem

        def number(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0

        def text(v: Any) -> bool:
            return isinstance(v, str) and bool(v.strip())

        where_key = "this geocoder takes no key: point it at an endpoint that needs none, or at a local proxy"
        if not text(self.wikidata_url):
            return "wikidata_url", "an http(s) URL such as 'https://www.wikidata.org/w/api.php'"
        problem = url_problem(self.wikidata_url, example=WIKIDATA_API_URL, where_key=where_key)
        if problem:
            return "wikidata_url", problem
        if self.nominatim_url is not None and not isinstance(self.nominatim_url, str):
            return "nominatim_url", f"an http(s) URL such as {NOMINATIM_URL!r}, or \"\" for none"
        if self.nominatim_url:
            problem = url_problem(self.nominatim_url, example=NOMINATIM_URL, where_key=where_key)
            if problem:
                return "nominatim_url", problem
        if not number(self.anchor_radius_km):
            return "anchor_radius_km", "a positive number of km"
        if self.candidate_rule not in CANDIDATE_RULES:
            return "candidate_rule", f"one of {', '.join(map(repr, CANDIDATE_RULES))}"
        if not text(self.language):
            return "language", "a language code such as 'en'"
        if self.contact is not None and not isinstance(self.contact, str):
            return "contact", "an e-mail address or URL (text)"
        if self.cache_path is not None and not text(self.cache_path):
            return "cache_path", "a file path (text)"
        if self.cache_path is not None:
            try:
                expand_home(self.cache_path)  # a path naming an environment variable is refused, as [paths]
            except ValueError as exc:
                return "cache_path", str(exc)
        if self.cache_ttl_s is not None and not number(self.cache_ttl_s):
            return "cache_ttl_s", "a positive number of seconds (leave it out: entries never expire)"
        n = self.nominatim_max_requests
        if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and n >= 0):
            return "nominatim_max_requests", "an integer >= 0 (0: answers from the cache only)"
        if not isinstance(self.ref_aliases, bool):
            return "ref_aliases", "true or false"
        return None

    @classmethod
    def from_config(cls, cfg: Any) -> GeocoderSettings:
        """Read ``[geohint.geocoder]`` from a campaign config (dict section or registered model), falling
        back to ``[campaign] contact`` for the contact. Absent table: defaults."""
        section: Any = {}
        if cfg is not None and hasattr(cfg, "section"):
            section = cfg.section("geohint")
        elif isinstance(cfg, Mapping):
            section = cfg.get("geohint", {})
        table = section.get("geocoder") if isinstance(section, Mapping) else getattr(section, "geocoder", None)
        if table is not None and not isinstance(table, Mapping):
            table = table.model_dump() if hasattr(table, "model_dump") else vars(table)
        settings = cls.from_mapping(table or {})
        if not settings.contact:
            campaign = getattr(cfg, "campaign", None)
            contact = getattr(campaign, "contact", None) if campaign is not None else None
            if contact:
                settings = cls(**{**{f.name: getattr(settings, f.name) for f in fields(cls)}, "contact": contact})
        return settings


def build_geocoder(
    http: Any,
    settings: GeocoderSettings,
    *,
    state_dir: str | os.PathLike[str] | None = None,
    configured_hosts: Iterable[str] = (),
) -> Geocoder:
    """A :class:`Geocoder` with Wikidata (and Nominatim) clients on the shared ``http`` client.

    Each client installs its policy-abiding default host policy (Wikidata: serial; Nominatim: 1 request
    per second) unless the API's host is in ``configured_hosts`` (``"hostname:port"`` or ``"hostname"``,
    e.g. the config's ``[hosts]`` keys), whose policy the HttpClient already applies.

    Raises
    ------
    ValueError
        If no contact is configured (both APIs require an identifying User-Agent).
    """
    if not settings.contact:
        raise ValueError(
            "geocoder needs a contact (e-mail or URL) for its User-Agent: set [geohint.geocoder] contact "
            "or [campaign] contact"
        )
    # a leading "~" is the home folder, as in a shell (taken literally it made a folder named "~" here)
    cache_path = (expand_home(settings.cache_path) if settings.cache_path
                  else str(Path(state_dir) / GEOCODE_CACHE_FILE) if state_dir else None)
    cache = ResponseCache(cache_path, ttl_s=settings.cache_ttl_s) if cache_path else None
    configured = set(configured_hosts)

    def keep(url: str) -> bool:
        key = host_key(url)
        from geoagent.runtime.http import host_name

        return key in configured or host_name(key) in configured

    ua = f"geoagent/0.1 (+{settings.contact}) GeoContext GeoHint geocoder"
    wd_kw: dict[str, Any] = {"policy": None} if keep(settings.wikidata_url) else {}
    wikidata = WikidataClient(http, user_agent=ua, base_url=settings.wikidata_url, cache=cache, **wd_kw)
    nominatim = None
    if settings.nominatim_url:
        nm_kw: dict[str, Any] = {"policy": None} if keep(settings.nominatim_url) else {}
        nominatim = NominatimClient(
            http,
            contact=settings.contact,
            base_url=settings.nominatim_url,
            cache=cache,
            max_requests=settings.nominatim_max_requests,
            **nm_kw,
        )
    return Geocoder(wikidata, nominatim, anchor_radius_km=settings.anchor_radius_km, language=settings.language,
                    candidate_rule=settings.candidate_rule)


def shared_geocoder(ctx: StageContext, settings: GeocoderSettings | None = None) -> Geocoder:
    """The process's one geocoder: ``ctx.services[`` :data:`~geoagent.constants.SERVICE_GEOCODER` ``]``, built there
    at the first call (:func:`build_geocoder` from ``settings``, default the context's config ``[geohint.geocoder]``;
    the context's ``http`` client, ``state_dir`` and the config's ``[hosts]``).

    One geocoder per process means one ``[geohint.geocoder] nominatim_max_requests`` cap (documented per process:
    the run's refresh of stored answers and its workers count against the same one) and one geocode cache, whose
    closing is registered with the services (:data:`~geoagent.constants.SERVICE_CLOSE_AT_END`, called by
    :func:`geoagent.engine.open_services` at its end) (review41a #1).

    Raises
    ------
    ValueError
        No contact configured (:func:`build_geocoder`), or a ``[geohint.geocoder]`` value out of range.
    """
    got = ctx.services.get(C.SERVICE_GEOCODER)
    if got is not None:
        return got
    cfg = ctx.services.get("config")
    if settings is None:
        settings = GeocoderSettings.from_config(cfg)
    hosts = list(getattr(cfg, "hosts", None) or {}) if cfg is not None and not isinstance(cfg, Mapping) else []
    geocoder = build_geocoder(ctx.get("http"), settings, state_dir=ctx.services.get("state_dir"),
                              configured_hosts=hosts)
    ctx.services[C.SERVICE_GEOCODER] = geocoder
    cache = getattr(geocoder.wikidata, "cache", None)
    if cache is not None:
        ctx.services.setdefault(C.SERVICE_CLOSE_AT_END, []).append(cache.close)
    return geocoder


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class GeocodeStage(Stage):
    """``answers`` -> ``located``: geocode each parsed answer (seed 000 Sec. 4.2-4.3, Appendix B).

    Parameters
    ----------
    geocoder : Geocoder, optional
        Use this geocoder; otherwise one comes from the context (see module docstring) at :meth:`start`.
    settings : GeocoderSettings, optional
        Settings used when building the geocoder (default: from the context's ``config``).
    sites : mapping, optional
        Site id -> object/mapping with ``lat``/``lon``: truth for payloads without ``meta.site_lat``.
    """

    name = C.STAGE_GEOCODER
    input_edge = C.EDGE_ANSWERS
    output_edge = C.EDGE_LOCATED
    concurrency = 4
    #: a stop cancels lookups in flight at once (free GETs; the response cache is written synchronously, so a
    #: cancelled task leaves nothing half done and is released untouched): Ctrl-C does not wait on a stalled host
    cancel_on_stop = True

    def __init__(
        self,
        geocoder: Geocoder | None = None,
        settings: GeocoderSettings | None = None,
        *,
        sites: Mapping[str, Any] | None = None,
    ) -> None:
        self.geocoder = geocoder
        self.settings = settings
        self.sites = sites
        self._aliases: dict[str, list[str]] = {}
        #: why the geocoder's API refused it (HTTP 403), once it did: the stage stops (:class:`GeocoderRefused`)
        self.refused: str | None = None
        #: the geocoder is the process's (:func:`shared_geocoder`): a refusal is the process's too
        self._shared = False

    def runnable(self) -> bool:
        """False once Nominatim or Wikidata refused the geocoder (HTTP 403): the runner stops leasing."""
        return self.refused is None

    def auth_lines(self) -> list[str]:
        """One line when the geocoder's API refused it (the engine ends the run ``authentication failed``, exit 5),
        else []."""
        return [] if self.refused is None else [f"the geocoder was refused: {self.refused}; {GEOCODER_REFUSED_FIX}"]

    async def start(self, ctx: StageContext) -> None:
        """Take the process's geocoder (``ctx.services`` :data:`~geoagent.constants.SERVICE_GEOCODER`), building it
        there at the first start (:func:`shared_geocoder`), unless this stage was given one; a refusal the process's
        geocoder met before (the run's refresh of stored rows) stops this stage too."""
        if self.sites is None:
            self.sites = ctx.services.get("sites")
        if self.geocoder is not None and not self._shared:
            return
        cfg = ctx.services.get("config")
        if self.settings is None:  # also for a geocoder of the context: ref_aliases, the unreachable hint read it
            self.settings = GeocoderSettings.from_config(cfg)
        # one geocoder per process, whoever starts first (review41a #1: the refresh's own was a second Nominatim
        # request cap, and a second geocode cache left open)
        self.geocoder, self._shared = shared_geocoder(ctx, self.settings), True
        self.refused = self.refused or ctx.services.get(C.SERVICE_GEOCODER_REFUSED)

    def unreachable_hint(self, host: str) -> str | None:
        """The ``[geohint.geocoder]`` key whose URL names ``host`` (runner's unreachable-host breaker)."""
        s = self.settings or GeocoderSettings()
        wd = getattr(getattr(self.geocoder, "wikidata", None), "base_url", None) or s.wikidata_url
        nm = getattr(getattr(self.geocoder, "nominatim", None), "base_url", None) or s.nominatim_url
        keys = [k for k, url in (("wikidata_url", wd), ("nominatim_url", nm)) if url and host_key(url) == host]
        return f"[geohint.geocoder] {' / '.join(keys) or 'wikidata_url / nominatim_url'}"

    def _truth(self, task: Task) -> tuple[float, float]:
        payload = task.payload
        meta = payload.get("meta") if isinstance(payload.get("meta"), Mapping) else {}
        for src in (meta, payload):
            lat, lon = _num(src.get("site_lat")), _num(src.get("site_lon"))
            if lat is not None and lon is not None:
                return lat, lon
        site = meta.get("site") or payload.get("site")
        if site is not None and self.sites is not None and site in self.sites:
            s = self.sites[site]
            lat = _num(s.get("lat") if isinstance(s, Mapping) else getattr(s, "lat", None))
            lon = _num(s.get("lon") if isinstance(s, Mapping) else getattr(s, "lon", None))
            if lat is not None and lon is not None:
                return lat, lon
        raise PermanentFailure(
            f"answer {task.key}: no site coordinate (meta.site_lat/meta.site_lon, or a known meta.site), "
            "so error_km cannot be computed"
        )

    async def _ref_aliases(self, ref_qid: Any) -> list[str]:
        if not is_qid(ref_qid):
            return []
        if ref_qid not in self._aliases:
            assert self.geocoder is not None
            ents = await self.geocoder.wikidata.get_entities([ref_qid], props=("labels", "aliases"))
            ent = ents.get(ref_qid)
            self._aliases[ref_qid] = [] if ent is None or ent.missing else list(dict.fromkeys(ent.names()))
        return self._aliases[ref_qid]

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        """Geocode one answer and return it on ``located`` under the same key. An answer queued by an earlier
        answer parser (``parser_version`` absent or lower) is parsed again from its text first
        (:func:`geoagent.geohint.reparse.current_payload`), and goes on with the new parse.

        Raises
        ------
        PermanentFailure
            No truth coordinate, or a non-retryable Wikidata error (bad request).
        BudgetStop
            The Nominatim request cap was reached (the usage policy forbids bulk use).
        GeocoderRefused
            Nominatim or Wikidata refused the geocoder with HTTP 403 (now or earlier in this process): the task is
            held untouched.
        """
        if self.geocoder is None:
            await self.start(ctx)
        if self.refused is None and self._shared:  # another stage on the process's geocoder was refused meanwhile
            self.refused = ctx.services.get(C.SERVICE_GEOCODER_REFUSED)
        if self.refused is not None:
            raise GeocoderRefused(self.refused)
        assert self.geocoder is not None
        true_lat, true_lon = self._truth(task)
        # an answer queued by an earlier answer parser is geocoded as the current one reads it (fixreparse41)
        payload = await current_payload(task.payload, ctx, geocoded=False)
        answer = ParsedAnswer.from_payload(payload)
        meta = payload.get("meta") if isinstance(payload.get("meta"), Mapping) else {}
        try:
            located = await self.geocoder.locate(answer, true_lat=true_lat, true_lon=true_lon)
            use_aliases = self.settings.ref_aliases if self.settings is not None else True
            aliases = await self._ref_aliases(meta.get("ref_qid")) if use_aliases else []
        except NominatimBudgetExceeded as exc:
            raise GeocoderCapStop(str(exc)) from None
        except PermanentHTTPError as exc:
            if exc.status == 403:  # the API refuses this application: stop, the answer held untouched
                body = exc.body_excerpt.strip()
                said = "" if not body or body.startswith("<") else f": {body[:160]}"  # an HTML page says nothing
                self.refused = self.refused or (f"HTTP 403 from {host_key(exc.url)} (the application is blocked, or "
                                                f"its User-Agent is not accepted){said}")
                if self._shared:  # every stage on the process's geocoder stops (review41a #1)
                    ctx.services.setdefault(C.SERVICE_GEOCODER_REFUSED, self.refused)
                raise GeocoderRefused(self.refused) from None
            raise
        except WikidataError as exc:
            if exc.code in ("maxlag", "ratelimited"):
                raise  # transient: nack and retry later
            raise PermanentFailure(f"answer {task.key}: {exc}") from None
        return [(task.key, located_payload(payload, located, aliases))]


def located_payload(answer_payload: Mapping[str, Any], located: LocatedAnswer, ref_aliases: list[str] | None = None) -> dict[str, Any]:
    """The ``located`` message: the answer payload plus the geocoder's flat fields (module docstring)."""
    out = dict(answer_payload)
    out.update(
        {
            "resolved_level": located.resolved_level,
            "resolved_label": located.label,
            "label": located.label,
            "lat": located.lat,
            "lon": located.lon,
            "qid": located.qid,
            "error_km": located.error_km,
            "anchor_qid": located.anchor_qid,
            "anchor_label": located.anchor_label,
            "geocode_source": located.source,
            # the rules that located it: a campaign resumed across a rules change keeps each answer's (newuser41 #1)
            "geocoder_rules": GEOCODER_RULES_VERSION,
            "linear": located.linear,
            "geocode_trace": [
                {k: getattr(t, k) for k in ("level", "query", "source", "outcome", "qid", "label", "anchor_distance_km")}
                for t in located.trace
            ],
            "ref_aliases": list(ref_aliases or []),
        }
    )
    return out
