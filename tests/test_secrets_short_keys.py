"""A local server's short placeholder key (``local``, ``EMPTY``, ``ollama``) must not be masked inside ordinary text
(while a paid host's short key is: ``tests/test_secrets_paid_short_keys.py``).

Fresh-user finding (session 7): with ``GEMINI_API_KEY=local`` (the README's own curl example key) and models named
``oa-local`` / ``gemini-local``, the manifest stored the names as ``oa-***`` / ``gemini-***`` and every later run
warned "models changed since its last run", even when only the cap had been raised.
"""

from __future__ import annotations

import anyio

from geoagent.secrets import MIN_SECRET_LEN, Secret, redact
from _made_up_keys import made_up_key


def test_short_values_are_not_scrubbed_from_text_but_real_keys_are():
    Secret("local", "LOCAL_KEY", local=True)  # a local server's key (geoagent.config.provider_settings says so)
    Secret("ollama", "OLLAMA_KEY", local=True)
    assert MIN_SECRET_LEN == 8
    assert redact("model oa-local on ollama-qwen") == "model oa-local on ollama-qwen"
    real = made_up_key("sk-", 26, seed="shortkeys-n16")
    Secret(real, "REAL_KEY")
    assert redact(f"Authorization: Bearer {real} for oa-local") == "Authorization: Bearer *** for oa-local"
    # a value passed explicitly is still scrubbed from 4 characters on
    assert redact("other 'plain' text", ["plain"]) == "other '***' text"


def test_model_names_containing_a_short_key_survive_the_manifest_and_cause_no_drift(tmp_path, monkeypatch):
    from _model_harness import generic_campaign, model_table

    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.runtime.manifest import config_changes, read_manifest
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("GA_SHORTKEY", "local")
    app = llm_openai.make_app(api_keys=["local"])

    async def main():
        async with serve(app) as base:
            p = generic_campaign(tmp_path, name="shortkey", n=4, cap_usd=1.0,
                                 models=model_table("oa-local", base_url=base, key_var="GA_SHORTKEY"))
            cfg = load_config(p)
            first = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            # the cap raised, as the budget-stop message advises: not a change to planned work
            p.write_text(p.read_text().replace("cap_usd = 1.0", "cap_usd = 2.0"))
            cfg2 = load_config(p)
            return cfg2, first, config_changes(cfg2)

    cfg2, first, changes = anyio.run(main)
    assert first.status == "complete", first.summary()
    stored = read_manifest(cfg2.state_dir())
    assert [m["name"] for m in stored["config"]["models"]] == ["oa-local"]
    assert changes.calls == [] and not changes.scoring and not changes.geocoder
