"""The ``[crawl]`` section of a campaign config: thresholds, type QIDs, endpoints and API usage policies.

Every number that the paper fixes (seed 000 = the GeoContext paper, Zhang and Wang 2026, Sec. 3.1-3.3) is a
default here and can be changed in the config (``geoagent/configs/example.toml`` lists every key). Public
APIs' usage policies are encoded as :class:`~geoagent.runtime.http.HostPolicy` defaults; their sources are
the APIs' own pages (and each client module in ``geoagent/clients/``):

* Overpass: https://dev.overpass-api.de/overpass-doc/en/preface/commons.html (slots per IP, daily volume);
* Wikidata Query Service: https://www.mediawiki.org/wiki/Wikidata_Query_Service/User_Manual#Query_limits;
* Wikimedia pageviews (AQS REST API): https://wikimedia.org/api/rest_v1/ and
  https://api.wikimedia.org/wiki/Documentation/Rate_limits;
* Mapillary API v4: https://www.mapillary.com/developer/api-documentation (rate limits);
* Wikimedia User-Agent policy: https://meta.wikimedia.org/wiki/User-Agent_policy.

Example::

    [crawl]
    contact = "mailto:me@example.org"
    seed = 0

    [[crawl.cities]]
    city = "Lisbon"
    country = "PT"
    continent = "EU"
    lat = 38.71
    lon = -9.14

    [crawl.screener]
    l_min_km = 0.32

Load with :func:`load_crawl_settings` (a mapping already parsed from TOML); errors name the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from geoagent import constants as C
from geoagent.config import ConfigProblem, check_model_id, expand_home
from geoagent.qid import is_qid
from geoagent.runtime.http import HostPolicy


class CrawlConfigError(ValueError):
    """The ``[crawl]`` config section is invalid; the message names the key and what was expected."""


class _Section(BaseModel):
    # strict, as the rest of the config (geoagent.config): a quoted "6" is not a number, "true" not a boolean;
    # the tuple fields take TOML arrays (lists) with strict=False on each, their items still checked
    # inf is refused as nan is (break34 crawl #1: a radius of inf sent Mapillary ~2,000 requests a second, the
    # box splitting without end)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


#: the largest radius (km) a crawl setting takes: a city disc or search radius past it would be a region, not a
#: city (the paper's are 6 and 3 km, Sec. 3.1-3.3), and a box that large costs thousands of API requests
MAX_RADIUS_KM = 50.0


#: The 16 photographable types of Sec. 3.2.1 with their Wikidata QIDs (class items; instances of
#: subclasses count too, via ``wdt:P31/wdt:P279*``). Editable in config. Source of the QIDs: the release's
#: ``scripts/00_select_sites.py`` (``TYPES``); its comment calls Q200334 "clock tower", Wikidata labels it
#: "bell tower". (Q1068842, once listed here as "clock tower", is "footbridge", a subclass of bridge.)
DEFAULT_SITE_TYPES: dict[str, str] = {
    "museum": "Q33506",
    "park": "Q22698",
    "church building": "Q16970",
    "theatre building": "Q24354",
    "marketplace": "Q330284",
    "bridge": "Q12280",
    "square": "Q174782",
    "library": "Q7075",
    "castle": "Q23413",
    "botanical garden": "Q167346",
    "monument": "Q4989906",
    "railway station": "Q55488",
    "university": "Q3918",
    "stadium": "Q483110",
    "fountain": "Q483453",
    "bell tower": "Q200334",
}

#: Japanese street-numbering blocks ("X-chome"): kanji or digit numerals followed by 丁目, or the
#: romanised "N-chome"/"N-chōme"/"Nchome" forms (Sec. 3.1: 573 of 800 Shibuya nodes are such blocks).
CHOME_PATTERNS: tuple[str, ...] = (
    r"[0-9０-９一二三四五六七八九十百〇]+\s*丁目",
    r"(?i)\b[0-9]+\s*-?\s*ch[oōô]u?me\b",
)

#: Mexico's housing developments, excluded like the X-chome blocks by the release's L_district measurement
#: (``analysis/district_scale.py``, ``_ADDRESS_UNIT``: names beginning "Unidad Habitacional" or
#: "Fraccionamiento"; they are the nodes its Mexico City sites lose in ``district_scale.csv``).
MEXICAN_UNIT_PATTERNS: tuple[str, ...] = (
    r"^Unidad Habitacional\b",
    r"^Fraccionamiento\b",
)

#: Other numbered addressing units, excluded by default (configurable): a bare number, "Block 12",
#: "Sector 5", "Ward 3", "Zone 2", "Quadra 7", "Lot 4", "Phường 12" style names.
DEFAULT_EXTRA_UNIT_PATTERNS: tuple[str, ...] = (
    r"^\s*[0-9]+\s*$",
    r"(?i)^\s*(block|sector|ward|zone|quadra|lot|phường|phuong)\s*[0-9]+[a-z]?\s*$",
)


#: The release's own addressing-unit rule (``analysis/district_scale.py``, ``_ADDRESS_UNIT``): a name ending in a
#: kanji or digit numeral and 丁目, or beginning "Unidad Habitacional" or "Fraccionamiento". Narrower than the
#: default (:data:`CHOME_PATTERNS`, :data:`MEXICAN_UNIT_PATTERNS`, :data:`DEFAULT_EXTRA_UNIT_PATTERNS`; the paper,
#: Sec. 3.1, requires addressing units to be excluded and lists none): set ``addressing_unit_patterns`` to these to
#: screen exactly as the release did (docs/judgement-calls.md, "Crawl judgement calls").
RELEASE_UNIT_PATTERNS: tuple[str, ...] = (
    r"[一二三四五六七八九十\d]+丁目$",
    r"^Unidad Habitacional",
    r"^Fraccionamiento",
)


class ScreenerSettings(_Section):
    """City screener (Sec. 3.1, 3.2.1)."""

    place_values: tuple[str, ...] = Field(("neighbourhood", "suburb", "quarter"), strict=False)
    radius_km: float = Field(6.0, gt=0, le=MAX_RADIUS_KM)
    min_points: int = Field(3, ge=2)
    addressing_unit_patterns: tuple[str, ...] = Field(CHOME_PATTERNS + MEXICAN_UNIT_PATTERNS + DEFAULT_EXTRA_UNIT_PATTERNS,
                                                      strict=False)
    coverage_radius_km: float = Field(1.0, gt=0, le=MAX_RADIUS_KM)
    min_coverage: int = Field(30, ge=0)
    l_min_km: float = Field(0.32, ge=0, le=MAX_RADIUS_KM)
    l_max_km: float = Field(0.65, gt=0, le=MAX_RADIUS_KM)
    overpass_timeout_s: int = Field(25, gt=0)

    @field_validator("place_values")
    @classmethod
    def _some_place_values(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # none: the screener finds no neighbourhood point, so every city is refused after its requests were sent and
        # the crawl ended "complete" with 0 sites (crawl40 #7)
        if not v:
            raise ConfigProblem("expected at least one OSM place value (the default: neighbourhood, suburb, quarter); "
                                "with none no city has a neighbourhood point and every city is refused")
        return v

    @field_validator("addressing_unit_patterns")
    @classmethod
    def _compile(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for p in v:
            try:
                re.compile(p)
            except re.error as e:
                raise ConfigProblem(f"bad regular expression {p!r}: {e}") from None
        return v

    @model_validator(mode="after")
    def _order(self) -> "ScreenerSettings":
        if self.l_min_km > self.l_max_km:
            raise ConfigProblem(f"l_min_km ({self.l_min_km}) must not exceed l_max_km ({self.l_max_km})")
        return self


class SamplerSettings(_Section):
    """Site sampler (Sec. 3.2.1)."""

    radius_km: float = Field(3.0, gt=0, le=MAX_RADIUS_KM)
    site_types: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_SITE_TYPES))
    max_sitelinks: int = Field(60, ge=0)
    min_spacing_m: float = Field(250.0, ge=0, le=MAX_RADIUS_KM * 1000)
    coverage_radius_m: float = Field(150.0, gt=0, le=MAX_RADIUS_KM * 1000)
    min_coverage: int = Field(8, ge=0)
    sites_per_city: int = Field(3, ge=1)
    page_size: int = Field(1000, ge=10)
    #: a candidate query that times out (WDQS 60 s deadline) is split into quadrants at most this many
    #: times over (0: no split; :meth:`geoagent.clients.wdqs.WdqsClient.site_candidates`)
    wdqs_split_depth: int = Field(4, ge=0, le=10)

    @field_validator("site_types")
    @classmethod
    def _qids(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:  # no candidate type: every city gets 0 sites after its requests (crawl40 #7)
            raise ConfigProblem("expected at least one site type (name = Wikidata class QID, e.g. museum = "
                                "\"Q33506\"; the default lists the paper's 16): with none no city gets a site")
        for name, qid in v.items():
            if not is_qid(qid):
                raise ConfigProblem(f"site type {name!r}: {qid!r} is not a Wikidata item id like Q33506")
        return v


#: the image thumbnail fields of the Mapillary Graph API v4 (api-notes section 6, the official SDK's field list):
#: ``[crawl.fetcher] thumb_field`` must be one of them
MAPILLARY_THUMB_FIELDS: tuple[str, ...] = ("thumb_256_url", "thumb_1024_url", "thumb_2048_url", "thumb_original_url")


class FetcherSettings(_Section):
    """Imagery fetcher (Sec. 3.2)."""

    radius_m: float = Field(150.0, gt=0, le=MAX_RADIUS_KM * 1000)
    min_separation_m: float = Field(40.0, ge=0, le=MAX_RADIUS_KM * 1000)
    max_images_per_site: int = Field(8, ge=1)
    min_brightness: float = Field(90.0, ge=0, le=255)
    grey_size_px: int = Field(32, ge=4)
    thumb_field: str = "thumb_1024_url"
    dedupe_hamming_max: int = Field(4, ge=0, le=64)
    #: cap on one thumbnail download's body, bytes; None (default): :data:`geoagent.clients.mapillary.THUMB_MAX_BYTES`
    #: of ``thumb_field`` (8 MiB for ``thumb_1024_url``); a larger body rejects that image only (:attr:`thumb_max_bytes`)
    max_thumb_bytes: int | None = Field(None, ge=1)
    #: only images captured on or after this day (ISO date, ``YYYY-MM-DD``, UTC): the benchmark regenerated on newer
    #: imagery (seed 000 Sec. 3, Fig. 1); sent to Mapillary's image search as ``start_captured_at`` and checked
    #: again on each image's ``captured_at`` (:func:`geoagent.crawl.fetcher.fetch_site_images`); None: any date
    captured_after: str | None = None

    @field_validator("captured_after", mode="before")
    @classmethod
    def _toml_date(cls, v: Any) -> Any:
        import datetime

        # TOML's own date (captured_after = 2024-01-01, unquoted) is read as a date: the same day
        if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime):
            return v.isoformat()
        return v

    @field_validator("captured_after")
    @classmethod
    def _iso_day(cls, v: str | None) -> str | None:
        import datetime

        if v is None:
            return v
        try:
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", v):
                raise ValueError
            datetime.date.fromisoformat(v)
        except ValueError:
            raise ConfigProblem("expected a date as YYYY-MM-DD (e.g. \"2024-01-01\"): images captured on or after it "
                                "are used") from None
        return v

    @property
    def captured_after_ms(self) -> int | None:
        """``captured_after`` as epoch milliseconds (its day's start, UTC), or None."""
        import datetime

        if self.captured_after is None:
            return None
        day = datetime.date.fromisoformat(self.captured_after)
        return int(datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc).timestamp() * 1000)

    @property
    def thumb_max_bytes(self) -> int:
        """The cap in force on one thumbnail download's body, bytes: ``max_thumb_bytes`` when set, else the
        default of ``thumb_field`` (:data:`geoagent.clients.mapillary.THUMB_MAX_BYTES`)."""
        from geoagent.clients.mapillary import THUMB_MAX_BYTES

        return self.max_thumb_bytes if self.max_thumb_bytes is not None else THUMB_MAX_BYTES[self.thumb_field]

    @field_validator("thumb_field")
    @classmethod
    def _thumbnail_field(cls, v: str) -> str:
        # sent to the Graph API as a field name: another name is refused there (400 on every image), and a field
        # that is not a thumbnail URL (e.g. compass_angle) leaves every image without a thumbnail, so no site gets one
        if v not in MAPILLARY_THUMB_FIELDS:
            raise ConfigProblem(f"expected one of the Mapillary thumbnail fields {', '.join(MAPILLARY_THUMB_FIELDS)}")
        return v


