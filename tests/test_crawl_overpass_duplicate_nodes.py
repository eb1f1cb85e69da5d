"""Adversarial review (session 13): an Overpass answer that lists a node twice (a mirror or proxy concatenating
outputs; one ``node...; out;`` statement never does). Each copy was a place node of its own: its nearest neighbour
the other copy at 0 km, so ``L_district`` (the median nearest-neighbour distance) fell and the node counts grew,
silently changing a city's admission. A node id seen again is now skipped. Real client, the Overpass fake."""

from __future__ import annotations

import asyncio

from geoagent.clients.overpass import OverpassClient
from geoagent.crawl.screener import l_district_km, measure_site_scale
from geoagent.crawl.settings import ScreenerSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import overpass as op_fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 48.8566, 2.3522


def test_a_node_listed_twice_counts_once():
    good = [{"type": "node", "id": 100 + i, "lat": LAT + 0.004 * i, "lon": LON + 0.003 * (i % 2),
             "tags": {"place": "neighbourhood", "name": f"N{i}"}} for i in range(5)]
    app = op_fake.make_app(good)
    app[op_fake.OVERPASS_STATE].passthrough = [dict(g) for g in good[:3]]  # three nodes again, verbatim

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            return await measure_site_scale("paris_x", LAT, LON, OverpassClient(http, base + "/api", UA),
                                            ScreenerSettings())

    row = asyncio.run(go())
    assert row["n_nodes_raw"] == row["n_nodes_filtered"] == 5
    assert row["L_district_median_km"] == round(l_district_km([p["lat"] for p in good], [p["lon"] for p in good]), 2)
