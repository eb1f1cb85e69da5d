"""gpt-5.4 and later OpenAI models bill images by larger patch budgets, and the reservation covers them (break34 #1).

OpenAI vision guide (https://developers.openai.com/api/docs/guides/images-vision), "Model sizing behavior":
"gpt-5.4 and future models | low, high, original, auto | high allows up to 2,500 patches or a 2048-pixel maximum
dimension. original allows up to 10,000 patches or a 6000-pixel maximum dimension"; on gpt-5.5 ``auto`` (and an
omitted detail) behaves as ``original``. Before, these ids had no rule and reserved ``image_input_tokens``
(1,600): a 12 MP phone photo (4032 x 3024) bills 9,890 patches at ``original``, so one call alone passed a cap
the reservation said it kept (a helper's end-to-end run spent $0.1513 of a $0.05 cap).
Expected figures below are worked by hand from the guide's steps A-C.
"""

from __future__ import annotations

import base64
import io
import math

import aiohttp
import pytest
from _made_up_keys import made_up_key
from _model_harness import CallerRig, billed, run
from PIL import Image

from geoagent.config import (ModelConfig, expected_image_tokens, load_config, openai_large_patch_model,
                             reserved_image_tokens, reserved_input_tokens)
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

KEY_VAR = "GPT54_TEST_KEY"
PHONE = (4032, 3024)


@pytest.mark.parametrize("model", ["gpt-5.4", "gpt-5.4-mini", "gpt-5.5", "gpt-5.5-2026-04-23", "openai/gpt-5.5",
                                   "gpt-5.10", "gpt-6", "ft:gpt-5.4-mini:org::abc", "GPT-5.5"])
def test_newer_and_unknown_openai_ids_take_the_large_patch_budgets(model):
    assert openai_large_patch_model(model)


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini", "chatgpt-4o-latest", "gpt-4.1", "gpt-4.1-mini",
                                   "gpt-4.5-preview", "gpt-4-turbo", "o1", "o1-mini", "o3", "o3-mini", "o4-mini",
                                   "gpt-5", "gpt-5-mini", "gpt-5-chat-latest", "gpt-5.1", "gpt-5.2", "gpt-5.2-codex",
                                   "gpt-5.3-codex", "codex-mini-latest", "computer-use-preview",
                                   "llama-3.2-vision", "qwen2.5-vl-72b", "sandbox-model"])
def test_older_openai_ids_and_other_vendors_keep_their_rules(model):
    assert not openai_large_patch_model(model)


def test_a_phone_photo_on_gpt55_is_expected_and_reserved_by_the_guides_budgets():
    # original (auto, omitted): 4032 x 3024 fits 6000 px; 126 x 95 = 11,970 patches > 10,000: r = sqrt(1024 x
    # 10,000 / 12,192,768) = 0.91644 -> 115.47 x 86.60 patches -> x 86/86.60 -> 114.67 x 86 -> 115 x 86 = 9,890
    for params in (None, {"detail": "auto"}, {"detail": "original"}):
        assert expected_image_tokens("openai", "gpt-5.5", PHONE, params)[0] == 9890
        assert reserved_image_tokens("openai", "gpt-5.5", PHONE, params)[0] == 10000
    # high: first to the 2,048-px side: 2048 x 1536 -> 64 x 48 = 3,072 > 2,500: r = sqrt(1024 x 2,500 / 3,145,728)
    # = 0.90211 -> 57.74 x 43.30 patches -> x min(57/57.74, 43/43.30) = x 0.98727 -> 57.0 x 42.75 -> 57 x 43 = 2,451
    assert expected_image_tokens("openai", "gpt-5.5", PHONE, {"detail": "high"})[0] == 2451
    assert reserved_image_tokens("openai", "gpt-5.5", PHONE, {"detail": "high"})[0] == 2500
    # low: "a low-resolution 512px x 512px version": 16 x 16 = 256 expected; reserved at the high budget
    assert expected_image_tokens("openai", "gpt-5.5", PHONE, {"detail": "low"})[0] == 256
    assert reserved_image_tokens("openai", "gpt-5.5", PHONE, {"detail": "low"})[0] == 2500
    # a small image is billed its own patches under every budget
    assert expected_image_tokens("openai", "gpt-5.4", (640, 480))[0] == 20 * 15
    m = ModelConfig(name="m", provider="openai", model="gpt-5.5", price_input_usd_per_mtok=5.0)
    assert reserved_input_tokens(m, "Where?", has_image=True, size_px=PHONE) == 2 + 16 + 10000