class ImageAuditSettings(_Section):
    """Vision-model image audit (Sec. 3.2, App. A.4). ``model`` must not be an evaluated model."""

    provider: str = "simulated"
    model: str = "sim-vision-auditor"
    max_output_tokens: int = Field(400, ge=16)
    temperature: float = Field(0.0, ge=0.0, le=2.0)  # as [[models]] temperature (config38 #4)
    #: optional CSV of human keep/exclude verdicts (columns image, human_verdict[, human_reason, ...])
    human_verdicts: str | None = None

    _model_id = field_validator("model")(check_model_id)

    @field_validator("human_verdicts")
    @classmethod
    def _home(cls, v: str | None) -> str | None:
        return expand_home(v)  # a leading "~" is the home folder, as in [paths]


#: the farthest distance (km) any band of the benchmark reaches: the context ladders' 3-6 km band (seed 000 Sec. 3.3)
#: and GeoVerify's 3-6 km decoy band (Sec. 5.2), both drawn from the referenceability candidates: the least
#: ``[crawl.referenceability] radius_km`` takes (crawl40 #5)
FARTHEST_BAND_KM = max(C.LADDER_BANDS_KM[-1][1], C.GEOVERIFY_DECOY_BANDS_KM[-1][1])


def _band_km(band: tuple[float, float]) -> str:
    """``(3.0, 6.0)`` -> ``"3-6 km"``."""
    return f"{band[0]:g}-{band[1]:g} km"


