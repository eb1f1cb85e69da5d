"""Walk30 #2: a Gemini thinking model given ``max_output_tokens = 300`` answered every request with no text (its
thinking used the whole limit, ``finishReason`` ``MAX_TOKENS``, billed) and the run spent half its cap on 488 such
answers before exit 6 said so. Now a model whose answers keep coming back empty at the output limit is stopped
after :data:`~geoagent.workers.cutoff_breaker.CUT_OFF_EMPTY_TO_STOP` of them in a row: its tasks are left queued
untouched, the other models run to the end, the run ends ``incomplete`` with a line naming the model, its limit and
the fix, and a re-run with a raised limit completes it.

The campaign runs the real engine against the local Gemini fake (``geoagent/sandbox/llm_gemini``), which answers a
thinking model whose cap is at or below its thinking tokens as the API does: a candidate without parts.
"""

from __future__ import annotations

from _made_up_keys import made_up_key

import anyio
import pytest

from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INCOMPLETE, run_campaign
from geoagent.sandbox import llm_gemini
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status
from geoagent.workers.cutoff_breaker import CUT_OFF_EMPTY_TO_STOP, CutOffBreaker, empty_cut_off

KEY = made_up_key("AIza", 35, seed="cutoff")
N = 40


def _gemini(name: str, model: str, base: str, max_out: int) -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "gemini"\nmodel = "{model}"\nbase_url = "{base}"\n'
            f'api_key_env = "GA_CUTOFF_KEY"\nprice_input_usd_per_mtok = 0.30\nprice_output_usd_per_mtok = 2.50\n'
            f'max_output_tokens = {max_out}\nconcurrency = 2\nrate = {{ requests = 5000, period_s = 1.0 }}\n')


def test_a_model_whose_answers_keep_coming_back_empty_at_the_limit_is_stopped_and_resumes_once_raised(
        tmp_path, monkeypatch):
    monkeypatch.setenv("GA_CUTOFF_KEY", KEY)
    app = llm_gemini.make_app(api_keys=[KEY])

    async def main():
        async with serve(app) as base:
            def config(limit: int):
                return load_config(generic_campaign(
                    tmp_path, name="cutoff", n=N, cap_usd=5.0,
                    models=_gemini("flash", "gemini-2.5-flash", base, limit)
                    + _gemini("lite", "gemini-2.5-flash-lite", base, 300)))

            with pytest.warns(Warning, match="thinking"):  # the dry run's and the load's warning, as before
                cfg = config(300)
            first = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            status = format_status(campaign_status(cfg))  # what `run.py status` prints now
            flash_calls = sum(1 for c in app["calls"] if c.get("model") == "gemini-2.5-flash")
            second = await run_campaign(config(30000), live=False, handle_signals=False, export=False)
            return first, flash_calls, second, status

    first, flash_calls, second, status = anyio.run(main)
    # status names the stopped model and the setting to raise (break30 #5: it said nothing of it)
    assert (f"model flash stopped: its last {CUT_OFF_EMPTY_TO_STOP} answers came back empty at the output-token "
            "limit (max_output_tokens = 300); raise models[0].max_output_tokens: its tasks were left queued") in status, \
        status
    assert first.status == "incomplete" and first.exit_code == EXIT_INCOMPLETE, first.summary()
    line = next(ln for ln in first.stop_reasons if "came back empty" in ln)
    assert line.startswith(f"model flash: its last {CUT_OFF_EMPTY_TO_STOP} answers came back empty, cut off at the "
                           "output-token limit (max_output_tokens = 300, finish reason MAX_TOKENS): "), line
    assert "raise models[0].max_output_tokens" in line and line.endswith("left queued"), line
    assert line in first.summary()
    # stopped after the 10th empty answer: only the calls already in flight then (concurrency 2) were sent after it
    assert CUT_OFF_EMPTY_TO_STOP <= flash_calls <= CUT_OFF_EMPTY_TO_STOP + 2, flash_calls
    c = first.counts["requests"]
    assert c.dead == 0 and c.leased == 0 and c.done == N + flash_calls and c.ready == N - flash_calls
    # raised above the thinking budget: the re-run plans the flash requests anew and completes the campaign
    assert second.status == "complete" and second.exit_code == EXIT_COMPLETE, second.summary()


