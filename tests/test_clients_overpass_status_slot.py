"""Reading Overpass's ``/api/status`` does not spend one of the client's Overpass rate slots.

The slot quota of an Overpass instance counts queries (``/api/interpreter``): the server adds a pause after each
query in proportion to its run time (drolbr/Overpass-API#333, the maintainer), and its 429 page tells a
rate-limited client to read ``/api/status`` (so reading it cannot need a free slot). The client's status read
therefore has a light limit of its own (:data:`geoagent.clients.overpass.STATUS_POLICY`) and queries keep the
host's full pace: with 1 query per period, N screenings take about N-1 periods, not 2N-1.
"""

from __future__ import annotations

import asyncio
import time

from geoagent.clients.overpass import OverpassClient
from geoagent.crawl.screener import place_query
from geoagent.crawl.settings import ScreenerSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import overpass as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
PERIOD_S = 0.6
#: the crawl's Overpass pace (1 query per 10 s), scaled down to PERIOD_S
SLOW = HostPolicy(rate=1, period_s=PERIOD_S, concurrency=2, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)
LAT0, LON0 = 48.86, 2.34


def test_status_read_does_not_take_a_query_rate_slot():
    els = [{"type": "node", "id": 1, "lat": LAT0, "lon": LON0, "tags": {"place": "suburb", "name": "A"}}]
    app = fake.make_app(els)
    n = 3

    async def go():
        async with serve(app) as base, HttpClient(default_policy=SLOW) as http:
            client = OverpassClient(http, base + "/api", UA, policy=SLOW, check_slots=True)
            t0 = time.monotonic()
            for _ in range(n):
                await client.interpreter(place_query(LAT0, LON0, ScreenerSettings()))
            return time.monotonic() - t0

    elapsed = asyncio.run(go())
    st = app[fake.OVERPASS_STATE]
    assert st.status_calls == n and len(st.queries) == n  # the status page is still read before every query
    # n queries at 1 per period: (n - 1) periods (+ margin); with the status read in the same slot it was
    # 2n - 1 periods (about 3.0 s here)
    assert elapsed < (n - 1) * PERIOD_S + 0.45, f"{n} screenings took {elapsed:.2f} s"


def test_status_policy_is_light_but_paced():
    from geoagent.clients.overpass import STATUS_POLICY

    # its own limit still keeps the politeness: at most one status read in flight, a few per second at most
    assert STATUS_POLICY.concurrency == 1 and STATUS_POLICY.rate / STATUS_POLICY.period_s <= 2.0


def test_set_limit_policy_reresolves_a_key_already_used():
    """A limit key used before it had a policy (it ran at its host's pace) gets its own state once given one."""
    from geoagent.runtime.http import limit_key

    app = fake.make_app([])

    async def go():
        async with serve(app) as base, HttpClient(default_policy=SLOW) as http:
            host = base.split("//", 1)[1]
            key = limit_key(host, "status")
            await http.request("GET", base + "/api/status", headers={"User-Agent": UA}, limit=key)  # host's slot
            http.set_limit_policy(key, HostPolicy(rate=100, period_s=1.0, concurrency=1))
            t0 = time.monotonic()
            await http.request("GET", base + "/api/status", headers={"User-Agent": UA}, limit=key)
            return time.monotonic() - t0

    assert asyncio.run(go()) < PERIOD_S / 2  # not held behind the host's slot taken by the first read
