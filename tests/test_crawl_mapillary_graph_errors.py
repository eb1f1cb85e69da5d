"""Graph API errors of Mapillary's single-image requests, through the real client and the local fake
(geoagent.sandbox.mapillary shapes: TOKEN_EXPIRED, rate_limited, NO_PERMISSION_ONLY):

* an expired or revoked token (OAuth code 190, which the Graph API answers with HTTP 400) on ``GET /{id}`` is
  the token's refusal, so the crawl stops "authentication failed" (exit 5), as a refused search does;
* throttling (Graph codes 4, 17, 32, 613, at HTTP 400, 403, 429 or inside a 200) is retried with backoff, never
  taken for a deleted image nor for a refused token (a 403 is not the token's when its body says throttling);
* the "does not exist" error (code 100, subcode 33) is a deleted image, unless its message names only missing
  permissions (a hypothetical variant: the Graph API's own message names both causes at once)."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.clients.mapillary import MapillaryClient, MapillaryError, ThumbnailUnavailable
from geoagent.crawl.fetcher import fetch_site_images
from geoagent.crawl.settings import FetcherSettings
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError, RetriesExhausted
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT0, LON0 = 48.2, 16.37
IID = "700000000001"


def _run(img: fake_mly.FakeImage, call):
    app = fake_mly.make_app([img])

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            try:
                return await call(m), None, m
            except Exception as e:  # noqa: BLE001 - the test looks at what was raised
                return None, e, m

    out, exc, m = asyncio.run(go())
    return out, exc, m, app[fake_mly.MAPILLARY_STATE]


def test_an_expired_token_on_a_single_image_request_is_the_tokens_refusal():
    img = fake_mly.FakeImage(IID, LAT0, LON0, graph_error=fake_mly.TOKEN_EXPIRED)
    _, exc, m, st = _run(img, lambda m: m.download_thumbnail(IID))
    assert isinstance(exc, MapillaryError) and not isinstance(exc, ThumbnailUnavailable), repr(exc)
    assert exc.code == 190 and exc.status == 400
    assert m.token_refused(exc) == "HTTP 400, Mapillary error 190"
    assert st.image_requests == [IID]  # not retried: a token does not come back by itself


@pytest.mark.parametrize("code", [4, 17, 32, 613])
@pytest.mark.parametrize("status", [200, 400, 403, 429])
def test_throttling_is_retried_with_backoff(code, status):
    img = fake_mly.FakeImage(IID, LAT0, LON0, graph_error=fake_mly.rate_limited(code, status), graph_error_times=2)
    url, exc, _, st = _run(img, lambda m: m.fresh_thumb_url(IID))
    assert exc is None and url.startswith("http"), repr(exc)
    assert st.image_requests == [IID] * 3  # two throttled answers, then the image


@pytest.mark.parametrize("status", [400, 403])
def test_throttling_that_persists_is_a_retryable_failure_not_a_deleted_image_nor_a_refused_token(status):
    img = fake_mly.FakeImage(IID, LAT0, LON0, graph_error=fake_mly.rate_limited(4, status))
    _, exc, m, st = _run(img, lambda m: m.download_thumbnail(IID))
    assert isinstance(exc, RetriesExhausted) and not isinstance(exc, (ThumbnailUnavailable, PermanentHTTPError)), repr(exc)
    assert "4" in exc.last and "limit" in exc.last
    assert m.token_refused(exc) is None
    assert len(st.image_requests) == FAST.max_attempts


@pytest.mark.parametrize("times", [2, None])
def test_a_throttled_search_is_retried_then_raised_as_retryable(times):
    imgs = [fake_mly.FakeImage(IID, LAT0, LON0)]
    st = fake_mly.MapillaryFakeState(images=imgs, search_error=fake_mly.rate_limited(613, 403), search_error_times=times)

    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            try:
                return await m.images_within(LAT0, LON0, 50.0), m
            except Exception as e:  # noqa: BLE001 - the test looks at what was raised
                return e, m

    out, m = asyncio.run(go())
    if times is None:
        assert isinstance(out, RetriesExhausted) and "613" in out.last and m.token_refused(out) is None, repr(out)
        assert len(st.search_requests) == FAST.max_attempts
    else:
        assert [i.image_id for i, _ in out] == [IID] and len(st.search_requests) == 3
    assert m.throttled == min(FAST.max_attempts, times or FAST.max_attempts)
    assert m.token_refused(MapillaryError("HTTP 403: Mapillary error 4: limit", code=4, status=403)) is None


def test_a_throttled_image_fails_the_site_for_a_later_retry_instead_of_being_rejected_as_gone(tmp_path):
    imgs = [fake_mly.FakeImage(IID, LAT0, LON0, graph_error=fake_mly.rate_limited(17, 400))]
    app = fake_mly.make_app(imgs)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images({"site": "s1", "lat": LAT0, "lon": LON0}, m, FetcherSettings(), tmp_path)

    with pytest.raises(RetriesExhausted):
        asyncio.run(go())


def test_does_not_exist_is_gone_but_a_permission_only_message_is_told_apart():
    gone = fake_mly.FakeImage(IID, LAT0, LON0, deleted=True)
    _, exc, m, _ = _run(gone, lambda m: m.fresh_thumb_url(IID))
    assert isinstance(exc, ThumbnailUnavailable) and "gone" in str(exc) and exc.status == 400
    assert m.token_refused(exc) is None
    perm = fake_mly.FakeImage(IID, LAT0, LON0, graph_error=fake_mly.NO_PERMISSION_ONLY)
    _, exc, m, _ = _run(perm, lambda m: m.fresh_thumb_url(IID))
    assert isinstance(exc, ThumbnailUnavailable) and "gone" not in str(exc), repr(exc)
    assert "missing permissions" in str(exc)


def test_a_token_revoked_after_the_search_stops_the_crawl_with_exit_5(tmp_path, monkeypatch):
    """The searches (screening, sampling) go through; every single-image request then answers code 190 (HTTP
    400): the fetcher's first image stops the crawl as the search's refusal does (exit 5, nothing dead)."""
    from geoagent import constants as C
    from geoagent import engine
    from geoagent.config import config_from_dict
    from geoagent.crawl.demo import SANDBOX_POLICY
    from geoagent.sandbox.city import build_world, serve_world

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|engine|test")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    world = build_world(0)
    for img in world.images:
        img.graph_error = fake_mly.TOKEN_EXPIRED

    async def go():
        async with serve_world(world) as sb:
            cfg = config_from_dict({
                "campaign": {"name": "crawl-revoked", "kind": "crawl"}, "budget": {"cap_usd": 0.0},
                "crawl": {"contact": "mailto:e2e@example.org", "cities": world.cities, "endpoints": sb["endpoints"],
                          "policies": {k: SANDBOX_POLICY for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")}},
            })
            return await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = asyncio.run(go())
    text = out.summary()
    assert out.exit_code == 5 and out.status == "authentication failed", text
    assert "the Mapillary API refused the access token (HTTP 400, Mapillary error 190)" in text
    assert all(c.dead == 0 for c in out.counts.values()), text
    assert out.counts[C.EDGE_SITES].ready > 0, text  # the sites stay queued for a re-run with a good token


GONE_TEXT = "Unsupported get request. Object with ID '{id}' does not exist"


@pytest.mark.parametrize("shape", [fake_mly.GraphErrorShape(404, 100, 33, GONE_TEXT, "GraphMethodException"),
                                   fake_mly.GraphErrorShape(410, 100, 0, "(#100) Object was deleted", "GraphMethodException")],
                         ids=["404", "410"])
def test_a_404_or_410_with_a_graph_error_body_is_a_gone_image_not_a_failed_site(tmp_path, shape):
    """Adversarial review (session 11): before c078d05 a 404/410 of ``GET /{id}`` was a gone image whatever its
    body (PermanentHTTPError 404/410); since then a Graph error body made it a MapillaryError that only an HTTP
    400 "does not exist" read as gone, so the fetcher raised it and the whole site failed (queue retries, then
    dead-lettered) for one deleted image."""
    gone = fake_mly.FakeImage(IID, LAT0, LON0, graph_error=shape)
    _, exc, m, st = _run(gone, lambda m: m.fresh_thumb_url(IID))
    assert isinstance(exc, ThumbnailUnavailable) and exc.kind == "gone" and exc.status == shape.status, repr(exc)
    assert m.token_refused(exc) is None and st.image_requests == [IID]  # not retried
    imgs = [fake_mly.FakeImage(IID, LAT0, LON0, graph_error=shape),
            fake_mly.FakeImage("700000000002", LAT0 + 0.0009, LON0, brightness=170.0)]
    app = fake_mly.make_app(imgs)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images({"site": "s1", "lat": LAT0, "lon": LON0}, m, FetcherSettings(), tmp_path)

    res = asyncio.run(go())
    assert [k["image_id"] for k in res.kept] == ["700000000002"]
    assert [(r["image_id"], "gone" in r["reason"]) for r in res.rejected] == [(IID, True)]
