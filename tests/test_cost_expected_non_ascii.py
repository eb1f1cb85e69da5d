"""The dry run's expected text tokens for non-ASCII prompts, and expected <= reserved for any text.

Rule (OpenAI help center, "What are tokens and how to count them"): ~4 characters per token is the rule of
thumb for English; non-English text has a higher token-to-character ratio ("Cómo estás": 10 characters, 5
tokens). Expected = ceil(ASCII chars / 4) + 1 per non-ASCII character (the simulated provider keeps
chars / 4, what it bills). The reservation counts a non-ASCII character at its UTF-8 bytes (>= 2), so the
expected figure never exceeds it. Before, the expected figure was ceil(chars / 4) for every script: a CJK
prompt of 100 characters was expected at 25 tokens (real tokenizers: ~100+).
"""

from __future__ import annotations

import random

import pytest

from geoagent.config import (config_from_dict, estimate, estimate_input_tokens, expected_input_tokens,
                             expected_text_tokens, reserved_input_tokens)
from geoagent.engine import estimate_lines


@pytest.mark.parametrize(("text", "tokens"), [
    ("where?", 2),                      # ASCII: ceil(6 / 4)
    ("Cómo estás", 2 + 2),              # 8 ASCII chars -> 2, 'ó' and 'á' -> 1 each (OpenAI's example: 5 real)
    ("東京タワー", 5),                    # 5 CJK / kana characters, 1 each (before: ceil(5 / 4) = 2)
    ("Where is 東京?", 3 + 2),           # 'Where is ?' = 10 ASCII chars -> 3, + 2
    ("📍📍", 2),                          # emoji (astral): 1 each (before: 1 for both)
    ("Москва", 6),                      # Cyrillic: 1 each
    ("", 0),
])
def test_expected_text_tokens_hand_computed(text, tokens):
    assert expected_text_tokens(text) == tokens
    assert expected_input_tokens(text, 100) == tokens + 100


def test_simulated_provider_keeps_its_chars_per_4_billing():
    from geoagent.sandbox.responders import simulated_usage

    assert expected_text_tokens("東京タワー", provider="simulated") == 2  # ceil(5 / 4)
    assert simulated_usage("東京タワー", False, "x")[0] == 2


def _cfg(provider: str, model: str) -> object:
    m = {"name": "m", "provider": provider, "model": model, "base_url": "http://127.0.0.1:9/v1",
         "price_input_usd_per_mtok": 1.0, "max_output_tokens": 10, "params": {"system": "Réponds en français."}}
    return config_from_dict({"campaign": {"name": "c", "kind": "generic"}, "budget": {"cap_usd": 100.0},
                             "models": [m]})


def test_dry_run_expected_figure_for_a_cjk_prompt_and_its_line():
    cfg = _cfg("openai", "gpt-4o")
    prompt = "この写真はどこで撮影されましたか?"  # 16 non-ASCII + '?' (1 ASCII)
    est = estimate(cfg, [{"model": "m", "prompt": prompt}])
    me = est.by_model["m"]
    # system "Réponds en français." = 20 chars, 'é' and 'ç' non-ASCII: 18 ASCII; with the prompt's '?': 19
    # ASCII -> ceil(19 / 4) = 5, + 16 + 2 = 18 non-ASCII -> 23
    assert me.input_tokens == 5 + 18 and me.non_ascii_chars == 18
    # reserved: 19 // 3 = 6, + 16 x 3 bytes + 2 x 2 bytes = 52, + 16 = 74
    assert me.worst_input_tokens == 6 + 48 + 4 + 16
    line = next(ln for ln in estimate_lines(est, cfg) if ln.strip().startswith("m:"))
    assert "input expected: prompt chars/4 (ASCII; 18 non-ASCII chars at 1 token each)" in line


def _random_text(rng: random.Random, n: int) -> str:
    pools = [(0x20, 0x7E), (0xA0, 0x17F), (0x400, 0x4FF), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
             (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0xD800, 0xDFFF)]  # incl. lone surrogates (surrogatepass)
    out = []
    for _ in range(n):
        lo, hi = pools[rng.randrange(len(pools))] if rng.random() < 0.6 else pools[0]
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def test_expected_never_exceeds_reserved_for_random_text():
    rng = random.Random(20261201)
    cfg = _cfg("anthropic", "claude-x")
    m = cfg.models[0]
    for i in range(3000):
        text = _random_text(rng, rng.randint(0, 400))
        for img in (0, rng.randint(1, 5000)):
            exp = expected_input_tokens(text, img)
            assert exp <= estimate_input_tokens(text, img > 0, image_tokens=img), repr(text)
        system = _random_text(rng, rng.randint(0, 40))
        exp = expected_input_tokens(text + system, 0)
        assert exp <= reserved_input_tokens(m, text, {"system": system}), repr(text)
