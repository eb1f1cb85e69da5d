"""The dry run's input-token figure: what it assumes, and images billed by each provider's documented rule.

A user's walkthrough: the dry-run input estimate was about twice the real usage and the line did not say
what it assumed. The expected figure now counts prompt chars / 4 (about 4 characters per token, as OpenAI,
Anthropic and Gemini document) plus, per image, what the provider's rule bills for the image's size; the
reservation keeps the higher worst case ((prompt + system) chars / 3 + 16 + max(``image_input_tokens``, the
documented bill)) so the cap still holds.
Hand-computed figures below come from the providers' pages (OpenAI vision guide "Calculating costs",
Anthropic vision guide, Gemini token guide).
"""

from __future__ import annotations

import math

import anyio
import pytest
from PIL import Image

from geoagent.config import config_from_dict, estimate, expected_image_tokens, load_config
from geoagent.engine import estimate_lines, run_campaign


@pytest.mark.parametrize(("provider", "model", "size", "params", "tokens"), [
    # OpenAI's worked examples: 1024x1024 high -> 768x768, 4 tiles: 85 + 4 x 170; 2048x4096 -> 1024x2048 ->
    # 768x1536, 6 tiles: 85 + 6 x 170; low detail: 85
    ("openai", "gpt-4o", (1024, 1024), {}, 765),
    ("openai", "gpt-4o-2024-08-06", (2048, 4096), {}, 1105),
    ("openai", "gpt-4o", (4096, 8192), {"detail": "low"}, 85),
    # gpt-4o-mini: 1024x768 keeps its size (shortest side 768), 4 tiles: 2,833 + 4 x 5,667
    ("openai", "gpt-4o-mini", (1024, 768), {}, 25_501),
    # Anthropic: w x h / 750 (200x200 -> 54); a long edge over 1568 is scaled to 1568 first: 3136x1568 ->
    # 1568x784, the guide's largest 1:2 size (not resized further), ceil(1,639.08) = 1,640 ("~1,600")
    ("anthropic", "claude-sonnet-4-5", (200, 200), {}, 54),
    ("anthropic", "claude-sonnet-4-5", (1000, 1000), {}, math.ceil(1_000_000 / 750)),
    ("anthropic", "claude-sonnet-4-5", (3136, 1568), {}, 1640),
    # Gemini: <= 384 px both sides: 258; else 258 per 768-px tile (1024x768 -> 2 x 1 tiles)
    ("gemini", "gemini-2.0-flash", (384, 384), {}, 258),
    ("gemini", "gemini-2.0-flash", (1024, 768), {}, 516),
    ("gemini", "gemini-2.0-flash", (3000, 2000), {}, 4 * 3 * 258),
])
def test_documented_image_token_rules(provider, model, size, params, tokens):
    got = expected_image_tokens(provider, model, size, params)
    assert got is not None and got[0] == tokens


def test_no_rule_for_other_openai_compatible_models():
    assert expected_image_tokens("openai", "llava-1.6", (1024, 768)) is None


def _cfg(provider: str, model: str, **extra) -> object:
    m = {"name": "m", "provider": provider, "model": model, "base_url": "http://127.0.0.1:9/v1",
         "price_input_usd_per_mtok": 1.0, "max_output_tokens": 10, **extra}
    return config_from_dict({"campaign": {"name": "c", "kind": "generic"}, "budget": {"cap_usd": 100.0},
                             "models": [m]})


def test_dry_run_line_names_the_input_assumption_from_the_image_size(tmp_path):
    img = tmp_path / "photo.jpg"
    Image.new("RGB", (1024, 768), (90, 90, 90)).save(img)
    prompt = "where? " * 13 + "city"  # 95 chars
    cfg = _cfg("gemini", "gemini-2.0-flash")
    # three distinct requests of the same length (a repeated request key is one call)
    est = estimate(cfg, [{"model": "m", "prompt": prompt[:-1] + str(i), "image_ref": str(img)} for i in range(3)])
    me = est.by_model["m"]
    # expected: ceil(95 / 4) = 24, + 516 per call; reserved: 95 // 3 = 31, + 16 + 1600 per call (the worst case)
    assert me.input_tokens == 3 * (24 + 516)
    assert len(prompt) == 95 and me.worst_input_tokens == 3 * (31 + 16 + 1600)
    assert me.worst_case_usd == pytest.approx(3 * (math.ceil((31 + 16 + 1600) * 1.25) * 1.0 + 10 * 0.0) / 1e6)
    line = next(ln for ln in estimate_lines(est, cfg) if ln.strip().startswith("m:"))
    assert "input expected: prompt chars/4 + about 516 tokens per image from its size (Gemini: 258 per image" in line
    assert ("reserved per call: (prompt + system prompt) chars/3 + 16 + per image max(1600 ([[models]] "
            "image_input_tokens), the documented bill for its size)") in line
    assert "x 1.25 ([budget] input_estimate_factor)" in line


