"""Adversarial review (session 13): a WDQS candidate row whose ``?links`` (the item's sitelink count, which the
candidate query binds for every row and filters on) does not read as a number ("many"). The client leaves it None
(:func:`geoagent.clients.wdqs.entity_from_binding`), and the sampler turned None into 0 sitelinks: the candidate
passed the ``max_sitelinks`` rule unchecked and could become a site with ``sitelinks`` 0 in ``sites.csv``. Such a
candidate is now left out before the shuffle, with walk decision ``skip_no_sitelinks``. Real clients, the WDQS fake
serving the literal verbatim and the Mapillary fake for coverage."""

from __future__ import annotations

import asyncio
import math

from geoagent.clients.mapillary import MapillaryClient
from geoagent.clients.wdqs import WdqsClient
from geoagent.crawl.sampler import sample_sites
from geoagent.crawl.settings import CitySpec, SamplerSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as mly_fake
from geoagent.sandbox import wdqs as wd_fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 48.85, 2.35


def _offset(dx_m: float, dy_m: float) -> tuple[float, float]:
    return LAT + dy_m / 111195.0, LON + dx_m / (111195.0 * math.cos(math.radians(LAT)))


def test_a_candidate_whose_sitelinks_do_not_read_is_skipped_with_a_decision():
    spots = {"Q101": (0, 0), "Q102": (600, 0), "Q103": (0, 600)}
    ents, imgs = [], []
    for k, (qid, (dx, dy)) in enumerate(spots.items()):
        lat, lon = _offset(dx, dy)
        ents.append(wd_fake.FakeEntity(qid, f"Museum {qid}", lat, lon, 5, ("Q33506",),
                                       links_literal="many" if qid == "Q102" else None))
        imgs += [mly_fake.FakeImage(str(920000 + 100 * k + i), lat + 0.0001 * (i - 4), lon) for i in range(9)]

    async def go():
        async with serve(wd_fake.make_app(ents)) as wd, serve(mly_fake.make_app(imgs)) as mly, \
                HttpClient(default_policy=FAST) as http:
            city = CitySpec(city="Test Town", country="FR", continent="EU", lat=LAT, lon=LON)
            return await sample_sites(city, WdqsClient(http, wd + "/sparql", UA), MapillaryClient(http, mly, "MLY|1|x", UA),
                                      SamplerSettings(sites_per_city=3), seed=3)

    res = asyncio.run(go())
    assert sorted(s["qid"] for s in res.sites) == ["Q101", "Q103"], res.walk
    assert all(s["sitelinks"] == 5 for s in res.sites)
    assert {"qid": "Q102", "decision": "skip_no_sitelinks"} in res.walk
    assert res.coverage_calls == 2
