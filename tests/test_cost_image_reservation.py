"""The ledger's reservation is a true worst case (issue 2 point 7): images at their documented bill, system prompt.

A provider bills an image by its size: gpt-4o-mini bills a 640x480 photo 2,833 + 2 x 5,667 = 14,167 input
tokens (OpenAI vision guide, "Calculating costs": 2 tiles of 512 px), Gemini bills a 2000x1600 photo
3 x 3 x 258 = 2,322 (Gemini token guide: 258 per 768-px tile); both above the default
``image_input_tokens`` (1,600). A reservation of 1,600 per image settled at the bill, and calls in flight
passed the cap. The reservation now counts max(``image_input_tokens``, the documented bill for the image's
size, read from its header) and the ``params.system`` prompt. The fakes bill by the same documented rules
(``image_billing="documented"``); expected figures are recomputed here by hand from those rules.
"""

from __future__ import annotations

from _made_up_keys import made_up_key

import math

import anyio
import pytest
from _model_harness import CallerRig, billed, generic_campaign, model_table, photo_task, run, write_model_config
from PIL import Image

from geoagent.config import estimate, load_config
from geoagent.engine import run_campaign
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import llm_gemini, llm_openai
from geoagent.sandbox.server import serve

KEY_VAR = "RESERVE_TEST_KEY"
KEY_VALUE = made_up_key("sk-", 28, seed="reservetest-n16")
GEMINI_KEY = made_up_key("AIza", 35, seed="reserve")


def test_fake_bills_images_by_the_documented_rule_for_their_size(tmp_path, monkeypatch):
    """The fakes in ``documented`` mode: gpt-4o-mini tiles, Gemini 768-px tiles, no rule -> 765; the model
    caller's reservation covers each bill (it reads the same size from the loaded image's header)."""
    img = tmp_path / "big.png"
    Image.new("RGB", (2000, 1600), (80, 90, 100)).save(img)
    prompt = "Where was this photo taken? Name the city."

    async def main():
        apps = {"openai": llm_openai.make_app(image_billing="documented"),
                "gemini": llm_gemini.make_app(image_billing="documented")}
        out = {}
        for api, model in (("openai", "gpt-4o-mini"), ("openai", "llava-1.6"), ("gemini", "gemini-2.0-flash")):
            async with serve(apps[api]) as base, HttpClient() as http:
                cfg_text = (f'[campaign]\nname = "fk"\n[budget]\ncap_usd = 5.0\n[[models]]\nname = "m"\n'
                            f'provider = "{api}"\nmodel = "{model}"\n'
                            f'base_url = "{base + "/v1" if api == "openai" else base}"\n'
                            f'api_key_env = "{KEY_VAR}"\nprice_input_usd_per_mtok = 1.0\nmax_output_tokens = 20\n')
                p = tmp_path / f"{api}-{model}.toml"
                p.write_text(cfg_text)
                rig = await CallerRig(tmp_path / f"{api}-{model}", load_config(p), http).start()
                t = Task(key=model, payload={"model": "m", "prompt": prompt, "image_ref": str(img)}, attempts=0,
                         lease_id="x")
                [(_, msg)] = await rig.handle(t)
                out[model] = msg["input_tokens"]
                assert rig.state.ledger.summary().overrun_usd == 0  # the reservation covered the bill
                assert billed(apps[api]["calls"])[-1]["input_tokens"] == msg["input_tokens"]
        return out

    monkeypatch.setenv(KEY_VAR, GEMINI_KEY)  # the fakes accept any key; Gemini's has its documented shape
    got = run(main(), 60)
    text = math.ceil(len(prompt) / 4)
    # gpt-4o-mini: 2000x1600 fits 2048; shortest side 1600 -> 768: 960x768 -> 2 x 2 tiles
    assert got["gpt-4o-mini"] == text + 2833 + 4 * 5667
    assert got["llava-1.6"] == text + 765  # no documented rule: the simulated 765
    assert got["gemini-2.0-flash"] == text + 3 * 3 * 258


