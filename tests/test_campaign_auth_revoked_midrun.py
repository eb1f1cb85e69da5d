"""A model's key refused in the middle of a run, after the model had answered: no task is dead-lettered.

With ``max_attempts`` below the breaker's threshold (5 consecutive failures), the breaker's own count may not
reach the threshold before a task's attempts run out. Those failures are a refused key, not a failed task:
the task must stay queued (run ends 'authentication failed', exit 5) so a re-run with a working key does it,
never dead-lettered (where only ``run.py dead --requeue`` would bring it back). Through the real engine
against the local OpenAI-compatible fake; the key is 'revoked' by the fake itself: after its first answer a
middleware hands the fake a wrong key, which the fake refuses with its own 401 ``invalid_api_key``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from aiohttp import web

from _model_harness import generic_campaign, model_table
from geoagent.config import load_config
from geoagent.engine import EXIT_AUTH, STATUS_AUTH, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

GOOD = made_up_key("sk-", 35, seed="sandbox-good-a-n20")
WRONG = made_up_key("sk-", 35, seed="sandbox-wrong-n21")


def test_key_revoked_after_the_model_answered_dead_letters_nothing(tmp_path: Path, monkeypatch):
    app = llm_openai.make_app(api_keys=[GOOD])
    revoked = {"after": 1, "ok": 0}

    @web.middleware
    async def revoke(request, handler):  # outermost: from the second request on the key is refused
        if request.path.endswith("/chat/completions") and revoked["ok"] >= revoked["after"]:
            request = request.clone(headers={**request.headers, "Authorization": f"Bearer {WRONG}"})
        resp = await handler(request)
        if getattr(resp, "status", 0) == 200 and request.path.endswith("/chat/completions"):
            revoked["ok"] += 1
        return resp

    app.middlewares.insert(0, revoke)
    monkeypatch.setenv("GA_TEST_KEY_R", GOOD)
    n = 3

    async def main():
        async with serve(app) as base:
            models = model_table("gpt", base_url=base, key_var="GA_TEST_KEY_R", model="sim-gpt", max_output_tokens=64,
                                 concurrency=1, rate_requests=5000)
            cfg = load_config(generic_campaign(tmp_path, name="revoked", n=n, cap_usd=5.0, models=models,
                                               queue={"max_attempts": 2, "backoff_base_s": 0.01, "backoff_max_s": 0.05}))
            return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    c = out.counts["requests"]
    assert revoked["ok"] == 1  # one answer before the key was refused
    assert c.done == 1 and c.dead == 0 and c.ready + c.leased == n - 1
    assert out.status == STATUS_AUTH and out.exit_code == EXIT_AUTH
    assert "authentication failed for model gpt (HTTP 401): check GA_TEST_KEY_R" in out.summary()
