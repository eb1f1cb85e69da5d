"""The empty-answer breaker across runs and processes (``geoagent.workers.cutoff_breaker``, "Across runs").

Sessions 30-31 left this open: the breaker lived in one process's memory, so a re-run without the fix, and each
process of a ``--stages`` scale-out, paid for another 10 empty answers (plus the calls in flight) before stopping
the model again. A breaker that opens is now recorded in ``state/<campaign>/cut_off.json`` with the id of the
request settings; the same settings later go one request at a time and the first answer decides.
"""

from __future__ import annotations

import asyncio

import anyio
import orjson
import pytest

from _made_up_keys import made_up_key
from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INCOMPLETE, run_campaign
from geoagent.sandbox import llm_gemini
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status
from geoagent.workers.cutoff_breaker import (CUT_OFF_EMPTY_TO_STOP, CUT_OFF_RECORD, CutOffBreaker,
                                             request_settings_id)

KEY = made_up_key("AIza", 35, seed="cutoff-record")
N = 30


def _gemini(name: str, model: str, base: str, max_out: int, concurrency: int = 4) -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "gemini"\nmodel = "{model}"\nbase_url = "{base}"\n'
            f'api_key_env = "GA_CUTREC_KEY"\nprice_input_usd_per_mtok = 0.30\nprice_output_usd_per_mtok = 2.50\n'
            f'max_output_tokens = {max_out}\nconcurrency = {concurrency}\nrate = {{ requests = 5000, period_s = 1.0 }}\n')


def test_a_rerun_under_the_same_limit_pays_one_empty_answer_not_ten(tmp_path, monkeypatch):
    monkeypatch.setenv("GA_CUTREC_KEY", KEY)
    app = llm_gemini.make_app(api_keys=[KEY])
    record = tmp_path / "state" / "cutrec" / CUT_OFF_RECORD

    def flash_calls() -> int:
        return sum(1 for c in app["calls"] if c.get("model") == "gemini-2.5-flash")

    async def main():
        async with serve(app) as base:
            def config(limit: int):
                with pytest.warns(Warning):  # the load's thinking-room warning at a low limit
                    cfg = load_config(generic_campaign(
                        tmp_path, name="cutrec", n=N, cap_usd=5.0,
                        models=_gemini("flash", "gemini-2.5-flash", base, limit)
                        + _gemini("lite", "gemini-2.5-flash-lite", base, 300)))
                return cfg

            first = await run_campaign(config(300), live=False, handle_signals=False, export=False)
            after_first = flash_calls()
            rec_first = orjson.loads(record.read_bytes())
            cfg = config(300)  # re-run unchanged
            second = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            status = format_status(campaign_status(cfg))
            after_second = flash_calls()
            third = await run_campaign(load_config(generic_campaign(
                tmp_path, name="cutrec", n=N, cap_usd=5.0,
                models=_gemini("flash", "gemini-2.5-flash", base, 30000)
                + _gemini("lite", "gemini-2.5-flash-lite", base, 300))), live=False, handle_signals=False, export=False)
            return first, after_first, rec_first, second, status, after_second, third

    first, after_first, rec_first, second, status, after_second, third = anyio.run(main)
    # the breaker opens when the 10th empty answer is counted; by then up to 4 more calls (the concurrency) may be on
    # the wire, and under load a few answers already received may still wait to be counted while their host slots
    # went to the next requests (seen once in a fresh-clone run at -n 4 on 2 cores: 15): at most twice the concurrency
    assert first.status == "incomplete" and CUT_OFF_EMPTY_TO_STOP <= after_first <= CUT_OFF_EMPTY_TO_STOP + 2 * 4
    (settings, flash), = rec_first["models"]["flash"].items()  # one record, under its requests' settings id
    assert flash["max_output_tokens"] == 300 and flash["empty"] == CUT_OFF_EMPTY_TO_STOP and flash["opened_at"]
    assert len(settings) == 16 and int(settings, 16) >= 0  # request_settings_id of its requests
    # the re-run under the same settings: one probe, empty again, the breaker opens at once
    assert after_second - after_first == 1, (after_first, after_second)
    assert second.status == "incomplete" and second.exit_code == EXIT_INCOMPLETE
    line = next(ln for ln in second.stop_reasons if "came back empty" in ln)
    assert line.startswith("model flash: its answers came back empty, cut off at the output-token limit "
                           "(max_output_tokens = 300, finish reason MAX_TOKENS), in an earlier run or another process "
                           f"of this campaign (recorded {flash['opened_at']}), and so did the one answer this run "
                           "asked for under the same settings: "), line
    assert "raise models[0].max_output_tokens" in line, line
    assert (f"model flash stopped: its answers came back empty at the output-token limit (max_output_tokens = 300), "
            f"as recorded at {flash['opened_at']}, and again in this run; raise models[0].max_output_tokens") in status
    # the limit raised: other settings, counted afresh (no probation: the run completes); the record of the old
    # settings stays, for a later run that goes back to them
    assert third.status == "complete" and third.exit_code == EXIT_COMPLETE, third.summary()
    assert list(orjson.loads(record.read_bytes())["models"]["flash"]) == [settings]


