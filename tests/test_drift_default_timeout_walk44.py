"""Walk44 B2: a re-run after adding only ``params = { thinking_budget = 0 }`` to a Gemini thinking model printed
``info: ... limits or pacing changed since its last run (models[1].timeout_s: 600.0 -> 120.0)``, a key the config
never named: a model's ``timeout_s`` defaults to 600 s while it may think at length and to 120 s once it does not.
The line now says the value is that default, not set in the config; a ``timeout_s`` written in the config is the
user's change and reads as before. Real configs compared as the run compares them (the manifest's stored config)."""

from __future__ import annotations

from geoagent.config import config_from_dict
from geoagent.runtime.drift import changed_keys_text, setting_lines
from geoagent.runtime.manifest import config_changes_against, stored_config


def _cfg(gemini: dict) -> object:
    return config_from_dict({
        "campaign": {"name": "w44-timeout", "seed": 1}, "budget": {"cap_usd": 1.0},
        "models": [{"name": "gpt", "provider": "simulated", "model": "sim"},
                   {"name": "gem", "provider": "gemini", "model": "gemini-2.5-flash", "max_output_tokens": 300,
                    "base_url": "http://gemini.sandbox.invalid", **gemini}]})


def _lines(before: object, now: object) -> list[str]:
    changes = config_changes_against({"config": stored_config(before)}, now)
    return setting_lines("w44-timeout", changes, changed_keys_text, now)


def test_a_default_timeout_that_moved_with_thinking_is_named_as_the_default():
    thinking, not_thinking = _cfg({}), _cfg({"params": {"thinking_budget": 0}})
    assert (thinking.models[1].timeout_s, not_thinking.models[1].timeout_s) == (600.0, 120.0)
    (line,) = [ln for ln in _lines(thinking, not_thinking) if "limits or pacing" in ln]
    assert ("limits or pacing changed since its last run (models[1].timeout_s: 600.0 -> 120.0, the default for a "
            "non-thinking model; not set in the config)") in line, line
    # and back: thinking on again
    (back,) = [ln for ln in _lines(not_thinking, thinking) if "limits or pacing" in ln]
    assert "(models[1].timeout_s: 120.0 -> 600.0, the default for a reasoning or thinking model; not set in the config)" \
        in back, back


def test_a_timeout_written_in_the_config_reads_as_the_users_change():
    before, now = _cfg({"timeout_s": 600.0}), _cfg({"timeout_s": 300.0})
    (line,) = [ln for ln in _lines(before, now) if "limits or pacing" in ln]
    assert "(models[1].timeout_s: 600.0 -> 300.0)" in line and "default" not in line, line


def test_other_pacing_keys_are_listed_beside_the_default():
    before = _cfg({})
    now = _cfg({"params": {"thinking_budget": 0}, "concurrency": 3})
    (line,) = [ln for ln in _lines(before, now) if "limits or pacing" in ln]
    assert "models[1].concurrency: " in line and "-> 3" in line, line
    assert "models[1].timeout_s: 600.0 -> 120.0, the default for a non-thinking model; not set in the config" in line
