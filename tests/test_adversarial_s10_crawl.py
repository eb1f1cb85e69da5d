"""Adversarial review, session 10: the crawl side and its API clients against the real APIs' rules.

Each test failed before its fix (see the commit that added it). External APIs are the local aiohttp fakes of
``geoagent/sandbox`` (no function-level mocks of our clients).
"""

from __future__ import annotations

import asyncio

import pytest

from geoagent.clients.overpass import OverpassClient
from geoagent.clients.pageviews import PageviewsClient
from geoagent.clients.wdqs import WdqsClient, around_query
from geoagent.crawl.screener import place_query
from geoagent.crawl.settings import CrawlConfigError, CrawlSettings, ScreenerSettings, load_crawl_settings
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox import overpass as overpass_fake
from geoagent.sandbox import pageviews as pageviews_fake
from geoagent.sandbox import wdqs as wdqs_fake
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)


# --- 1. a crawl User-Agent without contact details ------------------------------------------------------------
# Wikimedia's User-Agent policy (WDQS, pageviews) asks for contact information: an e-mail address or a URL
# (api-notes sections 2 and 4; https://meta.wikimedia.org/wiki/User-Agent_policy). The crawl builds its UA as
# "<tool> (GeoContext benchmark crawler; contact: <[crawl] contact>)", and the Overpass/WDQS/pageviews fakes took
# the bare word "contact" as contact details, so `contact = "Jane Doe"` ran clean against every fake while the
# real services get a UA with nothing to reach anyone by.

def test_crawl_contact_without_email_or_url_is_refused_at_load():
    with pytest.raises(CrawlConfigError) as ei:
        load_crawl_settings({"contact": "Jane Doe"})
    assert "contact" in str(ei.value)
    for ok in ("mailto:me@example.org", "me@example.org", "https://example.org/crawler"):
        assert load_crawl_settings({"contact": ok}).contact == ok


def _contactless_ua() -> str:
    # what a crawl would send with `contact = "Jane Doe"` (built without the settings' validation)
    return CrawlSettings.model_construct(contact="Jane Doe", tool_name="geoagent-crawl/0.1").user_agent


def test_overpass_wdqs_and_pageviews_fakes_refuse_a_ua_without_contact_details():
    ua = _contactless_ua()
    assert "contact" in ua and "@" not in ua and "://" not in ua

    async def go() -> list[int]:
        statuses = []
        async with serve(overpass_fake.make_app([])) as base, HttpClient(default_policy=FAST) as http:
            try:
                await OverpassClient(http, base + "/api", ua, check_slots=False).interpreter(
                    place_query(48.86, 2.34, ScreenerSettings()))
            except PermanentHTTPError as e:
                statuses.append(e.status)
        async with serve(wdqs_fake.make_app()) as base, HttpClient(default_policy=FAST) as http:
            try:
                await WdqsClient(http, base + "/sparql", ua).select(around_query(48.86, 2.34, 6.0, limit=10, offset=0))
            except PermanentHTTPError as e:
                statuses.append(e.status)
        async with serve(pageviews_fake.make_app({"X": 3})) as base, HttpClient(default_policy=FAST) as http:
            try:
                await PageviewsClient(http, base, ua).total("X", "20240101", "20240131")
            except PermanentHTTPError as e:
                statuses.append(e.status)
        return statuses

    assert asyncio.run(go()) == [403, 403, 403]