def test_fake_bills_openai_low_detail_images_their_base_tokens(tmp_path, monkeypatch):
    """OpenAI's ``detail: "low"`` is billed the base tokens whatever the size (vision guide, "Calculating
    costs"): the documented-mode fake honours it, and the reservation (which honours it too) covers it."""
    img = tmp_path / "big.png"
    Image.new("RGB", (2000, 1600), (80, 90, 100)).save(img)
    prompt = "Where was this photo taken? Name the city."
    app = llm_openai.make_app(image_billing="documented")

    async def main():
        async with serve(app) as base, HttpClient() as http:
            p = tmp_path / "low.toml"
            p.write_text(f'[campaign]\nname = "low"\n[budget]\ncap_usd = 5.0\n[[models]]\nname = "m"\n'
                         f'provider = "openai"\nmodel = "gpt-4o-mini"\nbase_url = "{base}/v1"\n'
                         f'api_key_env = "{KEY_VAR}"\nprice_input_usd_per_mtok = 1.0\nmax_output_tokens = 20\n')
            rig = await CallerRig(tmp_path / "low", load_config(p), http).start()
            t = Task(key="low", payload={"model": "m", "prompt": prompt, "image_ref": str(img),
                                         "params": {"detail": "low"}}, attempts=0, lease_id="x")
            [(_, msg)] = await rig.handle(t)
            assert rig.state.ledger.summary().overrun_usd == 0
            return msg["input_tokens"]

    monkeypatch.setenv(KEY_VAR, GEMINI_KEY)
    assert run(main(), 60) == math.ceil(len(prompt) / 4) + 2833
    assert billed(app["calls"])[-1]["input_tokens"] == math.ceil(len(prompt) / 4) + 2833


def _mini_campaign(tmp_path, base: str, cap_usd: float, n: int = 40):
    path = generic_campaign(tmp_path, name="imgcap", n=n, cap_usd=cap_usd,
                            models=model_table("mini", base_url=base, key_var=KEY_VAR, model="gpt-4o-mini",
                                               max_output_tokens=100, concurrency=4, rate_requests=5000))
    path.write_text(path.read_text().replace(f"n_requests = {n}\n", f"n_requests = {n}\nimage = true\n"))
    return load_config(path)