class ReferenceabilitySettings(_Section):
    """Text-only referenceability auditor (Sec. 3.3, App. A.3)."""

    #: candidates within this radius of a site; at least :data:`FARTHEST_BAND_KM` (a smaller radius empties the
    #: farthest ladder and decoy bands), and more only lists and rates candidates no band uses (a load warning)
    radius_km: float = Field(6.0, gt=0, le=MAX_RADIUS_KM)

    @field_validator("radius_km")
    @classmethod
    def _reaches_every_band(cls, v: float) -> float:
        if v < FARTHEST_BAND_KM:  # at 2 km every ladder lost its 3-6 km band and GeoVerify's 3-6 km band had 0 trials
            raise ConfigProblem(
                f"expected at least {FARTHEST_BAND_KM:g} km, got {v:g}: the context ladders' farthest band "
                f"({_band_km(C.LADDER_BANDS_KM[-1])}, seed 000 Sec. 3.3) and GeoVerify's farthest decoy band "
                f"({_band_km(C.GEOVERIFY_DECOY_BANDS_KM[-1])}, Sec. 5.2) are drawn from these candidates, so a smaller "
                "radius leaves them empty")
        return v
    page_size: int = Field(500, ge=10)
    #: an entity query that times out is split into quadrants at most this many times over (0: no split;
    #: :meth:`geoagent.clients.wdqs.WdqsClient.entities_around`)
    wdqs_split_depth: int = Field(4, ge=0, le=10)
    #: candidates per auditor call; the crawl cuts each city's merged, QID-sorted candidates into fixed
    #: batches of this size (:func:`geoagent.crawl.referenceability.fixed_batches`)
    batch_size: int = Field(40, ge=1)
    provider: str = "simulated"
    model: str = "sim-text-auditor"
    max_output_tokens: int = Field(4000, ge=64)
    temperature: float = Field(0.0, ge=0.0, le=2.0)  # as [[models]] temperature (config38 #4)
    sensitive_screen: bool = True
    pageviews: bool = False
    pageviews_start: str = "20240101"
    pageviews_end: str = "20241231"

    @field_validator("pageviews_start", "pageviews_end")
    @classmethod
    def _yyyymmdd(cls, v: str) -> str:
        # the pageviews API's date form, checked at load: a "2024-01-01" or "20241301" failed every site's audit
        # after the crawl's screening and downloads (config38 #4)
        import datetime

        try:
            if not re.fullmatch(r"\d{8}", v):
                raise ValueError
            datetime.date(int(v[:4]), int(v[4:6]), int(v[6:]))
        except ValueError:
            raise ValueError("a date as YYYYMMDD (e.g. 20240101)") from None
        return v

    @model_validator(mode="after")
    def _start_before_end(self) -> "ReferenceabilitySettings":
        if self.pageviews_start > self.pageviews_end:
            raise ConfigProblem(f"pageviews_start ({self.pageviews_start}) is after pageviews_end ({self.pageviews_end})")
        return self
    #: a (pageviews, LLM) pair goes to human review when the pageview percentile tier and the LLM tier
    #: differ by at least this many tiers (high/mid/low are 2 apart at most)
    review_tier_gap: int = Field(2, ge=1, le=2)
    #: optional CSV of human decisions on review-queue items (columns site, qid, decision: ``keep`` or a corrected
    #: referenceability 0-5; optional reviewer, note), applied to the ladders and trials after the calls
    review_verdicts: str | None = None

    _model_id = field_validator("model")(check_model_id)

    @field_validator("review_verdicts")
    @classmethod
    def _review_home(cls, v: str | None) -> str | None:
        return expand_home(v)  # a leading "~" is the home folder, as in [paths]

    @field_validator("model")
    @classmethod
    def _model_names_files(cls, v: str) -> str:
        """The model names the crawl's ladder files (``<site>_ladder_<model>-en.csv``): one that cannot
        (:func:`geoagent.crawl.ladder.auditor_name_problem`) failed only at the ladder stage, after the ratings
        were paid for."""
        from geoagent.crawl.ladder import auditor_name_problem

        problem = auditor_name_problem(v)
        if problem:
            raise ConfigProblem(problem)
        return v