def _breakers(tmp_path, n: int = 2) -> list[CutOffBreaker]:
    return [CutOffBreaker(threshold=3, record=tmp_path / CUT_OFF_RECORD) for _ in range(n)]


def test_a_sibling_process_record_opens_the_breaker_on_its_next_empty_answer(tmp_path):
    a, b = _breakers(tmp_path)
    s = request_settings_id("openai", "o4-mini", {"max_output_tokens": 200})
    assert b.answered("m", "", "length", 200, settings=s) is None  # b: 1 empty, counting
    for _ in range(3):
        cut = a.answered("m", "", "length", 200, "models[0].max_output_tokens", settings=s)
    assert cut is not None and cut.earlier_at is None  # a opened by its own count, and recorded it
    cut_b = b.answered("m", "", "length", 200, settings=s)
    assert cut_b is not None and cut_b.earlier_at == a.recorded["m"][s]["opened_at"]
    # under other settings the record does not count: a fresh count
    c = CutOffBreaker(threshold=3, record=tmp_path / CUT_OFF_RECORD)
    other = request_settings_id("openai", "o4-mini", {"max_output_tokens": 4000})
    assert not c.on_probation("m", other) and c.on_probation("m", s)
    assert c.answered("m", "", "length", 4000, settings=other) is None
    # answers under other settings leave the record of these as it is (break32b #4: one model, two settings) ...
    assert c.answered("m", "", "stop", 4000, settings=other) is None and c.on_probation("m", s)
    assert c.answered("m", "Paris", "stop", 4000, settings=other) is None and c.on_probation("m", s)
    # ... an answer under them that is not empty at the limit (text, or empty and ended by the model) drops it
    assert c.answered("m", "", "stop", 200, settings=s) is None and not c.on_probation("m", s)
    assert "m" not in c.recorded and orjson.loads((tmp_path / CUT_OFF_RECORD).read_bytes()) == {"models": {}}


def test_probation_sends_one_request_at_a_time_until_an_answer_with_text(tmp_path):
    a, = _breakers(tmp_path, 1)
    s = request_settings_id("anthropic", "claude-x", {"max_output_tokens": 100})
    for _ in range(3):
        a.answered("m", "", "max_tokens", 100, settings=s)
    b = CutOffBreaker(threshold=3, record=tmp_path / CUT_OFF_RECORD)  # the next run
    order: list[tuple[str, int, bool]] = []
    in_turn = 0

    async def task(i: int, text: str) -> None:
        nonlocal in_turn
        async with b.probe_turn("m", s) as probe:
            in_turn += 1
            order.append(("start", i, probe))
            assert in_turn == 1 or not probe  # only the probe holds the turn
            await asyncio.sleep(0.01)
            b.answered("m", text, "stop" if text else "max_tokens", 100, settings=s)
            in_turn -= 1

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(task, 0, "")  # the probe's answer: empty and cut off
            await asyncio.sleep(0)
            for i in range(1, 4):
                tg.start_soon(task, i, "an answer")

    # the first probe comes back empty and cut off: the breaker opens, the waiting tasks find it open
    anyio.run(main)
    assert order[0] == ("start", 0, True) and all(not p for _, _, p in order[1:]), order
    assert b.is_open("m") is not None and b.is_open("m").earlier_at is not None

    c = CutOffBreaker(threshold=3, record=tmp_path / CUT_OFF_RECORD)
    order.clear()
    c_answers = iter(["an answer"] * 4)

    async def task_c(i: int) -> None:
        async with c.probe_turn("m", s) as probe:
            order.append(("start", i, probe))
            await asyncio.sleep(0.01)
            c.answered("m", next(c_answers), "stop", 100, settings=s)

    async def main_c() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(task_c, i)

    anyio.run(main_c)
    # one probe, then the rest at once (none of them the probe: the record was dropped by the answer with text)
    assert [p for _, _, p in order] == [True, False, False, False], order
    assert c.is_open("m") is None and "m" not in c.recorded


def test_a_damaged_record_is_read_as_empty(tmp_path, caplog):
    (tmp_path / CUT_OFF_RECORD).write_text("{not json", encoding="utf-8")
    b = CutOffBreaker(record=tmp_path / CUT_OFF_RECORD)
    assert b.recorded == {}
    assert "cannot be read" in caplog.text
