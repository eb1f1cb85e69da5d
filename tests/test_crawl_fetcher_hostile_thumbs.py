"""Adversarial review (session 13): thumbnails the CDN serves as complete JPEGs that are no usable photo. A 1x1
(or 3 px wide) JPEG, a placeholder or a tracking pixel, was kept as a site image and sent on to the model audit
and the campaign; a 10000x10000 JPEG (a 100-megapixel decompression bomb of about 1 MB, below Pillow's refusal at
twice ``Image.MAX_IMAGE_PIXELS``) was decoded in full to measure its brightness and then kept. Both are rejected
now, measured from the JPEG header before any decoding, with a named reason and the same record as any other
thumbnail whose bytes are no usable image. Real client, the Mapillary fake serving those bytes."""

from __future__ import annotations

import asyncio
import io

import orjson
from PIL import Image

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


def _jpeg(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (w, h), 150).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _walk(st, root):
    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images({"site": "bcn_site", "lat": LAT0, "lon": LON0}, m, FetcherSettings(), root)
    return asyncio.run(go())


def _one(tmp_path, body: bytes):
    # one good image (the fake's rendered JPEG) and one whose CDN answer is ``body``, ~47 m apart
    imgs = [fake_mly.FakeImage("800000000001", LAT0, LON0, brightness=150.0),
            fake_mly.FakeImage("800000000002", LAT0 + 0.00042, LON0, brightness=150.0, cdn_body=body)]
    st = fake_mly.MapillaryFakeState(images=imgs)
    res = _walk(st, tmp_path)
    assert [k["image_id"] for k in res.kept] == ["800000000001"], res.kept
    (rej,) = res.rejected
    assert rej["image_id"] == "800000000002"
    path = image_path(tmp_path, "bcn_site", "800000000002")
    assert not path.exists()
    rec = orjson.loads(rejection_path(path).read_bytes())
    assert rec["unreadable"] is True and rec["reason"] == rej["reason"]
    return rej["reason"]


def test_a_one_pixel_thumbnail_is_rejected_not_kept(tmp_path):
    reason = _one(tmp_path, _jpeg(1, 1))
    assert "1x1 px" in reason and "too small" in reason


def test_a_thin_strip_thumbnail_is_rejected(tmp_path):
    reason = _one(tmp_path, _jpeg(3, 2000))
    assert "3x2000 px" in reason and "too small" in reason


def test_a_100_megapixel_thumbnail_is_rejected_before_it_is_decoded(tmp_path):
    reason = _one(tmp_path, _jpeg(10000, 10000))
    assert "10000x10000 px" in reason and "too large" in reason