class LadderSettings(_Section):
    """Context-ladder builder (Sec. 3.3): 3 bands x 3 tiers, ``draws_per_cell`` random draws per cell."""

    draws_per_cell: int = Field(2, ge=1)
    seed: int | None = None


class EndpointSettings(_Section):
    """Base URLs of the public APIs (point them at the sandbox for offline runs)."""

    overpass: str = "https://overpass-api.de/api"
    #: other Overpass instances, tried in order when the first keeps failing with 5xx (e.g.
    #: "https://maps.mail.ru/osm/tools/overpass/api"); empty by default
    overpass_mirrors: tuple[str, ...] = Field((), strict=False)
    wdqs: str = "https://query.wikidata.org/sparql"
    pageviews: str = "https://wikimedia.org/api/rest_v1"
    mapillary: str = "https://graph.mapillary.com"
    mapillary_token_env: str = "MAPILLARY_TOKEN"

    @field_validator("mapillary_token_env")
    @classmethod
    def _token_env_name(cls, v: str) -> str:
        """The NAME of the variable holding the token, never the token (config38 #5: ``"MLY|..."`` pasted here
        went into ``manifest.json`` and the missing-token message); the message never repeats the value."""
        from geoagent.config import env_var_name

        try:
            return env_var_name(v)
        except ValueError as e:  # a whole sentence: the section's error text adds no "(got ...)" to it
            raise ConfigProblem(f"expected {e}") from None

    @field_validator("overpass", "wdqs", "pageviews", "mapillary", "overpass_mirrors")
    @classmethod
    def _plain_urls(cls, v: Any, info: Any) -> Any:
        """http(s) URLs without credentials (:func:`geoagent.config.url_problem`): the resolved config goes to
        ``manifest.json`` and URLs into status lines, so a token in one (Mapillary's examples put it in the
        query, ``?access_token=MLY|...``) would be stored and shown; the message never repeats the URL."""
        from geoagent.config import url_problem

        where = ("put the token in the variable mapillary_token_env names" if info.field_name == "mapillary"
                 else "these APIs take no key")
        for url in (v if isinstance(v, tuple) else (v,)):
            problem = url_problem(url, example=str(cls.model_fields[info.field_name].default or
                                                   "https://overpass-api.de/api"), where_key=where)
            if problem:
                raise ConfigProblem(f"expected {problem}, got a string")
        if info.field_name == "mapillary":  # its requests carry the token (Authorization: OAuth MLY|...)
            from urllib.parse import urlsplit

            from geoagent.config import is_local_host

            parts = urlsplit(v)
            if parts.scheme == "http" and not is_local_host(parts.hostname):
                raise ConfigProblem(f"plain http:// to {parts.hostname}, a host that is not local, would send the "
                                    "Mapillary token unencrypted; use https://")
        return v


