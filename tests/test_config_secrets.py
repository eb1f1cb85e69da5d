"""Secrets: keys only from the environment or .env (real env wins), never shown, never pickled."""

from __future__ import annotations

import logging
import os
import pickle
import textwrap

import pytest
from _made_up_keys import made_up_key

from geoagent.config import load_config, provider_settings
from geoagent.secrets import (
    RedactingFilter,
    Secret,
    SecretNotFound,
    get_secret,
    lookup_secret,
    read_dotenv,
    redact,
)


def test_secret_never_shows_its_value():
    value = made_up_key("sk-", 12, seed="abcdef123456")
    s = Secret(value, "OPENAI_API_KEY")
    assert str(s) == "***" and f"{s}" == "***" and value not in repr(s)
    assert repr(s) == "Secret('OPENAI_API_KEY', '***')"
    assert s.reveal() == value
    with pytest.raises(TypeError):
        pickle.dumps(s)
    with pytest.raises(ValueError):
        Secret("")


def test_dotenv_is_read_and_real_environment_wins(tmp_path, monkeypatch):
    env_file = tmp_path / ".env"
    env_file.write_text(
        textwrap.dedent(
            """
            # comment
            FROM_FILE_ONLY=file-value-1234
            BOTH_SET="file-loses-5678"
            export QUOTED='single quoted 999'
            """
        )
    )
    monkeypatch.setenv("BOTH_SET", "env-wins-4321")
    monkeypatch.delenv("FROM_FILE_ONLY", raising=False)
    assert read_dotenv(env_file)["QUOTED"] == "single quoted 999"
    assert get_secret("FROM_FILE_ONLY", dotenv_path=env_file).reveal() == "file-value-1234"
    assert get_secret("BOTH_SET", dotenv_path=env_file).reveal() == "env-wins-4321"
    assert get_secret("QUOTED", dotenv_path=env_file).reveal() == "single quoted 999"
    # reading .env never exports into the process environment
    assert "FROM_FILE_ONLY" not in os.environ
    assert lookup_secret("NOT_ANYWHERE_XYZ", dotenv_path=env_file) is None
    with pytest.raises(SecretNotFound) as ei:
        get_secret("NOT_ANYWHERE_XYZ", dotenv_path=env_file)
    assert "NOT_ANYWHERE_XYZ" in str(ei.value)


def test_default_dotenv_is_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GEOAGENT_DOTENV", raising=False)
    monkeypatch.delenv("CWD_KEY_T", raising=False)
    (tmp_path / ".env").write_text("CWD_KEY_T=from-cwd-env-file\n")
    assert get_secret("CWD_KEY_T").reveal() == "from-cwd-env-file"


def test_invalid_variable_name_is_not_echoed():
    with pytest.raises(ValueError) as ei:
        lookup_secret("sk-live-abcdefgh")
    assert "sk-live-abcdefgh" not in str(ei.value)


def test_redact_and_logging_filter(caplog):
    s = Secret("tok-zyxwvut-98765")
    assert redact("Bearer tok-zyxwvut-98765 failed") == "Bearer *** failed"
    assert redact("other 'plain' text", ["plain"]) == "other '***' text"
    logger = logging.getLogger("geoagent.test.secrets")
    flt = RedactingFilter()
    logger.addFilter(flt)
    try:
        with caplog.at_level(logging.INFO, logger="geoagent.test.secrets"):
            logger.info("calling with key %s", s.reveal())
    finally:
        logger.removeFilter(flt)
    assert "tok-zyxwvut-98765" not in caplog.text and "calling with key ***" in caplog.text


def test_provider_settings_get_the_key_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(
        textwrap.dedent(
            """
            [campaign]
            name = "s"
            [budget]
            cap_usd = 1
            [[models]]
            name = "m"
            provider = "openai"
            model = "gpt-x"
            base_url = "http://127.0.0.1:8/v1"
            api_key_env = "S_TEST_KEY"
            rate = { requests = 3, period_s = 1.0 }
            headers = { "X-Title" = "geoagent" }
            """
        )
    )
    (tmp_path / ".env").write_text("S_TEST_KEY=sk-from-dotenv-0001\n")
    monkeypatch.delenv("S_TEST_KEY", raising=False)
    cfg = load_config("c.toml")
    ps = provider_settings(cfg, "m", dotenv_path=tmp_path / ".env")
    assert isinstance(ps.api_key, Secret) and ps.api_key.reveal() == "sk-from-dotenv-0001"
    assert "sk-from-dotenv-0001" not in repr(ps) and "sk-from-dotenv-0001" not in repr(ps.public_dict())
    assert ps.kind == "openai" and ps.model == "gpt-x" and ps.base_url == "http://127.0.0.1:8/v1"
    assert ps.policy.rate == 3 and ps.policy.retry_unknown_outcome is False
    assert dict(ps.headers) == {"X-Title": "geoagent"}
    (tmp_path / ".env").write_text("")
    with pytest.raises(SecretNotFound, match="S_TEST_KEY"):
        provider_settings(cfg, "m", dotenv_path=tmp_path / ".env")
