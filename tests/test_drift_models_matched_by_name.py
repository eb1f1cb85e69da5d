"""Config drift compares ``[[models]]`` entries by name, not by position (adversarial review, session 9).

The manifest diff walked the models array by index, so a model removed from the front of the list, or the list
merely reordered, read as every later entry's ``name`` and ``model`` changing (``models[0].model: 'gem-a' ->
'gem-b'``): a re-run that only dropped a model and planned more requests warned that "results would mix both
versions" and recorded a ``config_mix``, and a reorder alone was reported as a change the stored results do not
have. Each entry is now compared with the earlier entry of the same name: removing or adding one is a plan-scope
change (its tasks are planned or not; the others are asked as before), a reorder is no change, and a real change
of one entry is still named (runs against the Gemini fake; lines as printed on stderr, the manifest as written).
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
from geoagent.sandbox.llm_gemini import make_app as gemini_app
from geoagent.sandbox.server import serve

KEY = "local-drift-names"


def _table(name: str, base: str, model: str, extra: str = "") -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "gemini"\nmodel = "{model}"\nbase_url = "{base}"\n'
            f'api_key_env = "GEM_KEY"\nprice_input_usd_per_mtok = 0.1\nprice_output_usd_per_mtok = 0.4\n'
            f'max_output_tokens = 50\nmax_attempts = 5\ntimeout_s = 5.0\n{extra}')


def _runs(tmp_path, second):
    """Run a generic campaign (models a, b; 2 requests) then again with ``second(base)`` -> (models, n); return
    the second run's status, its stderr lines about the campaign, and the manifest."""
    app = gemini_app(api_keys=[KEY])

    async def run(models, n):
        p = generic_campaign(tmp_path, name="drn", n=n, cap_usd=5.0, models=models)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = load_config(p)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
        return out, [ln for ln in err.getvalue().splitlines() if "campaign drn" in ln]

    async def go():
        async with serve(app) as base:
            first, _ = await run(_table("a", base, "gem-a") + _table("b", base, "gem-b"), 2)
            assert first.status == "complete"
            return await run(*second(base))

    out, lines = anyio.run(go)
    return out.status, lines, read_manifest(tmp_path / "state" / "drn")


def test_removing_the_first_model_is_a_plan_scope_change_not_a_mix(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_KEY", KEY)
    status, lines, man = _runs(tmp_path, lambda base: (_table("b", base, "gem-b"), 3))
    assert status == "complete"
    assert not [ln for ln in lines if ln.startswith("warning:")], lines
    (info,) = [ln for ln in lines if "changes which tasks are planned" in ln]
    assert "models[0].model" not in info and "'gem-a' -> 'gem-b'" not in info, info
    assert not man.get("config_mix"), man.get("config_mix")


def test_reordering_the_models_is_no_change(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_KEY", KEY)
    status, lines, man = _runs(tmp_path, lambda base: (_table("b", base, "gem-b") + _table("a", base, "gem-a"), 2))
    assert status == "complete"
    assert lines == [], lines
    assert not man.get("config_mix") and not man.get("config_not_applied")


def test_a_real_change_of_one_entry_after_a_reorder_is_still_named(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_KEY", KEY)
    status, lines, man = _runs(tmp_path, lambda base: (
        _table("b", base, "gem-b", "params = { temperature = 0.5 }\n") + _table("a", base, "gem-a"), 3))
    assert status == "complete"
    (warn,) = [ln for ln in lines if ln.startswith("warning:")]
    assert "models[0].params.temperature: unset -> 0.5" in warn, warn  # models[0] is b in the new file
    assert ".name" not in warn and ".model:" not in warn, warn
    assert len(man.get("config_mix") or []) == 1
