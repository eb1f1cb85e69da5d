"""Session 12 adversarial review of the crawl pipeline (seed 000 Sec. 3) and its API clients: malformed but
plausible API answers (identifiers that become file names, WKT variants, elements without coordinates,
a server that ignores OFFSET) against the local fakes of geoagent/sandbox."""

from __future__ import annotations

import asyncio
import math
import os

import pytest

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.fetcher import fetch_site_images
from geoagent.crawl.settings import FetcherSettings
from geoagent.paths import safe_image_id, safe_name
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as mly_fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 48.85, 2.35


def _offset(dx_m: float, dy_m: float) -> tuple[float, float]:
    return LAT + dy_m / 111195.0, LON + dx_m / (111195.0 * math.cos(math.radians(LAT)))


# --- identifiers that become file names ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["123\n", "site_a\n"])
def test_a_trailing_newline_is_not_a_safe_file_name(bad):
    """``$`` in a ``re.match`` pattern also matches before a final newline: ``"123\\n"`` passed as an image id and
    ``"site_a\\n"`` as a site id, and became file names with a newline in them."""
    with pytest.raises(ValueError):
        safe_name(bad, what="site id")
    if bad[:-1].isdigit():
        with pytest.raises(ValueError):
            safe_image_id(bad)


def test_an_image_id_with_a_trailing_newline_is_not_an_image_id(tmp_path):
    """A search answer whose ``id`` is digits plus a newline (``"90001\\n"``) was taken as an image id: the fetcher
    asked the Graph API for ``/90001%0A`` and recorded it in the site's selection under that id (a file name
    ``90001\\n.jpg`` had the API answered). It is not a Mapillary id (digits only): left out like any other
    unusable search row, never requested."""
    a_lat, a_lon = _offset(0, 0)
    b_lat, b_lon = _offset(80, 0)
    imgs = [mly_fake.FakeImage(image_id="90000", lat=a_lat, lon=a_lon, brightness=150),
            mly_fake.FakeImage(image_id="90001\n", lat=b_lat, lon=b_lon, brightness=150)]
    app = mly_fake.make_app(imgs)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|1|x", UA)
            return await fetch_site_images({"site": "paris_test", "lat": LAT, "lon": LON}, c, FetcherSettings(),
                                           tmp_path)

    res = asyncio.run(go())
    names = sorted(os.listdir(tmp_path / "paris_test"))
    assert not [n for n in names if "\n" in n], names
    assert [k["image_id"] for k in res.kept] == ["90000"]
    assert [r["image_id"] for r in res.rejected] == []
    assert app[mly_fake.MAPILLARY_STATE].image_requests == ["90000"]


# --- WDQS: WKT variants and malformed bindings ------------------------------------------------------------------

W_LAT, W_LON = 41.39, 2.17


def _wdqs_run(app, fn):
    from geoagent.clients.wdqs import WdqsClient

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            return await fn(WdqsClient(http, base + "/sparql", UA))

    return asyncio.run(go())


def test_wkt_variants_in_an_area_answer():
    """One ``?coord`` literal with a malformed number (``Point(2.17e 41.39)``) raised ``ValueError`` out of the
    whole area query, which the crawl's stages take as permanent: the site (or the city's sampling) was
    dead-lettered for one bad row among hundreds. Now that row is skipped; ``POINT(...)`` (WKT keywords are
    case-insensitive) is read as the point it is; a coordinate on another globe (WDQS writes its IRI before the
    point: ``<http://www.wikidata.org/entity/Q405> Point(...)``, the Moon) is no place near a site, Earth's
    (Q2) is."""
    from geoagent.sandbox import wdqs as wd_fake

    globe = "http://www.wikidata.org/entity/"
    ents = [wd_fake.FakeEntity("Q101", "Plain", 41.391, 2.171),
            wd_fake.FakeEntity("Q102", "Upper", 41.392, 2.172, coord_wkt="POINT(2.172 41.392)"),
            wd_fake.FakeEntity("Q103", "Broken", 41.39, 2.17, coord_wkt="Point(2.17e 41.39)"),
            wd_fake.FakeEntity("Q104", "Moon", 41.393, 2.173, coord_wkt=f"<{globe}Q405> Point(2.173 41.393)"),
            wd_fake.FakeEntity("Q105", "Earth", 41.394, 2.174, coord_wkt=f"<{globe}Q2> Point(2.174 41.394)")]
    got = _wdqs_run(wd_fake.make_app(ents), lambda c: c.entities_around(W_LAT, W_LON, 2.0, page_size=50))
    assert {(e.qid, e.lat, e.lon) for e in got} == {("Q101", 41.391, 2.171), ("Q102", 41.392, 2.172),
                                                     ("Q105", 41.394, 2.174)}


