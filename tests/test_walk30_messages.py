"""Walk30 #8: config and key-variable messages that left the fix to guesswork: a quoted number was shown only by
its quotes, an unknown key with no close match named no valid key, and a misspelt key variable did not mention
the correctly spelt one set in ``.env``."""

from __future__ import annotations

import copy

import pytest

from geoagent.config import ConfigError, config_from_dict
from geoagent.secrets import SecretNotFound, get_secret, missing_keys_message

BASE = {"campaign": {"name": "x", "seed": 1}, "budget": {"cap_usd": 1.0},
        "models": [{"name": "m", "provider": "simulated", "model": "sim"}]}


def _error(mutate) -> str:
    d = copy.deepcopy(BASE)
    mutate(d)
    with pytest.raises(ConfigError) as ei:
        config_from_dict(d)
    return str(ei.value)


def test_a_quoted_number_or_boolean_is_said_to_be_a_string():
    msg = _error(lambda d: d["models"][0].update(concurrency="4"))
    assert "models[0].concurrency: expected an integer, got '4' (a quoted string: write the number without quotes)" \
        in msg, msg
    assert "(a quoted string" not in _error(lambda d: d["models"][0].update(concurrency=[4]))  # an array, no string


def test_an_unknown_key_with_nothing_close_lists_its_tables_keys():
    msg = _error(lambda d: d["budget"].update(max_spend=3))
    assert "budget.max_spend: unknown key ([budget] takes: cap_usd, input_estimate_factor, reserve)" in msg, msg
    assert "(did you mean 'cap_usd'?)" in _error(lambda d: d["budget"].update(cap_uds=3))  # a close one: named alone


def test_a_misspelt_key_variable_names_the_close_one_that_is_set(tmp_path):
    env = tmp_path / ".env"
    env.write_text("ANTHROPIC_API_KEY=made-up-value-for-the-test\n")
    msg = missing_keys_message([("ANTHROPC_API_KEY", "claude")], dotenv_path=env, environ={})
    assert msg.endswith(f"ANTHROPC_API_KEY (model claude; did you mean ANTHROPIC_API_KEY, which is set in {env}?)"), msg
    assert "made-up-value" not in msg
    with pytest.raises(SecretNotFound, match=r"\(did you mean ANTHROPIC_API_KEY, which is set in .*\.env\?\)"):
        get_secret("ANTHROPC_API_KEY", dotenv_path=env, environ={})
    # a name that is no key's, or one far from it, is never offered
    far = missing_keys_message([("GEMINI_API_KEY", "g")], dotenv_path=env, environ={"GEMINI_MODEL": "x"})
    assert "did you mean" not in far
    near_env = missing_keys_message([("OPENAI_API_KEY", "gpt")], dotenv_path=env, environ={"OPENAI_APIKEY": "x"})
    assert "did you mean OPENAI_APIKEY, which is set in the environment?" in near_env


def test_status_of_a_killed_run_says_its_http_counters_are_the_last_records():
    """Walk30 #9: after `kill -9`, `status` showed "calls 85" (the ledger) and "84 requests" (the last progress
    record's HTTP counters) with no word that the second stops at the last record."""
    from geoagent.status import format_status

    rec = {"t": 1764800000.0, "elapsed_s": 12.0, "stages": [], "finished": False,
           "http": {"127.0.0.1:8002": {"requests": 84, "retries": 0, "errors": {}}}}
    killed = format_status({"campaign": "c", "queues": {}, "progress": rec, "running": False})
    assert ("http counters as of the last progress record (2025-12-03 22:13:20 UTC): requests sent after it are not "
            "in them\n") in killed, killed
    assert "84 requests" in killed
    live = format_status({"campaign": "c", "queues": {}, "progress": rec, "running": True})
    assert "http counters as of" not in live and "84 requests" in live


def test_the_quoted_hint_only_when_unquoting_would_fix_it():
    """Break30 #7: ``"4.5"`` or ``"inf"`` in an integer field was told to drop its quotes, which would still fail."""
    for bad in ("4.5", "inf", "cheap"):
        msg = _error(lambda d, v=bad: d["models"][0].update(concurrency=v))
        assert "(a quoted string" not in msg, msg
    assert "(a quoted string" in _error(lambda d: d["budget"].update(cap_usd="2.5"))
    assert "(a quoted string" not in _error(lambda d: d["budget"].update(cap_usd="inf"))
