"""Mapillary client against the local Graph API v4 fake (full pages and 5xx split into quadrants)."""

from __future__ import annotations

import asyncio
import io
import random

import pytest
from PIL import Image, ImageStat

from geoagent.clients.mapillary import (
    MapillaryClient,
    MapillaryError,
    ThumbnailUnavailable,
    bbox_around,
    normalise_bbox,
    parse_image,
    quadrants,
)
from geoagent.geo import haversine_km
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
TOKEN = "MLY|123|secretsecret"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)
LAT0, LON0 = 52.37, 4.895


def _images(n=600, seed=4, spread=0.006):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(fake.FakeImage(image_id=str(10**14 + i * 7919), lat=LAT0 + rng.uniform(-spread, spread),
                                  lon=LON0 + rng.uniform(-spread, spread), is_pano=(i % 5 == 0),
                                  camera_type="equirectangular" if i % 5 == 0 else rng.choice(["perspective", "fisheye"]),
                                  compass_angle=rng.uniform(0, 360), captured_at_ms=1_600_000_000_000 + i * 1000,
                                  brightness=rng.choice([40.0, 120.0, 200.0])))
    return out


async def _run(app, fn, limit=2000, token=TOKEN):
    async with serve(app) as base, HttpClient(default_policy=FAST) as http:
        c = MapillaryClient(http, base, token, UA, limit=limit)
        return await fn(c), c


def test_bbox_search_returns_requested_fields():
    imgs = _images(80)
    app = fake.make_app(imgs)
    box = bbox_around(LAT0, LON0, 1000)
    got, c = asyncio.run(_run(app, lambda c: c.search_images(box)))
    assert {g.image_id for g in got} == {i.image_id for i in imgs}
    q = app[fake.MAPILLARY_STATE].search_requests[0]
    assert "fields=id%2Ccomputed_geometry" in q or "fields=id,computed_geometry" in q
    assert "access_token" not in q  # the token travels in the Authorization header
    g0 = next(g for g in got if g.image_id == imgs[3].image_id)
    assert (g0.lat, g0.lon) == pytest.approx((imgs[3].lat, imgs[3].lon))  # [lon, lat] parsed correctly
    assert g0.captured_at_ms == imgs[3].captured_at_ms and g0.compass_angle == pytest.approx(imgs[3].compass_angle)


def test_full_page_splits_into_quadrants_without_losing_or_duplicating():
    imgs = _images(600)
    app = fake.make_app(imgs)
    box = bbox_around(LAT0, LON0, 1000)
    got, c = asyncio.run(_run(app, lambda c: c.search_images(box), limit=100))
    assert sorted(g.image_id for g in got) == sorted(i.image_id for i in imgs)
    assert c.splits >= 3 and c.requests_made == 1 + 4 * c.splits


def test_dense_box_500_splits():
    imgs = _images(600)
    app = fake.make_app(imgs, dense_threshold=200)
    box = bbox_around(LAT0, LON0, 1000)
    got, c = asyncio.run(_run(app, lambda c: c.search_images(box)))
    assert len(got) == 600 and c.splits >= 1


def test_dense_point_full_at_the_minimum_box_is_kept_as_a_lower_bound():
    """A parked dashcam: more images on one point than a page holds. The minimal box that is still full keeps
    its page (a lower bound) and is reported, instead of failing the search (and the city or site) for good."""
    imgs = [fake.FakeImage(image_id=str(1000 + i), lat=LAT0, lon=LON0) for i in range(30)]
    app = fake.make_app(imgs)
    full: list = []
    got, c = asyncio.run(_run(app, lambda c: c.search_images(bbox_around(LAT0, LON0, 50), full_boxes=full), limit=10))
    assert len(got) == 10 and {g.image_id for g in got} <= {i.image_id for i in imgs}
    # the point lies on the split lines, so every quadrant around it holds it: each is full at the minimum size
    assert full and all(b.n_images == 10 for b in full) and c.full_min_boxes == len(full)
    for b in full:
        w, s, e, n = b.box
        assert w <= LON0 <= e and s <= LAT0 <= n and min(e - w, n - s) <= c.min_box_deg
    cov, _ = asyncio.run(_run(fake.make_app(imgs), lambda c: c.count_images_within(LAT0, LON0, 50), limit=10))
    assert (cov.total, cov.perspective, cov.lower_bound) == (10, 10, True)
    note = cov.note()
    assert note["event"] == "mapillary_box_full" and note["sv_perspective_at_least"] == 10 and note["reason"]
    exact, _ = asyncio.run(_run(fake.make_app(imgs), lambda c: c.count_images_within(LAT0, LON0, 50)))  # page limit 2,000: all fit
    assert (exact.total, exact.lower_bound, exact.note()) == (30, False, None)


