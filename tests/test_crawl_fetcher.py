"""Imagery fetcher (seed 000 Sec. 3.2): spread, brightness filter, de-duplication, safe paths."""

from __future__ import annotations

import asyncio
import io
import json
import math

import numpy as np
import pytest
from PIL import Image

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.fetcher import dhash64, fetch_site_images, hamming, image_path, mean_brightness, selection_path
from geoagent.crawl.settings import FetcherSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)
LAT, LON = 48.85, 2.35


def _jpeg(arr):
    buf = io.BytesIO()
    Image.fromarray(arr.astype(np.uint8)).save(buf, format="PNG")  # lossless, so the mean is exact
    return buf.getvalue()


def test_mean_brightness_of_small_grey_copy():
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (64, 64)).astype(np.uint8)
    # independent: numpy mean of PIL's 32x32 bilinear greyscale copy
    ref = np.asarray(Image.fromarray(arr).convert("L").resize((32, 32), Image.Resampling.BILINEAR), dtype=float).mean()
    assert mean_brightness(_jpeg(arr), 32) == pytest.approx(ref, abs=1e-9)
    assert mean_brightness(_jpeg(np.full((40, 40), 200))) == pytest.approx(200.0)
    with pytest.raises(ValueError):
        mean_brightness(b"not an image")


def test_dhash_separates_different_frames():
    a = fake.render_thumbnail("1", 130)
    b = fake.render_thumbnail("2", 130)
    twin = fake.render_thumbnail("3", 131, pattern_seed="1")
    assert hamming(dhash64(a), dhash64(twin)) <= 4 < hamming(dhash64(a), dhash64(b))


def _offset(dx_m, dy_m):
    return LAT + dy_m / 111195.0, LON + dx_m / (111195.0 * math.cos(math.radians(LAT)))


def test_fetch_filters_and_stores(tmp_path):
    imgs = []
    def add(i, dx, dy, **kw):
        lat, lon = _offset(dx, dy)
        imgs.append(fake.FakeImage(image_id=str(9000 + i), lat=lat, lon=lon, **kw))
    add(0, 0, 0, brightness=150)                # kept (nearest)
    add(1, 10, 0, brightness=150)               # within 40 m of 0 -> skipped without download
    add(2, 60, 0, brightness=50)                # too dark
    add(3, 0, 70, brightness=160, pattern_seed="9000")  # near-duplicate of 0
    add(4, -80, 0, brightness=140)              # kept
    add(5, 0, -90, brightness=140, is_pano=True, camera_type="equirectangular")  # panorama
    add(6, 120, 40, brightness=120)             # kept
    add(7, 400, 0, brightness=200)              # outside 150 m
    app = fake.make_app(imgs)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|1|x", "geoagent-test (contact: mailto:t@example.org)")
            return await fetch_site_images({"site": "paris_test", "lat": LAT, "lon": LON}, c, FetcherSettings(), tmp_path)

    res = asyncio.run(go())
    assert [k["image_id"] for k in res.kept] == ["9000", "9004", "9006"]
    reasons = {r["image_id"]: r["reason"] for r in res.rejected}
    assert reasons["9001"].startswith("within 40 m") and reasons["9002"].startswith("too dark")
    assert reasons["9003"].startswith("near-duplicate") and reasons["9005"] == "panorama" and "9007" not in reasons
    st = app[fake.MAPILLARY_STATE]
    assert "9001" not in st.thumb_requests and "9005" not in st.thumb_requests  # never downloaded
    assert res.downloads == 5  # 9000, 9002 (dark), 9003 (duplicate), 9004, 9006
    for k in res.kept:
        assert (tmp_path / "paris_test" / f"{k['image_id']}.jpg").read_bytes()[:2] == b"\xff\xd8"
    meta = json.loads(selection_path(tmp_path, "paris_test", res.selection_key).read_text())
    assert [k["image_id"] for k in meta["kept"]] == ["9000", "9004", "9006"]
    assert meta["kept"][0]["captured_at_ms"] == imgs[0].captured_at_ms


def test_paths_are_validated(tmp_path):
    assert image_path(tmp_path, "site_a", "123") == tmp_path / "site_a" / "123.jpg"
    for bad_site, bad_id in (("../x", "1"), ("site", "../1"), ("site", "12a"), ("site", "")):
        with pytest.raises(ValueError):
            image_path(tmp_path, bad_site, bad_id)


def test_an_image_without_a_usable_thumbnail_is_skipped_not_fatal(tmp_path):
    """Real CDNs: a null ``thumb_1024_url``, a URL that expired between issue and download (403 once,
    then a reissued URL works), one refused even when fresh, and an HTML page served with 200. Each is
    this image's problem: the site's other images are still fetched (before: the first one aborted the
    whole site, and a re-run hit it again, so the site never got images)."""
    imgs = []

    def add(i, dx, **kw):
        lat, lon = _offset(dx, 0)
        imgs.append(fake.FakeImage(image_id=str(7000 + i), lat=lat, lon=lon, brightness=150, **kw))

    add(0, 0, has_thumb=False)                                   # no thumbnail at all
    add(1, 45, cdn_expired_first=1)                              # expired once -> reissued URL works
    add(2, -45, cdn_expired_first=5)                             # refused even when fresh
    add(3, 0.0001 + 90, cdn_body=b"<html>rate limited</html>")   # 200 with an HTML page
    add(4, -95)                                                  # ordinary
    add(5, 140, deleted=True)                                    # listed by search, Graph "does not exist" (400) on /{id}
    app = fake.make_app(imgs)
    fast1 = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=1, timeout_s=5)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=fast1) as http:
            c = MapillaryClient(http, base, "MLY|1|x", "geoagent-test (contact: mailto:t@example.org)")
            return await fetch_site_images({"site": "thumbs", "lat": LAT, "lon": LON}, c, FetcherSettings(), tmp_path)

    res = asyncio.run(go())
    assert sorted(k["image_id"] for k in res.kept) == ["7001", "7004"]
    reasons = {r["image_id"]: r["reason"] for r in res.rejected}
    assert sorted(reasons) == ["7000", "7002", "7003", "7005"]
    assert all(r.startswith("no thumbnail") for r in reasons.values())
    assert "403" in reasons["7002"] and "not a JPEG" in reasons["7003"] and "gone" in reasons["7005"]
    assert sorted(p.name for p in (tmp_path / "thumbs").glob("*.jpg")) == ["7001.jpg", "7004.jpg"]
    meta = json.loads(selection_path(tmp_path, "thumbs", res.selection_key).read_text())
    assert sorted(r["image_id"] for r in meta["rejected"]) == ["7000", "7002", "7003", "7005"]