def test_dry_run_reserves_the_documented_bill_when_it_is_above_the_image_budget(tmp_path):
    # a 3000x2000 photo on Gemini: 4 x 3 tiles of 768 px x 258 = 3,096 tokens, above the 1,600 budget: the
    # reservation (and the dry run's worst case) counts the bill, as the model caller does; a note says so
    img = tmp_path / "big.png"
    Image.new("RGB", (3000, 2000)).save(img)
    cfg = _cfg("gemini", "gemini-2.0-flash")
    est = estimate(cfg, [{"model": "m", "prompt": "where?", "image_ref": str(img)}])
    assert est.by_model["m"].worst_input_tokens == len("where?") // 3 + 16 + 3096
    lines = estimate_lines(est, cfg)
    note = [ln for ln in lines if "note: m:" in ln]
    assert len(note) == 1 and "a 3000x2000 image is billed about 3096 input tokens" in note[0]
    assert "the reservations count the documented bill" in note[0] and not [ln for ln in lines if "!!!" in ln]
    # with a budget above it: the budget is reserved, no note
    ok = _cfg("gemini", "gemini-2.0-flash", image_input_tokens=3200)
    est_ok = estimate(ok, [{"model": "m", "prompt": "where?", "image_ref": str(img)}])
    assert est_ok.by_model["m"].worst_input_tokens == len("where?") // 3 + 16 + 3200
    assert not [ln for ln in estimate_lines(est_ok, ok) if "note: m:" in ln]


def test_unknown_rule_falls_back_on_the_configured_budget_and_says_so():
    cfg = _cfg("openai", "llava-1.6")
    est = estimate(cfg, [{"model": "m", "prompt": "abcd" * 5, "image_ref": "synthetic:1"}])
    assert est.by_model["m"].input_tokens == 5 + 1600
    line = next(ln for ln in estimate_lines(est, cfg) if ln.strip().startswith("m:"))
    assert "+ 1600 per image ([[models]] image_input_tokens; no documented rule for openai llava-1.6" in line


def test_dry_run_input_figure_matches_the_simulated_run(tmp_path):
    # the simulated provider bills ceil(chars / 4) + 765 per image: the expected figure must equal the run's
    p = tmp_path / "sim.toml"
    p.write_text(f"""
[campaign]
name = "sim"
kind = "generic"
[paths]
queues = "{tmp_path / 'q'}"
state = "{tmp_path / 's'}"
[budget]
cap_usd = 10.0
[generic]
n_requests = 12
image = true
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = 1.0
""", encoding="utf-8")
    cfg = load_config(p)
    dry = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False, export=False))
    line = next(ln for ln in dry.extra_lines if ln.strip().startswith("sim:"))
    run = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert run.status == "complete"
    assert f"{run.spend['input_tokens']} in / " in line
    assert "simulated provider: 765 per image" in line


def test_dry_run_reports_photos_and_the_gray_field_apart(tmp_path):
    # fresh-user finding: 64x64 photos (~6 tokens on Anthropic) read as "about 59 tokens per image" because the
    # mean took in the 512x512 gray-field control images
    img = tmp_path / "photo.jpg"
    Image.new("RGB", (64, 64), (90, 90, 90)).save(img)
    cfg = _cfg("anthropic", "claude-sonnet-4-5")
    plan = [{"model": "m", "prompt": f"is this near place {i}?", "image_ref": str(img)} for i in range(9)]
    plan.append({"model": "m", "prompt": "is this near place X?", "image_ref": "blank:gray", "image_id": "blank:gray"})
    est = estimate(cfg, plan)
    me = est.by_model["m"]
    # by hand (Anthropic: ceil(w * h / 750)): 64x64 -> ceil(5.46) = 6; 512x512 -> ceil(349.5) = 350
    assert me.image_tokens_by_kind == {"photos": [9, 9 * 6], "gray-field control image": [1, 350]}
    line = next(ln for ln in estimate_lines(est, cfg) if ln.strip().startswith("m:"))
    assert ("photos: about 6 tokens each (9 requests with one), gray-field control image: about 350 tokens each "
            "(1 request with one)") in line
    assert "tokens per image" not in line  # no mean over both