@pytest.mark.parametrize("wkt", ["Point(- 48.85)", "Point(1e 2)", "Point(1.2.3 4)"])
def test_parse_point_never_raises(wkt):
    from geoagent.clients.wdqs import parse_point

    assert parse_point(wkt) is None


def test_malformed_bindings_are_skipped_not_raised():
    """A binding that is not an object, or a sitelink count that overflows an int (``"1e400"``), raised
    ``AttributeError``/``OverflowError`` out of the page's parse."""
    from geoagent.clients.wdqs import entity_from_binding

    item = {"type": "uri", "value": "http://www.wikidata.org/entity/Q42"}
    coord = {"type": "literal", "value": "Point(2 48)"}
    assert entity_from_binding(None) is None and entity_from_binding("x") is None
    e = entity_from_binding({"item": item, "coord": coord, "links": {"type": "literal", "value": "1e400"},
                             "dist": {"type": "literal", "value": "NaN"}})
    assert e is not None and e.sitelinks is None and e.dist_km is None


# --- Overpass: elements the screener must survive ----------------------------------------------------------------


def test_malformed_place_elements_are_skipped_not_fatal():
    """A node with ``"lat": null``, one without an ``id``, ``tags`` that is not an object, or an element that is
    not an object at all raised ``TypeError``/``KeyError``/``AttributeError`` out of the screening (retried and
    dead-lettered: the city was never screened). They are skipped; ``L_district`` comes from the usable nodes."""
    from geoagent.clients.overpass import OverpassClient
    from geoagent.crawl.screener import l_district_km, measure_site_scale
    from geoagent.crawl.settings import ScreenerSettings
    from geoagent.sandbox import overpass as op_fake

    good = [{"type": "node", "id": 100 + i, "lat": LAT + 0.004 * i, "lon": LON + 0.003 * (i % 2),
             "tags": {"place": "neighbourhood", "name": f"N{i}"}} for i in range(5)]
    bad = [None, "node", {"type": "node", "id": 9, "lat": None, "lon": LON, "tags": {"place": "suburb"}},
           {"type": "node", "lat": LAT, "lon": LON, "tags": {"place": "suburb"}},
           {"type": "node", "id": "n12", "lat": LAT, "lon": LON, "tags": {"place": "suburb"}},
           {"type": "node", "id": 13, "lat": 95.0, "lon": LON, "tags": {"place": "suburb"}}]
    odd_tags = {"type": "node", "id": 14, "lat": LAT + 0.03, "lon": LON, "tags": "suburb"}  # usable position, no tags
    app = op_fake.make_app(good)
    app[op_fake.OVERPASS_STATE].passthrough = bad + [odd_tags]

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            return await measure_site_scale("paris_x", LAT, LON, OverpassClient(http, base + "/api", UA),
                                            ScreenerSettings())

    row = asyncio.run(go())
    pts = good + [odd_tags]
    assert row["n_nodes_raw"] == row["n_nodes_filtered"] == 6
    assert row["L_district_median_km"] == round(l_district_km([p["lat"] for p in pts], [p["lon"] for p in pts]), 2)


def test_an_endpoint_that_ignores_offset_fails_instead_of_paging_forever():
    """WDQS pages with ``LIMIT``/``OFFSET`` until a page comes back short. An endpoint that drops ``OFFSET`` (a
    proxy, a mirror) answers the first page again and again: the client asked for pages without end, holding
    every copy in memory. A full page that repeats the previous one is now an error naming the cause."""
    from geoagent.clients.wdqs import WdqsError
    from geoagent.sandbox import wdqs as wd_fake

    ents = [wd_fake.FakeEntity(f"Q{200 + i}", f"Thing {i}", W_LAT + 0.0001 * i, W_LON) for i in range(30)]
    app = wd_fake.make_app(ents)
    app[wd_fake.WDQS_STATE].ignore_offset = True

    async def bounded(c):
        return await asyncio.wait_for(c.entities_around(W_LAT, W_LON, 2.0, page_size=10, max_split_depth=0), 20)

    with pytest.raises(WdqsError, match="OFFSET"):
        _wdqs_run(app, bounded)
    assert len(app[wd_fake.WDQS_STATE].queries) == 2


