"""Tasks an earlier run left queued that the current plan sets aside are not results that would mix
(adversarial review, session 9).

The drift decision counted every task an earlier run left queued, in flight or dead-lettered as keeping its
original request next to work under the new settings ("22 tasks an earlier run left queued ... keep their
original requests, so results would mix"), also the ones this plan no longer holds, which it then sets aside
unsent (superseded), and the ones set aside before. A re-run that narrowed the plan to the tasks already done
and changed ``max_output_tokens`` thus warned that results mix, appended a ``config_mix`` to the manifest and
recorded the new config as the one the results were made with, though no request was sent under it. Now those
tasks are left out of the count: the change reaches none of the stored results (``config_not_applied``).
"""

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

KEY = "local-drift-aside"


def _table(base: str, max_out: int) -> str:
    return (f'\n[[models]]\nname = "a"\nprovider = "gemini"\nmodel = "gem-a"\nbase_url = "{base}"\n'
            f'api_key_env = "GEM_KEY"\nprice_input_usd_per_mtok = 100.0\nprice_output_usd_per_mtok = 400.0\n'
            f'max_output_tokens = {max_out}\nconcurrency = 1\nmax_attempts = 3\ntimeout_s = 5.0\n')


def test_a_plan_narrowed_to_done_tasks_with_new_settings_is_not_a_mix(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_KEY", KEY)
    app = gemini_app(api_keys=[KEY])

    async def run(base, n, cap, max_out):
        p = generic_campaign(tmp_path, name="aside", n=n, cap_usd=cap, models=_table(base, max_out))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = load_config(p)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
        return out, [ln for ln in err.getvalue().splitlines() if "campaign aside" in ln]

    async def go():
        async with serve(app) as base:
            first, _ = await run(base, 8, 0.06, 50)  # the cap stops it with tasks still queued
            calls = len(find_fault_state(app).log)
            assert first.status != "complete" and 0 < calls < 8, (first.status, calls)
            # the plan now holds only the tasks already answered (the plan's order is the queue's), with a new
            # max_output_tokens: nothing is asked under it
            second, lines = await run(base, calls, 5.0, 40)
            return calls, second, lines

    calls, second, lines = anyio.run(go)
    assert len(find_fault_state(app).log) == calls  # no request sent by the second run
    assert second.status == "complete"
    assert not [ln for ln in lines if ln.startswith("warning:")], lines
    assert [ln for ln in lines if "set aside" in ln], lines
    assert [ln for ln in lines if "affects none of the stored results" in ln], lines
    man = read_manifest(tmp_path / "state" / "aside")
    assert not man.get("config_mix"), man.get("config_mix")
    assert man.get("config_not_applied")
    assert man["config"]["models"][0]["max_output_tokens"] == 50  # what the stored answers were made with
