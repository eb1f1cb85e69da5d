"""``latency_s`` of a model answer is the model's time, not the time the request waited for its host's limits.

Walkthrough 23, item 4: with the local fake (which answers at once) behind ``rate = 5`` per second and 32 tasks at a
time, the stored answers had a median ``latency_s`` of 3.4 s (max 14 s): the provider timed the whole
``HttpClient.request`` call, its waits for the host's rate and concurrency slots included. Now it is the final
attempt's time from the send to its answer read in full (``HttpResponse.elapsed_s``).
"""

from __future__ import annotations

import asyncio
import time

from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.secrets import lookup_secret
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 24, seed="latency-n16")


def test_latency_leaves_out_the_wait_for_the_hosts_rate_slot(tmp_path):
    async def go() -> list[tuple[float, float]]:
        app = llm_openai.make_app(api_keys=(KEY,))
        one_per_2s = HostPolicy(rate=1, period_s=2.0, concurrency=4, max_attempts=1, timeout_s=10.0)
        secret = lookup_secret("LAT_KEY", environ={"LAT_KEY": KEY}, dotenv_path=tmp_path / "none.env")
        async with serve(app) as url, HttpClient(default_policy=one_per_2s) as http:
            prov = make_provider(ProviderSettings(kind="openai", model="m", base_url=url + "/v1", api_key=secret), http)

            async def timed(i: int) -> tuple[float, float]:
                t0 = time.monotonic()
                resp = await prov.generate(ModelRequest(provider="openai", model="m", prompt=f"where {i}?"))
                return resp.latency_s, time.monotonic() - t0

            return list(await asyncio.gather(timed(1), timed(2)))

    (lat1, wall1), (lat2, wall2) = asyncio.run(go())
    assert max(wall1, wall2) >= 2.0  # the second call waited for the host's slot ...
    assert lat1 < 1.0 and lat2 < 1.0, (lat1, lat2)  # ... which its latency leaves out (the fake answers at once)
    assert lat1 > 0 and lat2 > 0
