"""Thumbnails rejected as too dark or as near-duplicates are recorded (image id, reason, brightness, hash), so a
second walk of the site (a resume after a kill, another campaign) downloads none of them again; a walk whose
settings keep such an image (a lower brightness floor) downloads it then. Real client, local Mapillary fake."""

from __future__ import annotations

import asyncio
import json
import math

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.fetcher import fetch_site_images, image_path, rejection_path
from geoagent.crawl.settings import FetcherSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)
LAT, LON = 48.85, 2.35
SITE = {"site": "paris_resume", "lat": LAT, "lon": LON}


def _offset(dx_m, dy_m):
    return LAT + dy_m / 111_320.0, LON + dx_m / (111_320.0 * math.cos(math.radians(LAT)))


def _images():
    out = []
    for i, (dx, dy, kw) in enumerate([
        (0, 0, {"brightness": 150}),                           # kept
        (60, 0, {"brightness": 50}),                           # too dark
        (0, 70, {"brightness": 160, "pattern_seed": "7000"}),  # near-duplicate of 7000
        (-80, 0, {"brightness": 140}),                         # kept
    ]):
        lat, lon = _offset(dx, dy)
        out.append(fake.FakeImage(image_id=str(7000 + i), lat=lat, lon=lon, **kw))
    return out


def _walk(root, settings):
    app = fake.make_app(_images())

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|1|x", "geoagent-test (contact: mailto:t@example.org)")
            return await fetch_site_images(SITE, c, settings, root)

    res = asyncio.run(go())
    return res, list(app[fake.MAPILLARY_STATE].thumb_requests)


def test_a_second_walk_downloads_no_rejected_thumbnail_again(tmp_path):
    first, got1 = _walk(tmp_path, FetcherSettings())
    assert [k["image_id"] for k in first.kept] == ["7000", "7003"]
    assert {r["image_id"]: r["reason"][:14] for r in first.rejected} == {"7001": "too dark (mean", "7002": "near-duplicate"}
    assert sorted(got1) == ["7000", "7001", "7002", "7003"] and first.downloads == 4
    rec = json.loads(rejection_path(image_path(tmp_path, "paris_resume", "7001")).read_text())
    assert rec["image_id"] == "7001" and rec["reason"].startswith("too dark") and 45 < rec["brightness"] < 55
    assert rec["grey_size_px"] == 32 and len(rec["dhash"]) == 16
    assert not image_path(tmp_path, "paris_resume", "7001").exists()  # still never written as an image

    second, got2 = _walk(tmp_path, FetcherSettings())  # a resume: same settings, same images root
    assert got2 == [] and second.downloads == 0  # before: 7001 and 7002 were downloaded again
    assert second.rejections_reused == 2
    assert second.to_json() | {"downloads": 0} == first.to_json() | {"downloads": 0}  # the same selection record


def test_settings_that_keep_a_rejected_image_download_it(tmp_path):
    _walk(tmp_path, FetcherSettings())
    res, got = _walk(tmp_path, FetcherSettings(min_brightness=40))  # 7001 (mean ~50) is bright enough now
    assert got == ["7001"] and res.downloads == 1
    assert "7001" in [k["image_id"] for k in res.kept] and image_path(tmp_path, "paris_resume", "7001").is_file()
    assert {r["image_id"] for r in res.rejected} == {"7002"}


def test_a_record_measured_at_another_grey_size_is_not_used(tmp_path):
    _walk(tmp_path, FetcherSettings())
    res, got = _walk(tmp_path, FetcherSettings(grey_size_px=16))
    assert sorted(got) == ["7001", "7002"]  # measured again at the new size (the kept files are read from disk)
    assert {r["image_id"] for r in res.rejected} == {"7001", "7002"}
