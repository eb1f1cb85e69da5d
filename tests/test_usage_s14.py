"""Impossible and missing usage counts, session 14 (s14-usage), end to end through the model-caller stage, its
ledger and store: real HTTP on 127.0.0.1 to the local fakes of :mod:`geoagent.sandbox`, real SQLite; no mocks.

* An explicit zero output count beside a non-empty answer text (OpenAI-compatible ``completion_tokens: 0``,
  Anthropic ``output_tokens: 0``, Gemini ``candidatesTokenCount: 0``) was accepted as free output: the call was
  settled at its input tokens only, an under-count. It is impossible usage now: booked at the reservation (the
  worst case), ``usage_reported`` false, warned once per model.
* A Gemini answer with text and ``totalTokenCount`` but no ``candidatesTokenCount`` was counted from the total. The
  JSON mapping leaves a zero count out, so the body says zero candidate tokens for an answer with text, and the
  documented bodies without the count (a streamed answer's chunks before the last) carry a running total: booked
  as not reported now (:mod:`geoagent.providers.gemini`).
* A Gemini answer withheld by the safety filter (a candidate without content, ``finishReason`` ``SAFETY``) without
  ``usageMetadata`` was a malformed body: retried (each retry billed, HTTP 200) and booked as unknown-outcome
  spend. It is the withheld answer it is now: not retried, booked at its worst case, its reason kept.
"""

from __future__ import annotations

import logging

import pytest
from _model_harness import CallerRig, billed, photo_task, run, write_model_config

from geoagent.config import load_config
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import PermanentFailure
from geoagent.sandbox import llm_anthropic, llm_gemini, llm_openai
from geoagent.sandbox.server import serve

KEY_VAR = "S14_USAGE_KEY"
KEY_VALUE = "s14-usage-" "key-0123456789"
MAX_OUT = 50
APPS = {"openai": llm_openai, "anthropic": llm_anthropic, "gemini": llm_gemini}


def _config(tmp_path, api: str, base: str):
    """The one-model campaign config of :func:`write_model_config`, its model served by the fake of ``api``."""
    cfg = write_model_config(tmp_path / "c.toml", base, name=f"s14{api}", key_var=KEY_VAR, max_output_tokens=MAX_OUT,
                             max_attempts=3)
    if api == "openai":
        return cfg
    path = tmp_path / "c.toml"
    model = {"anthropic": "claude-sim", "gemini": "gemini-sim"}[api]
    path.write_text(path.read_text().replace('provider = "openai"', f'provider = "{api}"')
                    .replace('model = "gpt-sim"', f'model = "{model}"').replace(f'"{base}/v1"', f'"{base}"'))
    return load_config(path)


def _task(i: int, marker: str = "") -> Task:
    t = photo_task(i)
    return Task(key=t.key, payload={**t.payload, "prompt": t.payload["prompt"] + marker}, attempts=0, lease_id="x")


@pytest.mark.parametrize("api,mode", [("openai", "zero_output"), ("anthropic", "zero_output"),
                                      ("gemini", "zero_output"), ("gemini", "total_only")])
def test_an_impossible_output_count_is_booked_at_the_worst_case_and_said_once(tmp_path, monkeypatch, caplog, api, mode):
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)

    async def main():
        app = APPS[api].make_app(seed=3, api_keys=[KEY_VALUE], usage=mode)
        async with serve(app) as base, HttpClient() as http:
            rig = await CallerRig(tmp_path, _config(tmp_path, api, base), http).start()
            outs = [(await rig.handle(_task(i)))[0][1] for i in range(2)]
            return rig, outs, billed(app["calls"])

    with caplog.at_level(logging.WARNING, logger="geoagent.workers.model_caller"):
        rig, outs, calls = run(main(), 60)
    try:
        led = rig.state.ledger
        assert len(calls) == 2  # each sent once
        for out in outs:
            # before: usage_reported absent (reported), output_tokens 0 (or the total's difference), cost at input only
            assert out["text"] and out["usage_reported"] is False, out
            assert out["output_tokens"] == MAX_OUT  # the worst case: max_output_tokens
        rows = rig.state.db.read("SELECT amount_nusd, actual_nusd, state FROM reservations")
        assert len(rows) == 2 and all(state == "settled" and actual == amount > 0 for amount, actual, state in rows)
        assert led.spend_by_model()["m"]["unreported_calls"] == 2 and led.check_consistency() == []
        said = [r for r in caplog.records if "without a usage count" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in caplog.records]  # once per model
    finally:
        rig.state.close()


