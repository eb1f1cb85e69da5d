"""Image token rules checked against the providers' documented numbers (expected bill vs reservation bound).

OpenAI vision guide, "Calculating costs" (section "GPT-4.1-mini, GPT-4.1-nano, o4-mini"): 32-px patches, over
1,536 the image is scaled down (worked example 1800 x 2400 -> 1056 x 1408 = 33 x 44 = 1,452), multipliers
gpt-5-mini 1.62, gpt-5-nano 2.46, gpt-4.1-mini 1.62, gpt-4.1-nano 2.46, o4-mini 1.72. Reservations keep
min(1536, raw patches): a user measured the API billing gpt-4.1-mini the full 1,536 x 1.62 = 2,488 for a
4000 x 1474 image that the guide's formula (and OpenAI's own calculator: 2,348) puts at 1,449 patches.

Anthropic vision guide, "Evaluate image size": long edge > 1,568 px or > ~1,600 tokens -> scaled down; tokens =
w x h / 750; largest sizes not resized: 1:1 1092x1092, 3:4 951x1268, 2:3 896x1344, 9:16 819x1456, 1:2 784x1568.
Before, the bill was capped at 1,600, so the guide's 784 x 1568 (1,639.08 tokens) was reserved 1,600 and a
2000 x 2000 photo (resized to 1092 x 1092: 1,590) was expected at 1,600.
"""

from __future__ import annotations

import math
import random

import pytest

from geoagent.config import (ModelConfig, anthropic_image_size_px, config_from_dict, estimate, expected_image_tokens,
                             openai_patches, reserved_image_tokens, reserved_input_tokens)


@pytest.mark.parametrize(("size", "documented", "bound"), [
    ((1024, 1024), 1024, 1024),  # guide: 32 x 32 = 1,024, below the cap
    ((1800, 2400), 1452, 1536),  # guide: 57 x 75 = 4,275 -> 1056 x 1408 -> 33 x 44 = 1,452
    # first fitted to the 2,048-px side ("Model sizing behavior"): 2048 x 754 -> 64 x 24 = 1,536, within the budget:
    # the 1,536 the forum measured (step B alone, without the side limit, gives 63 x 23 = 1,449)
    ((4000, 1474), 1536, 1536),
    ((3000, 400), 576, 1222),    # 2048 x 273 -> 64 x 9 = 576; the bound is the image as sent (94 x 13)
    ((100, 50), 8, 8),           # 4 x 2
])
def test_openai_patch_counts_follow_the_guide(size, documented, bound):
    assert openai_patches(*size) == (documented, bound)


@pytest.mark.parametrize(("model", "mult"), [("gpt-5-mini", 1.62), ("gpt-5-nano", 2.46), ("gpt-4.1-mini", 1.62),
                                             ("gpt-4.1-nano", 2.46), ("o4-mini", 1.72)])
def test_openai_multipliers_are_the_guides(model, mult):
    assert expected_image_tokens("openai", model, (1024, 1024))[0] == math.ceil(1024 * mult)
    assert expected_image_tokens("openai", model, (1800, 2400))[0] == math.ceil(1452 * mult)
    assert reserved_image_tokens("openai", model, (1800, 2400))[0] == math.ceil(1536 * mult)


def test_gpt41_mini_worked_numbers():
    # 1,452 x 1.62 = 2,352.24 -> 2,353 expected (the forum's "2,352.24 calculated by formula");
    # 1,536 x 1.62 = 2,488.32 -> 2,489 reserved (the forum's measured 2,488 for 4000 x 1474)
    assert expected_image_tokens("openai", "gpt-4.1-mini", (1800, 2400))[0] == 2353
    # 1,536 x 1.62: the guide's 2,048-px side limit first (the forum measured 2,488 where step B alone gives 2,348)
    assert expected_image_tokens("openai", "gpt-4.1-mini", (4000, 1474))[0] == 2489
    assert reserved_image_tokens("openai", "gpt-4.1-mini", (4000, 1474))[0] == 2489


