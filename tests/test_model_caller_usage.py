"""Adversarial review (session 3): documented non-answers from the OpenAI-compatible fake, end to end through
the model-caller stage, its ledger and store (real HTTP on 127.0.0.1, real SQLite; no mocks).

The fake's prompt markers (:mod:`geoagent.sandbox.llm_openai`) produce a refusal (``content: null`` + text in
``refusal``), a content-filtered answer (``content: null``, ``finish_reason: "content_filter"``) and an answer
without ``usage``. Expected ledger amounts are recomputed from the fake's call log at the config's prices.
"""

from __future__ import annotations

import pytest
from _model_harness import CallerRig, billed, photo_task, run, write_model_config
from _model_harness import cost_usd as cost

from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import PermanentFailure
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY_VAR = "PROVREVIEW_OPENAI_KEY"
KEY_VALUE = made_up_key("sk-", 26, seed="usagetest-n16")


def _task(key: str, marker: str) -> Task:
    t = photo_task(0, key=key)
    return Task(key=key, payload={**t.payload, "prompt": t.payload["prompt"] + " " + marker}, attempts=0, lease_id="x")


def test_refusal_filter_and_missing_usage_settle_the_ledger_without_under_counting(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)

    async def main():
        app = llm_openai.make_app(seed=3, api_keys=[KEY_VALUE])
        async with serve(app) as base, HttpClient() as http:
            cfg = write_model_config(tmp_path / "c.toml", base, name="provrev", key_var=KEY_VAR, max_output_tokens=50,
                                     max_attempts=1)
            rig = await CallerRig(tmp_path, cfg, http).start()
            led = rig.state.ledger

            # 1) refusal: a definite answer, stored and settled at the reported usage
            [(_, out)] = await rig.handle(_task("refuse", llm_openai.REFUSE_MARKER))
            call = billed(app["calls"])[-1]
            assert out["text"] == llm_openai.REFUSAL_TEXT and out["finish_reason"] == "stop" and not out["cached"]
            assert (out["input_tokens"], out["output_tokens"]) == (call["input_tokens"], call["output_tokens"])
            s1 = led.summary()
            assert s1.calls == 1 and s1.spent_usd == pytest.approx(cost(call["input_tokens"], call["output_tokens"]))

            # 2) content filter: not an answer, not retryable (permanent), billed input settled, nothing unknown
            with pytest.raises(PermanentFailure, match="content_filter"):
                await rig.handle(_task("filter", llm_openai.FILTER_MARKER))
            call = billed(app["calls"])[-1]
            s2 = led.summary()
            assert s2.calls == 2 and s2.unknown_calls == 0 and s2.reserved_usd == 0
            assert s2.spent_usd - s1.spent_usd == pytest.approx(cost(call["input_tokens"], 0))
            assert len(billed(app["calls"])) == 2  # sent once

            # 3) no usage in the body: an answer all the same (billed once): stored and emitted, settled at its
            #    reservation (the worst case, >= the bill), marked not reported; asked again it is not sent again
            #    (before s13-usage: unknown-outcome spend and a retry that paid again, up to max_attempts)
            [(_, out)] = await rig.handle(_task("nousage", llm_openai.NO_USAGE_MARKER))
            call = billed(app["calls"])[-1]
            assert out["usage_reported"] is False and not out["cached"] and out["text"]
            assert out["output_tokens"] == 50  # the worst case: max_output_tokens
            s3 = led.summary()
            assert s3.calls == 3 and s3.unknown_calls == 0 and s3.reserved_usd == 0
            booked = s3.spent_usd - s2.spent_usd
            assert booked >= cost(call["input_tokens"], call["output_tokens"]) > 0
            assert out["cost_usd"] == pytest.approx(booked)
            assert led.spend_by_model()["m"]["unreported_calls"] == 1
            [(_, again)] = await rig.handle(_task("nousage", llm_openai.NO_USAGE_MARKER))
            assert again["cached"] and again["usage_reported"] is False and again["text"] == out["text"]
            assert len(billed(app["calls"])) == 3 and led.summary().calls == 3  # not paid twice
            assert led.check_consistency() == []

    run(main(), 60)
