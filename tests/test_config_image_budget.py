"""[[models]] image_input_tokens: the per-image input budget of reservations and dry runs (worst case).

gpt-4o-mini bills a 1024x768 high-detail image as 2,833 + 4 x 5,667 = 25,501 input tokens (OpenAI vision
pricing: the same USD per image as gpt-4o, which counts 85 + 4 x 170 = 765); with the default budget of
1,600 its reservations would under-estimate and calls in flight could pass the cap.
"""

from __future__ import annotations

import math

from geoagent.config import IMAGE_INPUT_TOKENS, config_from_dict, estimate
from geoagent.providers.base import ModelRequest

PROMPT = "Was this photo taken within 150 m of the Louvre? Answer yes or no."


def _cfg(**model):
    base = {"name": "mini", "provider": "openai", "model": "gpt-4o-mini", "base_url": "http://127.0.0.1:9/v1",
            "price_input_usd_per_mtok": 0.15, "price_output_usd_per_mtok": 0.60, "max_output_tokens": 100}
    return config_from_dict({"campaign": {"name": "c", "kind": "generic"}, "budget": {"cap_usd": 5.0},
                             "models": [{**base, **model}]})


def test_default_budget_and_text_only_calls():
    m = _cfg().models[0]
    assert m.image_input_tokens == IMAGE_INPUT_TOKENS == 1600
    assert m.estimate_input_tokens(PROMPT, True) == len(PROMPT) // 3 + 16 + 1600
    assert m.estimate_input_tokens(PROMPT, False) == len(PROMPT) // 3 + 16


def test_model_budget_sets_the_reservation_and_the_dry_run_worst_case():
    cfg = _cfg(image_input_tokens=25_501)
    m = cfg.models[0]
    n_in = len(PROMPT) // 3 + 16 + 25_501
    assert m.estimate_input_tokens(PROMPT, True) == n_in
    req = ModelRequest(provider="openai", model="gpt-4o-mini", prompt=PROMPT, image_id="img-1", params={})
    est = estimate(cfg, [("mini", req)])
    me = est.by_model["mini"]
    factor = cfg.budget.input_estimate_factor
    assert me.worst_input_tokens == n_in  # what the reservations count
    # the expected figure: prompt chars / 4 + what OpenAI bills gpt-4o-mini for the request's image, a
    # 640x480 placeholder (image_id without a file): 2 tiles of 512 px, 2,833 + 2 x 5,667
    assert me.input_tokens == math.ceil(len(PROMPT) / 4) + 2833 + 2 * 5667
    assert math.isclose(me.worst_case_usd, (math.ceil(n_in * factor) * 0.15 + 100 * 0.60) / 1e6, rel_tol=1e-12)


def test_negative_budget_is_a_config_error():
    import pytest

    from geoagent.config import ConfigError

    with pytest.raises(ConfigError, match=r"models\[0\]\.image_input_tokens"):
        _cfg(image_input_tokens=-1)
