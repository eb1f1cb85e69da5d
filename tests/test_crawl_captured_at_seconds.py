"""A Mapillary ``captured_at`` sent in seconds is read as seconds, and the crawl logs the decision.

Leftover of session 13: ``captured_at`` is epoch milliseconds (Mapillary API v4 image fields, "timestamp, ms since
epoch"; api-notes section 6: "clients divide by 1000"), and a value in seconds (1626443291 for 2021-07-16) was kept
as 1626443291 ms, a capture on 1970-01-19, exported as such, unnoticed. The rule
(:func:`geoagent.clients.mapillary.read_captured_at`): a value that as milliseconds falls before 1990-01-01 (no
street-level photo with a position is that old) but as seconds falls between 1990-01-01 and a day from now is read
as seconds (times 1000); any other value before 1990 as milliseconds is unknown. Each such image carries the
decision (``captured_at_note``), and the fetcher logs one ``mapillary_captured_at`` decision per site naming them.
Real client and fetcher over the local Mapillary fake."""

from __future__ import annotations

import asyncio

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.export import _iso
from geoagent.crawl.fetcher import fetch_site_images
from geoagent.crawl.settings import FetcherSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 41.39, 2.17
MS = 1_626_443_291_000  # 2021-07-16T13:48:11Z, the api-notes skeleton's value


def test_captured_at_in_seconds_is_converted_and_logged(tmp_path):
    caps = {"800000000001": MS, "800000000002": MS // 1000, "800000000003": 5, "800000000004": 0,
            "800000000005": str(MS // 1000)}
    # 60 m apart, so the fetcher keeps (and downloads) each of them
    imgs = [fake.FakeImage(iid, LAT + 0.00054 * i, LON, brightness=150, pattern_seed=str(i))
            for i, iid in enumerate(caps)]
    for img in imgs:
        img.captured_at_ms = caps[img.image_id]
    notes = []

    async def note(rec):
        notes.append(rec)

    async def go():
        async with serve(fake.make_app(imgs)) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|1|tok", UA)
            found = await c.images_within(LAT, LON, 400)
            res = await fetch_site_images({"site": "s1", "lat": LAT, "lon": LON}, c,
                                          FetcherSettings(radius_m=400, max_images_per_site=8), tmp_path, on_note=note)
            return found, res

    found, res = asyncio.run(go())
    got = {img.image_id: img.captured_at_ms for img, _ in found}
    assert got == {"800000000001": MS, "800000000002": MS, "800000000003": None, "800000000004": None,
                   "800000000005": MS}
    assert _iso(got["800000000002"]) == "2021-07-16T13:48:11Z"  # before: 1970-01-19T19:47:23Z
    by_id = {img.image_id: img for img, _ in found}
    assert by_id["800000000001"].captured_at_note is None
    assert "seconds" in by_id["800000000002"].captured_at_note
    assert "unknown" in by_id["800000000003"].captured_at_note
    # the selection record keeps the decision beside the value
    kept = {k["image_id"]: k for k in res.kept}
    assert kept["800000000002"]["captured_at_ms"] == MS and "seconds" in kept["800000000002"]["captured_at_note"]
    assert "captured_at_note" not in kept["800000000001"]
    # one decision-log record for the site, naming each image
    recs = [n for n in notes if n.get("event") == "mapillary_captured_at"]
    assert len(recs) == 1
    assert recs[0]["converted_from_seconds"] == ["800000000002", "800000000005"]
    assert recs[0]["unknown"] == ["800000000003", "800000000004"]
    assert "milliseconds" in recs[0]["reason"]
