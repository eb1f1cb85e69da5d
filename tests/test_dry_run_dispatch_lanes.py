"""The dry run's replay of the model caller's dispatch (:func:`geoagent.config.simulate_dispatch`).

Found while reproducing a fresh user's walkthrough (two models, one of them rate-limited, over the cap): the
replay never ended. A rate window's oldest send at ``s`` frees its slot at ``s + period_s`` (the wake-up time),
but the window was pruned with ``s <= t - period_s``, which float rounding can make false at ``t = s + period_s``
(``(0.15 + 1.0) - 1.0 < 0.15``): the slot stayed taken, the wake-up time stayed the same, and time stood still.
"""

from __future__ import annotations

import pytest

from geoagent.config import config_from_dict, estimate

PRICES = {"price_input_usd_per_mtok": 0.15, "price_output_usd_per_mtok": 0.60, "max_output_tokens": 100,
          "expected_output_tokens": 11}


def _two_models_cfg(cap_usd: float, rate: int):
    """A local offline simulated model and a rate-limited OpenAI-compatible model (the sandbox fake's host)."""
    return config_from_dict({"campaign": {"name": "ln", "kind": "generic"}, "budget": {"cap_usd": cap_usd}, "models": [
        {"name": "sim-a", "provider": "simulated", "model": "sim-1", "concurrency": 4, **PRICES},
        {"name": "fake-gpt", "provider": "openai", "model": "sandbox-gpt", "concurrency": 4,
         "base_url": "http://openai.sandbox.invalid/v1", "expected_latency_s": 0.05,
         "rate": {"requests": rate, "period_s": 1.0}, **PRICES}]})


@pytest.mark.timeout(60)
def test_dispatch_replay_with_a_rate_limited_model_ends():
    plan = [{"model": m, "prompt": f"p{i}"} for i in range(100) for m in ("sim-a", "fake-gpt")]
    est = estimate(_two_models_cfg(0.003, 10), plan)  # worst $0.0127 > cap: the replay runs
    assert est.calls_before_cap is not None and 0 < est.calls_before_cap <= est.calls
