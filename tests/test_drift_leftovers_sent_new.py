"""Tasks an earlier run left queued are sent with the NEW ``[[models]]`` settings, and the drift warning says
so (walkthrough 19, finding 1).

The warning said the tasks an earlier run left queued, in flight or dead-lettered "keep their original
requests"; the run then sent them with the new ``max_output_tokens`` (6060 of 6319 answers at 256 after a
change from 300): a queued payload carries only what planning fixed (the prompt text, a task section's
``max_output_tokens``), and :func:`geoagent.workers.model_caller.build_request` reads the model's settings
from the current config at send time. Real runs of the engine against the local Gemini fake; the budget cap
stops the first run with tasks still queued."""

from __future__ import annotations

import contextlib
import io
import warnings

import anyio

from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.manifest import read_manifest
from geoagent.sandbox.faults import find_fault_state
from geoagent.sandbox.llm_gemini import make_app as gemini_app
from geoagent.sandbox.server import serve

KEY = "local-drift-leftovers"


def _table(base: str, max_out: int) -> str:
    return (f'\n[[models]]\nname = "a"\nprovider = "gemini"\nmodel = "gem-a"\nbase_url = "{base}"\n'
            f'api_key_env = "GEM_KEY"\nprice_input_usd_per_mtok = 100.0\nprice_output_usd_per_mtok = 400.0\n'
            f'max_output_tokens = {max_out}\nconcurrency = 1\nmax_attempts = 3\ntimeout_s = 5.0\n')


def test_queued_tasks_go_out_with_the_new_settings_and_the_warning_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_KEY", KEY)
    app = gemini_app(api_keys=[KEY])

    async def run(base, cap, max_out):
        p = generic_campaign(tmp_path, name="leftnew", n=8, cap_usd=cap, models=_table(base, max_out))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = load_config(p)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
        return out, [ln for ln in err.getvalue().splitlines() if "campaign leftnew" in ln]

    async def go():
        async with serve(app) as base:
            first, _ = await run(base, 0.06, 50)  # the cap stops it with tasks still queued
            calls = len(find_fault_state(app).log)
            assert first.status != "complete" and 0 < calls < 8, (first.status, calls)
            second, lines = await run(base, 5.0, 40)
            return calls, second, lines

    calls, second, lines = anyio.run(go)
    assert second.status == "complete"
    warn = [ln for ln in lines if ln.startswith("warning:")]
    assert len(warn) == 1, lines
    assert "keep their original requests" not in warn[0]
    assert (f"{8 - calls} tasks an earlier run left queued, in flight or dead-lettered will be sent with the new "
            "[[models]] settings") in warn[0], warn[0]
    assert "the answers already stored keep the old ones" in warn[0]
    man = read_manifest(tmp_path / "state" / "leftnew")
    groups = {g["params"]["max_output_tokens"]: g["answers"] for g in man["answers_by_request_params"]["a"]}
    # what really happened, and what the warning now says: the leftovers were sent under 40
    assert groups == {50: calls, 40: 8 - calls}, groups
