"""Processes that share a host slower than one request per period per process take turns (issue 2,
"Rate limit": a host limited to 1 request/s never sees two requests closer than 1.0 s, here with several
processes of one campaign).

Children are real subprocesses (``tests/_hostshare_child.py``: an HttpClient plus a HostShare on one
board, as ``engine.open_services`` wires them) calling the local Nominatim fake, which runs in the test
process and logs every arrival with ``time.monotonic()`` (CLOCK_MONOTONIC is system-wide on Linux, so
comparable with the children's clocks). The checks use those server-side arrival times only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pytest

import _hostshare_procs
from _hostshare_procs import Children
from geoagent.runtime.hostshare import HostShare, board_path, share_policy, takes_turns, turn_spacing_s
from geoagent.runtime.http import HostPolicy, HttpClient, _throttle_params, host_key
from geoagent.sandbox import echo
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox.echo import SCRIPT_KEY
from geoagent.sandbox.faults import FAULTS_KEY
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve
import test_queue_contract

GAZETTEER = Path(__file__).resolve().parent / "fixtures" / "gazetteer_geocode.jsonl"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pid/start-time liveness and a system-wide monotonic clock are Linux's")

#: fixtures: the module's redis-server (tests/test_queue_contract.py) and both board kinds (tests/_hostshare_procs.py)
redis_url = test_queue_contract.redis_url
boards = _hostshare_procs.boards


def test_which_hosts_take_turns_and_their_spacing():
    nominatim = HostPolicy(rate=1, period_s=1.0, concurrency=1)
    assert not takes_turns(nominatim, 1)  # alone: the process's own limiter, no board per request
    assert takes_turns(nominatim, 2) and takes_turns(nominatim, 3)
    fifty = HostPolicy(rate=50, period_s=1.0)
    assert not takes_turns(fifty, 2) and not takes_turns(fifty, 50) and takes_turns(fifty, 51)
    two = HostPolicy(rate=2, period_s=1.0)
    assert not takes_turns(two, 2) and takes_turns(two, 3)  # floor(2/2) = 1, floor(2/3) = 0
    # spacing: period / rate plus the client's 10% margin (at least 20 ms), as one process's fractional limiter
    assert turn_spacing_s(nominatim) == pytest.approx(1.1)
    assert turn_spacing_s(two) == pytest.approx(0.55)
    assert turn_spacing_s(HostPolicy(rate=0.5, period_s=1.0)) == pytest.approx(2.2)
    assert turn_spacing_s(HostPolicy(rate=100, period_s=1.0)) == pytest.approx(0.03)  # 10 ms + 20 ms floor
    # the spacing equals the window a lone process gives one request of a 1-per-(period/rate) policy
    assert turn_spacing_s(nominatim) == _throttle_params(nominatim)[1]
    # any 1-s window holds at most `rate` sends spaced that far apart: floor(period / spacing) + 1 <= rate
    for rate in (1, 2, 3, 7):
        assert int(1.0 // turn_spacing_s(HostPolicy(rate=rate, period_s=1.0))) + 1 <= rate
    # the per-process limiter still gets the fractional share (one request per n * spacing)
    assert _throttle_params(share_policy(nominatim, 3))[1] == pytest.approx(3 * turn_spacing_s(nominatim))
    with pytest.raises(ValueError):
        turn_spacing_s(HostPolicy(rate=0, period_s=1.0))


def _tag(rec: dict) -> str:
    return rec["params"]["w"]


@pytest.mark.wallclock
def test_three_processes_take_turns_on_a_one_per_second_host_and_survive_a_sigkill(tmp_path, boards):
    """Nominatim's 1 request/s shared by three processes: no two arrivals closer than 1.0 s, the host
    is kept busy at about the allowed rate with all three taking part, and after one process is
    SIGKILLed the other two go on, losing at most about one spacing. (The kill rarely lands while the
    victim holds the head of the queue, which lasts only from its turn to its send in a steady round;
    that path is checked deterministically in test_a_dead_turn_holder_costs_one_spacing_...)
    """
    policy = HostPolicy(rate=1, period_s=1.0, concurrency=1)
    spacing = turn_spacing_s(policy)  # 1.1 s
    board_opt = boards[2]
    state = nm_fake.NominatimFakeState(min_interval_s=1.0, tolerance_s=0.0)  # 429 for ANY gap under 1.0 s

    async def go():
        app = nm_fake.make_app(Gazetteer.from_jsonl(GAZETTEER), state=state)
        kids = Children()
        async with serve(app) as base:
            opt = dict(url=base + "/search", rate=policy.rate, concurrency=policy.concurrency, workers=2,
                       max_attempts=2, params={"q": "Tokyo", "format": "jsonv2"}, **board_opt)
            for tag, duration_s in (("A", 15.0), ("B", 60.0), ("C", 15.0)):
                await kids.start(tag, duration_s=duration_s, **opt)
            deadline = time.monotonic() + 25.0
            while {_tag(r) for r in state.requests} != set("ABC"):
                assert time.monotonic() < deadline, "the three children did not all reach the server"
                await asyncio.sleep(0.05)
            t_all = time.monotonic()
            await asyncio.sleep(4.5)
            t_kill = time.monotonic()
            kids.procs["B"].kill()  # SIGKILL: no goodbye, maybe holding the turn or queued for it
            out = await kids.finish()
        return list(state.requests), out, t_all, t_kill

    log, out, t_all, t_kill = asyncio.run(go())
    assert out["A"][0] == 0 and out["C"][0] == 0, out
    assert out["B"][0] == -9
    t = np.array([r["t_mono"] for r in log])
    by = {k: np.array([r["t_mono"] for r in log if _tag(r) == k]) for k in "ABC"}
    gaps = np.diff(t)
    # the policy, server-side: never two arrivals closer than 1.0 s (so the fake never answered 429)
    assert gaps.min() >= 1.0, np.round(gaps, 3).tolist()
    assert [r["status"] for r in log] == [200] * len(log)
    assert by["B"].max() < t_kill + 0.05
    # all three took part while all ran (turns go round: each sent), and the rate was used: in the
    # all-three phase the arrivals are about one per spacing (allow 25% for polling and a loaded machine)
    three = (t_all, t_kill)
    in3 = t[(t >= three[0]) & (t < three[1])]
    assert all(((by[k] >= three[0]) & (by[k] < three[1])).sum() >= 1 for k in "ABC"), {k: by[k] - t_all for k in "ABC"}
    assert in3.size >= 0.75 * (three[1] - three[0]) / spacing, (in3.size, np.round(np.diff(in3), 3).tolist())
    # after the kill: A and C both go on; the host's longest silence is the dead process's place in the
    # round (one spacing) on top of the normal one, until the others count two processes (B's row is
    # found dead within a poll and keeps counting one window), plus polling slack
    after = t[t >= t_kill]
    assert ((by["A"] > t_kill).sum() >= 2) and ((by["C"] > t_kill).sum() >= 2)
    stall = np.diff(np.concatenate([[t[t < t_kill].max()], after])).max()
    assert stall <= 2 * spacing + 0.8, (stall, np.round(after - t_kill, 3).tolist())
    # and over the rest of the run the two keep the host at about the allowed rate
    late = after[after >= t_kill + 3.0]
    span = min(by["A"].max(), by["C"].max()) - (t_kill + 3.0)
    assert late.size >= 0.75 * span / spacing, (late.size, span)


def _tickets(board: Path, member: int | None = None) -> int:
    """Tickets in the board's turn queues (of one member row, when given)."""
    with contextlib.closing(sqlite3.connect(board, timeout=5)) as c:
        if member is None:
            return c.execute("SELECT COUNT(*) FROM tickets").fetchone()[0]
        return c.execute("SELECT COUNT(*) FROM tickets WHERE member = ?", (member,)).fetchone()[0]


