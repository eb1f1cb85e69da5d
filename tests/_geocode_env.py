"""Test helper: the geocoder wired to local Wikidata and Nominatim fakes over loopback.

The fixture gazetteer ``tests/fixtures/gazetteer_geocode.jsonl`` uses the real QIDs of Tokyo (Q1490),
Paris (Q90), Paris, Texas (Q830149), London (Q84) and New York City (Q60) with approximate coordinates, and for
those five the real QIDs of their country (P17: Japan Q17, France Q142, United States Q30, United Kingdom Q145) and,
for Paris (Île-de-France Q13917) and New York City (New York State Q1384), of their P131; Paris, Texas is located
in (P131) Lamar County under a fixture id (Q99000950), as that county is not in the fixture file. Items named by P131
or P17 and absent from the file are "missing" to the fake Wikidata. Every other entry has a fixture id (Q99000xxx)
and a hand-placed coordinate near the real place. It is test data, not geodata.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from geoagent.clients.cache import ResponseCache
from geoagent.clients.nominatim import NominatimClient
from geoagent.clients.wikidata import WikidataClient
from geoagent.geohint.geocode import Geocoder
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GAZETTEER = FIXTURES / "gazetteer_geocode.jsonl"
UA = "geoagent-tests/0.1 (+https://example.org/geoagent; ops@example.org)"
CONTACT = "ops@example.org"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=4, backoff_base_s=0.01, backoff_max_s=5.0, timeout_s=5.0)


@dataclass
class Env:
    geocoder: Geocoder
    wikidata: WikidataClient
    nominatim: NominatimClient
    wd_state: wd_fake.WikidataFakeState
    nm_state: nm_fake.NominatimFakeState
    gazetteer: Gazetteer
    http: HttpClient


@contextlib.asynccontextmanager
async def geocode_env(
    gazetteer: Gazetteer | None = None,
    *,
    cache: ResponseCache | None = None,
    nominatim_cache: ResponseCache | None = None,
    **geocoder_kw,
) -> AsyncIterator[Env]:
    """Serve both fakes, open one HttpClient, build the clients (fast host policies) and a Geocoder."""
    gaz = gazetteer or Gazetteer.from_jsonl(GAZETTEER)
    wd_app = wd_fake.make_app(gaz)
    nm_app = nm_fake.make_app(gaz, min_interval_s=0.0)
    async with serve(wd_app) as wd_url, serve(nm_app) as nm_url, HttpClient(default_policy=FAST) as http:
        wd = WikidataClient(http, user_agent=UA, base_url=wd_url + "/w/api.php", cache=cache, policy=FAST, maxlag_min_wait_s=0.05)
        nm = NominatimClient(http, contact=CONTACT, base_url=nm_url, cache=nominatim_cache, policy=FAST)
        yield Env(Geocoder(wd, nm, **geocoder_kw), wd, nm, wd_app[wd_fake.WIKIDATA_STATE], nm_app[nm_fake.NOMINATIM_STATE], gaz, http)


def km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Independent haversine (radius 6371.0088 km), written out here rather than imported."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(a))