def test_a_reported_nonzero_output_count_is_kept(tmp_path, monkeypatch):
    """The control: the fakes' normal answers still settle at their reported usage."""
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)

    async def main():
        app = llm_gemini.make_app(seed=3, api_keys=[KEY_VALUE])
        async with serve(app) as base, HttpClient() as http:
            rig = await CallerRig(tmp_path, _config(tmp_path, "gemini", base), http).start()
            return rig, (await rig.handle(_task(0)))[0][1], billed(app["calls"])[-1]

    rig, out, call = run(main(), 60)
    try:
        assert "usage_reported" not in out and out["output_tokens"] == call["output_tokens"] > 0
        assert "unreported_calls" not in rig.state.ledger.spend_by_model()["m"]
    finally:
        rig.state.close()


@pytest.mark.parametrize("mode", ["omit", "null"])
def test_a_withheld_gemini_answer_without_usage_is_booked_once_not_retried(tmp_path, monkeypatch, mode):
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)

    async def main():
        app = llm_gemini.make_app(seed=3, api_keys=[KEY_VALUE], usage=mode)
        async with serve(app) as base, HttpClient() as http:
            rig = await CallerRig(tmp_path, _config(tmp_path, "gemini", base), http).start()
            try:
                await rig.handle(_task(0, " " + llm_gemini.WITHHOLD_MARKER))
            except Exception as exc:  # noqa: BLE001 - the outcome is the point
                return rig, exc, billed(app["calls"])
            return rig, None, billed(app["calls"])

    rig, exc, calls = run(main(), 60)
    try:
        # before: a malformed body ("usageMetadata missing"): retried by the HTTP layer (each attempt billed), the
        # task nacked to be asked again, the reservation booked as unknown-outcome spend
        assert isinstance(exc, PermanentFailure) and "finishReason SAFETY" in str(exc), exc
        assert len(calls) == 1
        s = rig.state.ledger.summary()
        rows = rig.state.db.read("SELECT amount_nusd, actual_nusd, state FROM reservations")
        assert (s.calls, s.unknown_calls, s.open_reservations) == (1, 0, 0), s
        assert len(rows) == 1 and rows[0][2] == "settled" and rows[0][1] == rows[0][0] > 0  # the worst case
        assert rig.state.ledger.spend_by_model()["m"]["unreported_calls"] == 1
    finally:
        rig.state.close()


def test_a_withheld_answer_books_its_worst_case_tokens_with_its_cost(tmp_path, monkeypatch):
    """Leftover: the withheld answer above was settled at its reservation's cost but with 0 input and 0 output
    tokens (close_failed_call has no request to count them from), so the ledger's token totals left out a call its
    dollars count. Now the reservation keeps the worst-case token counts its amount was priced from, and the
    withheld answer is booked with them: max_output_tokens out, the reserved input estimate in, priced at the
    reservation."""
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)

    async def main():
        app = llm_gemini.make_app(seed=3, api_keys=[KEY_VALUE], usage="omit")
        async with serve(app) as base, HttpClient() as http:
            rig = await CallerRig(tmp_path, _config(tmp_path, "gemini", base), http).start()
            with pytest.raises(PermanentFailure):
                await rig.handle(_task(0, " " + llm_gemini.WITHHOLD_MARKER))
            return rig

    rig = run(main(), 60)
    try:
        s = rig.state.ledger.summary()
        [(amount, actual, n_in, n_out)] = rig.state.db.read(
            "SELECT amount_nusd, actual_nusd, input_tokens, output_tokens FROM reservations")
        # before: (0, 0) in both the summary and the reservation row
        assert (s.input_tokens, s.output_tokens) == (n_in, n_out) and n_out == MAX_OUT and n_in > 0
        m = rig.cfg.models[0]
        assert actual == amount and m.worst_case_usd(n_in, n_out) == pytest.approx(amount / 1e9, rel=1e-6, abs=1e-9)
        assert rig.state.ledger.check_consistency() == []
    finally:
        rig.state.close()