def test_dense_point_failing_at_the_minimum_box_still_fails_loudly():
    imgs = [fake.FakeImage(image_id=str(1000 + i), lat=LAT0, lon=LON0) for i in range(30)]
    app = fake.make_app(imgs, dense_threshold=20)  # 5xx on every box holding the point
    with pytest.raises(MapillaryError, match="keeps failing on a minimal box"):
        asyncio.run(_run(app, lambda c: c.search_images(bbox_around(LAT0, LON0, 50))))


def test_coverage_count_perspective_within_radius():
    imgs = _images(400)
    app = fake.make_app(imgs)
    cov, _ = asyncio.run(_run(app, lambda c: c.count_images_within(LAT0, LON0, 300)))
    inside = [i for i in imgs if haversine_km(LAT0, LON0, i.lat, i.lon) * 1000 <= 300]
    assert cov.total == len(inside) > 0
    assert cov.perspective == sum(1 for i in inside if not i.is_pano and i.camera_type not in ("equirectangular", "spherical"))


def test_thumbnail_download_fresh_url_and_brightness():
    imgs = _images(10)
    app = fake.make_app(imgs)
    data, _ = asyncio.run(_run(app, lambda c: c.download_thumbnail(imgs[2].image_id)))
    grey = Image.open(io.BytesIO(data)).convert("L")
    assert abs(ImageStat.Stat(grey).mean[0] - imgs[2].brightness) < 6
    assert app[fake.MAPILLARY_STATE].image_requests == [imgs[2].image_id]


def test_expired_thumbnail_url_is_refused():
    imgs = _images(3)
    app = fake.make_app(imgs, ttl_s=-1.0)  # every URL is already expired
    with pytest.raises(ThumbnailUnavailable) as ei:
        asyncio.run(_run(app, lambda c: c.download_thumbnail(imgs[0].image_id)))
    assert ei.value.status == 403 and isinstance(ei.value, MapillaryError)
    st = app[fake.MAPILLARY_STATE]
    assert st.image_requests == [imgs[0].image_id] * 2  # a fresh URL was asked for once more before giving up


def test_thumbnail_url_that_expired_before_use_is_reissued_once():
    imgs = _images(3)
    imgs[1].cdn_expired_first = 1
    app = fake.make_app(imgs)
    data, _ = asyncio.run(_run(app, lambda c: c.download_thumbnail(imgs[1].image_id)))
    assert data.startswith(b"\xff\xd8") and Image.open(io.BytesIO(data)).format == "JPEG"
    st = app[fake.MAPILLARY_STATE]
    assert st.image_requests == [imgs[1].image_id] * 2 and st.thumb_requests == [imgs[1].image_id] * 2


def test_null_thumbnail_url_and_non_jpeg_bytes_are_per_image_failures():
    imgs = _images(3)
    imgs[0].has_thumb = False
    imgs[1].cdn_body = b"<html><body>Content not available</body></html>"
    app = fake.make_app(imgs)

    async def both(c):
        errors = []
        for img in imgs[:2]:
            with pytest.raises(ThumbnailUnavailable) as ei:
                await c.download_thumbnail(img.image_id)
            errors.append(str(ei.value))
        return errors

    errors, _ = asyncio.run(_run(app, both))
    assert "no thumb_1024_url" in errors[0] and "not a JPEG" in errors[1]
    assert imgs[0].image_id not in app[fake.MAPILLARY_STATE].thumb_requests  # nothing to download


