"""Adversarial review s18 (adv2): the session's dry-run pacing, figure layout and GeoHint plan changes, attacked."""

from __future__ import annotations

import pytest


# --- dry run: a model on a local fake in the cap's dispatch replay --------------------------------------------------
def _priced(name: str, pout: float, provider: str, base_url: str) -> dict:
    return {"name": name, "provider": provider, "model": name, "base_url": base_url, "concurrency": 8,
            "price_output_usd_per_mtok": pout, "max_output_tokens": 100, "expected_output_tokens": 50}


def _two_models(provider: str, base_url: str):
    from geoagent.config import config_from_dict, estimate

    cfg = config_from_dict({"campaign": {"name": "dr", "kind": "generic"}, "budget": {"cap_usd": 0.0155},
                            "models": [_priced("a", 10.0, provider, base_url),
                                       _priced("ge", 100.0, provider, base_url)]})
    plan = [{"model": m, "prompt": f"p{i}"} for m in ("a", "ge") for i in range(40)]
    return estimate(cfg, plan)


def test_the_cap_replay_paces_a_model_on_a_local_fake_as_the_estimate_does():
    """The estimate times an openai model on ``openai.sandbox.invalid`` (no expected_latency_s of its own) by its rate
    alone, as a simulated model behind the fake (the fake answers at once; commit 9bbb359), but the cap's dispatch
    replay (:func:`geoagent.config.simulate_dispatch`) still held each of its calls 2.0 s (``model_time_basis``):
    the dry run said 'a 23 of 40, ge 0 of 40' (and warned that ge gets no answer) where the same fake serving a
    simulated model gave 'a 10, ge 1'. The two are answered alike, so their replays must agree."""
    fake = _two_models("openai", "http://openai.sandbox.invalid/v1")
    sim = _two_models("simulated", "http://openai.sandbox.invalid/v1")
    assert {n: m.time_basis for n, m in fake.by_model.items()} == {"a": "rate", "ge": "rate"}
    assert ({n: m.calls_before_cap for n, m in fake.by_model.items()}
            == {n: m.calls_before_cap for n, m in sim.by_model.items()})


def test_a_real_model_on_loopback_keeps_its_latency_in_the_estimate_and_the_replay():
    """A user's own server on 127.0.0.1 (vLLM) is no fake of ours: 2.0 s per call, in both (the hand-computed 23/0
    of tests/test_cost_cap_per_model.py)."""
    est = _two_models("openai", "http://127.0.0.1:9/v1")
    assert {n: m.time_basis for n, m in est.by_model.items()} == {"a": "latency", "ge": "latency"}
    assert {n: m.calls_before_cap for n, m in est.by_model.items()} == {"a": 23, "ge": 0}