def _policy(**kw: Any) -> dict[str, Any]:
    return kw


#: Usage policies of each public API as HostPolicy fields (sources: the API pages in the module docstring):
#: Overpass: 2 slots per IP and ~10,000 requests/day -> at most 2 in flight, 1 request per 10 s.
#: WDQS: one query at a time, 60 s of query time per minute (tracked by the client) -> concurrency 1.
#: Pageviews: soft cap ~200 req/s per client -> a polite 20/s, 4 in flight.
#: Mapillary search API: 10,000 requests/min per app -> 20/s, 8 in flight.
#: seconds an Overpass answer may take beyond its query's ``[timeout:]`` (sending the result) before the HTTP client's
#: per-attempt timeout may drop it (:meth:`CrawlSettings.overpass_timeout_note`)
OVERPASS_TRANSFER_MARGIN_S = 10.0
DEFAULT_POLICIES: dict[str, dict[str, Any]] = {
    "overpass": _policy(rate=1.0, period_s=10.0, concurrency=2, max_attempts=4, backoff_base_s=5.0, backoff_max_s=120.0, timeout_s=60.0),
    "wdqs": _policy(rate=1.0, period_s=1.0, concurrency=1, max_attempts=4, backoff_base_s=2.0, backoff_max_s=120.0, timeout_s=70.0),
    "pageviews": _policy(rate=20.0, period_s=1.0, concurrency=4, max_attempts=4, timeout_s=30.0),
    "mapillary": _policy(rate=20.0, period_s=1.0, concurrency=8, max_attempts=4, timeout_s=60.0),
    "thumbnails": _policy(rate=20.0, period_s=1.0, concurrency=8, max_attempts=3, timeout_s=60.0),
}