def test_the_breaker_counts_only_empty_answers_cut_off_in_a_row():
    b = CutOffBreaker(threshold=3, window=100, window_empty=100)
    assert empty_cut_off("", "MAX_TOKENS") and empty_cut_off(None, "length") and empty_cut_off("  \n", "max_tokens")
    assert not empty_cut_off('{"city": "Par', "length")  # a partial answer may parse: never counted
    assert not empty_cut_off("", "stop") and not empty_cut_off("", None)
    assert b.answered("m", "", "length", 300) is None and b.answered("m", "", "length", 300) is None
    assert b.answered("m", "ok", "stop", 300) is None  # an answer with text starts the count over
    assert b.answered("m", "", "length", 300) is None and b.answered("m", "", "length", 300) is None
    assert b.answered("other", "", "length") is None  # per model
    cut = b.answered("m", "", "length", 300, "geoverify.max_output_tokens")
    assert cut is not None and (cut.model, cut.empty, cut.of, cut.max_output_tokens) == ("m", 3, 3, 300)
    assert "raise geoverify.max_output_tokens" in cut.message()
    assert b.answered("m", "text", "stop") is cut and b.is_open("m") is cut  # open for the rest of the run
    b.hold("m", "k1")
    b.hold("m", "k1")
    assert b.report_lines() == [cut.message() + "; 1 request(s) of model m left queued"]
    assert b.report_lines(left_queued=7)[0].endswith("no model can run any more, so dispatching stopped: 7 "
                                                     "request(s) left queued")


def test_a_mostly_empty_model_is_stopped_by_the_window():
    """Break30 #6: 9 empty answers then one with text, over and over, never made 10 in a row: 450 paid empty
    answers of 500. 18 of the last 20 empty stop it too."""
    b = CutOffBreaker()
    n = 0
    cut = None
    while cut is None and n < 500:
        text = "an answer" if n % 10 == 9 else ""
        cut = b.answered("m", text, "length" if not text else "stop", 300)
        n += 1
    assert cut is not None and n == 21 and (cut.empty, cut.of) == (18, 20), (n, cut)  # at the next empty one
    assert cut.message().startswith("model m: 18 of its last 20 answers came back empty")
    # half empty: never stopped (a model that answers half the time is the campaign's to judge)
    half = CutOffBreaker()
    assert all(half.answered("h", "" if i % 2 else "x", "length" if i % 2 else "stop") is None for i in range(200))


def test_output_limit_keys_name_the_setting_that_gives_the_limit():
    from geoagent.config import config_from_dict
    from geoagent.engine import load_kind
    from geoagent.config import output_limit_keys

    load_kind("geoverify")
    base = {"campaign": {"name": "x", "seed": 1}, "budget": {"cap_usd": 1.0},
            "models": [{"name": "a", "provider": "simulated", "model": "sim"},
                       {"name": "b", "provider": "simulated", "model": "sim", "params": {"max_output_tokens": 50}}]}
    assert output_limit_keys(config_from_dict(base)) == {"a": "models[0].max_output_tokens",
                                                        "b": "models[1].params.max_output_tokens"}
    gv = config_from_dict({**base, "campaign": {"name": "x", "seed": 1, "kind": "geoverify"},
                           "geoverify": {"max_output_tokens": 300}})
    assert output_limit_keys(gv) == {"a": "geoverify.max_output_tokens", "b": "geoverify.max_output_tokens"}


def test_several_model_caller_processes_that_each_hold_tasks_all_end(tmp_path):
    """Break30 #1: three ``--stages model_caller`` processes each stopped the empty-answer model and held its tasks,
    and each waited for the others' held leases: they expired and were re-leased by whichever came first, and two
    of the three were still waiting after 900 s. A process that holds tasks now ends without waiting for other
    processes' leases; the tasks it held are released for the others, and the last one leaves them queued."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from geoagent.sandbox.server import spawn, wait_ready

    repo = Path(__file__).resolve().parents[1]
    proc, base = spawn("geoagent.sandbox.llm_gemini:make_app", api_keys=[KEY])
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="cutoff3", n=120, cap_usd=5.0,
                                models=_gemini("flash", "gemini-2.5-flash", base, 300)
                                + _gemini("lite", "gemini-2.5-flash-lite", base, 300))
        env = {**os.environ, "GA_CUTOFF_KEY": KEY, "PYTHONPATH": str(repo)}
        t0 = time.monotonic()
        runs = [subprocess.Popen([sys.executable, str(repo / "run.py"), "run", str(cfgp), "--stages", "model_caller",
                                  "--no-live"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(3)]
        outs = []
        for r in runs:
            try:
                out, err = r.communicate(timeout=120)  # the visibility timeout is 300 s: a wait for leases hangs
            except subprocess.TimeoutExpired:
                for x in runs:
                    x.kill()
                raise AssertionError("a model_caller process still waited for the others' held leases") from None
            outs.append((r.returncode, out, err))
        took = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.join(10)
    assert all(code == 3 for code, _, _ in outs), [(c, o[-800:], e[-800:]) for c, o, e in outs]
    assert any("model flash:" in o and "came back empty" in o for _, o, _ in outs)
    assert took < 120
