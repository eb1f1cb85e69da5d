"""Adversarial review (session 6, second pass) of the newest runtime changes: lease renewal
(geoagent.runtime.leases, WorkQueue.extend on SQLite and a real redis-server), HTTP fail fast (an attempt that
cannot reach its host takes no rate slot) and the watch-mode half-open probe (geoagent.runtime.worker).

Every test runs against real queues and real loopback servers; the invariants are the runtime issue's:
a leased task is worked on by one worker at a time (no second paid request for a key), a settled lease is never
resurrected by a renewal, a crashed process's tasks come back after one visibility timeout, and a host limited to
N requests per period never sees more than N arrivals in any window of that period (server-side count)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
from aiohttp import web

from geoagent.runtime.http import HostPolicy, HttpClient, RetriesExhausted
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner
from geoagent.sandbox.server import free_port, serve
from test_queue_contract import backend, redis_url  # noqa: F401 - the module's fixtures (both backends)
from _made_up_keys import made_up_key

REPO = Path(__file__).resolve().parents[1]


# -- 1. lease renewal ---------------------------------------------------------------------------------------------

def test_extend_never_resurrects_a_released_nacked_or_dead_lettered_task(backend):  # noqa: F811
    """A renewal racing a release / nack / dead-letter (the keeper's snapshot was taken before the task settled)
    must report the key and leave the task where the settlement put it."""

    async def body(open_):
        q = open_()
        await q.put_many([("rel", {}), ("nak", {}), ("ded", {}), ("live", {})])
        t = {x.key: x for x in await q.lease(4, 30)}
        await q.release(t["rel"])
        await q.nack(t["nak"], "boom", backoff_s=0)
        await q.dead_letter(t["ded"], "bad")
        stale = await q.extend([t["rel"], t["nak"], t["ded"], t["live"]], 30)
        assert sorted(stale) == ["ded", "nak", "rel"]
        c = await q.counts()
        # hand count: rel and nak ready, live leased, ded dead
        assert (c.ready, c.leased, c.done, c.dead) == (2, 1, 0, 1)
        again = {x.key for x in await q.lease(4, 30)}
        assert again == {"rel", "nak"}
        # the old lease ids of the re-leased tasks stay stale; renewing them changes nothing
        assert sorted(await q.extend([t["rel"], t["nak"]], 30)) == ["nak", "rel"]
        assert (await q.counts()).leased == 3

    backend.run(body)


_KILLED_RUNNER = textwrap.dedent("""
    import sys, anyio
    from geoagent.runtime.queue import open_queue
    from geoagent.runtime.stage import Stage, StageContext
    from geoagent.runtime.worker import StageRunner

    class Forever(Stage):
        name = "forever"
        input_edge = "a"
        output_edge = None
        concurrency = 2

        async def handle(self, task, ctx):
            print("started", task.key, flush=True)
            await anyio.sleep(3600)
            return []

    async def main():
        q = open_queue(sys.argv[1], "c", "a")
        await StageRunner(Forever(), q, None, StageContext("c"), visibility_timeout_s=float(sys.argv[2])).run()

    anyio.run(main)
""")


def test_a_sigkilled_runner_stops_renewing_and_its_tasks_come_back_after_one_visibility_timeout(tmp_path):
    """The keeper lives in the runner's process: while it runs the leases are renewed past their first deadline;
    after SIGKILL nobody renews them and both tasks come back one visibility timeout later (not sooner)."""
    vt_s = 1.0

    async def main():
        q = open_queue(tmp_path / "q", "c", "a")
        try:
            await q.put_many([("k0", {}), ("k1", {})])
            proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUNNER, str(tmp_path / "q"), str(vt_s)],
                                    cwd=REPO, stdout=subprocess.PIPE, text=True,
                                    env={**os.environ, "PYTHONPATH": str(REPO)})
            try:
                started = set()
                with anyio.fail_after(60):
                    while len(started) < 2:
                        line = await anyio.to_thread.run_sync(proc.stdout.readline)
                        assert line, "the runner ended before starting both tasks"
                        started.add(line.split()[1])
                # renewed: after three visibility timeouts the tasks are still leased by the live runner
                await anyio.sleep(3 * vt_s)
                c = await q.counts()
                assert (c.leased, c.ready) == (2, 0)
                assert await q.lease(2, 60) == []
            finally:
                proc.send_signal(signal.SIGKILL)
                await anyio.to_thread.run_sync(proc.wait)
            killed_at = time.monotonic()
            with anyio.fail_after(30):
                while True:
                    got = await q.lease(2, 60)
                    if got:
                        break
                    await anyio.sleep(0.05)
            back_after_s = time.monotonic() - killed_at
            got += await q.lease(2, 60) if len(got) < 2 else []
            assert {t.key for t in got} == {"k0", "k1"}
            # renewed at most vt/3 before the kill, for a full vt: back between 2/3 vt and vt (+ slack) later
            assert back_after_s <= vt_s + 2.0
        finally:
            await q.close()

    anyio.run(main)


# -- 3. watch-mode half-open probe ---------------------------------------------------------------------------------

class _Fetch(Stage):
    """Fetches one URL per task through a real HttpClient (one attempt per request)."""
    name = "fetch"
    input_edge = "a"
    output_edge = None
    concurrency = 1

    def __init__(self, url: str, policy: HostPolicy) -> None:
        self.url = url
        self.policy = policy
        self.http: HttpClient | None = None

    async def start(self, ctx):
        self.http = await HttpClient(default_policy=self.policy).__aenter__()

    async def stop(self, ctx):
        if self.http is not None:
            await self.http.__aexit__(None, None, None)

    async def handle(self, task, ctx):
        assert self.http is not None
        await self.http.request("GET", self.url)
        return []


def _slow_app(slow_s: float, arrivals: list[str]) -> web.Application:
    """An app whose ``GET /x`` records each arrival in ``arrivals`` and answers after ``slow_s`` seconds."""

    async def slow(request: web.Request) -> web.Response:
        arrivals.append(request.path)
        await asyncio.sleep(slow_s)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", slow)
    return app


def test_a_slow_half_open_probe_keeps_its_lease_so_no_other_worker_sends_the_same_key(tmp_path):
    """Watch mode: the breaker opened on a closed port; the host comes back slow (each answer takes over two
    visibility timeouts). The probe is a task being worked on like any other: its lease must be renewed, or another
    process of the campaign leases the same key while the probe's request is in flight (a second request for it)."""
    vt_s = 0.5
    slow_s = 2.0
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"
    arrivals: list[str] = []
    app = _slow_app(slow_s, arrivals)
    policy = HostPolicy(rate=100, period_s=1.0, concurrency=2, max_attempts=1, timeout_s=30.0)

    async def main():
        q = open_queue(tmp_path / "q", "c", "a")
        other = open_queue(tmp_path / "q", "c", "a")  # another process of the campaign
        try:
            await q.put_many([("k0", {})])
            runner = StageRunner(_Fetch(url, policy), q, None, StageContext("c"), burst=False,
                                 visibility_timeout_s=vt_s, unreachable_after=1, probe_after_s=0.5,
                                 probe_max_s=0.5, grace_s=5.0)
            stolen = []
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(runner.run)
                    while not runner.stats.unreachable:  # the breaker opens on the closed port
                        await anyio.sleep(0.02)
                    async with serve(app, "127.0.0.1", port):
                        while not arrivals:  # the probe reached the slow host
                            await anyio.sleep(0.02)
                        # while the probe's request is in flight, the other process polls for work
                        t_end = time.monotonic() + slow_s - 0.3
                        while time.monotonic() < t_end and not stolen:
                            stolen = await other.lease(1, 60)
                            await anyio.sleep(0.05)
                        while (await q.counts()).done < 1 and not stolen:
                            await anyio.sleep(0.05)
                    runner.request_stop()
            assert stolen == [], "the probe's lease expired mid-request: another worker took the same key"
            assert arrivals == ["/x"]
            assert (await q.counts()).done == 1
        finally:
            await other.close()
            await q.close()

    anyio.run(main)


# -- 2. HTTP: unreached attempts take no rate slot -----------------------------------------------------------------

def test_retries_waiting_on_a_down_host_never_burst_past_the_rate_when_it_comes_back():
    """Requests retrying on a closed port (their unreached attempts give their rate slots back) and fresh ones all
    hit the host the moment it comes up: the server must still never see more than ``rate`` arrivals in any window
    of ``period_s`` (server-side arrival times, monotonic clock of this process)."""
    rate, period_s = 3, 1.0
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"
    arrivals: list[float] = []

    async def h(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", h)
    policy = HostPolicy(rate=rate, period_s=period_s, concurrency=16, max_attempts=8, backoff_base_s=0.05,
                        backoff_max_s=0.4, timeout_s=10.0)
    results: list[object] = []

    async def one():
        try:
            results.append((await http_box[0].request("GET", url)).status)
        except RetriesExhausted as exc:
            results.append(exc)

    http_box: list[HttpClient] = []

    async def main():
        async with HttpClient(policies={f"127.0.0.1:{port}": policy}) as http:
            http_box.append(http)
            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    for _ in range(8):  # in their retry sequences while the host is down
                        tg.start_soon(one)
                    await anyio.sleep(0.3)
                    async with serve(app, "127.0.0.1", port):
                        for _ in range(8):  # fresh ones the moment it is back
                            tg.start_soon(one)
                        while len(results) < 16:
                            await anyio.sleep(0.05)

    anyio.run(main)
    arrivals.sort()
    worst = max(sum(1 for b in arrivals if a <= b < a + period_s) for a in arrivals) if arrivals else 0
    assert worst <= rate, f"{worst} arrivals within {period_s} s (limit {rate}): {arrivals}"
    assert len(arrivals) == sum(1 for r in results if r == 200)


def test_a_stop_during_a_slow_probe_releases_it_untouched_and_nothing_stays_leased(tmp_path):
    """Watch mode: a stop request while the half-open probe's request is in flight: the probe gets the grace
    period, then is cancelled and released untouched (no attempt counted, no verdict), nothing stays leased, the
    key was sent once, and the runner ends within the grace period (not after the slow answer)."""
    vt_s, slow_s, grace_s = 0.5, 5.0, 0.3
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"
    arrivals: list[str] = []
    app = _slow_app(slow_s, arrivals)
    policy = HostPolicy(rate=100, period_s=1.0, concurrency=2, max_attempts=1, timeout_s=30.0)

    async def main():
        q = open_queue(tmp_path / "q", "c", "a")
        try:
            await q.put_many([("k0", {}), ("k1", {})])
            runner = StageRunner(_Fetch(url, policy), q, None, StageContext("c"), burst=False,
                                 visibility_timeout_s=vt_s, unreachable_after=1, probe_after_s=0.3,
                                 probe_max_s=0.3, grace_s=grace_s)
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(runner.run)
                    while not runner.stats.unreachable:
                        await anyio.sleep(0.02)
                    async with serve(app, "127.0.0.1", port):
                        while not arrivals:
                            await anyio.sleep(0.02)
                        t0 = time.monotonic()
                        runner.request_stop()
                        await runner.finished.wait()
                        stopped_s = time.monotonic() - t0
            c = await q.counts()
            assert (c.ready, c.leased, c.done, c.dead) == (2, 0, 0, 0)
            assert stopped_s < slow_s - 1.0
            assert arrivals == ["/x"]
            got = await q.lease(2, 60)
            # the first failed attempt (connection refused, before the breaker opened) and the probe: both untouched
            assert sorted((t.key, t.attempts) for t in got) == [("k0", 0), ("k1", 0)]
        finally:
            await q.close()

    anyio.run(main)


class _Slow(Stage):
    name = "slow"
    input_edge = "edge"
    output_edge = None
    concurrency = 2

    def __init__(self, calls: dict[str, int], slow_s: float) -> None:
        self.calls = calls
        self.slow_s = slow_s

    async def handle(self, task, ctx):
        self.calls[task.key] = self.calls.get(task.key, 0) + 1
        await anyio.sleep(self.slow_s)
        return []


def test_two_runners_on_either_backend_never_handle_a_slow_task_twice(backend):  # noqa: F811
    """The renewal on both backends (Redis extend is a Lua script on the server clock): tasks each taking three
    visibility timeouts, two runners (two connections) on one queue: every key handled exactly once."""
    vt_s, slow_s = 0.5, 1.5
    calls: dict[str, int] = {}

    async def body(open_):
        q1, q2 = open_(), open_()
        await q1.put_many([(f"k{i}", {}) for i in range(4)])
        runners = [StageRunner(_Slow(calls, slow_s), q, None, StageContext("c"), visibility_timeout_s=vt_s)
                   for q in (q1, q2)]
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for r in runners:
                    tg.start_soon(r.run)
        c = await q1.counts()
        assert (c.done, c.ready, c.leased, c.dead) == (4, 0, 0, 0)
        assert calls == {f"k{i}": 1 for i in range(4)}

    backend.run(body)


def test_one_hosts_unreachable_streak_never_makes_another_host_fail_fast():
    """Fail fast is per host: with host A known unreachable (a request exhausted its retries there), a request to
    host B whose first attempts are refused (B's port opens a moment later) keeps its full retries and gets
    through; and B's answering leaves A's streak running (A still fails fast, one attempt)."""
    port_a, port_b = free_port(), free_port()
    url_a, url_b = f"http://127.0.0.1:{port_a}/x", f"http://127.0.0.1:{port_b}/x"
    policy = HostPolicy(rate=100, period_s=1.0, concurrency=4, max_attempts=6, backoff_base_s=0.2,
                        backoff_max_s=0.4, timeout_s=10.0)

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", ok)

    async def main():
        async with HttpClient(default_policy=policy) as http:
            try:
                await http.request("GET", url_a)
                raise AssertionError("host A answered")
            except RetriesExhausted as exc:
                assert (exc.unreachable, exc.attempts, exc.streak) == (True, 6, 1)
            out: list[int] = []

            async def b():
                out.append((await http.request("GET", url_b)).status)

            async with anyio.create_task_group() as tg:
                tg.start_soon(b)
                await anyio.sleep(0.05)  # B's first attempt was refused; it is in its backoff
                async with serve(app, "127.0.0.1", port_b):
                    with anyio.fail_after(20):
                        while not out:
                            await anyio.sleep(0.02)
            assert out == [200]
            try:
                await http.request("GET", url_a)
                raise AssertionError("host A answered")
            except RetriesExhausted as exc:
                assert (exc.unreachable, exc.attempts, exc.streak) == (True, 1, 2)

    anyio.run(main)


def test_model_watch_mode_stop_while_the_probe_is_in_flight_pays_it_once_and_leaves_nothing_leased(
        tmp_path, monkeypatch):
    """Watch mode, model caller: the dead model's server comes up slow (each answer takes 2 s); Ctrl-C arrives while
    the half-open probe's request is in flight. The probe was sent, so it may finish in the grace period: its key
    is paid once and its answer stored, the other held tasks stay ready untouched (no attempt counted), nothing is
    left leased, and the ledger holds no open reservation or unknown spend."""
    import signal as _signal

    from _model_harness import generic_campaign, model_table
    from geoagent import constants as C
    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.runtime.store import open_campaign_state
    from geoagent.sandbox import llm_openai

    key = made_up_key("sk-", 36, seed="sandbox-watch-n22")
    n = 4
    monkeypatch.setenv("GA_TEST_WATCH_KEY2", key)
    dead_app = llm_openai.make_app(api_keys=[key])
    sent: list[float] = []

    @web.middleware
    async def slow(request, handler):
        sent.append(time.monotonic())
        await asyncio.sleep(2.0)
        return await handler(request)

    dead_app.middlewares.insert(0, slow)
    port = free_port()
    model = model_table("dead", base_url=f"http://127.0.0.1:{port}", key_var="GA_TEST_WATCH_KEY2", model="sim-dead",
                        max_output_tokens=64, concurrency=1, rate_requests=5000) + "max_attempts = 1\n"
    cfg = load_config(generic_campaign(tmp_path, name="probestop", n=n, cap_usd=5.0, models=model, queue={
        "max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
        "watch_probe_after_s": 0.3, "watch_probe_max_s": 0.3}))

    async def main():
        out: dict[str, object] = {}

        async def drive():
            with anyio.fail_after(60):
                # the closed port: every model call fails unreachable until the breaker opens (nothing sent)
                await anyio.sleep(1.0)
                async with serve(dead_app, "127.0.0.1", port):
                    while not sent:
                        await anyio.sleep(0.02)
                    await anyio.sleep(0.3)  # the probe is at the server
                    _signal.raise_signal(_signal.SIGINT)
                    while "outcome" not in out:
                        await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            out["outcome"] = await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)
        return out["outcome"]

    outcome = anyio.run(main)
    calls = [r for r in dead_app["calls"]]
    assert len(sent) == 1 and len(calls) == 1, calls  # one probe, no other request, no second send of its key
    c = outcome.counts[C.EDGE_REQUESTS]
    assert c.leased == 0 and c.dead == 0 and c.done + c.ready == n, outcome.summary()
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        assert st.ledger.check_consistency() == []
        reserved, unknown = st.ledger.db.read("SELECT reserved_nusd, unknown_nusd FROM ledger_totals WHERE id = 1")[0]
        n_responses = st.store.count_responses()
    assert reserved == 0
    # the probe finished inside the grace period: its answer is stored (once), no spend left unknown; its task is
    # the one done, the other held tasks are ready untouched
    assert (n_responses, unknown, c.done, c.ready) == (1, 0, 1, n - 1)
