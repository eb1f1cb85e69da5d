"""Adversarial review (session 13): a WDQS row whose ``?coord`` lies outside the circle the query asked for. The
service filters by distance from the centre (``wikibase:around`` / ``FILTER(?dist <= R)``), so such a row is
garbage: a ``Point(LAT LON)`` written latitude first (Barcelona's 41.39, 2.17 read as lat 2.17, lon 41.39: Somalia),
a proxy or mirror mixing answers. It was returned as is; the sampler would store a site thousands of km away and the
referenceability ladder measure distances to it. Such rows are dropped now and counted
(:attr:`WdqsClient.outside_radius`, with the QIDs in :attr:`WdqsClient.outside_radius_qids`). Real client, the WDQS
fake serving the row's literal verbatim."""

from __future__ import annotations

import asyncio

from geoagent.clients.wdqs import WdqsClient
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import wdqs as wd_fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 41.39, 2.17


def _run(ents, fn):
    async def go():
        async with serve(wd_fake.make_app(ents)) as base, HttpClient(default_policy=FAST) as http:
            c = WdqsClient(http, base + "/sparql", UA)
            return await fn(c), c

    return asyncio.run(go())


def _ents():
    return [wd_fake.FakeEntity("Q101", "Plain", 41.391, 2.171, sitelinks=3, instance_of=("Q570116",)),
            # latitude first: lat 2.172, lon 41.392, in range but ~4,600 km from the centre
            wd_fake.FakeEntity("Q102", "Swapped", 41.392, 2.172, sitelinks=3, instance_of=("Q570116",),
                               coord_wkt="Point(41.392 2.172)"),
            wd_fake.FakeEntity("Q103", "Edge", 41.39 + 1.99 / 111.2, 2.17, sitelinks=3, instance_of=("Q570116",))]


def test_entities_around_drop_a_row_outside_the_circle():
    got, c = _run(_ents(), lambda c: c.entities_around(LAT, LON, 2.0, page_size=50))
    assert {e.qid for e in got} == {"Q101", "Q103"}
    assert c.outside_radius == 1 and c.outside_radius_qids == ["Q102"]


def test_site_candidates_drop_a_row_outside_the_circle():
    got, c = _run(_ents(), lambda c: c.site_candidates(LAT, LON, 2.0, ["Q570116"], 50, page_size=50))
    assert {e.qid for e in got} == {"Q101", "Q103"}
    assert c.outside_radius == 1