async def _tickets_after_release(board: Path, timeout_s: float = 2.0) -> int:
    """Tickets left once the last sender's own ticket had time to leave (it goes on the board thread
    right after the send, so it may still be there when the response is back)."""
    deadline = time.monotonic() + timeout_s
    while (left := await asyncio.to_thread(_tickets, board)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


def test_a_cancelled_wait_passes_the_turn_on_and_a_shared_pause_holds_the_next_turn(tmp_path):
    """Two clients (standing in for two processes) share a 1 request/s host, so they take turns.

    * B's request is cancelled while it holds its place in the turn queue: its ticket leaves the board
      and A's next request is not held up by it.
    * A 429 with ``Retry-After: 2.5`` to whoever sends next: the next turn (due one spacing later, in
      whichever process) waits until the pause is over.
    """
    policy = HostPolicy(rate=1, period_s=1.0, concurrency=1, timeout_s=10.0, backoff_base_s=0.05, backoff_max_s=10.0)
    spacing = turn_spacing_s(policy)
    board = board_path(tmp_path)
    retry_after = 2.5

    async def go():
        app = echo.make_app()
        async with serve(app) as base:
            url = base + "/script"
            async with HttpClient(default_policy=policy) as a, HostShare(board, a), \
                    HttpClient(default_policy=policy) as b, HostShare(board, b) as b_share:
                await a.request("GET", url, params={"w": "A"})  # alone: its own limiter
                await b.request("GET", url, params={"w": "B"})  # joined: both take turns from now on
                # once both limiters are free again (one request per 2 spacings each), A sends at once and
                # B's next request has to wait one spacing for its turn, in the queue on the board
                await asyncio.sleep(2 * spacing + 0.1)
                await a.request("GET", url, params={"w": "A"})
                t_a = time.monotonic()
                waiting = asyncio.ensure_future(b.request("GET", url, params={"w": "Bx"}))
                b_member = b_share.hosts[host_key(base)].seq
                deadline = time.monotonic() + 5.0
                while await asyncio.to_thread(_tickets, board, b_member) == 0:  # B's ticket is queued on the board
                    assert time.monotonic() < deadline and not waiting.done()
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.2)
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
                await asyncio.wait_for(a.request("GET", url, params={"w": "A"}), 10.0)  # not stuck behind Bx
                t_next = time.monotonic()
                left = await _tickets_after_release(board)
                # both limiters free again: whoever sends first gets the 429, the other one is then
                # queued for its turn (due one spacing later) while the pause is posted
                await asyncio.sleep(2 * spacing + 0.1)
                app[SCRIPT_KEY].append(f"429:{retry_after:g}")

                async def calls(http, tag):
                    for _ in range(2):
                        await http.request("GET", url, params={"w": tag})

                await asyncio.wait_for(asyncio.gather(calls(a, "A"), calls(b, "B")), 30.0)
        return list(app[FAULTS_KEY].log), t_a, t_next, left

    log, t_a, t_next, left = asyncio.run(go())
    tags = [parse_qs(r.query)["w"][0] for r in log]
    t = np.array([r.t_mono for r in log])
    assert "Bx" not in tags and left == 0
    assert t_next - t_a <= 2 * spacing + 0.5  # A's own share (one request per 2 spacings), nothing more
    assert np.diff(t).min() >= 1.0, np.round(np.diff(t), 3).tolist()
    (i429,) = [i for i, r in enumerate(log) if r.status == 429]
    assert t[i429 + 1] >= t[i429] + retry_after  # the turn due at +1.1 s waited out the pause
    assert [r.status for r in log[i429 + 1 :]] == [200] * 4 and set(tags[i429 + 1 :]) == {"A", "B"}