@pytest.mark.parametrize(("size", "seen", "tokens"), [
    ((1092, 1092), (1092, 1092), 1590),  # 1,192,464 / 750 = 1,589.95
    ((951, 1268), (951, 1268), 1608),    # 1,205,868 / 750 = 1,607.82
    ((896, 1344), (896, 1344), 1606),    # 1,204,224 / 750 = 1,605.63
    ((819, 1456), (819, 1456), 1590),    # 1,192,464 / 750 = 1,589.95
    ((784, 1568), (784, 1568), 1640),    # 1,229,312 / 750 = 1,639.08
    ((2000, 2000), (1092, 1092), 1590),  # resized to the guide's 1:1 size
    ((1093, 1093), (1092, 1092), 1590),  # one px over the 1:1 size: 40 x 40 = 1,600 patches > 1,568
    ((3136, 1568), (1568, 784), 1640),   # long edge to 1,568: the guide's 1:2 size
    ((1000, 1000), (1000, 1000), 1334),  # the guide's example: ~1,334
    ((200, 200), (200, 200), 54),        # the guide's example: ~54
])
def test_anthropic_bill_matches_the_guides_sizes(size, seen, tokens):
    assert anthropic_image_size_px(*size) == seen
    assert expected_image_tokens("anthropic", "claude-sonnet-4-5", size)[0] == tokens


def test_anthropic_reservation_covers_the_guides_largest_bill():
    m = ModelConfig(name="c", provider="anthropic", model="claude-sonnet-4-5", price_input_usd_per_mtok=3.0)
    # 784 x 1568 is billed 1,640 (> the 1,600 image budget): reserved 1,640, not 1,600 as before
    assert reserved_input_tokens(m, "Where?", has_image=True, size_px=(784, 1568)) == 2 + 16 + 1640
    # a resized image is reserved the largest bill of any size within the limits, whatever the rounding
    assert reserved_image_tokens("anthropic", "claude-sonnet-4-5", (4000, 3000))[0] == 1640
    assert reserved_image_tokens("anthropic", "claude-sonnet-4-5", (1000, 1000))[0] == 1334
    # small images: the patch count can exceed w x h / 750 (200 x 200: 8 x 8 = 64 > 54); the bound takes it
    assert reserved_image_tokens("anthropic", "claude-sonnet-4-5", (200, 200))[0] == 64