def test_error_objects_and_bad_ids():
    app = fake.make_app(_images(5))

    async def no_token():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|x|y", UA)
            c._token = "nope"
            return await c.search_images(bbox_around(LAT0, LON0, 100))

    with pytest.raises(MapillaryError) as ei:
        asyncio.run(no_token())
    assert ei.value.code == 190
    with pytest.raises(ValueError):
        asyncio.run(_run(fake.make_app(_images(5)), lambda c: c.image("../etc/passwd", ("id",))))
    assert parse_image({"id": "12a", "geometry": {"type": "Point", "coordinates": [1, 2]}}) is None
    assert parse_image({"id": "12", "geometry": {"type": "Point", "coordinates": [1, 2]}}).lat == 2
    with pytest.raises(ValueError):
        MapillaryClient(None, "http://x", TOKEN, UA, limit=2001)
    assert len(quadrants((0, 0, 2, 2))) == 4


def test_large_box_is_split_before_asking():
    imgs = _images(50, spread=0.08)
    app = fake.make_app(imgs)
    box = (LON0 - 0.09, LAT0 - 0.09, LON0 + 0.09, LAT0 + 0.09)  # 0.0324 square degrees
    got, c = asyncio.run(_run(app, lambda c: c.search_images(box)))
    assert len(got) == 50 and c.requests_made == 4  # four quadrants of 0.0081, no 400 from the API


def test_search_across_the_antimeridian_and_near_a_pole():
    """A site a few metres west of 180 deg (Taveuni, Fiji): its 150 m box reaches past +180, which the API
    refuses (bbox 400); the client searches one box on each side and finds the cameras east of the line.
    Near a pole the box's latitudes are clamped to 90."""
    lat, lon = -16.80, 179.9995
    rng = random.Random(7)
    imgs = []
    for i in range(40):
        la = lat + rng.uniform(-0.002, 0.002)
        lo = lon + rng.uniform(-0.002, 0.002)
        lo = lo - 360.0 if lo > 180.0 else lo  # wrapped like real coordinates
        imgs.append(fake.FakeImage(image_id=str(500 + i), lat=la, lon=lo))
    polar = [fake.FakeImage(image_id=str(900 + i), lat=89.9995, lon=-170.0 + 40.0 * i) for i in range(5)]
    app = fake.make_app(imgs + polar)

    async def go(c):
        near = await c.images_within(lat, lon, 150.0)
        pole = await c.images_within(89.9990, 0.0, 150.0)
        return near, pole

    (near, pole), _ = asyncio.run(_run(app, go))
    want = sorted(i.image_id for i in imgs if haversine_km(lat, lon, i.lat, i.lon) * 1000.0 <= 150.0)
    assert sorted(i.image_id for i, _ in near) == want
    assert any(i.lon < 0 for i, _ in near) and any(i.lon > 0 for i, _ in near)  # both sides of the line
    want_pole = sorted(i.image_id for i in polar if haversine_km(89.9990, 0.0, i.lat, i.lon) * 1000.0 <= 150.0)
    assert want_pole and sorted(i.image_id for i, _ in pole) == want_pole
    assert normalise_bbox((179.9, 10.0, 180.1, 11.0)) == [(179.9, 10.0, 180.0, 11.0), (-180.0, 10.0, pytest.approx(-179.9), 11.0)]
    assert normalise_bbox((179.9, 0.0, 180.00000001, 1.0)) == [(179.9, 0.0, 180.0, 1.0)]  # no 1 mm sliver box
    assert normalise_bbox((-180.2, 89.0, -179.8, 90.5)) == [(pytest.approx(179.8), 89.0, 180.0, 90.0), (-180.0, 89.0, -179.8, 90.0)]
