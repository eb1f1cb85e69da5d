"""Adversarial review (session 13): a thumbnail URL whose CDN answer redirects to itself without end. aiohttp gives
up after 10 redirects (``TooManyRedirects``); the HTTP layer counted that as a connection failure, retried it, and
:meth:`MapillaryClient.download_thumbnail` let it propagate, so one image's bad URL failed its whole site, on every
walk ("connection: TooManyRedirects"), the other images of the site never fetched. It is that image's condition
now (:class:`ThumbnailUnavailable`, ``kind`` ``"refused"``): the image is skipped with a named reason and no record
(the next walk asks again), the site's other images are kept. Real client, the Mapillary fake's CDN looping."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.clients.mapillary import MapillaryClient, ThumbnailUnavailable
from geoagent.crawl.fetcher import fetch_site_images, image_path, rejection_path
from geoagent.crawl.settings import FetcherSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT0, LON0 = 41.39, 2.17


def _state():
    return fake_mly.MapillaryFakeState(images=[
        fake_mly.FakeImage("800000000001", LAT0, LON0, brightness=150.0, cdn_redirect_loop=True),
        fake_mly.FakeImage("800000000002", LAT0 + 0.00042, LON0, brightness=150.0)])


def test_a_redirect_loop_skips_the_image_not_the_site(tmp_path):
    st = _state()

    async def walk():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images({"site": "bcn_site", "lat": LAT0, "lon": LON0}, m, FetcherSettings(),
                                           tmp_path)

    res = asyncio.run(walk())
    assert [k["image_id"] for k in res.kept] == ["800000000002"]
    (rej,) = res.rejected
    assert rej["image_id"] == "800000000001" and "redirect" in rej["reason"], rej
    assert not rejection_path(image_path(tmp_path, "bcn_site", "800000000001")).exists()


def test_download_thumbnail_names_the_loop():
    st = _state()

    async def one():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            return await MapillaryClient(http, base, "MLY|1|tok", UA).download_thumbnail("800000000001")

    with pytest.raises(ThumbnailUnavailable) as ei:
        asyncio.run(one())
    assert ei.value.kind == "refused" and "redirect" in str(ei.value) and "sig=" not in str(ei.value)
