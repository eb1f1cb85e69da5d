"""Adversarial review (session 13): image fields of hostile value (``captured_at``, ``compass_angle``, ``is_pano``).

``captured_at`` values no camera wrote. Mapillary's ``captured_at`` is epoch
milliseconds; a value far out of range (1e20, -1e18) was kept in the image's metadata and crashed the export
(``OSError: Value too large``, ``ValueError: year ... out of range`` in the ISO conversion) of the whole crawl, a
date after the download (2100) was exported as a capture time, and a JSON ``true`` became 1 ms (1970). Such a value
is now unknown (None), as a string that is not a number already was. Real client, the Mapillary fake."""

from __future__ import annotations

import asyncio
import time

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.export import _iso
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT0, LON0 = 41.39, 2.17
GOOD = 1_700_000_000_000


def test_out_of_range_or_non_numeric_captured_at_is_unknown():
    caps = {"800000000001": 10**20, "800000000002": 4_102_444_800_000, "800000000003": True,
            "800000000004": -10**18, "800000000005": "2023-01-01T00:00:00Z", "800000000006": GOOD,
            "800000000007": str(GOOD), "800000000008": float(GOOD)}
    imgs = [fake_mly.FakeImage(iid, LAT0 + 0.0001 * i, LON0) for i, iid in enumerate(caps)]
    for img in imgs:
        img.captured_at_ms = caps[img.image_id]
    st = fake_mly.MapillaryFakeState(images=imgs)

    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            return await MapillaryClient(http, base, "MLY|1|tok", UA).images_within(LAT0, LON0, 150)

    got = {img.image_id: img.captured_at_ms for img, _ in asyncio.run(go())}
    assert got == {"800000000001": None, "800000000002": None, "800000000003": None, "800000000004": None,
                   "800000000005": None, "800000000006": GOOD, "800000000007": GOOD, "800000000008": GOOD}
    for ms in got.values():  # every value kept converts for the export
        iso = _iso(ms)
        assert iso is None or iso <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def test_compass_angle_is_a_bearing_or_unknown():
    """Same review: ``compass_angle`` (degrees, 0-360 per the API) was kept as sent: 720 or -90 exported as such, a
    JSON ``true`` as 1 degree, the string "inf" as infinity. A finite number is now taken modulo 360; anything else is
    unknown (None)."""
    angles = {"800000000001": 720.0, "800000000002": -90.0, "800000000003": True, "800000000004": "inf",
              "800000000005": "abc", "800000000006": 123.5, "800000000007": "45"}
    imgs = [fake_mly.FakeImage(iid, LAT0 + 0.0001 * i, LON0, compass_angle=a) for i, (iid, a) in enumerate(angles.items())]
    st = fake_mly.MapillaryFakeState(images=imgs)

    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            return await MapillaryClient(http, base, "MLY|1|tok", UA).images_within(LAT0, LON0, 150)

    got = {img.image_id: img.compass_angle for img, _ in asyncio.run(go())}
    assert got == {"800000000001": 0.0, "800000000002": 270.0, "800000000003": None, "800000000004": None,
                   "800000000005": None, "800000000006": 123.5, "800000000007": 45.0}


def test_is_pano_as_text_is_read_as_the_flag_it_spells():
    """Same review: ``is_pano`` sent as the text "false" was ``bool("false")``, True: a perspective image counted as a
    panorama, lowering a site's or city's coverage count (and so its admission). "true"/"false" read as the flags they
    spell; a value that is neither a boolean nor such a text counts as a panorama (never as perspective coverage)."""
    panos = {"800000000001": "false", "800000000002": "true", "800000000003": False, "800000000004": True,
             "800000000005": "maybe", "800000000006": 0}
    imgs = [fake_mly.FakeImage(iid, LAT0 + 0.0001 * i, LON0, is_pano=p) for i, (iid, p) in enumerate(panos.items())]
    st = fake_mly.MapillaryFakeState(images=imgs)

    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            return await MapillaryClient(http, base, "MLY|1|tok", UA).images_within(LAT0, LON0, 150)

    got = {img.image_id: img.is_pano for img, _ in asyncio.run(go())}
    assert got == {"800000000001": False, "800000000002": True, "800000000003": False, "800000000004": True,
                   "800000000005": True, "800000000006": True}


def test_camera_type_that_is_no_text_does_not_break_the_coverage_count():
    """Same review: ``camera_type`` sent as a list or an object raised ``TypeError: unhashable type`` from
    :attr:`MapillaryImage.perspective`, out of the coverage count, failing the city's screening or the site walk. A
    value that is not text is now absent (None): the image is judged by ``is_pano`` alone, as one without the field."""
    types = {"800000000001": ["perspective"], "800000000002": {"a": 1}, "800000000003": "fisheye",
             "800000000004": "perspective"}
    imgs = [fake_mly.FakeImage(iid, LAT0 + 0.0001 * i, LON0, camera_type=t) for i, (iid, t) in enumerate(types.items())]
    st = fake_mly.MapillaryFakeState(images=imgs)

    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await m.images_within(LAT0, LON0, 150), await m.count_images_within(LAT0, LON0, 150)

    found, count = asyncio.run(go())
    assert {i.image_id: i.camera_type for i, _ in found} == {"800000000001": None, "800000000002": None,
                                                              "800000000003": "fisheye", "800000000004": "perspective"}
    assert (count.total, count.perspective) == (4, 4)