class CitySpec(_Section):
    """One candidate city (the paper's list of 58 is an input that can be edited freely)."""

    city: str
    country: str = ""
    continent: str = ""
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)

    @field_validator("continent")
    @classmethod
    def _continent_code(cls, v: str) -> str:
        # the swapped-image control pairs sites whose continents differ (seed 000 Sec. 5): "eu" beside "EU"
        # must be one continent, and "Europe" no continent at all (refused, listing the codes)
        from geoagent.geo import continent_code

        try:
            return continent_code(v)
        except ValueError as exc:
            raise ConfigProblem(str(exc)) from None


class CrawlSettings(_Section):
    """The whole ``[crawl]`` section."""

    contact: str = Field(min_length=3)
    tool_name: str = "geoagent-crawl/0.1"

    @field_validator("contact", "tool_name")
    @classmethod
    def _header_safe(cls, v: str) -> str:
        from geoagent.config import header_safe

        return header_safe(v)  # both go into every User-Agent header (config38 #3)
    seed: int = 0
    watch: bool = False
    cities: tuple[CitySpec, ...] = Field((), strict=False)
    evaluated_models: tuple[str, ...] = Field((), strict=False)
    screener: ScreenerSettings = ScreenerSettings()
    sampler: SamplerSettings = SamplerSettings()
    fetcher: FetcherSettings = FetcherSettings()
    image_audit: ImageAuditSettings = ImageAuditSettings()
    referenceability: ReferenceabilitySettings = ReferenceabilitySettings()
    ladder: LadderSettings = LadderSettings()
    endpoints: EndpointSettings = EndpointSettings()
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("contact")
    @classmethod
    def _contact_reachable(cls, v: str) -> str:
        # it goes into every request's User-Agent, and Wikimedia's User-Agent policy (WDQS, pageviews) asks for
        # contact information there: an e-mail address or a URL (https://meta.wikimedia.org/wiki/User-Agent_policy;
        # the Nominatim client's rule too, geoagent.clients.nominatim.user_agent_for). A bare name reaches nobody.
        text = v.strip()
        if "@" not in text and "://" not in text:
            raise ConfigProblem("expected an e-mail address or a URL to reach you by (e.g. \"mailto:you@example.org\"; "
                                "it goes into the User-Agent, as Wikimedia's User-Agent policy asks)")
        return v

    @field_validator("policies")
    @classmethod
    def _policies_valid(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        # every table checked at load, as host_policy builds it (config38 #4: an unknown API name was never
        # read and a bad key or value failed only when the crawl's first stage process built its clients)
        for api, over in v.items():
            if api not in DEFAULT_POLICIES:
                import difflib

                close = difflib.get_close_matches(str(api), sorted(DEFAULT_POLICIES), n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigProblem(f"[crawl.policies.{api}]: unknown API{hint}; the crawl's APIs are "
                                    f"{', '.join(sorted(DEFAULT_POLICIES))}")
            try:
                build_host_policy(api, over)
            except CrawlConfigError as e:
                raise ConfigProblem(str(e)) from None
        return v

    @model_validator(mode="after")
    def _auditor_not_evaluated(self) -> "CrawlSettings":
        # Sec. 3.3 constraint 1 (and Sec. 3.2 for the image audit): the auditor must not be an
        # evaluated model, else the benchmark sets its own exam.
        evaluated = set(self.evaluated_models)
        for key, model in (("image_audit.model", self.image_audit.model), ("referenceability.model", self.referenceability.model)):
            if model in evaluated:
                raise ConfigProblem(f"{key} = {model!r} is also an evaluated model; the auditor must not be one")
        return self

    @model_validator(mode="after")
    def _city_keys_unique(self) -> "CrawlSettings":
        # every city's queue key and file stem is the ASCII slug of its name (stages.city_key): a name
        # without Latin letters or digits has none, and two cities with one slug (Córdoba, Spain and
        # Córdoba, Argentina) would share one queue key, so the second would silently never be crawled
        from geoagent.crawl.sampler import slug

        seen: dict[str, int] = {}
        for i, c in enumerate(self.cities):
            key = slug(c.city)
            if not key or len(key) > 128:
                raise ConfigProblem(f"cities[{i}].city = {c.city!r}: the crawl keys cities by the ASCII letters and digits "
                                 f"of the name (1-128 of them); write the name in Latin script, e.g. 'Tokyo'")
            if key in seen:
                j = seen[key]
                raise ConfigProblem(f"cities[{i}].city = {c.city!r} and cities[{j}].city = {self.cities[j].city!r} share the "
                                 f"key {key!r}; make the names differ in letters or digits (e.g. add the country)")
            seen[key] = i
        return self

    def load_warnings(self) -> list[str]:
        """Warnings the config loader prints for this section (:func:`geoagent.config.load_config`): one line per
        pair of cities whose centres lie closer than twice ``[crawl.sampler] radius_km`` (haversine, km), so their
        site discs overlap: one place may enter the benchmark as two cities, the same landmark drawn for both
        (walk31 #5: "Torino" beside "Turin" at the same centre was crawled as a second city without a word), at
        most 10 lines, then a count of the rest; before them the Overpass timeout note
        (:meth:`overpass_timeout_note`) when it applies, and a note when ``[crawl.referenceability] radius_km`` reaches
        beyond :data:`FARTHEST_BAND_KM` (candidates rated but never drawn)."""
        out: list[str] = []
        timeouts = self.overpass_timeout_note()
        if timeouts:
            out.append(timeouts)
        radius = self.referenceability.radius_km
        if radius > FARTHEST_BAND_KM:  # crawl40 #5: listed and rated (paid), never drawn
            out.append(f"[crawl.referenceability] radius_km = {radius:g} reaches beyond the farthest band the benchmark "
                       f"uses ({FARTHEST_BAND_KM:g} km: the ladders' {_band_km(C.LADDER_BANDS_KM[-1])} band, GeoVerify's "
                       f"{_band_km(C.GEOVERIFY_DECOY_BANDS_KM[-1])} decoys): candidates between {FARTHEST_BAND_KM:g} and "
                       f"{radius:g} km are queried and rated (paid auditor calls) but no ladder or trial draws them; "
                       f"the paper's radius is {FARTHEST_BAND_KM:g} km")
        if len(self.cities) < 2:
            return out
        import numpy as np

        from geoagent.geo import haversine_km_array

        lat = np.array([c.lat for c in self.cities])
        lon = np.array([c.lon for c in self.cities])
        limit = 2.0 * self.sampler.radius_km
        n_timeouts = len(out)
        for j in range(1, len(self.cities)):
            d = haversine_km_array(lat[:j], lon[:j], lat[j], lon[j])
            i = int(np.argmin(d))
            if d[i] < limit:
                out.append(f"crawl.cities[{j}] ({self.cities[j].city!r}) is {d[i]:.1f} km from crawl.cities[{i}] "
                           f"({self.cities[i].city!r}), closer than twice [crawl.sampler] radius_km ({limit:g} km): "
                           "their site discs overlap, so one place may count as two cities of the benchmark (and "
                           "the same landmark be drawn for both); keep one of them, or move a centre")
        pairs = out[n_timeouts:]
        return out[:n_timeouts] + (pairs if len(pairs) <= 10 else
                                   pairs[:10] + [f"crawl.cities: {len(pairs) - 10} more such pair(s)"])

    def overpass_timeout_note(self) -> str | None:
        """A warning when ``[crawl.screener] overpass_timeout_s`` (the ``[timeout:]`` of each query: how long the
        Overpass server may run it, seconds) leaves less than :data:`OVERPASS_TRANSFER_MARGIN_S` before the HTTP
        client's per-attempt timeout (``[crawl.policies.overpass] timeout_s``, default 60 s): the client would drop an
        answer the server is still computing and send the query again (up to ``max_attempts``), while the server goes
        on running the dropped one in one of the IP's 2 slots (providers37 #6: ``[timeout:180]``, Overpass's own
        default, against 60 s). None when the attempt outlasts the query."""
        over = self.policies.get("overpass", {})
        http_s = over.get("timeout_s", DEFAULT_POLICIES["overpass"]["timeout_s"]) if isinstance(over, Mapping) else None
        query_s = self.screener.overpass_timeout_s
        if (not isinstance(http_s, (int, float)) or isinstance(http_s, bool)
                or query_s + OVERPASS_TRANSFER_MARGIN_S <= http_s):
            return None
        given = "" if "timeout_s" in over else " (the default)"
        return (f"[crawl.screener] overpass_timeout_s = {query_s} (how long the Overpass server may run a query) "
                f"leaves less than {OVERPASS_TRANSFER_MARGIN_S:g} s before the HTTP timeout, [crawl.policies.overpass] "
                f"timeout_s = {http_s:g}{given}: a query still running then is dropped and sent again while the server "
                f"goes on with it; lower overpass_timeout_s or set [crawl.policies.overpass] timeout_s = "
                f"{query_s + OVERPASS_TRANSFER_MARGIN_S:g} or more")

    @property
    def user_agent(self) -> str:
        """Descriptive User-Agent with contact (Wikimedia User-Agent policy; courteous for OSM too)."""
        return f"{self.tool_name} (GeoContext benchmark crawler; contact: {self.contact})"

    def host_policy(self, api: str) -> HostPolicy:
        """The :class:`HostPolicy` for ``api`` (``overpass``, ``wdqs``, ``pageviews``, ``mapillary``,
        ``thumbnails``): the default usage policy overlaid with ``[crawl.policies.<api>]``."""
        return build_host_policy(api, self.policies.get(api, {}))


def build_host_policy(api: str, overrides: Mapping[str, Any]) -> HostPolicy:
    """The :class:`HostPolicy` of ``api``: :data:`DEFAULT_POLICIES`' entry overlaid with ``overrides`` (a
    ``[crawl.policies.<api>]`` table).

    Raises
    ------
    CrawlConfigError
        ``overrides`` is not a table, names a key HostPolicy does not take, or gives a value it refuses; the
        message names the table and the key.
    """
    import dataclasses
    import difflib

    if not isinstance(overrides, Mapping):
        raise CrawlConfigError(f"[crawl.policies.{api}]: expected a table of HostPolicy keys, got "
                               f"{type(overrides).__name__}")
    base = dict(DEFAULT_POLICIES.get(api, {}))
    base.update(overrides)
    known = [f.name for f in dataclasses.fields(HostPolicy)] if dataclasses.is_dataclass(HostPolicy) else []
    for key in overrides:
        if known and key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CrawlConfigError(f"[crawl.policies.{api}] {key}: unknown key{hint}; known: {', '.join(sorted(known))}")
    problem = _connect_timeout_problem(api, overrides)
    if problem:
        raise CrawlConfigError(problem)
    try:
        return HostPolicy(**base)
    except (TypeError, ValueError) as e:
        raise CrawlConfigError(f"[crawl.policies.{api}]: {e}") from None


def _connect_timeout_problem(api: str, overrides: Mapping[str, Any]) -> str | None:
    """Why ``[crawl.policies.<api>] connect_timeout_s`` is invalid (not a number > 0, or above the policy's
    ``timeout_s``: the override's, else the API's default), or None when it is valid or not set."""
    if "connect_timeout_s" not in overrides:
        return None
    c = overrides["connect_timeout_s"]
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not c > 0 or c != c:
        return f"[crawl.policies.{api}] connect_timeout_s: expected a number of seconds > 0, got {c!r}"
    total = overrides.get("timeout_s", DEFAULT_POLICIES.get(api, {}).get("timeout_s", HostPolicy().timeout_s))
    if isinstance(total, (int, float)) and not isinstance(total, bool) and c > total:
        return (f"[crawl.policies.{api}] connect_timeout_s = {c:g} must not exceed its timeout_s = {total:g} "
                "(seconds; the connect timeout bounds the connection phase of one attempt)")
    return None


def _format_errors(err: ValidationError, where: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden" and e["loc"]:  # a typo: name the closest key of that table
            from geoagent.config import did_you_mean, table_keys

            valid = table_keys(CrawlSettings, e["loc"][:-1])
            lines.append(f"{where}: key 'crawl.{loc}': unknown key{did_you_mean(e['loc'][-1], valid or ())}")
            continue
        error = (e.get("ctx") or {}).get("error")
        # a rule over several keys of the section (a model validator) has no location: the section is named
        key = f"key 'crawl.{loc}'" if loc else "[crawl]"
        if e["type"] == "value_error" and isinstance(error, ConfigProblem):  # a whole sentence (config.py's rule)
            lines.append(f"{where}: {key}: {error}")
            continue
        lines.append(f"{where}: {key}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def load_crawl_settings(section: Mapping[str, Any], *, where: str = "config") -> CrawlSettings:
    """Validate a parsed ``[crawl]`` mapping.

    Parameters
    ----------
    section : mapping
        The ``crawl`` table of a TOML config.
    where : str
        File name used in error messages.

    Raises
    ------
    CrawlConfigError
        Naming each bad key (``crawl.screener.l_min_km``...) with what was expected, including the
        auditor-is-an-evaluated-model rule.
    """
    try:
        return CrawlSettings.model_validate(dict(section))
    except ValidationError as e:
        raise CrawlConfigError(_format_errors(e, where)) from None


def _register() -> None:
    """Let campaign configs validate their ``[crawl]`` table with :class:`CrawlSettings`."""
    try:
        from geoagent.config import register_section
    except ImportError:  # config module not available (partial checkout)
        return
    register_section("crawl", CrawlSettings)


_register()
