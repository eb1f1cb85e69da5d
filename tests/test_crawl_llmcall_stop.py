"""A stop request sends no new crawl audit call (the crawl's side of the Ctrl-C money fix): a metered call
still waiting for its host's slot when the stop comes raises ``Abandoned`` at send time, unsent and without a
reservation; a call already sent finishes and is settled. Against the local OpenAI-compatible fake."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from geoagent.config import ModelConfig
from geoagent.crawl.llmcall import metered_generate
from geoagent.providers.base import ModelRequest
from geoagent.providers.openai_compat import OpenAICompatProvider
from geoagent.providers.settings import ProviderSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.stage import Abandoned
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox.llm_common import add_latency
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve

MODEL = ModelConfig(name="auditor", provider="openai", model="sim-gpt", price_input_usd_per_mtok=1.0,
                    price_output_usd_per_mtok=4.0, max_output_tokens=100)


@pytest.mark.parametrize("metered", [True, False])
def test_a_call_queued_for_its_host_at_the_stop_is_not_sent(tmp_path, metered):
    received: list[str] = []

    async def main():
        app = add_latency(make_app(require_auth=False), 0.5)

        @web.middleware
        async def count(request, handler):  # outermost: counts requests on arrival
            received.append(request.path)
            return await handler(request)

        app.middlewares.insert(0, count)
        state = open_campaign_state("audit", root=tmp_path, cap_usd=10.0)
        stop = {"now": False}
        try:
            async with serve(app) as base:
                # one request at a time to the model host: the second call waits for the first's slot
                async with HttpClient(default_policy=HostPolicy(concurrency=1, timeout_s=5.0)) as http:
                    prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt", base_url=base + "/v1"), http)

                    def call(i: int):
                        req = ModelRequest(provider="openai", model="sim-gpt", prompt=f"Rate place {i} 0-5.",
                                           params={"max_tokens": 100})
                        kw = {"ledger": state.ledger, "model_cfg": MODEL} if metered else {}
                        return asyncio.ensure_future(metered_generate(prov, req, stopping=lambda: stop["now"], **kw))

                    first, second = call(1), call(2)
                    while not received:
                        await asyncio.sleep(0.01)
                    stop["now"] = True  # the stop comes while the first is on the wire, the second queued
                    resp = await first
                    with pytest.raises(Abandoned):
                        await second
                    with pytest.raises(Abandoned):
                        await call(3)  # after the stop: refused before anything
            return resp, state.ledger.summary()
        finally:
            state.close()

    resp, ledger = asyncio.run(main())
    assert resp.text and len(received) == 1  # only the call already sent reached the server
    if metered:
        assert ledger.calls == 1 and ledger.unknown_calls == 0 and ledger.open_reservations == 0
        assert ledger.released_calls == 0  # the abandoned calls never reserved
        assert abs(ledger.spent_usd - (resp.usage.input_tokens * 1.0 + resp.usage.output_tokens * 4.0) / 1e6) < 1e-12
