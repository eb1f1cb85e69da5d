"""Per-host limits shared across the PROCESSES of one campaign (issue 2, point 4 and "Rate limit").

Children are real subprocesses (``tests/_hostshare_child.py``: an HttpClient plus a HostShare on one
board, as ``engine.open_services`` wires them). The local echo server runs in the test process and logs
every arrival with ``time.monotonic()`` (CLOCK_MONOTONIC is system-wide on Linux, so comparable with
the children); the checks count those server-side arrivals with numpy, independently of the limiters.
"""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pytest

import _hostshare_procs
from _hostshare_procs import REPO, Children
from geoagent.runtime.hostshare import POLL_S, HostShare, board_path, share_policy
from geoagent.runtime.http import HostPolicy, HttpClient, _throttle_params, host_key
from geoagent.sandbox.echo import SCRIPT_KEY, make_app
from geoagent.sandbox.faults import FAULTS_KEY
from _windows import max_in_window
from geoagent.sandbox.server import serve
import test_queue_contract
from _made_up_keys import made_up_key


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pid/start-time liveness and a system-wide monotonic clock are Linux's")

#: fixtures: the module's redis-server (tests/test_queue_contract.py) and both board kinds (tests/_hostshare_procs.py)
redis_url = test_queue_contract.redis_url
boards = _hostshare_procs.boards



def test_share_policy_hand_cases():
    p = HostPolicy(rate=50, period_s=1.0, concurrency=16)
    assert share_policy(p, 1) is p  # alone: the configured policy itself, untouched
    assert (share_policy(p, 2).rate, share_policy(p, 2).concurrency) == (25.0, 8)
    assert (share_policy(p, 3).rate, share_policy(p, 3).concurrency) == (16.0, 6)  # floor 50/3, ceil 16/3
    assert share_policy(p, 3).max_attempts == p.max_attempts
    nominatim = HostPolicy(rate=1, period_s=1.0, concurrency=1)
    two = share_policy(nominatim, 2)  # floor(1/2) == 0: the fraction, one request per 2 s
    assert two.rate == 0.5 and two.concurrency == 1
    assert _throttle_params(two)[0] == 1 and _throttle_params(two)[1] >= 2.0
    with pytest.raises(ValueError):
        share_policy(p, 0)
    with pytest.raises(ValueError, match="poll_s"):
        HostShare("unused.sqlite", HttpClient(), poll_s=30.0)  # longer than the lease allows


def _tag(rec) -> str:
    return parse_qs(rec.query)["w"][0]


