"""A thumbnail whose bytes are not a readable image (a complete JPEG that PIL cannot decode) gets a rejection
record with the reason, as a too-dark one does, so a resume (or another campaign on the same images root) decides
it from the record instead of downloading it again; an answer that is no complete JPEG (an HTML page) gets none. Real client,
the Mapillary fake serving broken bytes for those images."""

from __future__ import annotations

import asyncio

import orjson

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.fetcher import fetch_site_images, image_path, rejection_path
from geoagent.crawl.settings import FetcherSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT0, LON0 = 41.39, 2.17
CORRUPT = b"\xff\xd8\xff\xe0" + b"this is not jpeg data" * 8 + b"\xff\xd9"  # JPEG markers, undecodable inside
HTML = b"<html><body>Something went wrong</body></html>"


def _images():
    # ~47 m apart along a meridian (well over min_separation_m), nearest first: good, corrupt, html, good
    return [fake_mly.FakeImage(str(800000000001 + i), LAT0 + 0.00042 * i, LON0, brightness=150.0,
                               cdn_body={1: CORRUPT, 2: HTML}.get(i)) for i in range(4)]


def test_unreadable_thumbnails_get_a_rejection_record_and_a_resume_skips_them(tmp_path):
    st = fake_mly.MapillaryFakeState(images=_images())
    settings = FetcherSettings()
    site = {"site": "bcn_site", "lat": LAT0, "lon": LON0}

    async def walk():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images(site, m, settings, tmp_path)

    first = asyncio.run(walk())
    bad = {"800000000002", "800000000003"}
    assert {k["image_id"] for k in first.kept} == {"800000000001", "800000000004"}
    reasons = {r["image_id"]: r["reason"] for r in first.rejected}
    assert set(reasons) == bad, first.rejected
    assert "not a readable image" in reasons["800000000002"] and "not a JPEG" in reasons["800000000003"]
    corrupt = image_path(tmp_path, "bcn_site", "800000000002")
    rec = orjson.loads(rejection_path(corrupt).read_bytes())
    assert rec["image_id"] == "800000000002" and rec["reason"] == reasons["800000000002"] and rec["unreadable"] is True
    assert not corrupt.exists()
    # the HTML answer is a failed transfer, no verdict on the image: no record (the test below)
    assert not rejection_path(image_path(tmp_path, "bcn_site", "800000000003")).exists()
    thumbs, images = list(st.thumb_requests), list(st.image_requests)
    assert bad <= set(thumbs)

    second = asyncio.run(walk())  # a resume: the undecodable one decided from its record, not downloaded again
    assert second.downloads == 0 and second.rejections_reused == 1
    assert st.thumb_requests[len(thumbs):] == ["800000000003"] * FAST.max_attempts  # the HTML one asked again
    assert "800000000002" not in st.image_requests[len(images):]
    assert second.rejected == first.rejected and second.kept == first.kept


def test_a_transfer_that_gave_no_jpeg_is_asked_again_once_the_cdn_recovers(tmp_path):
    """Adversarial review (session 11): an answer that is no complete JPEG (an HTML error page served with 200, a
    body cut short), after the HTTP layer's own retries, says nothing about the image: the same URL can serve the
    photo a minute later. It was recorded as ``unreadable`` like bytes that are a JPEG PIL cannot decode, so every
    later walk, of this crawl or of any campaign sharing the images root, rejected that image for good. Only a
    complete JPEG that cannot be decoded gets the record now; the other is downloaded again on the next walk."""
    imgs = _images()
    st = fake_mly.MapillaryFakeState(images=imgs)
    settings = FetcherSettings()
    site = {"site": "bcn_site", "lat": LAT0, "lon": LON0}

    async def walk():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images(site, m, settings, tmp_path)

    first = asyncio.run(walk())
    html_id, corrupt_id = "800000000003", "800000000002"
    assert html_id in {r["image_id"] for r in first.rejected}
    assert not rejection_path(image_path(tmp_path, "bcn_site", html_id)).exists()  # no verdict on the image
    assert rejection_path(image_path(tmp_path, "bcn_site", corrupt_id)).exists()  # its bytes decide: recorded
    imgs[2].cdn_body = None  # the CDN serves the photo again
    second = asyncio.run(walk())
    assert html_id in {k["image_id"] for k in second.kept}, second.rejected
    assert corrupt_id in {r["image_id"] for r in second.rejected} and second.rejections_reused == 1
