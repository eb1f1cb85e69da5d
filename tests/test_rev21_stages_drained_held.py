"""Adversarial review of the --stages "drained" judgement (commit 38bdb89): a stage that drained while it HELD
tasks of its own (the model caller: one model's API key refused) releases them at its end, so they are ready on
its input edge at the engine's count. They were left by this process, not "queued by another process after stage
model_caller had finished here"."""

from __future__ import annotations

import anyio

from _model_harness import generic_campaign, model_table
from geoagent.config import load_config
from geoagent.engine import EXIT_AUTH, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

GOOD_KEY = made_up_key("sk-", 33, seed="sandbox-good-n20")
WRONG_KEY = made_up_key("sk-", 33, seed="sandbox-wrong-n19")


def test_held_tasks_of_a_drained_stages_process_are_not_said_to_be_another_process_s(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BAD_KEY", WRONG_KEY)
    app = llm_openai.make_app(api_keys=[GOOD_KEY])

    async def go():
        async with serve(app) as base:
            models = model_table("good") + model_table("bad", base_url=base, key_var="BAD_KEY", model="sim-gpt")
            cfg = generic_campaign(tmp_path, name="held", n=40, models=models, cap_usd=1.0,
                                   queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05})
            return await run_campaign(load_config(cfg), live=False, handle_signals=False, export=False,
                                      only_stages=["model_caller"])

    out = anyio.run(go)
    text = out.summary() + "\n" + "\n".join(out.extra_lines or [])
    assert out.exit_code == EXIT_AUTH, text
    assert "authentication failed for model bad" in text, text
    # the bad model's 40 requests were held by this very process and released at its end
    assert "queued by another process" not in text, text
