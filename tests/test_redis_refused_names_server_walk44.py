"""Walk44 B3: a Redis server that refuses the connection is named by its address and variable, never by secrets.

With no redis-server on the URL's port, every command said ``the Redis server named by [backend] url_env cannot be
used: ConnectionError: Error 111 connecting to ***. Connection refused.``: the URL was masked by its fragments too,
so redis-py's ``host:port`` vanished, and the line named no variable. Now it shows ``host:port``, the variable
(``[backend] url_env``) and asks whether redis-server runs there; the password and the user name stay hidden (the
URL whole too: tests/test_secrets_redis_url_whole.py). Real redis-py against a port nothing listens on, through the
CLI as a user runs it."""

from __future__ import annotations

import socket

from _model_harness import generic_campaign, model_table

PASSWORD = "pw-" + "Qz83Lm2Kx7Tv"
USER = "walkuser44"
VARIABLE = "GEOAGENT_TEST_W44_REDIS_URL"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_names_host_port_and_variable_but_no_secret(tmp_path, monkeypatch, capsys):
    from geoagent.cli import main

    port = _free_port()  # closed again: nothing listens there
    monkeypatch.setenv(VARIABLE, f"redis://{USER}:{PASSWORD}@127.0.0.1:{port}/0")
    cfg = generic_campaign(tmp_path, name="w44-refused", n=2, models=model_table())
    cfg.write_text(cfg.read_text(encoding="utf-8") + f'\n[backend]\nkind = "redis"\nurl_env = "{VARIABLE}"\n',
                   encoding="utf-8")
    for command in (["run", str(cfg), "--no-live"], ["status", str(cfg)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        (line,) = [ln for ln in err.splitlines() if "cannot be used" in ln]
        assert f"127.0.0.1:{port}" in line and "***" not in line, line
        assert f"from variable {VARIABLE} ([backend] url_env): is redis-server running there" in line, line
        for secret in (PASSWORD, PASSWORD[3:11], USER):
            assert secret not in err, (secret, err)


def test_a_failed_connection_masks_the_password_and_user_also_where_redis_py_echoes_them():
    from geoagent.runtime.backend import scrub, server_address

    url = f"redis://{USER}:{PASSWORD}@10.1.2.3:6390/0"
    text = scrub(f"connect {url}: auth {PASSWORD[:10]}... for {USER} at 10.1.2.3:6390 refused", url)
    assert PASSWORD[:10] not in text and USER not in text and url not in text
    assert "10.1.2.3:6390 refused" in text
    assert server_address(url) == "10.1.2.3:6390"
    assert server_address("redis://[::1]/0") == "[::1]:6379"
    assert server_address("unix:///run/redis.sock") == "/run/redis.sock"
