"""A crawl auditor's paid call whose request key is already in flight in another process of the campaign
(its task's lease expired while the first process was still waiting for the answer, e.g. stopped with Ctrl-Z
past the visibility timeout, and another ``--stages`` process or machine leased it again) is not sent a
second time: :func:`geoagent.crawl.llmcall.metered_generate` waits for the other call's stored answer, as the
model caller's send gate does (:func:`geoagent.workers.model_caller._lookup_or_reserve`). Before, the crawl
looked the store up once, before its host slot, never asked whether the key was held elsewhere, and paid a
second time. Two campaign states on one file (SQLite) or one server (Redis) are the two processes (each its
own ledger owner); the local OpenAI-compatible fake answers slowly and logs every call it bills.

The same holds inside one process: a stage runner whose lease expired while its own worker was still on the call
(the wall clock stepped forward past the visibility timeout: a suspend and resume, an NTP step) leases the task
again and hands it to a second worker. Both calls have the same ledger owner, so "held elsewhere" cannot see the
first; the second now waits for the key's turn in the process (as the model caller does, ``_one_call_per_key``)
and gets the stored answer."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.config import ModelConfig
from geoagent.crawl.llmcall import metered_generate
from geoagent.providers.base import ModelRequest
from geoagent.providers.openai_compat import OpenAICompatProvider
from geoagent.providers.settings import ProviderSettings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.llm_common import CALLS_KEY
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from _state_backends import KINDS, open_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

MODEL = ModelConfig(name="auditor", provider="openai", model="sim-gpt", price_input_usd_per_mtok=1.0,
                    price_output_usd_per_mtok=4.0, max_output_tokens=100)


@pytest.mark.parametrize("same_process", [False, True], ids=["two-processes", "one-process"])
@pytest.mark.parametrize("kind", KINDS)
def test_key_in_flight_in_another_process_is_not_sent_again(tmp_path, kind, same_process, request):
    url = request.getfixturevalue("redis_url") if kind == "redis" else None

    async def main():
        # every call stalls 0.6 s server-side, then is answered (and billed): a slow model
        app = make_app(faults={"rate": 1.0, "kinds": ("timeout",), "timeout_delay_s": 0.6}, require_auth=False)
        async with serve(app) as base:
            policy = HostPolicy(max_attempts=1, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=10.0)
            req = ModelRequest(provider="openai", model="sim-gpt", prompt="Rate the place 0-5.",
                               params={"max_tokens": 100})
            first = open_state(kind, url, "audit", tmp_path, cap_usd=10.0)
            # another process's ledger owner, or the same one (a second worker of the same process)
            second = first if same_process else open_state(kind, url, "audit", tmp_path, cap_usd=10.0)
            try:
                async with HttpClient(default_policy=policy) as http:
                    prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt",
                                                                 base_url=base + "/v1"), http)
                    a = asyncio.create_task(metered_generate(prov, req, ledger=first.ledger, model_cfg=MODEL,
                                                             store=first.store))
                    for _ in range(200):  # the first call is on the wire (the fake logged its arrival)
                        if (await first.ledger.asummary()).open_reservations:
                            break
                        await asyncio.sleep(0.01)
                    b = await metered_generate(prov, req, ledger=second.ledger, model_cfg=MODEL, store=second.store)
                    a = await a
                summary = (await first.ledger.asummary()).to_json()
            finally:
                if second is not first:
                    second.close()
                first.close()
            return a, b, summary, list(app[CALLS_KEY])

    a, b, s, calls = asyncio.run(main())
    assert len(calls) == 1, f"the fake billed {len(calls)} calls for one request key"
    assert a.text == b.text
    assert s["calls"] == 1 and s["reserved_usd"] == 0 and s["unknown_calls"] == 0
