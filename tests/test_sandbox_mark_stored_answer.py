"""A sandbox fake's answer read back from the campaign's store still counts as simulated (s16).

Before: the sandbox mark (:attr:`geoagent.providers.base.ModelResponse.sandbox`, from the fakes'
``X-Geoagent-Sandbox: 1`` header) lived only on the response object of the call. The store kept it as
``request_meta.provider_kind = "simulated"``, but a stored answer read back (``ResponseStore.get``) came out
unmarked, so a crawl audit paid before a kill and reused after the restart (:func:`geoagent.crawl.llmcall.metered_generate`
finds it in the store) was recorded as a real model's (``provider_kind: "model"`` in ``image_audit/<city>/<id>.json``),
and the killed crawl's records differed from an uninterrupted one's (seen in
``tests/test_crash_campaigns.py::test_crawl_sigkilled_in_download_audit_rating_and_write_matches_uninterrupted``).
Now a stored answer whose ``request_meta`` recorded geoagent's simulation reads back marked, on both state
backends. The fake runs on a port of its own (a plain URL), so only its mark says it is a fake.
"""

from __future__ import annotations

import asyncio

import pytest

from geoagent.crawl.llmcall import metered_generate
from geoagent.providers.base import ModelRequest
from geoagent.providers.openai_compat import OpenAICompatProvider
from geoagent.providers.settings import ProviderSettings
from geoagent.runtime.http import HttpClient
from geoagent.sandbox.llm_common import CALLS_KEY, unmarked
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from _state_backends import KINDS, open_state
from test_crawl_llmcall_in_flight import MODEL
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture


def _two_runs(tmp_path, kind, url, app, provider_kinds):
    """One audit request through :func:`metered_generate` in two runs on the same state (the second is the restart
    after a kill: a new state object, the same files or server), the fake ``app`` served on a plain URL; the crawl
    passes ``provider_kinds[i]`` in run ``i``. Returns (the two responses, the stored answer read back after the
    second, the calls the fake billed)."""
    async def main():
        async with serve(app) as base:
            req = ModelRequest(provider="openai", model="sim-gpt", prompt="Rate the place 0-5.",
                               params={"max_tokens": 100})
            results = []
            for run_kind in provider_kinds:
                state = open_state(kind, url, "audit", tmp_path, cap_usd=10.0)
                try:
                    async with HttpClient() as http:
                        prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt",
                                                                     base_url=base + "/v1"), http)
                        results.append(await metered_generate(prov, req, ledger=state.ledger, model_cfg=MODEL,
                                                              store=state.store, provider_kind=run_kind))
                        stored = state.store.get(req.key())
                finally:
                    state.close()
            return results, stored, len(app[CALLS_KEY])

    return asyncio.run(main())


@pytest.mark.parametrize("marked", [True, False], ids=["sandbox-fake", "model-server"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_stored_answer_reused_after_a_restart_keeps_the_sandbox_mark(tmp_path, kind, marked, request):
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    app = make_app(require_auth=False)
    # provider_kind "model": what the crawl passes for a plain URL it cannot tell from a server
    (first, again), stored, calls = _two_runs(tmp_path, kind, url, app if marked else unmarked(app), ("model", "model"))
    assert calls == 1  # the restart reused the stored answer
    assert again.text == first.text
    assert first.sandbox is marked
    assert again.sandbox is marked, "the stored answer read back lost the fake's mark"  # before: False
    assert stored.sandbox is marked


@pytest.mark.parametrize("kind", KINDS)
def test_a_reused_stored_answer_keeps_the_kind_recorded_when_it_was_paid_for(tmp_path, kind, request):
    """Review (s16): the crawl records with each auditor answer what answered it (``provider_kind``); a stored
    answer reused after a restart whose config moved the auditor (a real model server then, a replay now) was
    recorded under the new config's kind. Now the stored answer carries the kind recorded at call time
    (:attr:`ModelResponse.recorded_kind`) and :func:`geoagent.crawl.llmcall.answer_kind` prefers it."""
    from geoagent.crawl.llmcall import answer_kind

    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    app = unmarked(make_app(require_auth=False))  # a model server as far as geoagent can tell
    (fresh, reused), _, _ = _two_runs(tmp_path, kind, url, app, ("model", "replay"))  # the restart says "replay"
    fresh_kind, reused_kind = answer_kind(fresh, "model"), answer_kind(reused, "replay")
    assert fresh.recorded_kind is None and fresh_kind == "model"
    assert reused.recorded_kind == "model" and reused_kind == "model"  # before: "replay", the new config's
    assert answer_kind(fresh, None) is None  # nothing known, nothing recorded
