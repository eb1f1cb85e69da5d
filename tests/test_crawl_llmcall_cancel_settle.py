"""A crawl audit answered and paid is not lost when the runner's grace period runs out while it settles.

``metered_generate`` settles the reservation after the answer came back (one job on the ledger's database
thread). If the run's grace period expires (the runner cancels its workers' scope) while that job waits, the
answer was paid for but the caller (e.g. the image auditor, which stores the audit right after) never got it:
the next run sends the same request key again and pays twice. Against the local OpenAI-compatible fake; the
database thread is kept busy from the fake's handler, so the settle is what is waiting when the cancel comes.
"""

from __future__ import annotations

import time

import anyio
from aiohttp import web

from geoagent.config import ModelConfig
from geoagent.crawl.llmcall import metered_generate
from geoagent.providers.base import ModelRequest
from geoagent.providers.openai_compat import OpenAICompatProvider
from geoagent.providers.settings import ProviderSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve

MODEL = ModelConfig(name="auditor", provider="openai", model="sim-gpt", price_input_usd_per_mtok=1.0,
                    price_output_usd_per_mtok=4.0, max_output_tokens=100)


def test_cancel_while_settling_still_returns_the_paid_answer(tmp_path):
    state = open_campaign_state("audit", root=tmp_path, cap_usd=10.0)
    answered: anyio.Event | None = None  # made inside the event loop
    got: list = []

    async def main():
        nonlocal answered
        answered = anyio.Event()
        app = make_app(require_auth=False)

        @web.middleware
        async def busy_db(request, handler):  # the answer is on its way: keep the ledger's thread busy 0.6 s
            resp = await handler(request)
            if request.path.endswith("/chat/completions") and getattr(resp, "status", 0) == 200:
                state.ledger.db.submit(time.sleep, 0.6)
                answered.set()
            return resp

        app.middlewares.insert(0, busy_db)
        async with serve(app) as base:
            async with HttpClient(default_policy=HostPolicy(timeout_s=5.0)) as http:
                prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt", base_url=base + "/v1"), http)
                req = ModelRequest(provider="openai", model="sim-gpt", prompt="Rate place 1 0-5.", params={"max_tokens": 100})
                scope = anyio.CancelScope()

                async def call():
                    with scope:  # the runner's work scope, cancelled when the grace period ends
                        got.append(await metered_generate(prov, req, ledger=state.ledger, model_cfg=MODEL))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await answered.wait()
                    await anyio.sleep(0.2)  # the client has the answer and waits for its settle job
                    scope.cancel()

    try:
        anyio.run(main)
        time.sleep(0.7)  # let the database thread finish its queue
        summary = state.ledger.summary()
    finally:
        state.close()
    assert len(got) == 1 and got[0].text  # the paid answer reached the caller (who stores it)
    resp = got[0]
    assert summary.calls == 1 and summary.open_reservations == 0 and summary.unknown_calls == 0
    assert abs(summary.spent_usd - (resp.usage.input_tokens * 1.0 + resp.usage.output_tokens * 4.0) / 1e6) < 1e-12