def test_a_fine_tuned_model_bills_images_as_its_base_model():
    # ft:gpt-4o-mini bills gpt-4o-mini's 2,833 + 5,667 per tile, not the 1,600 budget
    base = expected_image_tokens("openai", "gpt-4o-mini", (640, 480))
    assert expected_image_tokens("openai", "ft:gpt-4o-mini-2024-07-18:org::x1", (640, 480))[0] == base[0] == 2833 + 2 * 5667


def test_detail_original_is_a_valid_param():
    m = ModelConfig(name="m", provider="openai", model="gpt-5.5", params={"detail": "original"})
    assert m.params["detail"] == "original"
    with pytest.raises(ValueError, match="'original'"):
        ModelConfig(name="m", provider="openai", model="gpt-5.5", params={"detail": "huge"})


def test_documented_fake_bills_a_phone_photo_on_gpt55_within_the_reservation(tmp_path, monkeypatch):
    img = tmp_path / "phone.jpg"
    Image.new("RGB", PHONE, (90, 120, 150)).save(img, "JPEG", quality=30)
    prompt = "Where was this photo taken? Name the city."
    app = llm_openai.make_app(image_billing="documented")

    async def main():
        async with serve(app) as base, HttpClient() as http:
            p = tmp_path / "g55.toml"
            p.write_text(f'[campaign]\nname = "g55"\n[budget]\ncap_usd = 5.0\n[[models]]\nname = "m"\n'
                         f'provider = "openai"\nmodel = "gpt-5.5"\nbase_url = "{base}/v1"\napi_key_env = "{KEY_VAR}"\n'
                         f'price_input_usd_per_mtok = 5.0\nprice_output_usd_per_mtok = 30.0\nmax_output_tokens = 200\n'
                         'reasoning_model = true\n')
            rig = await CallerRig(tmp_path / "g55", load_config(p), http).start()
            t = Task(key="p", payload={"model": "m", "prompt": prompt, "image_ref": str(img)}, attempts=0, lease_id="x")
            [(_, msg)] = await rig.handle(t)
            s = rig.state.ledger.summary()
            return msg, s

    monkeypatch.setenv(KEY_VAR, made_up_key("sk-", 40, seed="gpt54"))
    msg, s = run(main(), 60)
    assert msg["input_tokens"] == math.ceil(len(prompt) / 4) + 9890
    assert billed(app["calls"])[-1]["input_tokens"] == msg["input_tokens"]
    assert s.overrun_usd == 0 and s.overrun_calls == 0  # the reservation covered the bill


@pytest.mark.parametrize(("model", "status"), [("gpt-5.5", 200), ("gpt-4o", 400)])
def test_fake_takes_detail_original_only_from_gpt54_and_later(model, status):
    buf = io.BytesIO()
    Image.new("RGB", (1, 1), (200, 200, 200)).save(buf, "PNG")  # a 1x1 photo, made here (no encoded literal)
    png = base64.b64encode(buf.getvalue()).decode("ascii")
    body = {"model": model, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Where?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}", "detail": "original"}}]}]}

    async def main():
        async with serve(llm_openai.make_app()) as base, aiohttp.ClientSession() as s:
            async with s.post(f"{base}/v1/chat/completions", json=body,
                              headers={"Authorization": "Bearer " + made_up_key("sk-", 40, seed="orig")}) as r:
                return r.status, await r.json()

    got, payload = run(main(), 30)
    assert got == status
    if status == 400:
        assert payload["error"]["param"] == "image_url.detail"


def test_mini_and_nano_variants_are_reserved_at_their_older_siblings_multipliers():
    # review34 #7: the guide lists no multiplier for gpt-5.4-mini/-nano; gpt-5-mini and gpt-5-nano bill 1.62 and 2.46
    assert reserved_image_tokens("openai", "gpt-5.4-mini", PHONE)[0] == 16200  # 10,000 x 1.62
    assert reserved_image_tokens("openai", "gpt-5.4-nano", PHONE)[0] == 24600  # 10,000 x 2.46
    assert expected_image_tokens("openai", "gpt-5.4-mini", PHONE)[0] == 9890  # the estimate keeps 1 a patch


@pytest.mark.parametrize(("model", "ok"), [("gpt-5.5", True), ("gpt-4o", False), ("gpt-5-mini", False),
                                           ("openai/gpt-4.1", False), ("llava-1.6", True)])
def test_detail_original_only_for_models_that_take_it(model, ok):
    # review34 #6: an older OpenAI model answers 400 to it, and every task would be dead-lettered
    if ok:
        ModelConfig(name="m", provider="openai", model=model, params={"detail": "original"})
    else:
        with pytest.raises(ValueError, match="'original' is for gpt-5.4 and later"):
            ModelConfig(name="m", provider="openai", model=model, params={"detail": "original"})