# --- imagery fetcher: perspective images only --------------------------------------------------------------------


def test_the_fetcher_keeps_perspective_frames_not_fisheye(tmp_path):
    """Sec. 3.2 takes *perspective* Mapillary images; the release's fetcher selects ``camera_type ==
    "perspective"`` (geocontext/streetview.py ``pick``: it "excludes fisheye (heavy distortion) and equirectangular
    (full panorama)"; 71 of 200 Paris candidates were fisheye). Ours only left out panoramas, so a fisheye frame
    was downloaded, kept and audited. It is skipped before download now, with its own reason (and summary
    category); an image whose ``camera_type`` is absent is still judged by ``is_pano`` alone."""
    from geoagent.crawl.campaign import image_counts

    spots = [(0, 0, "perspective"), (80, 0, "fisheye"), (-80, 0, "perspective"), (0, 80, None)]
    imgs = []
    for i, (dx, dy, cam) in enumerate(spots):
        lat, lon = _offset(dx, dy)
        imgs.append(mly_fake.FakeImage(image_id=str(91000 + i), lat=lat, lon=lon, brightness=150,
                                       camera_type=cam))  # type: ignore[arg-type]
    app = mly_fake.make_app(imgs)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|1|x", UA)
            return await fetch_site_images({"site": "paris_test", "lat": LAT, "lon": LON}, c, FetcherSettings(),
                                           tmp_path / "images")

    res = asyncio.run(go())
    assert sorted(k["image_id"] for k in res.kept) == ["91000", "91002", "91003"]
    (rej,) = res.rejected
    assert rej["image_id"] == "91001" and rej["reason"].startswith("not a perspective camera"), rej
    assert "91001" not in app[mly_fake.MAPILLARY_STATE].thumb_requests  # never downloaded
    state = tmp_path / "state"
    (state / "image_selection").mkdir(parents=True)
    (state / "image_selection" / "paris_test.json").write_text(__import__("json").dumps(res.to_json()))
    counts = image_counts(state, tmp_path / "images")
    assert counts["skipped"] == {"not perspective (fisheye or another non-perspective camera)": 1}


# --- site sampler: a candidate without a label is no landmark ---------------------------------------------------


def test_the_sampler_never_takes_a_candidate_named_by_its_bare_qid():
    """WDQS's label service answers an item's bare QID when it has no label in the asked languages (``en``,
    ``mul``). The release's site selection drops such candidates (``00_select_sites.py``: "Seen once: Marrakech's
    Q3496072 (a stadium with only French/Arabic names) ..."; ``df[~df.name.eq(df.qid)]``), and our own auditor
    never rates a bare-QID "name" (App. A.3 rates names). The sampler took it as a site: landmark ``Q104``, site id
    ``testtown_q104``. Now the walk skips it before any coverage call, with its decision logged."""
    from geoagent.clients.wdqs import WdqsClient
    from geoagent.crawl.sampler import sample_sites
    from geoagent.crawl.settings import CitySpec, SamplerSettings
    from geoagent.sandbox import wdqs as wd_fake

    spots = {"Q101": (0, 0), "Q102": (600, 0), "Q103": (0, 600), "Q104": (-600, 0)}
    ents, imgs = [], []
    for k, (qid, (dx, dy)) in enumerate(spots.items()):
        lat, lon = _offset(dx, dy)
        ents.append(wd_fake.FakeEntity(qid, "" if qid == "Q104" else f"Museum {qid}", lat, lon, 5, ("Q33506",)))
        imgs += [mly_fake.FakeImage(str(920000 + 100 * k + i), lat + 0.0001 * (i - 4), lon) for i in range(9)]
    wd_app, mly_app = wd_fake.make_app(ents), mly_fake.make_app(imgs)

    async def go():
        async with serve(wd_app) as wd, serve(mly_app) as mly, HttpClient(default_policy=FAST) as http:
            city = CitySpec(city="Test Town", country="FR", continent="EU", lat=LAT, lon=LON)
            return await sample_sites(city, WdqsClient(http, wd + "/sparql", UA), MapillaryClient(http, mly, "MLY|1|x", UA),
                                      SamplerSettings(sites_per_city=4), seed=3)

    res = asyncio.run(go())
    assert sorted(s["qid"] for s in res.sites) == ["Q101", "Q102", "Q103"], res.walk
    assert {"qid": "Q104", "decision": "skip_no_label", "label": "Q104"} in res.walk
    assert res.coverage_calls == 3
