"""Thumbnail downloads have a body cap of their own, sized from the thumbnail Mapillary serves.

Leftover of session 13: a thumbnail body was read up to the HTTP layer's 64 MiB default (``HostPolicy.max_body_bytes``),
though a ``thumb_1024_url`` JPEG (1024 px wide, Mapillary API v4 image fields; api-notes section 6) is a few hundred
KB. Now each download is capped by ``[crawl.fetcher] max_thumb_bytes``, by default
:data:`geoagent.clients.mapillary.THUMB_MAX_BYTES` of the ``thumb_field`` (8 MiB for ``thumb_1024_url``): a larger body
is refused unread (its Content-Length) or abandoned while streaming, and the image is rejected with the reason
(``no thumbnail: ... larger than ...``); the site goes on with its other images. Real client and fetcher over the
local Mapillary fake."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.clients.mapillary import THUMB_MAX_BYTES
from geoagent.crawl.fetcher import fetch_site_images, image_path
from geoagent.crawl.settings import CrawlConfigError, FetcherSettings
from geoagent.clients.mapillary import MapillaryClient
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=10)
LAT, LON = 41.39, 2.17


def _fetch(imgs, settings, root, policy=FAST, state_out=None):
    async def go():
        app = fake.make_app(imgs)
        if state_out is not None:
            state_out.append(app[fake.MAPILLARY_STATE])
        async with serve(app) as base, HttpClient(default_policy=policy) as http:
            c = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images({"site": "s1", "lat": LAT, "lon": LON}, c, settings, root)
    return asyncio.run(go())


def _jpeg_shaped(n_bytes):
    return b"\xff\xd8" + b"\x00" * (n_bytes - 4) + b"\xff\xd9"


def test_default_cap_follows_the_thumbnail_size():
    assert THUMB_MAX_BYTES["thumb_256_url"] < THUMB_MAX_BYTES["thumb_1024_url"] < THUMB_MAX_BYTES["thumb_2048_url"]
    # a JPEG is smaller than its raw pixels: at most w x 2w px of 3 bytes (a portrait at twice the width) fits
    for field, w in (("thumb_256_url", 256), ("thumb_1024_url", 1024), ("thumb_2048_url", 2048)):
        assert w * 2 * w * 3 <= THUMB_MAX_BYTES[field] <= 4 * w * 2 * w * 3
    assert FetcherSettings().thumb_max_bytes == THUMB_MAX_BYTES["thumb_1024_url"] == 8 * 1024 * 1024
    assert FetcherSettings(max_thumb_bytes=5000).thumb_max_bytes == 5000


def test_a_thumbnail_over_the_default_cap_is_refused_and_the_site_goes_on(tmp_path):
    big = fake.FakeImage("800000000001", LAT, LON, brightness=150, cdn_body=_jpeg_shaped(9 * 1024 * 1024))
    ok = fake.FakeImage("800000000002", LAT + 0.001, LON, brightness=150)
    res = _fetch([big, ok], FetcherSettings(), tmp_path)
    assert [k["image_id"] for k in res.kept] == ["800000000002"]
    reason = {r["image_id"]: r["reason"] for r in res.rejected}["800000000001"]
    # before: the 9 MiB body was read whole and rejected only as "not a readable image" after decoding
    assert reason.startswith("no thumbnail:") and "larger than" in reason and "8388608" in reason
    assert "max_thumb_bytes" in reason
    assert not image_path(tmp_path, "s1", "800000000001").exists()


def test_a_configured_cap_applies(tmp_path):
    small = fake.FakeImage("800000000001", LAT, LON, brightness=150)  # the fake's 64 px render: a few KB
    padded = fake.FakeImage("800000000002", LAT + 0.001, LON, brightness=150, cdn_body=_jpeg_shaped(50_000))
    res = _fetch([small, padded], FetcherSettings(max_thumb_bytes=40_000), tmp_path)
    assert [k["image_id"] for k in res.kept] == ["800000000001"]
    assert "larger than" in {r["image_id"]: r["reason"] for r in res.rejected}["800000000002"]
    with pytest.raises((CrawlConfigError, ValueError)):
        FetcherSettings(max_thumb_bytes=0)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_refused_thumbnail_is_not_downloaded_again(tmp_path, chunked):
    """Leftover of the cap: "body too large" was retried like a cut-short body, max_attempts times (here 4), though
    the same URL serves the same bytes: refused by its Content-Length (before: 4 CDN requests of the image), or
    streamed up to the cap each try (chunked, no Content-Length: 4 x 40 KB read for nothing). Now the first refusal
    is final either way: the CDN fake sees one request of the image, and the image is rejected as before."""
    padded = fake.FakeImage("800000000002", LAT + 0.001, LON, brightness=150, cdn_body=_jpeg_shaped(200_000),
                            cdn_chunked=chunked)
    small = fake.FakeImage("800000000001", LAT, LON, brightness=150)
    policy = HostPolicy(**{**{f: getattr(FAST, f) for f in FAST.__slots__}, "max_attempts": 4})
    states = []
    res = _fetch([small, padded], FetcherSettings(max_thumb_bytes=40_000), tmp_path, policy=policy, state_out=states)
    assert [k["image_id"] for k in res.kept] == ["800000000001"]
    reason = {r["image_id"]: r["reason"] for r in res.rejected}["800000000002"]
    assert reason.startswith("no thumbnail:") and "larger than the cap of 40000 bytes" in reason
    assert ("no Content-Length" in reason) == chunked and ("Content-Length 200000" in reason) != chunked
    assert states[0].thumb_requests.count("800000000002") == 1, states[0].thumb_requests
    assert states[0].thumb_requests.count("800000000001") == 1
