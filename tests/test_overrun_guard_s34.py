"""Overrun guard: after a call billed above its reservation, the model's later calls of that kind reserve what it
showed it can bill (break34 provider #1, #3; review34 #1, #3).

The cap is only as hard as each reservation is an upper bound of its call's bill. A vision model with no documented
image rule behind an OpenAI-compatible host reserves ``image_input_tokens`` (1,600) per photo; one that bills 10,000
passed the cap by the difference on every call in flight, and again on every later call. Served here by a local
aiohttp app in Chat Completions' shape that bills each request the input tokens the test sets. The factor is taken
against the worst case before the guard (a first version took it against the raised reservation, so rising bills
never caught up), and lives in the process only (a new run starts at 1, so a config changed after the warning is not
multiplied by an old factor).
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


def _app(bills: list[int]) -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        n_in = bills.pop(0)
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"city": "Paris"}'},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": 8, "total_tokens": n_in + 8}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def _reserved(rig) -> list[float]:
    return [a / 1e9 for (a,) in rig.state.db.read("SELECT amount_nusd FROM reservations ORDER BY id")]


def test_rising_bills_are_caught_up_with_and_a_new_run_starts_afresh(tmp_path, monkeypatch):
    photo = tmp_path / "p.jpg"
    Image.new("RGB", (640, 480), (90, 120, 150)).save(photo, "JPEG")
    bills = [3_000, 12_000, 12_000, 12_000]
    app = _app(bills)
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
            costs = []
            for i in range(3):
                [(_, msg)] = await rig.handle(task(i))
                costs.append(msg["cost_usd"])
            run1 = _reserved(rig), rig.state.ledger.summary()
            rig2 = await CallerRig(tmp_path / "run1", cfg, http).start()  # a new process over the same state
            await rig2.handle(task(3))
            return costs, run1, _reserved(rig2)

    costs, (reserved, summary), reserved_after = anyio.run(main)
    assert costs[0] > reserved[0]  # 3,000 billed where 1,600 was reserved for the photo
    assert costs[1] > reserved[1] >= costs[0] * 0.99  # raised to the first bill, and then the bill rose
    assert reserved[2] >= costs[1] * 0.99 and costs[2] <= reserved[2]  # caught up: no third overrun
    assert summary.overrun_calls == 2
    assert reserved_after[3] < costs[0]  # a new run starts at the worst case itself
