"""Overrun guard: after a call billed above its reservation, the model's later calls reserve what it showed it can
bill, in this run and the next (break34 provider #1, #3).

The cap is only as hard as each reservation is an upper bound of its call's bill. A vision model with no documented
image rule behind an OpenAI-compatible host reserves ``image_input_tokens`` (1,600) per photo; one that bills 10,000
passed the cap by the difference on every call in flight, and again on every later call. Served here by a local
aiohttp app in Chat Completions' shape that bills each request 10,000 input tokens.
"""

from __future__ import annotations

import anyio
from _made_up_keys import made_up_key
from _model_harness import CallerRig
from aiohttp import web
from PIL import Image

from geoagent.config import load_config
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.sandbox.server import serve

KEY_VAR = "OVERRUN_GUARD_KEY"
BILLED_IN = 10_000


async def _chat(request: web.Request) -> web.Response:
    body = await request.json()
    return web.json_response({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"city": "Paris"}'},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": BILLED_IN, "completion_tokens": 8, "total_tokens": BILLED_IN + 8}})


def _reserved(rig) -> list[float]:
    return [a / 1e9 for (a,) in rig.state.db.read("SELECT amount_nusd FROM reservations ORDER BY id")]


def test_a_model_that_billed_above_its_reservation_reserves_more_from_then_on(tmp_path, monkeypatch):
    photo = tmp_path / "p.jpg"
    Image.new("RGB", (640, 480), (90, 120, 150)).save(photo, "JPEG")
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _chat)
    monkeypatch.setenv(KEY_VAR, made_up_key("sk-", 40, seed="guard34"))

    def task(i: int) -> Task:
        return Task(key=f"t{i}", payload={"model": "m", "prompt": f"Where was this photo taken? #{i}",
                                          "image_ref": str(photo)}, attempts=0, lease_id="x")

    async def main():
        async with serve(app) as base, HttpClient() as http:
            p = tmp_path / "g.toml"
            p.write_text(f'[campaign]\nname = "guard"\n[budget]\ncap_usd = 5.0\n[[models]]\nname = "m"\n'
                         f'provider = "openai"\nmodel = "qwen2.5-vl-72b"\nbase_url = "{base}/v1"\n'
                         f'api_key_env = "{KEY_VAR}"\nprice_input_usd_per_mtok = 1.0\nprice_output_usd_per_mtok = 1.0\n'
                         f'max_output_tokens = 50\n')
            cfg = load_config(p)
            rig = await CallerRig(tmp_path / "run1", cfg, http).start()
            [(_, first)] = await rig.handle(task(1))
            [(_, second)] = await rig.handle(task(2))
            run1 = _reserved(rig), rig.state.ledger.summary()
            # a new process over the same state: the guard is read back from the ledger
            rig2 = await CallerRig(tmp_path / "run1", cfg, http).start()
            await rig2.handle(task(3))
            return first, second, run1, _reserved(rig2)

    first, second, (reserved, summary), reserved_after = anyio.run(main)
    assert first["cost_usd"] > reserved[0]  # the first call was billed above its reservation: 1,600 per image
    assert summary.overrun_calls == 1  # only the first: the second reserved what the first cost
    assert reserved[1] >= first["cost_usd"] and second["cost_usd"] <= reserved[1]
    assert reserved_after[2] >= first["cost_usd"]
