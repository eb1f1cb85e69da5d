"""A city or site whose Mapillary search holds a box still full at the minimum box size (a parked dashcam's
thousands of frames within ~11 m) is screened, sampled and fetched with what the search got (a lower bound),
and the box is noted in the decision log, instead of failing on every resume. Real clients, local fakes."""

from __future__ import annotations

import asyncio

from geoagent.clients.mapillary import MapillaryClient
from geoagent.clients.overpass import OverpassClient
from geoagent.crawl.fetcher import fetch_site_images
from geoagent.crawl.screener import screen_city
from geoagent.crawl.settings import CitySpec, FetcherSettings, ScreenerSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox import overpass as fake_op
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)
LAT0, LON0 = 52.37, 4.895
PAGE = 10  # the client's page limit, standing in for the API's 2,000


def _dashcam(n=30):
    return [fake_mly.FakeImage(image_id=str(5000 + i), lat=LAT0, lon=LON0, brightness=150.0, pattern_seed=f"p{i}")
            for i in range(n)]


def test_screening_keeps_lower_bound_counts_and_notes_the_full_box():
    els = [{"type": "node", "id": 10 + i, "lat": LAT0 + 0.01 * i, "lon": LON0, "tags": {"place": "suburb", "name": f"S{i}"}}
           for i in range(4)]
    op_app, mly_app = fake_op.make_app(els), fake_mly.make_app(_dashcam())
    notes: list[dict] = []

    async def note(rec):
        notes.append(rec)

    async def go():
        async with serve(op_app) as op, serve(mly_app) as mly, HttpClient(default_policy=FAST) as http:
            overpass = OverpassClient(http, op + "/api", UA)
            mapillary = MapillaryClient(http, mly, "MLY|1|tok", UA, limit=PAGE)
            return await screen_city(CitySpec(city="Dashcamville", country="NL", continent="EU", lat=LAT0, lon=LON0),
                                     overpass, mapillary, ScreenerSettings(), on_note=note)

    res = asyncio.run(go())
    assert res.sv_lower_bound and res.to_json()["sv_lower_bound"] is True
    assert res.sv_total >= PAGE and res.sv_perspective >= PAGE  # at least the page that was kept
    assert len(notes) == 1 and notes[0]["event"] == "mapillary_box_full" and "lower bound" in notes[0]["reason"]
    assert notes[0]["sv_perspective_at_least"] == res.sv_perspective and notes[0]["full_boxes"][0]["n_images"] == PAGE


def test_fetch_uses_the_full_box_images_and_records_it(tmp_path):
    mly_app = fake_mly.make_app(_dashcam())
    notes: list[dict] = []

    async def note(rec):
        notes.append(rec)

    async def go():
        async with serve(mly_app) as mly, HttpClient(default_policy=FAST) as http:
            mapillary = MapillaryClient(http, mly, "MLY|1|tok", UA, limit=PAGE)
            return await fetch_site_images({"site": "dashcam_site", "lat": LAT0, "lon": LON0}, mapillary,
                                           FetcherSettings(), tmp_path, on_note=note)

    res = asyncio.run(go())
    assert res.kept  # one image (the rest stand on the same spot: within min_separation_m)
    assert res.to_json()["full_boxes"][0]["n_images"] == PAGE
    assert len(notes) == 1 and notes[0]["event"] == "mapillary_box_full" and notes[0]["n_found"] == PAGE