@pytest.mark.parametrize("model", ["claude-opus-4-7", "anthropic/claude-opus-4.7", "claude-opus-5", "claude-x"])
def test_high_resolution_claude_models_are_reserved_their_larger_bill(model):
    """Claude Opus 4.7 reads images up to 2,576 px on the long edge and about 3.75 MP (4,784 28-px patches): a
    4000 x 3000 photo is seen at the largest 4:3 size within 4,784 patches (2212 x 1659: 79 x 60 = 4,740 patches,
    billed ceil(2212 x 1659 / 750) = 4,893), so the 1,568-px models' 1,640-token bound would reserve about a
    third of its bill. Ids not known to predate 4.7 (a newer or unknown Claude) get the larger limits too."""
    from geoagent.config import anthropic_resolution

    assert anthropic_resolution(model) == (2576, 4784, 5001)  # 5,001 = ceil(4,784 x 784 / 750)
    sw, sh = anthropic_image_size_px(4000, 3000, max_edge_px=2576, max_patches=4784)
    assert max(sw, sh) <= 2576 and math.ceil(sw / 28) * math.ceil(sh / 28) <= 4784
    assert math.ceil((sw + 1) / 28) * math.ceil((sw + 1) * 3000 // 4000 / 28) > 4784  # the largest such size
    assert (sw, sh) == (2212, 1659)
    assert expected_image_tokens("anthropic", model, (4000, 3000))[0] == 4893
    assert reserved_image_tokens("anthropic", model, (4000, 3000))[0] == 5001
    # an image within the 1,568-px limits is billed the same by both generations
    assert expected_image_tokens("anthropic", model, (1000, 1000))[0] == 1334
    m = ModelConfig(name="c", provider="anthropic", model=model, price_input_usd_per_mtok=3.0)
    assert reserved_input_tokens(m, "Where?", has_image=True, size_px=(4000, 3000)) == 2 + 16 + 5001


@pytest.mark.parametrize("model", ["claude-3-5-sonnet-20241022", "claude-3-7-sonnet-latest", "claude-sonnet-4-20250514",
                                   "claude-opus-4-1-20250805", "claude-haiku-4-5", "anthropic/claude-sonnet-4.6",
                                   "claude-opus-4-5-20251101", "claude-sonnet-4-5@20250929"])
def test_claude_models_before_opus_4_7_keep_the_1568_px_limits(model):
    from geoagent.config import anthropic_resolution

    assert anthropic_resolution(model) == (1568, 1568, 1640)
    assert expected_image_tokens("anthropic", model, (2000, 2000))[0] == 1590
    assert reserved_image_tokens("anthropic", model, (4000, 3000))[0] == 1640


def test_expected_never_exceeds_reserved_for_random_sizes_and_models():
    rng = random.Random(7)
    models = [("openai", "gpt-4.1-mini"), ("openai", "gpt-5-nano"), ("openai", "o4-mini"), ("openai", "gpt-4o"),
              ("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet-4-5"), ("anthropic", "claude-opus-4-7"),
              ("openai", "anthropic/claude-3.5-sonnet"),
              ("gemini", "gemini-2.0-flash"), ("simulated", "sim")]
    for _ in range(4000):
        size = (rng.choice([rng.randint(1, 64), rng.randint(1, 2000), rng.randint(1, 9000)]),
                rng.choice([rng.randint(1, 64), rng.randint(1, 2000), rng.randint(1, 9000)]))
        for provider, model in models:
            exp = expected_image_tokens(provider, model, size)
            res = reserved_image_tokens(provider, model, size)
            assert exp[0] <= res[0], (provider, model, size)
            if model == "claude-sonnet-4-5":
                sw, sh = anthropic_image_size_px(*size)
                assert max(sw, sh) <= 1568 and math.ceil(sw / 28) * math.ceil(sh / 28) <= 1568
                assert res[0] <= 1640
            elif model == "claude-opus-4-7":
                assert res[0] <= 5001


def test_dry_run_expected_input_stays_below_its_worst_case(tmp_path):
    from PIL import Image

    paths = []
    for i, size in enumerate([(784, 1568), (3000, 2000), (1800, 2400), (64, 64)]):
        p = tmp_path / f"img{i}.png"
        Image.new("RGB", size).save(p)
        paths.append(str(p))
    models = [{"name": f"m{i}", "provider": prov, "model": mid, "base_url": "http://127.0.0.1:9/v1",
               "price_input_usd_per_mtok": 1.0, "max_output_tokens": 10}
              for i, (prov, mid) in enumerate([("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4.1-mini"),
                                               ("openai", "o4-mini"), ("gemini", "gemini-2.0-flash")])]
    cfg = config_from_dict({"campaign": {"name": "c", "kind": "generic"}, "budget": {"cap_usd": 100.0},
                            "models": models})
    plan = [{"model": m["name"], "prompt": f"где это? {j}", "image_ref": p}
            for m in models for j, p in enumerate(paths)]
    est = estimate(cfg, plan)
    for me in est.by_model.values():
        assert 0 < me.input_tokens <= me.worst_input_tokens, me
    # m0 (Claude), 784 x 1568: expected 1,640 and reserved 1,640 for that image
    assert est.by_model["m0"].image_tokens_max == 1640


def test_gemini_reservation_covers_the_crop_unit_tiling_of_narrow_images():
    """Gemini tiles a large image into 258-token tiles; read as a crop unit of min(w, h) / 1.5 (clamped 256-768 px)
    a narrow strip takes many more tiles than ceil(w/768) x ceil(h/768). Hand: 3000 x 400: crop 266.7 px ->
    12 x 2 = 24 tiles (6,192 tokens) vs 4 x 1 = 4 (1,032); 1920 x 1080: crop 720 -> 3 x 2 = 6 either way."""
    assert expected_image_tokens("gemini", "gemini-2.0-flash", (3000, 400))[0] == 4 * 258
    assert reserved_image_tokens("gemini", "gemini-2.0-flash", (3000, 400))[0] == 24 * 258
    assert reserved_image_tokens("gemini", "gemini-2.0-flash", (1920, 1080))[0] == 6 * 258
    assert reserved_image_tokens("openai", "google/gemini-2.5-flash", (400, 3000))[0] == 24 * 258
