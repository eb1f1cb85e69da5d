"""A paid host's short key is scrubbed; a local server's short placeholder key is not (adversarial review s7b).

``redact`` scrubbed a known key only from 8 characters, whatever host it was for, so a 7-character key of a
paid host (a proxy's short key) stayed in log lines and stored error text. The rule now: a key looked up for a
model on a paid host (``ModelConfig.on_paid_host``), or for anything else that does not say it is a local
server's (Mapillary's token, a bare lookup), is scrubbed from 4 characters; a local server's key ("EMPTY",
"local", "ollama", "lanbox") only from 8, so ordinary words and model names containing it survive.
"""

from __future__ import annotations

import logging

from geoagent.config import config_from_dict, provider_settings
from geoagent.providers.base import ModelResponse, Usage
from geoagent.providers.http_base import _without_key
from geoagent.secrets import MIN_PAID_SECRET_LEN, MIN_SECRET_LEN, install_log_redaction, lookup_secret, redact

PAID_SHORT = "Qx9#mP" "2"  # 7 characters: a proxy's short key
LOCAL_SHORT = "lanbox"  # a LAN server's placeholder key, also part of the model's name


def _cfg():
    return config_from_dict({"campaign": {"name": "shortkeys"}, "budget": {"cap_usd": 1.0}, "models": [
        {"name": "proxy", "provider": "openai", "model": "qwen", "base_url": "https://openrouter.ai/api/v1",
         "api_key_env": "PAID_SHORT_KEY", "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 2.0},
        {"name": "lanbox-7b", "provider": "openai", "model": "lanbox-7b", "base_url": "http://192.168.1.20:8000/v1",
         "api_key_env": "LAN_SHORT_KEY"}]})


def test_the_rule_constants():
    assert (MIN_PAID_SECRET_LEN, MIN_SECRET_LEN) == (4, 8)


def test_a_paid_hosts_short_key_is_scrubbed_from_logs_a_local_servers_is_not(monkeypatch, capsys):
    monkeypatch.setenv("PAID_SHORT_KEY", PAID_SHORT)
    monkeypatch.setenv("LAN_SHORT_KEY", LOCAL_SHORT)
    cfg = _cfg()
    assert cfg.model("proxy").on_paid_host and not cfg.model("lanbox-7b").on_paid_host
    paid = provider_settings(cfg, "proxy").api_key
    local = provider_settings(cfg, "lanbox-7b").api_key
    assert paid.reveal() == PAID_SHORT and local.reveal() == LOCAL_SHORT

    logger = logging.getLogger("test_secrets_paid_short_keys")
    logger.propagate = False
    handler = logging.StreamHandler()  # writes to sys.stderr as it is now (pytest's capture)
    logger.addHandler(handler)
    try:
        install_log_redaction(logger)
        logger.warning("HTTP 401 from openrouter.ai: invalid key %s (model %s)", paid.reveal(), "lanbox-7b")
        logger.warning("lanbox-7b answered with key %s", local.reveal())
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert PAID_SHORT not in err
    assert "invalid key *** (model lanbox-7b)" in err  # the model name holding the local key is left alone
    assert "lanbox-7b answered with key lanbox" in err  # a local key is not masked (documented rule)
    assert redact(f"upstream said: bad key {PAID_SHORT}!") == "upstream said: bad key ***!"


def test_a_short_key_echoed_in_an_answer_is_masked_for_a_paid_host_only():
    echo = ModelResponse(text=f"you sent {PAID_SHORT} and EMPTY", usage=Usage(1, 1))
    assert _without_key(echo, PAID_SHORT).text == "you sent *** and EMPTY"
    local_echo = ModelResponse(text="you sent EMPTY: an EMPTY key", usage=Usage(1, 1))
    assert _without_key(local_echo, "EMPTY", local=True).text == local_echo.text


def test_a_lookup_that_does_not_say_local_is_strict_and_tiny_values_are_never_masked():
    # Mapillary's token, or any bare lookup: scrubbed from 4 characters; 1-3 would mangle every line
    lookup_secret("ANY_SHORT_TOKEN", environ={"ANY_SHORT_TOKEN": "Vb4%"})
    lookup_secret("TINY_TOKEN", environ={"TINY_TOKEN": "Vb%"})
    assert redact("token Vb4% and Vb%") == "token *** and Vb%"
    # a local server's short key stays visible, also when looked up by the missing-key check
    lookup_secret("LOCAL_ONLY", environ={"LOCAL_ONLY": "Pt5&k"}, local=True)
    assert redact("Pt5&k") == "Pt5&k"
