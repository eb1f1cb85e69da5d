"""Adversarial checks of session 6's work (cost cap reservation, GeoVerify one trial per request, the
unreachable-host breaker). Each test names the defect it pins down; expected figures are hand-computed from
the providers' documented rules."""

from __future__ import annotations

from _made_up_keys import made_up_key

import io
import math

import anyio
from _model_harness import CallerRig, billed, run
from PIL import Image

from geoagent.config import (expected_image_tokens, image_size_px, load_config, reserved_image_tokens,
                             reserved_input_tokens)
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

KEY_VAR = "ADV_S6_KEY"
KEY_VALUE = made_up_key("sk-", 22, seed="advs6-n16")


def _huge_png(w: int = 20000, h: int = 10000) -> bytes:
    # a 1-bit all-black PNG: 200 megapixels, ~24 KB on disk (zlib), above Pillow's decompression-bomb limit
    buf = io.BytesIO()
    Image.new("1", (w, h)).save(buf, "PNG")
    return buf.getvalue()


def test_huge_png_is_reserved_at_its_documented_bill(tmp_path, monkeypatch):
    """Defect: ``image_size_px`` returned None for an image above Pillow's decompression-bomb limit (Image.open
    raises), so the reservation fell back on ``image_input_tokens`` (1,600) while gpt-4o-mini bills such an
    image by its size: 20000 x 10000 fits 2048 as 2048 x 1024, shortest side to 768: 1536 x 768, 3 x 2 tiles
    = 2,833 + 6 x 5,667 = 36,835 tokens (OpenAI vision guide)."""
    data = _huge_png()
    assert len(data) < 100_000
    assert image_size_px(None, None, data) == (20000, 10000)
    path = tmp_path / "huge.png"
    path.write_bytes(data)
    assert image_size_px(str(path), None) == (20000, 10000)
    assert expected_image_tokens("openai", "gpt-4o-mini", (20000, 10000))[0] == 2833 + 6 * 5667

    prompt = "Where was this photo taken? Name the city."
    app = llm_openai.make_app(api_keys=[KEY_VALUE], image_billing="documented")

    async def main():
        async with serve(app) as base, HttpClient() as http:
            p = tmp_path / "huge.toml"
            p.write_text(f'[campaign]\nname = "huge"\n[budget]\ncap_usd = 5.0\n[[models]]\nname = "m"\n'
                         f'provider = "openai"\nmodel = "gpt-4o-mini"\nbase_url = "{base}/v1"\n'
                         f'api_key_env = "{KEY_VAR}"\nprice_input_usd_per_mtok = 1.0\nmax_output_tokens = 20\n')
            cfg = load_config(p)
            rig = await CallerRig(tmp_path / "rig", cfg, http).start()
            t = Task(key="huge", payload={"model": "m", "prompt": prompt, "image_ref": str(path)}, attempts=0,
                     lease_id="x")
            [(_, msg)] = await rig.handle(t)
            rows = rig.state.db.read("SELECT amount_nusd, actual_nusd FROM reservations")
            return cfg, msg, rows, rig.state.ledger.summary()

    monkeypatch.setenv(KEY_VAR, KEY_VALUE)
    cfg, msg, rows, s = run(main(), 60)
    assert reserved_input_tokens(cfg.model("m"), prompt, has_image=True, size_px=(20000, 10000)) \
        == len(prompt) // 3 + 16 + 36_835
    assert msg["input_tokens"] == math.ceil(len(prompt) / 4) + 36_835
    assert billed(app["calls"])[-1]["input_tokens"] == msg["input_tokens"]
    [(amount, actual)] = rows
    # reserved: (chars/3 + 16 + 36,835) x 1.25 input tokens at 1 USD per 1M (+ 20 output tokens at 0 USD)
    assert amount >= math.ceil((len(prompt) // 3 + 16 + 36_835) * 1.25) * 1e3 - 1
    assert actual <= amount and s.overrun_usd == 0 and s.overrun_calls == 0


def _trial(image_id, site, arm, cand, truth, image_ref, band="signal"):
    from geoagent.data.model import VerifyTrial

    return VerifyTrial(image_id=image_id, site_id=site, arm=arm, cand=cand, img_lat=0.0, img_lon=0.0,
                       cand_lat=0.0, cand_lon=0.0, referenceability=None, d_km=0.1, band=band, truth=truth,
                       image_ref=image_ref)


def test_duplicate_skip_never_drops_a_main_arm_trial():
    """Defect: :func:`unique_trials` kept the first row in file order, so a mismatched-image control listed
    BEFORE the main-arm trial it collides with (same image shown, same claim: generic claims such as
    "City Hall" recur across continents) dropped the main-arm trial, changing H, F, d' and delta_1; the
    control (a check arm) is the one to skip."""
    from geoagent.geoverify.plan import unique_trials

    # site eu's control shows image 2000 (site na) with claim "City Hall"; image 2000's own main arm names
    # its own "City Hall" (signal, yes); the table lists site eu's rows first
    ctrl = _trial("1000", "eu", "ctrl_mismatch", "City Hall", "no", "2000")
    eu_main = _trial("1000", "eu", "main", "City Hall", "yes", "1000")
    na_main = _trial("2000", "na", "main", "City Hall", "yes", "2000")
    na_decoy = _trial("2000", "na", "main", "Harbour", "no", "2000", band="0.3-0.7km")
    rows = [eu_main, ctrl, na_main, na_decoy]
    lines = {t.trial_id: i + 2 for i, t in enumerate(rows)}
    kept, notes = unique_trials(rows, source="verify_trials.csv", lines=lines)
    assert [t.trial_id for t in kept] == [eu_main.trial_id, na_main.trial_id, na_decoy.trial_id]
    assert [t.arm for t in kept].count("main") == 3  # every main-arm trial scored
    [note] = notes
    assert note.startswith("verify_trials.csv line 3: ctrl_mismatch trial") and "like line 4" in note


def test_cjk_prompt_is_not_under_reserved():
    """Defect: the reservation counted text at chars / 3 (x 1.25), i.e. 0.42 tokens per character, while the
    providers' tokenizers spend about one token per CJK character (often two or three for rarer ones: a
    byte-level BPE token holds at least one UTF-8 byte, and a CJK character is 3 bytes), so a Japanese or
    Chinese prompt (an own template, a claim in a local script) was reserved well under its bill. A true
    bound: ASCII at chars / 3 as before, every other character at its UTF-8 length in tokens."""
    from geoagent.config import ModelConfig, estimate_input_tokens

    m = ModelConfig(name="m", provider="openai", model="gpt-4o", base_url="http://127.0.0.1:9/v1",
                    api_key_env=KEY_VAR, price_input_usd_per_mtok=1.0)
    ja = "この写真はどこで撮影されましたか？都市名を答えてください。"  # 29 characters, 87 UTF-8 bytes
    assert len(ja) == 29 and len(ja.encode("utf-8")) == 87
    assert estimate_input_tokens(ja, False) == 87 + 16
    assert reserved_input_tokens(m, ja) >= len(ja)  # at least one token per CJK character
    # mixed text: the ASCII part keeps chars / 3, the rest its bytes; system prompt too
    mixed = "Where was this photo taken? 東京駅 or 大阪城?"
    n_ascii = sum(1 for c in mixed if ord(c) < 128)
    assert estimate_input_tokens(mixed, False) == n_ascii // 3 + 6 * 3 + 16
    assert reserved_input_tokens(m, "Where?", {"system": "答えは日本語で"}) == (len("Where?") // 3 + 7 * 3 + 16)
    # English text is reserved as before
    en = "Where was this photo taken? Name the city."
    assert estimate_input_tokens(en, True, image_tokens=1600) == len(en) // 3 + 16 + 1600


def test_replay_with_recorded_usage_above_the_reservation_never_passes_the_cap(tmp_path):
    """Defect: a ``replay`` model settles each answer at its recorded usage, which the prompt-length worst
    case does not bound (a recorded image, a long answer): with 200,000 recorded input tokens per answer at
    1 USD per 1M, each settled $0.20 against a reservation of ~$0.0001, and a $0.50 cap let three through
    ($0.60 spent). The model caller now reserves at least the recorded bill (known before the "call"), so
    the third is refused: spent $0.40 + $0.20 > $0.50."""
    import orjson
    from _model_harness import photo_task

    from geoagent.config import estimate
    from geoagent.runtime.stage import BudgetStop
    from geoagent.workers.model_caller import build_request

    rec = tmp_path / "rec.jsonl"
    p = tmp_path / "c.toml"
    p.write_text(f'[campaign]\nname = "rp"\n[budget]\ncap_usd = 0.5\n[[models]]\nname = "m"\nprovider = "replay"\n'
                 f'model = "recorded"\nprice_input_usd_per_mtok = 1.0\nprice_output_usd_per_mtok = 1.0\n'
                 f'max_output_tokens = 50\nreplay = {{ path = "{rec}" }}\n')
    cfg = load_config(p)
    lines = [orjson.dumps({"key": build_request(cfg, photo_task(i).payload)[1].key(), "text": "Paris",
                           "usage": {"input_tokens": 200_000, "output_tokens": 10}}) for i in range(5)]
    rec.write_bytes(b"\n".join(lines) + b"\n")
    per_call = (200_000 + 10) / 1e6

    async def main():
        async with HttpClient() as http:
            rig = await CallerRig(tmp_path, cfg, http).start()
            outcomes = []
            for i in range(5):
                try:
                    await rig.handle(photo_task(i))
                    outcomes.append("ok")
                except BudgetStop:
                    outcomes.append("stop")
            est = estimate(cfg, [photo_task(i).payload for i in range(5)],
                           providers=rig.ctx.get("providers")).by_model["m"]
            return outcomes, rig.state.ledger.summary(), est

    outcomes, s, est = run(main(), 60)
    assert outcomes == ["ok", "ok", "stop", "stop", "stop"]
    assert abs(s.spent_usd - 2 * per_call) < 1e-9 and s.spent_usd <= s.cap_usd
    assert s.overrun_calls == 0
    # the dry run's worst case is the same reservation: the recorded bill of each answer
    assert abs(est.worst_case_usd - 5 * per_call) < 1e-9 and abs(est.cost_usd - 5 * per_call) < 1e-9


def test_rerun_while_host_still_down_keeps_the_tasks_queued(tmp_path, refused_port):
    """The breaker keeps a dead host's tasks queued in the run that trips it; a second run with the host
    still down should too. With one task, max_attempts 5 and the default threshold 5: run 1 nacks deliveries
    1-4 (attempts 4) and releases the 5th, which opens the breaker; the streak proved the host down, so its 4
    attempts are refunded (0 again, geoagent.runtime.worker "Refunds"), and run 2 does the same instead of
    dead-lettering the task at its next failure (was: attempts 5 -> dead)."""
    from test_runtime_unreachable_host import _pipeline

    url = f"http://127.0.0.1:{refused_port}/x"

    async def main():
        _, r1, c1, dead1 = await _pipeline(tmp_path, url, [("k0", {"i": 0})], max_attempts=5, unreachable_after=5)
        assert r1.stats.unreachable and (c1["a"].ready, c1["a"].dead) == (1, 0) and dead1 == []
        _, r2, c2, dead2 = await _pipeline(tmp_path, url, [], max_attempts=5, unreachable_after=5)
        return r2, c2, dead2

    r2, c2, dead2 = run(main(), 120)
    assert (c2["a"].ready, c2["a"].dead) == (1, 0) and dead2 == []
    assert r2.stats.unreachable and r2.stats.refunded_attempts == 4 and r2.stats.revived == 0


def test_documented_billing_covers_refused_and_blocked_answers(tmp_path):
    """Defect (fakes): under ``image_billing="documented"`` the OpenAI fake's refusals / filtered answers and
    the Gemini fake's blocked prompts billed the image the simulated 765 tokens instead of its documented bill
    (a refused call is billed its input like any other). A 2000 x 1600 image: gpt-4o-mini 2,833 + 4 x 5,667
    (960 x 768 after scaling: 2 x 2 tiles), Gemini 3 x 3 x 258."""
    import base64

    import aiohttp

    from geoagent.sandbox import llm_gemini

    buf = io.BytesIO()
    Image.new("RGB", (2000, 1600), (80, 90, 100)).save(buf, "PNG")
    b64 = base64.b64encode(buf.getvalue()).decode()
    gemini_key = made_up_key("AIza", 35, seed="adv-s6")

    async def main():
        out = {}
        async with serve(llm_openai.make_app(image_billing="documented")) as base, aiohttp.ClientSession() as s:
            for marker in (llm_openai.REFUSE_MARKER, llm_openai.FILTER_MARKER):
                prompt = f"Where is this? {marker}"
                body = {"model": "gpt-4o-mini", "max_tokens": 20, "messages": [{"role": "user", "content": [
                    {"type": "text", "text": prompt},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}}]}]}
                async with s.post(f"{base}/v1/chat/completions", json=body,
                                  headers={"Authorization": f"Bearer {KEY_VALUE}"}) as r:
                    assert r.status == 200
                    out[marker] = ((await r.json())["usage"]["prompt_tokens"], len(prompt))
        async with serve(llm_gemini.make_app(image_billing="documented")) as base, aiohttp.ClientSession() as s:
            prompt = f"Where is this? {llm_gemini.BLOCK_MARKER}"
            body = {"contents": [{"role": "user", "parts": [{"text": prompt},
                                                            {"inline_data": {"mime_type": "image/png", "data": b64}}]}]}
            async with s.post(f"{base}/v1beta/models/gemini-2.0-flash:generateContent", json=body,
                              headers={"x-goog-api-key": gemini_key}) as r:
                assert r.status == 200
                data = await r.json()
                assert data["promptFeedback"]["blockReason"] == "OTHER"
                out["block"] = (data["usageMetadata"]["promptTokenCount"], len(prompt))
        return out

    out = run(main(), 60)
    for marker in (llm_openai.REFUSE_MARKER, llm_openai.FILTER_MARKER):
        n, chars = out[marker]
        assert n == math.ceil(chars / 4) + 2833 + 4 * 5667
    n, chars = out["block"]
    assert n == math.ceil(chars / 4) + 3 * 3 * 258


def test_gemini_and_claude_behind_an_openai_compatible_endpoint_are_reserved_by_their_own_rule():
    """Defect: the image rule was chosen by the wire protocol (``provider``), so Gemini behind its OpenAI-
    compatible endpoint (``provider = "openai"``, ``model = "gemini-2.0-flash"``, or OpenRouter's
    ``google/gemini-2.0-flash-001``) got no rule and reserved ``image_input_tokens`` (1,600) for an image
    Gemini bills by its tiles: 2000 x 1600 -> ceil(2000/768) x ceil(1600/768) x 258 = 3 x 3 x 258 = 2,322.
    The model's own family decides the bill, whatever protocol carries the call."""
    from geoagent.config import ModelConfig

    assert expected_image_tokens("openai", "gemini-2.0-flash", (2000, 1600))[0] == 3 * 3 * 258
    assert expected_image_tokens("openai", "google/gemini-2.0-flash-001", (2000, 1600))[0] == 3 * 3 * 258
    # Claude through an OpenAI-compatible router: Anthropic's w x h / 750 (1000 x 750 -> 1,000)
    assert expected_image_tokens("openai", "anthropic/claude-3.5-sonnet", (1000, 750))[0] == 1000
    m = ModelConfig(name="g", provider="openai", model="gemini-2.0-flash",
                    base_url="http://127.0.0.1:9/v1beta/openai", api_key_env=KEY_VAR, price_input_usd_per_mtok=1.0)
    assert reserved_input_tokens(m, "Where?", has_image=True, size_px=(2000, 1600)) == 6 // 3 + 16 + 2322
    # other OpenAI-compatible models keep no rule (image_input_tokens)
    assert expected_image_tokens("openai", "llava-1.6", (2000, 1600)) is None


def test_openai_patch_billed_models_are_reserved_above_the_default_image_budget():
    """Defect: gpt-4.1-mini, gpt-4.1-nano and o4-mini bill an image by 32-px patches (at most 1,536) times a
    model multiplier (1.62, 2.46, 1.72; OpenAI vision guide, "Calculating costs"), up to 3,779 tokens, but had
    no rule, so the reservation counted the default ``image_input_tokens`` (1,600). Hand-computed: 1024 x 1024
    is 32 x 32 = 1,024 patches; 1800 x 2400 is 57 x 75 = 4,275 patches, capped at 1,536."""
    from geoagent.config import ModelConfig

    assert expected_image_tokens("openai", "gpt-4.1-mini", (1024, 1024))[0] == math.ceil(1024 * 1.62)  # 1,659
    assert expected_image_tokens("openai", "gpt-4.1-nano", (1024, 1024))[0] == math.ceil(1024 * 2.46)  # 2,520
    # 1800 x 2400: the guide scales it to 1056 x 1408 = 33 x 44 = 1,452 patches (expected); reservations keep
    # the cap of 1,536 (reserved_image_tokens; tests/test_cost_image_rules_documented.py)
    assert expected_image_tokens("openai", "o4-mini", (1800, 2400))[0] == math.ceil(1452 * 1.72)  # 2,498
    assert reserved_image_tokens("openai", "o4-mini", (1800, 2400))[0] == math.ceil(1536 * 1.72)  # 2,642
    assert reserved_image_tokens("openai", "gpt-4.1-nano-2025-04-14", (1800, 2400))[0] == math.ceil(1536 * 2.46)
    assert expected_image_tokens("openai", "gpt-4.1-mini", (100, 50))[0] == math.ceil(4 * 2 * 1.62)
    # gpt-5-mini / gpt-5-nano: the same patch rule, 1.62 / 2.46 (same table of the guide)
    assert reserved_image_tokens("openai", "gpt-5-mini", (1800, 2400))[0] == math.ceil(1536 * 1.62)  # 2,489
    assert expected_image_tokens("openai", "gpt-5-nano", (1024, 1024))[0] == math.ceil(1024 * 2.46)
    m = ModelConfig(name="n", provider="openai", model="gpt-4.1-nano", base_url="http://127.0.0.1:9/v1",
                    api_key_env=KEY_VAR, price_input_usd_per_mtok=0.1)
    assert reserved_input_tokens(m, "Where?", has_image=True, size_px=(1024, 1024)) == 2 + 16 + 2520
    # gpt-4.1 itself bills tiles like gpt-4o (85 + 170 per tile): at most 1,445 < 1,600, no rule needed
    assert expected_image_tokens("openai", "gpt-4.1", (1024, 1024)) is None


def test_watch_mode_resumes_a_stage_once_its_host_is_back(tmp_path):
    """A --watch pipeline whose fetch host is down trips the breaker (3 requests in a row); the host then comes
    back on the same port: the watching process gets the 4 queued tasks done within 8 s (its half-open probe, after
    a 0.5 s cool-down here, finds the host back and the stage resumes; worker "Unreachable hosts")."""
    from geoagent.runtime.daemon import open_edge_queues, run_pipeline
    from geoagent.runtime.stage import StageContext
    from geoagent.sandbox.server import free_port
    from test_runtime_unreachable_host import FAST, Fetch, Sink, _app

    port = free_port()
    url = f"http://127.0.0.1:{port}/x"

    async def main():
        stages = [Fetch(url), Sink()]
        queues = open_edge_queues(tmp_path / "q", "w", stages, backoff_base_s=0.0, backoff_max_s=0.0, max_attempts=50)
        views = []

        async def tick(view):
            views.append(view)

        try:
            await queues["a"].put_many([(f"k{i}", {"i": i}) for i in range(4)])
            async with HttpClient(default_policy=FAST) as http, anyio.create_task_group() as tg:
                async def drive():
                    with anyio.fail_after(20):
                        while not (views and views[-1].runners[0].stats.unreachable):
                            await anyio.sleep(0.05)
                    async with serve(_app(), "127.0.0.1", port):
                        with anyio.move_on_after(8):
                            while (await queues["a"].counts()).done < 4:
                                await anyio.sleep(0.1)
                        for r in views[-1].runners:
                            r.request_stop()

                tg.start_soon(drive)
                await run_pipeline("w", stages, queues, StageContext("w", {"http": http}), burst=False, tick=tick,
                                   tick_interval_s=0.05, handle_signals=False, grace_s=1.0,
                                   runner_options={"unreachable_after": 3, "probe_after_s": 0.5})
            return await queues["a"].counts()
        finally:
            for q in queues.values():
                await q.close()

    counts = run(main(), 90)
    assert counts.done == 4 and counts.ready == 0