def test_campaign_with_images_billed_above_image_input_tokens_never_passes_the_cap(tmp_path, monkeypatch):
    # 40 requests with a 640x480 placeholder photo each (generic campaign, image = true) to gpt-4o-mini at
    # 0.15 / 0.60 USD per 1M tokens; each call is billed ~14,180 input tokens (~$0.0021), the cap covers ~9
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)
    cap = 0.02
    app = llm_openai.make_app(api_keys=[KEY_VALUE], image_billing="documented")

    async def main():
        async with serve(app) as base:
            cfg = _mini_campaign(tmp_path, base, cap)
            return cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    cfg, out = anyio.run(main)
    assert cfg.model("mini").image_input_tokens == 1600  # the default budget, below the bill
    calls = billed(app["calls"])
    prompt_tokens = [c["input_tokens"] - 14_167 for c in calls]  # the fake's bill: text + 2833 + 2 x 5667
    assert calls and all(0 < n < 40 for n in prompt_tokens)
    billed_usd = sum((c["input_tokens"] * 0.15 + c["output_tokens"] * 0.60) / 1e6 for c in calls)
    assert out.status == "budget exhausted"
    s = out.spend
    assert s["spent_usd"] == pytest.approx(billed_usd, abs=1e-9) and s["unknown_usd"] == 0
    assert s["spent_usd"] <= cap  # the hard cap held
    assert s["overrun_usd"] == 0 and s["overrun_calls"] == 0  # no call billed more than it reserved
    assert "billed more than reserved" not in out.summary()
    # every call reserved its worst case: (chars/3 + 16 + 14,167) x 1.25 input tokens + 100 output tokens
    state = open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=cap)
    try:
        rows = state.db.read("SELECT amount_nusd, actual_nusd FROM reservations WHERE state = 'settled'")
    finally:
        state.close()
    prompt_chars = len("Generic task 0: describe in one sentence what a street photo of a city might show.")
    worst0 = (math.ceil((prompt_chars // 3 + 16 + 14_167) * 1.25) * 0.15 + 100 * 0.60) / 1e6
    assert len(rows) == len(calls) and all(a >= b for a, b in rows)
    assert min(a for a, _ in rows) / 1e9 == pytest.approx(worst0, rel=0.01)


def test_system_prompt_is_counted_in_the_reservation(tmp_path, monkeypatch):
    # a 30,000-char system prompt is sent and billed (~7,500 tokens); the reservation counts it at chars / 3
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)
    system = "Answer as a careful geographer. " * 1000  # 32,000 chars
    app = llm_openai.make_app(api_keys=[KEY_VALUE])

    async def main():
        async with serve(app) as base, HttpClient() as http:
            cfg = write_model_config(tmp_path / "c.toml", base, name="sysres", key_var=KEY_VAR, max_output_tokens=50)
            rig = await CallerRig(tmp_path, cfg, http).start()
            t = photo_task(0)
            t = Task(key=t.key, payload={**t.payload, "params": {"system": system}}, attempts=0, lease_id="x")
            [(_, msg)] = await rig.handle(t)
            amount = rig.state.db.read("SELECT amount_nusd, actual_nusd FROM reservations")[0]
            return cfg, msg, amount, rig.state.ledger.summary()

    cfg, msg, (amount_nusd, actual_nusd), s = run(main(), 60)
    prompt = photo_task(0).payload["prompt"]
    assert msg["input_tokens"] == math.ceil((len(system) + len(prompt)) / 4)  # the fake bills the system text
    # worst case: (prompt + system) chars / 3 + 16, x 1.25, at 2 USD per 1M; 50 output tokens at 10 USD per 1M
    worst_usd = (math.ceil(((len(prompt) + len(system)) // 3 + 16) * 1.25) * 2.0 + 50 * 10.0) / 1e6
    assert amount_nusd == math.ceil(worst_usd * 1e9 - 1e-6)
    assert actual_nusd <= amount_nusd and s.overrun_usd == 0
    # the dry run's worst case is the same reservation
    me = estimate(cfg, [{**photo_task(0).payload, "params": {"system": system}}]).by_model["m"]
    assert me.worst_case_usd == pytest.approx(worst_usd, rel=1e-12)
    assert me.worst_input_tokens == (len(prompt) + len(system)) // 3 + 16


def test_calls_billed_above_their_reservation_are_counted_and_warned_about(tmp_path, monkeypatch):
    # a model without a documented image rule and image_input_tokens = 0: the fake bills each image 765
    # tokens the reservation did not count, so every call settles above its reservation; the ledger counts
    # them and the summary warns
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)
    n = 6
    app = llm_openai.make_app(api_keys=[KEY_VALUE], image_billing="documented")

    async def main():
        async with serve(app) as base:
            path = generic_campaign(tmp_path, name="over", n=n, cap_usd=1.0,
                                    models=model_table("llava", base_url=base, key_var=KEY_VAR, model="llava-1.6"))
            path.write_text(path.read_text().replace(f"n_requests = {n}\n", f"n_requests = {n}\nimage = true\n")
                            + "image_input_tokens = 0\n")
            return await run_campaign(load_config(path), live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    calls = billed(app["calls"])
    assert out.status == "complete" and len(calls) == n
    assert all(c["input_tokens"] > 765 for c in calls)  # the image went and was billed
    prompts = [f"Generic task {i}: describe in one sentence what a street photo of a city might show." for i in range(n)]
    reserved = sum((math.ceil((len(p) // 3 + 16) * 1.25) * 0.15 + 100 * 0.60) / 1e6 for p in prompts)
    actual = sum((c["input_tokens"] * 0.15 + c["output_tokens"] * 0.60) / 1e6 for c in calls)
    s = out.spend
    # the calls in flight before the first settled (concurrency 4) overran; after it, the overrun guard raised the
    # model's reservations to what it had billed (break34), so the rest did not
    assert 1 <= s["overrun_calls"] <= 4 < n
    assert 0 < s["overrun_usd"] <= actual - reserved + 1e-8
    warn = [ln for ln in out.summary().split("\n") if "billed more than reserved" in ln]
    k = s["overrun_calls"]
    assert len(warn) == 1 and warn[0].startswith(f"  !!! WARNING: {k} call{'s' if k != 1 else ''} billed more than reserved")
    assert "raise [[models]] image_input_tokens" in warn[0]
