"""The crawl's metered audit calls close their reservation like the model caller (workers/billing.py).

Against the local OpenAI-compatible fake with its fault injection: a call whose attempts may all have been
billed (malformed 2xx bodies), or that is cancelled while on the wire, stays counted as unknown-outcome
spend; a 4xx refusal is released. Before the shared table these were all released (ledger under-count).
"""

from __future__ import annotations

import asyncio

import pytest

from geoagent.config import ModelConfig
from geoagent.crawl.llmcall import metered_generate
from geoagent.providers.base import ModelRequest
from geoagent.providers.openai_compat import OpenAICompatProvider
from geoagent.providers.settings import ProviderSettings
from geoagent.runtime.http import HostPolicy, HttpClient, OutcomeUnknown
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve

MODEL = ModelConfig(name="auditor", provider="openai", model="sim-gpt", price_input_usd_per_mtok=1.0,
                    price_output_usd_per_mtok=4.0, max_output_tokens=100)


def _run(tmp_path, faults: FaultConfig, *, cancel_after_s: float | None = None, path_suffix: str = ""):
    async def main():
        state = open_campaign_state("audit", root=tmp_path, cap_usd=10.0)
        try:
            async with serve(make_app(faults=faults, require_auth=False)) as base:
                policy = HostPolicy(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=0.5)
                async with HttpClient(default_policy=policy) as http:
                    prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt", base_url=base + "/v1" + path_suffix), http)
                    req = ModelRequest(provider="openai", model="sim-gpt", prompt="Rate the place 0-5.",
                                       params={"max_tokens": 100})
                    call = metered_generate(prov, req, ledger=state.ledger, model_cfg=MODEL)
                    if cancel_after_s is None:
                        try:
                            await call
                            error = None
                        except Exception as exc:  # noqa: BLE001 - the test inspects it
                            error = exc
                    else:
                        task = asyncio.ensure_future(call)
                        await asyncio.sleep(cancel_after_s)
                        task.cancel()
                        with pytest.raises(asyncio.CancelledError):
                            await task
                        error = None
            await asyncio.sleep(0.2)  # let a fire-and-forget ledger job commit
            return error, (await state.ledger.asummary()).to_json()
        finally:
            state.close()

    return asyncio.run(main())


def test_malformed_body_counts_as_unknown_spend(tmp_path):
    error, s = _run(tmp_path, FaultConfig(rate=1.0, kinds=("malformed",)))
    # a paid endpoint's unusable 2xx is reported at once (not re-sent under the same reservation)
    assert isinstance(error, OutcomeUnknown)
    assert s["unknown_calls"] == 1 and s["unknown_usd"] > 0  # it reached the server: maybe billed
    assert s["reserved_usd"] == 0  # nothing left open


def test_cancel_while_on_the_wire_counts_as_unknown_spend(tmp_path):
    error, s = _run(tmp_path, FaultConfig(rate=1.0, kinds=("timeout",), timeout_delay_s=5.0), cancel_after_s=0.2)
    assert s["unknown_calls"] == 1 and s["reserved_usd"] == 0


def test_refused_request_is_released(tmp_path):
    error, s = _run(tmp_path, FaultConfig(), path_suffix="/nope")
    assert error is not None and "404" in str(error)
    assert s["unknown_calls"] == 0 and s["spent_usd"] == 0 and s["reserved_usd"] == 0
    assert s["released_calls"] == 1


def test_call_waiting_for_its_host_holds_no_reservation(tmp_path):
    """Concurrency 1: while the first audit call hangs on the wire, a second one waits for the host slot.
    It has reserved nothing yet (the reservation is made at send time); cancelling both leaves one
    unknown-outcome call (the one that was sent), not two."""

    async def main():
        state = open_campaign_state("audit", root=tmp_path, cap_usd=10.0)
        try:
            faults = FaultConfig(rate=1.0, kinds=("timeout",), timeout_delay_s=5.0)
            async with serve(make_app(faults=faults, require_auth=False)) as base:
                policy = HostPolicy(concurrency=1, max_attempts=1, timeout_s=10.0)
                async with HttpClient(default_policy=policy) as http:
                    prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt", base_url=base + "/v1"), http)
                    calls = [
                        asyncio.ensure_future(metered_generate(
                            prov, ModelRequest(provider="openai", model="sim-gpt", prompt=f"Rate place {i} 0-5.",
                                               params={"max_tokens": 100}),
                            ledger=state.ledger, model_cfg=MODEL))
                        for i in range(2)
                    ]
                    await asyncio.sleep(0.4)
                    while_waiting = (await state.ledger.asummary()).to_json()
                    for c in calls:
                        c.cancel()
                    await asyncio.gather(*calls, return_exceptions=True)
            await asyncio.sleep(0.2)  # let a fire-and-forget ledger job commit
            return while_waiting, (await state.ledger.asummary()).to_json()
        finally:
            state.close()

    while_waiting, after = asyncio.run(main())
    assert while_waiting["open_reservations"] == 1  # the call on the wire; the one queued for the host has none
    assert after["unknown_calls"] == 1 and after["reserved_usd"] == 0 and after["open_reservations"] == 0


