"""The crawl's metered audit calls reserve what the model caller reserves for the same request.

Before: :func:`geoagent.crawl.llmcall.metered_generate` reserved the worst-case input WITHOUT ``[budget]
input_estimate_factor`` (the model caller and the dry run apply it), so an audit call held 1/1.25 of the input
part a campaign call holds, and could be admitted under a cap the campaign's reservation does not fit. Now both
call :func:`geoagent.config.reservation_usd`. Amounts below are hand-computed from the documented rule:
prompt chars // 3 + 16 + max(image_input_tokens 1600, the documented bill) tokens, x factor (ceil), at the
input price, + max output tokens at the output price.
"""

from __future__ import annotations

import asyncio
import io
import json
import math

import pytest
from PIL import Image

from geoagent.config import ModelConfig, config_from_dict, estimate
from geoagent.crawl.llmcall import metered_generate
from geoagent.providers.base import ModelRequest
from geoagent.providers.settings import ProviderSettings
from geoagent.providers.simulated import SimulatedProvider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.ledger import BudgetExhausted
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve

PROMPT = "Rate the place 0-5."  # 19 ASCII chars: 19 // 3 = 6 tokens
MODEL = ModelConfig(name="auditor", provider="simulated", model="sim-gpt", price_input_usd_per_mtok=1.0,
                    price_output_usd_per_mtok=4.0, max_output_tokens=100)
# input: 6 + 16 + 1600 (the simulated provider bills 765 per image, below the 1,600 image budget) = 1622
N_IN = 6 + 16 + 1600
NANO_FACTOR_125 = (2028 * 1 + 100 * 4) * 1000  # ceil(1622 x 1.25) = ceil(2027.5) = 2028 tokens; USD x 1e9
NANO_FACTOR_2 = (3244 * 1 + 100 * 4) * 1000  # 1622 x 2 = 3244
NANO_NO_FACTOR = (1622 * 1 + 100 * 4) * 1000  # what the crawl reserved before


def _jpeg(size=(320, 240)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (80, 120, 160)).save(buf, format="JPEG")
    return buf.getvalue()


def _request() -> ModelRequest:
    return ModelRequest(provider="simulated", model="sim-gpt", prompt=PROMPT, image_id="img-1", image=_jpeg(),
                        image_mime="image/jpeg", params={"max_output_tokens": 100})


def _audit(tmp_path, *, cap_usd: float, remote: bool, **kw):
    """One metered audit call; returns (error, reservation amounts in nano-USD, calls the fake saw, summary)."""

    async def main():
        state = open_campaign_state("audit", root=tmp_path, cap_usd=cap_usd)
        app = make_app(require_auth=False)
        try:
            async with serve(app) as base, HttpClient(default_policy=HostPolicy(timeout_s=5.0)) as http:
                prov = SimulatedProvider(ProviderSettings(kind="simulated", model="sim-gpt",
                                                          base_url=(base + "/v1") if remote else None), http)
                try:
                    await metered_generate(prov, _request(), ledger=state.ledger, model_cfg=MODEL, **kw)
                    error = None
                except BudgetExhausted as exc:
                    error = exc
                sent = len(app["calls"])
            amounts = [r[0] for r in state.ledger.db.read("SELECT amount_nusd FROM reservations ORDER BY id")]
            return error, amounts, sent, (await state.ledger.asummary()).to_json()
        finally:
            state.close()

    return asyncio.run(main())


def test_campaign_reservation_of_the_request_is_the_hand_computed_one():
    # the dry run's worst case is the model caller's reservation (same function)
    cfg = config_from_dict({"campaign": {"name": "c", "kind": "generic"}, "budget": {"cap_usd": 1.0},
                            "models": [MODEL.model_dump()]})
    req = ModelRequest(provider="simulated", model="sim-gpt", prompt=PROMPT, image_id="img-1",
                       params={"max_output_tokens": 100})
    est = estimate(cfg, [("auditor", req)])
    assert est.by_model["auditor"].worst_input_tokens == N_IN
    assert est.worst_case_usd == pytest.approx(NANO_FACTOR_125 / 1e9, rel=1e-12)


@pytest.mark.parametrize("remote", [False, True], ids=["offline", "over-http"])
def test_crawl_call_reserves_with_the_input_estimate_factor(tmp_path, remote):
    error, amounts, sent, s = _audit(tmp_path, cap_usd=1.0, remote=remote)
    assert error is None and s["calls"] == 1
    # the default factor 1.25 (the [budget] default), not the bare estimate (NANO_NO_FACTOR) as before
    assert amounts == [NANO_FACTOR_125] and NANO_FACTOR_125 > NANO_NO_FACTOR


def test_crawl_call_uses_the_campaign_factor_it_is_given(tmp_path):
    error, amounts, _, _ = _audit(tmp_path, cap_usd=1.0, remote=False, input_estimate_factor=2.0)
    assert error is None and amounts == [NANO_FACTOR_2]


def test_cap_between_the_bare_estimate_and_the_campaign_reservation_refuses_the_crawl_call(tmp_path):
    """A cap the bare estimate fits but the campaign's reservation does not: the model caller would refuse
    this request, and so must the crawl (before: it reserved 2,022,000 nano-USD and sent the call)."""
    cap = (NANO_NO_FACTOR + NANO_FACTOR_125) / 2 / 1e9
    error, amounts, sent, s = _audit(tmp_path, cap_usd=cap, remote=True)
    assert isinstance(error, BudgetExhausted)
    assert sent == 0 and amounts == [] and s["spent_usd"] == 0 and s["reserved_usd"] == 0


def test_engine_crawl_reserves_with_the_configured_factor_and_stays_under_a_tight_cap(tmp_path, monkeypatch):
    """``run.py crawl``: the image auditor is a priced [[models]] entry; ``[budget] input_estimate_factor = 3``
    reaches its reservations, and the crawl stops at a cap of 2.5 reservations without passing it."""
    from geoagent.crawl.image_audit import load_prompt
    from test_crawl_stages import run_paid_audit_crawl

    prompt = load_prompt("crawl_image_audit.txt")
    assert prompt.isascii()
    # image audit: max_output_tokens 400 ([crawl.image_audit] default), prices 10 USD / 1M tokens both ways
    n_in = len(prompt) // 3 + 16 + 1600
    one_nano = (math.ceil(n_in * 3.0) * 10 + 400 * 10) * 1000
    cap = 2.5 * one_nano / 1e9
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|engine|test")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    out = run_paid_audit_crawl("crawl-factor", {"cap_usd": cap, "input_estimate_factor": 3.0})
    assert out.status == "budget exhausted", out.summary()
    assert 0 < out.spend["spent_usd"] + out.spend["unknown_usd"] <= cap
    state = open_campaign_state("crawl-factor", root=tmp_path / "state")
    try:
        amounts = [r[0] for r in state.ledger.db.read("SELECT amount_nusd FROM reservations")]
    finally:
        state.close()
    assert amounts and set(amounts) == {one_nano}
    audited = list((tmp_path / "state" / "crawl-factor" / "image_audit").glob("*/*.json"))
    assert len(audited) == out.spend["calls"] >= 2  # 2.5 reservations: two calls fit, each settled below its hold
    assert json.loads(audited[0].read_text())["model"] == "aud-vision"
