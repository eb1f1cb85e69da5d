"""A change that planning fixes in each queued task (a GeoVerify prompt template) reaches only tasks planned after it
(session 36, runtime36 #1).

Before: with 114 of 170 tasks left queued by a budget stop, setting ``[geoverify] prompt_template`` printed "tasks an
earlier run left queued ... will be sent with the new [[models]] settings ... so results would mix", and the
manifest recorded the new template as the campaign's config; yet the queued tasks went out with the old prompt
(their payloads keep what planning put there). A model added in the next run was then asked with the new template
while the run said "asked like the 71 done, so nothing mixes". Real runs of the engine against the local Gemini
fake over the release sample's trials (skipped without it)."""

from __future__ import annotations

import contextlib
import io
import sqlite3
import warnings

import anyio

from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.manifest import read_manifest
from geoagent.sandbox.llm_gemini import make_app as gemini_app
from geoagent.sandbox.server import serve

KEY = "local-drift-fixed"
MARK = "Look carefully before you answer."


def _model(base: str, name: str) -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "gemini"\nmodel = "gem-{name}"\nbase_url = "{base}"\n'
            'api_key_env = "GEM_KEY"\nprice_input_usd_per_mtok = 100.0\nprice_output_usd_per_mtok = 400.0\n'
            'max_output_tokens = 60\nconcurrency = 1\nmax_attempts = 3\ntimeout_s = 5.0\n')


def _toml(tmp_path, release_dir, base, *, cap, template=None, models=("a",)):
    p = tmp_path / "gv.toml"
    tpl = f'prompt_template = "{template}"\n' if template else ""
    p.write_text(f'[campaign]\nname = "gvfix"\nkind = "geoverify"\nseed = 1\n'
                 f"[paths]\nqueues = \"{tmp_path / 'queues'}\"\nstate = \"{tmp_path / 'state'}\"\n"
                 f"[budget]\ncap_usd = {cap}\n[images]\nmissing = \"placeholder\"\n"
                 f'[geoverify]\nrelease_dir = "{release_dir}"\nn_boot = 0\n{tpl}'
                 + "".join(_model(base, m) for m in models), encoding="utf-8")
    return p


def _payload_prompts(tmp_path):
    """(model, prompt has the new text) of every task on the requests queue."""
    import orjson

    conn = sqlite3.connect(tmp_path / "queues" / "gvfix" / "requests.sqlite")
    try:
        rows = conn.execute("SELECT payload FROM tasks").fetchall()
    finally:
        conn.close()
    out = []
    for (payload,) in rows:
        d = orjson.loads(payload)
        out.append((d["model"], MARK in d["prompt"]))
    return out


def test_a_template_change_reaches_only_tasks_planned_after_it(release_dir, tmp_path, monkeypatch):
    from geoagent.geoverify.prompt import load_template

    monkeypatch.setenv("GEM_KEY", KEY)
    own = tmp_path / "claim2.txt"
    own.write_text(MARK + " " + load_template(), encoding="utf-8")
    app = gemini_app(api_keys=[KEY])

    async def run(base, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = load_config(_toml(tmp_path, release_dir, base, **kw))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
        return out, [ln for ln in err.getvalue().splitlines() if "campaign gvfix" in ln]

    async def go():
        async with serve(app) as base:
            first, _ = await run(base, cap=0.5)  # the cap stops it with tasks still queued
            # the template changed, the cap raised: the queued tasks keep the old prompt
            second, lines2 = await run(base, cap=0.5, template=own)
            man2 = read_manifest(tmp_path / "state" / "gvfix")
            prompts2 = _payload_prompts(tmp_path)
            third, lines3 = await run(base, cap=50.0, template=own, models=("a", "b"))
            return first, second, lines2, man2, prompts2, third, lines3

    first, second, lines2, man2, prompts2, third, lines3 = anyio.run(go)
    assert first.status != "complete", first.summary()
    info = [ln for ln in lines2 if "geoverify.prompt_template" in ln]
    assert len(info) == 1 and info[0].startswith("info:"), lines2
    assert "keep the old ones, so the change reaches no request" in info[0], info[0]
    assert "would mix" not in " ".join(lines2)
    assert not any(has for _, has in prompts2)  # no queued task carries the new template
    assert man2["config"]["geoverify"].get("prompt_template") is None  # the config the answers were made with
    assert "config_not_applied" in man2
    # a model added with the template: its tasks use it, the other model's do not: results mix, and the run says so
    warn = [ln for ln in lines3 if ln.startswith("warning:")]
    assert len(warn) == 1 and "would mix both versions" in warn[0] and "geoverify.prompt_template" in warn[0], lines3
    assert not any("nothing mixes" in ln for ln in lines3), lines3
    by_model = {}
    for model, has in _payload_prompts(tmp_path):
        by_model.setdefault(model, set()).add(has)
    assert by_model == {"a": {False}, "b": {True}}, by_model
