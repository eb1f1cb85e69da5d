"""The warning after a re-run with changed model settings names the changed keys, and says the change
affects nothing when no planned work is left to run and the new config plans none.

Walkthrough: "models changed since its last run; ... results would mix both versions" named no key, and came
even when every planned call was already done. Real runs of the engine (simulated provider, or an
OpenAI-compatible host on a closed port that leaves the requests queued); the warning is what the run prints
once it has planned (:func:`geoagent.engine.config_drift_after_plan`)."""

from __future__ import annotations

import anyio

from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.secrets import Secret


def _models(tokens: int, base_url: str | None = None, title: str = "plain-title") -> str:
    where = (f'provider = "openai"\nmodel = "gpt-x"\nbase_url = "{base_url}/v1"\n' if base_url
             else 'provider = "simulated"\nmodel = "sim-1"\n')
    return (f'\n[[models]]\nname = "m"\n{where}max_output_tokens = {tokens}\ntimeout_s = 2.0\n'
            f'connect_timeout_s = 1.0\nheaders = {{ "X-Title" = "{title}" }}\n')


def _run(path):
    return anyio.run(lambda: run_campaign(load_config(path), live=False, handle_signals=False, export=False))


def test_all_calls_done_the_change_affects_nothing_and_names_the_key(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="drift-done", n=6, models=_models(512))
    assert _run(p).status == "complete"
    p.write_text(p.read_text().replace("max_output_tokens = 512", "max_output_tokens = 256"))
    capsys.readouterr()
    _run(p)
    err = capsys.readouterr().err
    assert "warning" not in err and "would mix both versions" not in err
    assert ("info: campaign drift-done: models changed since its last run (models[0].max_output_tokens: 512 -> "
            "256); every planned task is done (6) and this config plans none anew, so the change affects none of "
            "the stored results") in err


def test_work_left_queued_names_the_changed_keys_redacted(tmp_path, capsys, refused_port):
    secret = "Team Quokka Seventeen"
    Secret(secret, "DRIFT_TITLE")  # a value known as a secret in this process: never printed
    closed = f"http://127.0.0.1:{refused_port}"
    p = generic_campaign(tmp_path, name="drift-left", n=6, models=_models(512, closed))
    out = _run(p)
    assert out.status == "incomplete" and out.counts["requests"].ready == 6  # host unreachable: all left queued
    p.write_text(p.read_text().replace("max_output_tokens = 512", "max_output_tokens = 256")
                 .replace("plain-title", secret))
    capsys.readouterr()
    _run(p)
    err = capsys.readouterr().err
    # the first run stored no answer (its host refused every call), so the 6 tasks it left queued are all asked
    # with the new settings: nothing mixes (walk31 #2; before, this warned that results would mix)
    assert ("info: campaign drift-left: models changed since its last run (models[0].headers.X-Title: "
            "'plain-title' -> '***'; models[0].max_output_tokens: 512 -> 256); model m had no task answered yet, "
            "so all its answers use the new settings: no model's results mix two settings.") in err
    assert "would mix" not in err
    assert secret not in err
