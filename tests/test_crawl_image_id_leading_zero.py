"""A Mapillary image id written with a leading zero is the same image as the id without it.

Leftover of session 14: ids are numeric strings in Graph API v4 (api-notes section 6: ``id``, "numeric id as a
string"; the official SDK's ``fetch_detections(identity: int, ...)`` takes the id as an integer), so ``0800000000001``
and ``800000000001`` write one number, one image. They were two images: a search answer that sent both spellings
(quadrant edges repeat an image, here once zero-padded) was counted twice for coverage, the two spellings became two
file names, and a human verdict written with a zero-padded id did not reach the image. The rule now
(:func:`geoagent.paths.safe_image_id`, where every id becomes a file name): an id is 1-32 ASCII digits, written in its
canonical form (no leading zero), so every reader that takes an id through it agrees. Real client and fetcher over
the local Mapillary fake."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.fetcher import fetch_site_images, image_path
from geoagent.crawl.image_audit import image_key, read_human_verdicts
from geoagent.crawl.settings import FetcherSettings
from geoagent.paths import safe_image_id
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 41.39, 2.17


def search_count_fetch(app, tmp_path):
    """The crawl's Mapillary steps for site ``s1`` at (LAT, LON) against the fake ``app``: the images found within
    400 m, the coverage count, and the fetcher's result (images written under ``tmp_path/s1``)."""
    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|1|tok", UA)
            found = await c.images_within(LAT, LON, 400)
            count = await c.count_images_within(LAT, LON, 400)
            res = await fetch_site_images({"site": "s1", "lat": LAT, "lon": LON}, c,
                                          FetcherSettings(radius_m=400, max_images_per_site=8), tmp_path)
            return found, count, res

    return asyncio.run(go())


def test_an_id_is_written_in_its_canonical_form_wherever_it_becomes_a_file_name(tmp_path):
    assert safe_image_id("0800000000001") == "800000000001"
    assert safe_image_id("000800000000001") == safe_image_id(800000000001) == "800000000001"
    assert image_path(tmp_path, "s1", "0800000000001") == image_path(tmp_path, "s1", "800000000001")
    assert image_key("images/s1/0800000000001.jpg") == image_key("800000000001") == "800000000001"
    # not ASCII digits (a superscript, Arabic-Indic 3), or zero: ids are positive (session 16, was image "0")
    for bad in ("", "12a", "-1", "1" * 33, "\u00b2", "\u0663", "0", "00"):
        with pytest.raises(ValueError):
            safe_image_id(bad)
        with pytest.raises(ValueError):
            image_key(bad)


def test_one_image_sent_under_two_spellings_is_found_and_fetched_once(tmp_path):
    # the same camera position, once zero-padded: one image (before: 2 found, 2 file names)
    imgs = [fake.FakeImage("800000000001", LAT, LON, brightness=150),
            fake.FakeImage("0800000000001", LAT, LON, brightness=150),
            fake.FakeImage("800000000002", LAT + 0.00054, LON, brightness=150, pattern_seed="b")]

    found, count, res = search_count_fetch(fake.make_app(imgs), tmp_path)
    assert [img.image_id for img, _ in found] == ["800000000001", "800000000002"]
    assert count.total == 2
    assert sorted(k["image_id"] for k in res.kept) == ["800000000001", "800000000002"]
    assert not res.rejected
    assert sorted(p.name for p in (tmp_path / "s1").glob("*.jpg")) == ["800000000001.jpg", "800000000002.jpg"]


def test_a_human_verdict_written_with_a_leading_zero_reaches_the_image(tmp_path):
    p = tmp_path / "verdicts.csv"
    p.write_text("image,human_verdict\nimages/s1/0800000000001.jpg,exclude\n800000000002,keep\n", encoding="utf-8")
    assert sorted(read_human_verdicts(p)) == ["800000000001", "800000000002"]
    # the two spellings of one image with different verdicts are a conflict, as for one spelling
    p.write_text("image,human_verdict\n0800000000001,exclude\n800000000001,keep\n", encoding="utf-8")
    with pytest.raises(ValueError, match="conflicting"):
        read_human_verdicts(p)
