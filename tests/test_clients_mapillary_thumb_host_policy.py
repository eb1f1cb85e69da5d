"""Adversarial review (session 13): a thumbnail URL on a host that already has a usage policy of its own. The client
installed the ``thumbnails`` policy on whatever host a thumbnail URL named, so a URL on the Graph API host itself (as
the sandbox hands out by default) replaced the Graph API's policy, and one on another API's host (say WDQS: 1 query
at a time) would lift that API's limits to the thumbnails' (20/s, 8 at once) for the rest of the crawl. The
thumbnails policy now goes only to hosts without a policy, never over the Graph API's or another host's. Real
client and HTTP layer, the Mapillary fake (thumbnail URLs on its own host) and a second fake as the CDN host."""

from __future__ import annotations

import asyncio

from geoagent.clients.mapillary import MapillaryClient
from geoagent.clients.overpass import host_of
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
API = HostPolicy(rate=500, period_s=1.0, concurrency=4, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.05,
                 timeout_s=5)
THUMBS = HostPolicy(rate=900, period_s=1.0, concurrency=6, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                    timeout_s=5)
OTHER = HostPolicy(rate=1, period_s=1.0, concurrency=1, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                   timeout_s=5)


def _imgs():
    return [fake_mly.FakeImage("800000000001", 41.39, 2.17, brightness=150.0)]


def test_thumbnails_on_the_graph_api_host_keep_the_api_policy():
    st = fake_mly.MapillaryFakeState(images=_imgs())  # thumbnail URLs name the Graph API host

    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA, policy=API, thumb_policy=THUMBS)
            http.set_policy(m.host, API)
            body = await m.download_thumbnail("800000000001")
            return body, http.policy_for(m.host)

    body, pol = asyncio.run(go())
    assert body.startswith(b"\xff\xd8") and pol is API


def test_thumbnails_on_another_apis_host_keep_its_policy_and_a_cdn_host_gets_the_thumbnail_policy():
    st = fake_mly.MapillaryFakeState(images=_imgs())

    async def go():
        async with serve(fake_mly.make_app(state=st)) as base, serve(fake_mly.make_cdn_app(st)) as cdn, \
                HttpClient(default_policy=FAST) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA, policy=API, thumb_policy=THUMBS)
            st.cdn_base = cdn
            await m.download_thumbnail("800000000001")
            fresh = http.policy_for(host_of(cdn))
            http.set_policy(host_of(cdn), OTHER)  # now the CDN's host is "another API's" host with its own policy
            await m.download_thumbnail("800000000001")
            return fresh, http.policy_for(host_of(cdn))

    fresh, after = asyncio.run(go())
    assert fresh is THUMBS and after is OTHER