def test_a_dead_turn_holder_costs_one_spacing_and_a_live_one_is_waited_for(tmp_path):
    """Tickets at the head of the turn queue, written straight into the board as a crashed process
    would leave them (two clients in the test process stand in for the live processes):

    * a dead holder (its pid has exited): the next sender drops it and waits one spacing from then
      (the dead process might have sent just before it died), not longer;
    * a holder whose member row is gone (declared dead by the others' heartbeat check): the same;
    * a live holder: the next sender waits for it, here until the test removes the ticket.
    """
    import subprocess

    from geoagent.runtime.hostshare import _identity, _proc_start

    policy = HostPolicy(rate=1, period_s=1.0, concurrency=1, timeout_s=10.0)
    spacing = turn_spacing_s(policy)
    board = board_path(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)

    def put_head(key: str, pid: int, pstart: str, member: int, token: str) -> None:
        with contextlib.closing(sqlite3.connect(board, timeout=5, isolation_level=None)) as c:
            c.execute("INSERT INTO tickets(token, host, pid, pstart, boot, member, since) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (token, key, pid, pstart, _identity(), member, time.monotonic()))

    def drop(token: str) -> None:
        with contextlib.closing(sqlite3.connect(board, timeout=5, isolation_level=None)) as c:
            c.execute("DELETE FROM tickets WHERE token = ?", (token,))

    async def go():
        app = echo.make_app()
        waits = {}
        async with serve(app) as base:
            url, key = base + "/echo", host_key(base)
            async with HttpClient(default_policy=policy) as a, HostShare(board, a), \
                    HttpClient(default_policy=policy) as b, HostShare(board, b) as b_share:
                await a.request("GET", url)
                await b.request("GET", url)  # joined: both take turns from now on
                b_member = b_share.hosts[key].seq
                for case, pid, pstart, member in (
                    ("dead pid", dead_pid, "", b_member),
                    ("member gone", os.getpid(), _proc_start(os.getpid()), 10**9),
                    ("live holder", os.getpid(), _proc_start(os.getpid()), b_member),
                ):
                    await asyncio.sleep(2 * spacing + 0.1)  # A's limiter and the host's next_at are free again
                    await asyncio.to_thread(put_head, key, pid, pstart, member, case)
                    t0 = time.monotonic()
                    sent = asyncio.ensure_future(a.request("GET", url))
                    if case == "live holder":
                        await asyncio.sleep(2 * spacing)
                        assert not sent.done()  # still waiting behind a live process's turn
                        await asyncio.to_thread(drop, case)
                        t0 = time.monotonic()
                    await asyncio.wait_for(sent, 10.0)
                    waits[case] = app[FAULTS_KEY].log[-1].t_mono - t0
                left = await _tickets_after_release(board)
        return waits, left

    waits, left = asyncio.run(go())
    assert spacing <= waits["dead pid"] <= spacing + 0.6, waits
    assert spacing <= waits["member gone"] <= spacing + 0.6, waits
    # the live holder left without sending: the next send goes at once (polling delay only)
    assert waits["live holder"] <= 0.6, waits
    assert left == 0