async def _wait_for_tags(app, tags: set[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not tags <= {_tag(r) for r in app[FAULTS_KEY].log}:
        if time.monotonic() > deadline:
            raise TimeoutError(f"children {sorted(tags)} did not all reach the server in {timeout_s} s")
        await asyncio.sleep(0.05)


def test_processes_share_rate_with_join_and_sigkill(tmp_path, boards):
    """Three processes on one host limited to 20/s: never more than 20 in any 1-s window (server-side).

    A and B start together; C joins once both are sending; B is SIGKILLed later; A and C then take
    over B's share (they grow only after B's last requests left the window).
    """
    rate = 20
    _kind, _new, board_opt = boards

    async def go():
        app = make_app()
        kids = Children()
        async with serve(app) as base:
            opt = dict(url=base + "/echo", rate=rate, concurrency=6, workers=6, **board_opt)
            await kids.start("A", duration_s=14.0, **opt)
            await kids.start("B", duration_s=30.0, **opt)
            await _wait_for_tags(app, {"A", "B"})
            await asyncio.sleep(1.5)
            t_join = time.monotonic()
            await kids.start("C", duration_s=9.0, **opt)
            await _wait_for_tags(app, {"C"})
            await asyncio.sleep(2.5)
            t_kill = time.monotonic()
            kids.procs["B"].kill()  # SIGKILL: no goodbye on the board
            out = await kids.finish()
        return list(app[FAULTS_KEY].log), out, t_join, t_kill

    log, out, t_join, t_kill = asyncio.run(go())
    assert out["A"][0] == 0 and out["C"][0] == 0, out
    assert out["B"][0] == -9
    t = np.array([r.t_mono for r in log])
    by = {k: np.array([r.t_mono for r in log if _tag(r) == k]) for k in "ABC"}
    assert max_in_window(t, 1.0) <= rate, max_in_window(t, 1.0)
    assert all(r.status == 200 for r in log)
    # C sent nothing before its join wait was over, and B nothing after it was killed
    assert by["C"].min() > t_join and by["B"].max() < t_kill + 0.05
    # not vacuous: the limit was used (20/s less the ~10% client margin and the floor of shares)
    assert max_in_window(t, 1.0) >= 15
    # while all three ran, each held about a third; after the kill, A took a larger share
    three = (by["C"].min() + 1.5, t_kill)
    in3 = by["A"][(by["A"] >= three[0]) & (by["A"] <= three[1])]
    assert max_in_window(in3, 1.0) <= math.floor(rate / 3)
    late = by["A"][(by["A"] >= t_kill + 2.5) & (by["A"] <= by["C"].max())]
    assert max_in_window(late, 1.0) > math.floor(rate / 3)


@pytest.mark.wallclock  # asserts arrival times within a 0.75 s lag: run in the uncrowded phase (docs/development.md)
def test_retry_after_seen_by_one_process_pauses_all(tmp_path, boards):
    """A 429 with Retry-After: 3 to one process stops the others too, after at most the documented lag."""
    _kind, _new, board_opt = boards
    retry_after = 3.0
    lag_allowed = POLL_S + 0.5  # documented poll lag + board transaction + loaded-machine margin

    async def go():
        app = make_app()
        kids = Children()
        async with serve(app) as base:
            opt = dict(url=base + "/script", rate=30, concurrency=3, workers=3, duration_s=9.0, **board_opt)
            for tag in "ABC":
                await kids.start(tag, **opt)
            await _wait_for_tags(app, set("ABC"))
            await asyncio.sleep(1.0)
            app[SCRIPT_KEY].append(f"429:{retry_after:g}")  # the next request, whoever sends it, gets a 429
            out = await kids.finish()
        return list(app[FAULTS_KEY].log), out

    log, out = asyncio.run(go())
    assert all(v[0] == 0 for v in out.values()), out
    (r429,) = [r for r in log if r.status == 429]
    t0, hit = r429.t_mono, _tag(r429)
    during = [r for r in log if t0 < r.t_mono < t0 + retry_after]
    late_starts = [round(r.t_mono - t0, 3) for r in during if r.t_mono >= t0 + lag_allowed]
    assert not late_starts, f"requests reached the host during the pause: {late_starts} s after the 429"
    others = set("ABC") - {hit}
    # not vacuous: the other processes were sending right before the 429 and resumed after the pause
    # (each sends its share in a burst per client window of 1.1 s, so look 2.5 s either side)
    before = {_tag(r) for r in log if t0 - 2.5 <= r.t_mono < t0}
    after = {_tag(r) for r in log if t0 + retry_after <= r.t_mono < t0 + retry_after + 2.5}
    assert others <= before and others <= after


def test_single_process_gets_full_rate_without_join_delay(tmp_path):
    """Alone on the board: the first request is not held for a join window, and the full 20/s is used."""
    rate = 20
    policy = HostPolicy(rate=rate, period_s=1.0, concurrency=8, timeout_s=10.0)

    async def go():
        app = make_app()
        async with serve(app) as base, HttpClient(default_policy=policy) as http:
            async with HostShare(board_path(tmp_path), http) as share:
                t_first = time.monotonic()
                await http.request("GET", base + "/echo")
                first_latency = app[FAULTS_KEY].log[0].t_mono - t_first

                async def worker():
                    for _ in range(10):
                        await http.request("GET", base + "/echo")

                await asyncio.gather(*(worker() for _ in range(6)))
                rows = _rows(board_path(tmp_path))
                busy_s = time.monotonic() - t_first
            # cheap: the board is touched by the background poll only, not per request
            assert share.ticks <= busy_s / POLL_S + 3, (share.ticks, busy_s)
        return np.array([r.t_mono for r in app[FAULTS_KEY].log]), first_latency, rows

    t, first_latency, rows = asyncio.run(go())
    assert t.size == 61
    hold_s = _throttle_params(policy)[1]
    assert first_latency < hold_s  # registration is one board write, not a join wait of a full window
    assert rate * 0.85 <= max_in_window(t, 1.0) <= rate  # the whole configured rate (less the margin)
    assert len(rows) == 1 and rows[0]["pid"] == os.getpid() and rows[0]["gone_at"] is None
    after = _rows(board_path(tmp_path))
    assert len(after) == 1 and after[0]["gone_at"] is not None  # leaving marks the row gone (it still counts a window)


def _rows(path: Path) -> list[dict]:
    with sqlite3.connect(path) as c:
        c.row_factory = sqlite3.Row
        return [dict(r) for r in c.execute("SELECT * FROM members")]


@pytest.mark.wallclock  # asserts arrival times: run in the uncrowded phase (docs/development.md)
def test_waking_from_a_pause_reads_the_board_before_sending(tmp_path, boards):
    """A pause posted while a process sleeps out its own shorter pause is seen before its first send.

    Process A polls the board only every 2 s here (the longest allowed), so only the check at the end of
    its own 1-s pause can find the longer pause B posted at 0.6 s (two clients in one test process stand
    in for two processes). Without that check A would send at 1.0 s.
    """
    policy = HostPolicy(rate=20, period_s=1.0, concurrency=4, timeout_s=10.0)

    async def go():
        app = make_app()
        async with serve(app) as base:
            key = host_key(base)
            new_board = boards[1]
            async with HttpClient(default_policy=policy) as b, HostShare(new_board(), b):
                await b.request("GET", base + "/echo", params={"w": "B"})
                async with HttpClient(default_policy=policy) as a, HostShare(new_board(), a, poll_s=2.0):
                    await a.request("GET", base + "/echo", params={"w": "A"})  # joined
                    t0 = time.monotonic()
                    a.pause_host(key, 1.0)
                    send = asyncio.ensure_future(a.request("GET", base + "/echo", params={"w": "A2"}))
                    await asyncio.sleep(0.6)
                    b.pause_host(key, 2.0)  # until t0 + 2.6: posted at once by B, not polled by A
                    await send
                    b_until = b.paused_until(key)
        arrival = [r.t_mono for r in app[FAULTS_KEY].log if _tag(r) == "A2"]
        return t0, arrival, b_until

    t0, (arrival,), b_until = asyncio.run(go())
    assert b_until == pytest.approx(t0 + 2.6, abs=0.1)
    # without the wake-up check A would have sent at t0 + 1.0, 1.6 s early; a few ms of slack for the board's
    # round trip of B's end time (a loaded -n 4 run saw A 0.3 ms before it, session 18)
    assert arrival >= b_until - 0.05


@pytest.mark.wallclock  # asserts arrival times: run in the uncrowded phase (docs/development.md)
def test_newcomer_waits_for_a_departed_process_to_leave_the_window(tmp_path, boards):
    """A process that left right after a full burst still owns that window: a newcomer must not add to it.

    (Two clients in the test process stand in for two processes; the first closes its share cleanly.)
    """
    rate = 20
    policy = HostPolicy(rate=rate, period_s=1.0, concurrency=rate, timeout_s=10.0)

    async def burst(http, url, tag):
        await asyncio.gather(*(http.request("GET", url, params={"w": tag}) for _ in range(rate)))

    async def go():
        app = make_app()
        async with serve(app) as base:
            new_board = boards[1]
            async with HttpClient(default_policy=policy) as a, HostShare(new_board(), a):
                await burst(a, base + "/echo", "A")  # alone: the full 20 at once
            async with HttpClient(default_policy=policy) as b, HostShare(new_board(), b):
                await burst(b, base + "/echo", "B")
        return list(app[FAULTS_KEY].log)

    log = asyncio.run(go())
    ta = np.array([r.t_mono for r in log if _tag(r) == "A"])
    tb = np.array([r.t_mono for r in log if _tag(r) == "B"])
    assert ta.size == tb.size == rate
    assert max_in_window(np.concatenate([ta, tb]), 1.0) <= rate
    assert tb.min() - ta.max() >= 1.0


def test_two_campaign_processes_share_the_model_hosts_rate(tmp_path):
    """``run.py run`` twice at once (engine.open_services wiring): the model's 10/s holds in total.

    The second process joins while the first is running; the board is watched from outside to see
    that both processes were members of the model's limit key (``host/gpt-x``: providers limit per model,
    so the processes share the model's key, :func:`geoagent.runtime.http.limit_key`) at once.
    """
    import contextlib

    import anyio

    from geoagent.sandbox import llm_openai

    rate, n = 10, 100
    key = made_up_key("sk-", 31, seed="hostshare-test-n16")
    app = llm_openai.make_app(api_keys=[key])
    env = {"HS_RT_KEY": key, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", ""), "PYTHONPATH": str(REPO)}

    def config(base_url: str) -> Path:
        p = tmp_path / "hs.toml"
        p.write_text(f"""
[campaign]
name = "hs"
kind = "generic"
seed = 3

[paths]
queues = "{tmp_path / 'queues'}"
state = "{tmp_path / 'state'}"

[budget]
cap_usd = 5.0

[generic]
n_requests = {n}

[[models]]
name = "m"
provider = "openai"
model = "gpt-x"
base_url = "{base_url}/v1"
api_key_env = "HS_RT_KEY"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 100
concurrency = 8
rate = {{ requests = {rate}, period_s = 1.0 }}
timeout_s = 5
""")
        return p

    async def go():
        members_seen = 0
        async with serve(app) as base:
            # warm the fake up: its first answer takes ~0.2 s (lazy set-up) and would hold back the
            # arrival log of requests sent meanwhile, bunching them on the server's clock
            async with HttpClient() as warm:
                await warm.request("POST", base + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                   json={"model": "gpt-x", "messages": [{"role": "user", "content": "warm-up"}], "max_tokens": 5})
            warmed = len(app[FAULTS_KEY].log)
            cfg = config(base)
            codes: list[int] = []
            board = board_path(tmp_path / "state" / "hs")

            async def one() -> None:
                p = await anyio.run_process([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--no-live"],
                                            env=env, check=False, cwd=tmp_path)
                codes.append(p.returncode)
                if p.returncode:
                    print(p.stdout.decode(errors="replace")[-3000:], p.stderr.decode(errors="replace")[-3000:])

            def live_members() -> int:
                if not board.exists():
                    return 0
                with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(board, timeout=5)) as c:
                    return c.execute("SELECT COUNT(*) FROM members WHERE gone_at IS NULL AND host LIKE '%/gpt-x'"
                                     ).fetchone()[0]
                return 0

            async with anyio.create_task_group() as tg:
                tg.start_soon(one)
                # the second starts once the first has opened its state (and so the board): two processes
                # creating campaign.sqlite at the same instant can race on its switch to WAL (ledger.py)
                while not board.exists() and not codes:
                    await anyio.sleep(0.05)
                tg.start_soon(one)
                while len(codes) < 2:
                    await anyio.sleep(0.1)
                    # in a thread: the server shares this event loop, and its arrival times must not lag
                    members_seen = max(members_seen, await anyio.to_thread.run_sync(live_members))
        return codes, members_seen, warmed

    codes, members_seen, warmed = anyio.run(go)
    assert codes == [0, 0]
    t = np.array([r.t_mono for r in list(app[FAULTS_KEY].log)[warmed:] if r.path.endswith("/chat/completions")])
    assert t.size == n
    assert max_in_window(t, 1.0) <= rate, np.round(t - t[0], 3).tolist()
    assert members_seen == 2  # not vacuous: both processes called the host at the same time


def test_policy_set_again_by_a_client_stays_a_share(tmp_path):
    """A client that (re)sets its host's policy before every request (as the Mapillary client does for
    thumbnail hosts) must not get the full rate back while another process shares the host.

    (Two clients in the test process stand in for two processes.)
    """
    rate = 20

    def policy() -> HostPolicy:  # a new object each time, like a client building its documented policy
        return HostPolicy(rate=rate, period_s=1.0, concurrency=8, timeout_s=10.0)

    async def go():
        app = make_app()
        async with serve(app) as base:
            key = host_key(base)
            async with HttpClient(default_policy=policy()) as a, HostShare(board_path(tmp_path), a), \
                    HttpClient(default_policy=policy()) as b, HostShare(board_path(tmp_path), b):
                end = time.monotonic() + 4.0

                async def worker(http, tag, reset):
                    while time.monotonic() < end:
                        if reset:
                            http.set_policy(key, policy())
                        await http.request("GET", base + "/echo", params={"w": tag})

                await asyncio.gather(*(worker(a, "A", True) for _ in range(8)), *(worker(b, "B", False) for _ in range(8)))
        return list(app[FAULTS_KEY].log)

    log = asyncio.run(go())
    t = np.array([r.t_mono for r in log])
    ta = np.array([r.t_mono for r in log if _tag(r) == "A"])
    tb = np.array([r.t_mono for r in log if _tag(r) == "B"])
    assert max_in_window(t, 1.0) <= rate
    assert ta.size and tb.size
    # once both are in, A holds its half although it keeps setting the full policy
    both = max(ta.min(), tb.min()) + 1.2
    assert max_in_window(ta[ta >= both], 1.0) <= rate // 2


def test_hosts_first_seen_during_a_tick_are_registered_next_tick(tmp_path, caplog):
    """A host first contacted while a board tick is in flight (every run of a sandbox campaign meets new
    local ports) is registered by the next tick; the tick must not fail on it (was: KeyError in _apply,
    logged as "hostshare: tick failed" on resumes of the demo). The tick is held in flight by another
    connection holding the board's write lock while five new hosts are contacted."""
    policy = HostPolicy(rate=200, period_s=1.0, concurrency=8, timeout_s=10.0)

    async def go():
        apps = [make_app() for _ in range(6)]
        async with serve(apps[0]) as b0, serve(apps[1]) as b1, serve(apps[2]) as b2, serve(apps[3]) as b3, \
                serve(apps[4]) as b4, serve(apps[5]) as b5:
            async with HttpClient(default_policy=policy) as http, HostShare(board_path(tmp_path), http, poll_s=0.05):
                await http.request("GET", b0 + "/echo")
                blocker = sqlite3.connect(board_path(tmp_path), isolation_level=None)
                blocker.execute("BEGIN IMMEDIATE")  # the next tick waits for this lock, in flight
                await asyncio.sleep(0.2)
                late = [asyncio.ensure_future(http.request("GET", b + "/echo")) for b in (b1, b2, b3, b4, b5)]
                await asyncio.sleep(0.2)  # the new hosts are known to the client, not to the tick in flight
                blocker.execute("ROLLBACK")
                blocker.close()
                await asyncio.wait_for(asyncio.gather(*late), 10)
        return [len(a[FAULTS_KEY].log) for a in apps]

    with caplog.at_level("ERROR", logger="geoagent.runtime.hostshare"):
        served = asyncio.run(go())
    assert served == [1] * 6
    assert not [r for r in caplog.records if "tick failed" in r.getMessage()]
    assert len({r["host"] for r in _rows(board_path(tmp_path))}) == 6  # every host was registered