def _budget_refused(tmp_path, *, remote: bool):
    """One audit call under a cap too small for its worst case: offline simulated provider (reserves
    before generate) or the simulated provider over HTTP to the OpenAI fake (reserves in before_send)."""
    from geoagent.providers.simulated import SimulatedProvider
    from geoagent.runtime.ledger import BudgetExhausted

    async def main():
        state = open_campaign_state("audit", root=tmp_path, cap_usd=0.0001)  # worst case of MODEL: ~0.0004 USD
        app = make_app(require_auth=False)
        try:
            async with serve(app) as base, HttpClient(default_policy=HostPolicy(timeout_s=2.0)) as http:
                settings = ProviderSettings(kind="simulated", model="sim-gpt", base_url=(base + "/v1") if remote else None)
                prov = SimulatedProvider(settings, http)
                assert prov.supports_before_send is remote
                req = ModelRequest(provider="simulated", model="sim-gpt", prompt="Rate the place 0-5.",
                                   params={"max_tokens": 100})
                with pytest.raises(BudgetExhausted):
                    await metered_generate(prov, req, ledger=state.ledger, model_cfg=MODEL)
                sent = len(app["calls"])
            return sent, (await state.ledger.asummary()).to_json(), state.ledger.check_consistency()
        finally:
            state.close()

    return asyncio.run(main())


@pytest.mark.parametrize("remote", [False, True], ids=["offline", "over-http"])
def test_budget_refusal_sends_nothing_and_leaves_the_ledger_clean(tmp_path, remote):
    sent, s, problems = _budget_refused(tmp_path, remote=remote)
    assert sent == 0 and problems == []
    assert s["reserved_usd"] == 0 and s["unknown_usd"] == 0 and s["spent_usd"] == 0 and s["open_reservations"] == 0


def test_an_answer_without_usage_is_kept_and_settled_at_its_reservation(tmp_path):
    """s13-usage: an audit answer whose body carries ``"usage": null`` is returned (not retried, not unknown
    spend) and settled at its reservation, the worst case, as the model caller books it."""

    async def main():
        state = open_campaign_state("audit", root=tmp_path, cap_usd=10.0)
        try:
            async with serve(make_app(require_auth=False, usage="null")) as base, HttpClient() as http:
                prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt", base_url=base + "/v1"), http)
                req = ModelRequest(provider="openai", model="sim-gpt", prompt="Rate the place 0-5.",
                                   params={"max_output_tokens": 100})
                resp = await metered_generate(prov, req, ledger=state.ledger, model_cfg=MODEL)
            rows = state.ledger.db.read("SELECT amount_nusd, actual_nusd FROM reservations")
            return resp, (await state.ledger.asummary()).to_json(), rows
        finally:
            state.close()

    resp, s, rows = asyncio.run(main())
    assert resp.text and resp.usage.reported is False and resp.usage.output_tokens == 100
    assert (s["calls"], s["unknown_calls"], s["reserved_usd"]) == (1, 0, 0)
    [(amount, actual)] = rows
    assert actual == amount > 0  # booked at the worst case, never below it


def test_a_withheld_audit_answer_books_its_worst_case_tokens(tmp_path):
    """A crawl audit call whose answer the safety filter withheld (Gemini fake, no usageMetadata) is settled at its
    reservation, as in the model caller; before, with 0 tokens (close_failed_call had no request to count them from),
    now with the worst-case counts its reservation was priced from: the prompt's estimate in, the request's
    max_output_tokens out."""
    from geoagent.providers.base import ProviderError
    from geoagent.providers.gemini import GeminiProvider
    from geoagent.sandbox import llm_gemini

    gem = ModelConfig(name="auditor", provider="gemini", model="gemini-sim", price_input_usd_per_mtok=1.0,
                      price_output_usd_per_mtok=4.0, max_output_tokens=100)

    async def main():
        state = open_campaign_state("audit", root=tmp_path, cap_usd=10.0)
        try:
            async with serve(llm_gemini.make_app(require_auth=False, usage="omit")) as base:
                async with HttpClient(default_policy=HostPolicy(max_attempts=2, backoff_base_s=0.01)) as http:
                    prov = GeminiProvider(ProviderSettings(kind="gemini", model="gemini-sim", base_url=base), http)
                    req = ModelRequest(provider="gemini", model="gemini-sim", params={"max_tokens": 100},
                                       prompt="Rate the place 0-5. " + llm_gemini.WITHHOLD_MARKER)
                    with pytest.raises(ProviderError):
                        await metered_generate(prov, req, ledger=state.ledger, model_cfg=gem)
            rows = state.db.read("SELECT amount_nusd, actual_nusd, input_tokens, output_tokens FROM reservations")
            return (await state.ledger.asummary()), rows, req.max_output_tokens
        finally:
            state.close()

    s, [(amount, actual, n_in, n_out)], max_out = asyncio.run(main())
    assert (s.calls, s.unknown_calls) == (1, 0) and actual == amount
    assert (s.input_tokens, s.output_tokens) == (n_in, n_out) and n_out == max_out and n_in > 0  # before: (0, 0)
    assert gem.worst_case_usd(n_in, n_out) == pytest.approx(amount / 1e9, rel=1e-6)
