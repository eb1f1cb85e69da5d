"""Issue 2 for the crawl's paid audits: an answer is stored with its settlement in one transaction
(:func:`geoagent.crawl.llmcall.metered_generate` with the campaign's response store), so a crawl killed after
the answer came but before its stage kept it (``image_audit/<site>/<image>.json``,
``audit_raw_answers.jsonl``) finds it on resume and does not pay for it again. Before, the answer was only
settled: the SIGKILL crash test of the crawl (tests/test_crash_campaigns.py) saw one key settled twice,
i.e. paid twice. Against the local OpenAI-compatible fake and its call log."""

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


@pytest.mark.parametrize("kind", KINDS)
def test_paid_answer_stored_with_its_settlement_and_not_asked_again(tmp_path, kind, request):
    url = request.getfixturevalue("redis_url") if kind == "redis" else None

    async def main():
        app = make_app(faults=None, require_auth=False)
        async with serve(app) as base:
            policy = HostPolicy(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=5.0)
            req = ModelRequest(provider="openai", model="sim-gpt", prompt="Rate the place 0-5.",
                               params={"max_tokens": 100})
            answers = []
            for _ in range(2):  # the second "run" opens the campaign state again, as a restart does
                state = open_state(kind, url, "audit", tmp_path, cap_usd=10.0)
                try:
                    async with HttpClient(default_policy=policy) as http:
                        prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt",
                                                                     base_url=base + "/v1"), http)
                        answers.append(await metered_generate(prov, req, ledger=state.ledger, model_cfg=MODEL,
                                                              store=state.store))
                    rec = state.store.get_record(req.key())
                    summary = (await state.ledger.asummary()).to_json()
                finally:
                    state.close()
            return answers, rec, summary, list(app[CALLS_KEY])

    answers, rec, s, calls = asyncio.run(main())
    assert len(calls) == 1 and calls[0]["status"] == 200  # one paid call for the two requests
    assert answers[0].text == answers[1].text and rec is not None
    assert rec["model"] == "auditor" and rec["request_meta"]["prompt_chars"] == len("Rate the place 0-5.")
    assert s["calls"] == 1 and s["reserved_usd"] == 0 and s["unknown_calls"] == 0
    assert (s["input_tokens"], s["output_tokens"]) == (calls[0]["input_tokens"], calls[0]["output_tokens"])
    assert s["spent_usd"] == pytest.approx(rec["cost_usd"], abs=1e-12)
    assert s["spent_usd"] == pytest.approx(
        (calls[0]["input_tokens"] * 1.0 + calls[0]["output_tokens"] * 4.0) / 1e6, abs=1e-12)
