"""The send gate: a model call's store lookup and ledger reservation happen once its host admitted it.

Issue 2, "Crash safety" and points 4, 6, 7: after a crash only requests that may have reached the wire may
count as unknown-outcome spend, so requests still queued behind a host's rate limit or concurrency cap
must hold no reservation. Checked at two levels against local servers (what the SERVER saw):

* ``HttpClient.request(before_send=...)``: the hook runs only after admission, once per request (not per
  retry); when it raises, nothing is sent and the rate slot is given back;
* ``before_send.before_wait``: asked once, only when the request would wait for admission; when it raises,
  the request ends unsent without a slot;
* the model caller: with the model's host limited to 1 request per 60 s, requests queued behind the
  first hold no reservation, and tasks whose response is already stored return without using the
  host's rate (a free slot is given back unsent; a taken one is not waited for: the store is asked first);
* under a host-wide ceiling, a request cancelled while waiting for the ceiling's slot frees its model's slot.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from _model_harness import CallerRig, billed, photo_task, run, write_model_config

from geoagent.runtime.http import HostPolicy, HttpClient, host_key, limit_key
from geoagent.runtime.queue import Task
from geoagent.sandbox import llm_openai
from geoagent.sandbox.echo import make_app
from geoagent.sandbox.faults import FAULTS_KEY
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY_VAR = "SEND_GATE_TEST_KEY"
KEY_VALUE = made_up_key("sk-", 26, seed="send-gate-n16")
#: a host allowing one request per 30 s: any request that needed a second rate slot would block for ~33 s
SLOW = HostPolicy(rate=1, period_s=30.0, concurrency=4, max_attempts=3, backoff_base_s=0.0, backoff_max_s=0.0, timeout_s=5.0)


class Refused(Exception):
    pass


# ---------------------------------------------------------------------------------------------------
# HTTP layer
# ---------------------------------------------------------------------------------------------------


def test_refusing_hook_sends_nothing_and_gives_the_rate_slot_back():
    async def go() -> tuple[Any, list[str], Any]:
        app = make_app()
        calls: list[str] = []

        async def refuse() -> None:
            calls.append("refuse")
            raise Refused("not this one")

        async with serve(app) as base, HttpClient(default_policy=SLOW) as http:
            with pytest.raises(Refused):
                await http.request("POST", base + "/echo", json={"i": 1}, before_send=refuse)
            # the host allows 1 request per 30 s: this one goes at once only if the refused request's
            # slot was given back (else it would wait ~33 s and the 5 s bound below would fail)
            resp = await asyncio.wait_for(http.request("POST", base + "/echo", json={"i": 2}), timeout=5.0)
            return resp, calls, (app, http.stats()[host_key(base)])

    resp, calls, (app, stats) = run(go(), 60)
    assert calls == ["refuse"]
    assert resp.status == 200 and orjson.loads(resp.json()["body"]) == {"i": 2}
    log = app[FAULTS_KEY].log
    assert [r.path for r in log] == ["/echo"]  # the refused request never reached the server
    assert stats.requests == 1  # and was not counted as an attempt


def test_hook_runs_once_per_request_not_per_retry():
    async def go() -> tuple[list[str], Any, Any]:
        app = make_app(script=[503, 500, 200])
        calls: list[str] = []

        async def ok() -> None:
            calls.append("gate")

        fast = HostPolicy(rate=1000, concurrency=4, max_attempts=5, backoff_base_s=0.001, backoff_max_s=0.01, timeout_s=5.0)
        async with serve(app) as base, HttpClient(default_policy=fast) as http:
            resp = await http.request("POST", base + "/script", json={}, before_send=ok)
            return calls, resp, app

    calls, resp, app = run(go(), 60)
    assert resp.status == 200 and resp.attempts == 3
    assert [r.path for r in app[FAULTS_KEY].log] == ["/script"] * 3  # three attempts reached the server
    assert calls == ["gate"]  # the gate ran once, before the first


def test_hook_is_not_called_while_the_request_waits_for_its_rate_slot():
    async def go() -> tuple[list[str], Any]:
        app = make_app()
        calls: list[str] = []

        async def gate() -> None:
            calls.append("gate")

        async with serve(app) as base, HttpClient(default_policy=SLOW) as http:
            await http.request("GET", base + "/echo")  # takes the host's only slot for the next ~33 s
            queued = asyncio.create_task(http.request("GET", base + "/echo", before_send=gate))
            await asyncio.sleep(0.5)
            assert not queued.done() and calls == []  # queued behind the rate limit: gate not yet called
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            return calls, app

    calls, app = run(go(), 60)
    assert calls == []
    assert len(app[FAULTS_KEY].log) == 1


def test_a_request_that_must_wait_for_its_rate_slot_asks_before_wait_first():
    """A hook's ``before_wait`` runs once, only when the request would wait for a rate slot; if it raises, the
    request ends there (nothing sent, no slot taken); if it passes, the request waits as before."""

    async def go() -> tuple[list[str], Any]:
        app = make_app()
        calls: list[str] = []

        class Gate:
            def __init__(self, answer_at_wait: bool) -> None:
                self.answer_at_wait = answer_at_wait

            async def __call__(self) -> None:
                calls.append("gate")

            async def before_wait(self) -> None:
                calls.append("before_wait")
                if self.answer_at_wait:
                    raise Refused("answered without the host")

        async with serve(app) as base, HttpClient(default_policy=SLOW) as http:
            await asyncio.wait_for(http.request("GET", base + "/echo", before_send=Gate(True)), timeout=5.0)
            assert calls == ["gate"]  # a free slot: no wait, so before_wait was not asked
            with pytest.raises(Refused):  # the only slot is used for ~33 s: asked at once, and it refused
                await asyncio.wait_for(http.request("GET", base + "/echo", before_send=Gate(True)), timeout=5.0)
            assert calls == ["gate", "before_wait"]
            queued = asyncio.create_task(http.request("GET", base + "/echo", before_send=Gate(False)))
            await asyncio.sleep(0.5)
            assert not queued.done() and calls == ["gate", "before_wait", "before_wait"]  # asked once, waits
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            return calls, app

    calls, app = run(go(), 60)
    assert calls == ["gate", "before_wait", "before_wait"]
    assert len(app[FAULTS_KEY].log) == 1


class _WaitGate:
    """A ``before_send`` hook recording its calls; its ``before_wait`` refuses (a stored answer) when told to."""

    def __init__(self, calls: list[str], refuse_at_wait: bool = True) -> None:
        self.calls = calls
        self.refuse_at_wait = refuse_at_wait

    async def __call__(self) -> None:
        self.calls.append("gate")

    async def before_wait(self) -> None:
        self.calls.append("before_wait")
        if self.refuse_at_wait:
            raise Refused("answered without the host")


def test_before_wait_is_asked_before_waiting_for_a_concurrency_slot_a_pause_and_once_over_key_and_ceiling():
    """Review rev23 (2, and the untested branches): a concurrency slot held by a slow answer, a Retry-After pause in
    force, and a model key and its host's ceiling both busy each ask ``before_wait`` first, once."""

    async def go() -> None:
        app = make_app()
        one = HostPolicy(rate=1000, period_s=1.0, concurrency=1, max_attempts=1, timeout_s=10.0)
        async with serve(app) as base, HttpClient(default_policy=one) as http:
            slow = asyncio.create_task(http.request("GET", base + "/slow", params={"delay_s": "3"}))
            await asyncio.sleep(0.3)  # the host's only concurrency slot is held for ~3 s
            calls: list[str] = []
            with pytest.raises(Refused):
                await asyncio.wait_for(http.request("GET", base + "/echo", before_send=_WaitGate(calls)), timeout=1.5)
            assert calls == ["before_wait"] and not slow.done()
            await slow
            http.pause_host(host_key(base), 1.0)  # a Retry-After in force: asked, then waits it out and sends
            calls = []
            resp = await asyncio.wait_for(http.request("GET", base + "/echo", before_send=_WaitGate(calls, False)), 10)
            assert resp.status == 200 and calls == ["before_wait", "gate"]
        one_per_s = HostPolicy(rate=1, period_s=1.0, concurrency=4, max_attempts=1, timeout_s=5.0)
        async with serve(app) as base:
            host = host_key(base)
            b = limit_key(host, "b")
            async with HttpClient(policies={host: one_per_s}, model_policies={b: one_per_s}, ceilings=[host]) as http:
                await http.request("GET", base + "/echo", limit=b)  # b's slot and the ceiling's, for ~1 s
                calls = []
                resp = await asyncio.wait_for(
                    http.request("GET", base + "/echo", limit=b, before_send=_WaitGate(calls, False)), 10)
                assert resp.status == 200 and calls == ["before_wait", "gate"]  # two waits, asked once

    run(go(), 60)


def test_before_wait_is_asked_before_waiting_for_the_processes_turn(tmp_path):
    """Review rev23 (1): where two processes take turns on a 1 request/s host (hostshare), a request whose own
    limiter is free but whose turn is a spacing away asks ``before_wait`` before it waits for the turn."""
    from geoagent.runtime.hostshare import HostShare, board_path, turn_spacing_s

    policy = HostPolicy(rate=1, period_s=1.0, concurrency=1, timeout_s=10.0, backoff_base_s=0.05, backoff_max_s=10.0)
    board = board_path(tmp_path)

    async def go() -> tuple[list[str], Any]:
        app = make_app()
        calls: list[str] = []
        async with serve(app) as base:
            url = base + "/echo"
            async with HttpClient(default_policy=policy) as a, HostShare(board, a), \
                    HttpClient(default_policy=policy) as b, HostShare(board, b):
                await a.request("GET", url)
                await b.request("GET", url)  # both joined: they take turns from now on
                await asyncio.sleep(2 * turn_spacing_s(policy) + 0.1)  # both limiters free again
                await a.request("GET", url)  # a's turn: b's next one is a spacing away
                with pytest.raises(Refused):
                    await asyncio.wait_for(b.request("GET", url, before_send=_WaitGate(calls)), timeout=0.8)
        return calls, app

    calls, app = run(go(), 60)
    assert calls == ["before_wait"]
    assert len(app[FAULTS_KEY].log) == 3  # the refused request was not sent


# ---------------------------------------------------------------------------------------------------
# model caller
# ---------------------------------------------------------------------------------------------------


def _config(tmp_path: Path, base_url: str, *, rate_requests: int, rate_period_s: float) -> Any:
    return write_model_config(tmp_path / "gate.toml", base_url, name="gate", key_var=KEY_VAR, max_attempts=2,
                              rate_requests=rate_requests, rate_period_s=rate_period_s)


def _task(i: int) -> Task:
    return photo_task(i, meta={"i": i})


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)


def test_requests_queued_behind_the_host_hold_no_reservation(tmp_path):
    async def go() -> None:
        app = llm_openai.make_app(api_keys=[KEY_VALUE])
        async with serve(app) as base, HttpClient() as http:
            cfg = _config(tmp_path, base, rate_requests=1, rate_period_s=60.0)
            c = await CallerRig(tmp_path, cfg, http).start()
            tasks = [asyncio.create_task(c.handle(_task(i))) for i in range(5)]
            done, pending = await asyncio.wait(tasks, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1 and len(pending) == 4
            await asyncio.sleep(0.3)  # the four others are parked at the host's rate limit
            calls = billed(app["calls"])
            assert len(calls) == 1
            # one reservation: the request that went out (settled); the queued four reserved nothing
            assert [s for _, s in c.reservations()] == ["settled"]
            s = c.state.ledger.summary()
            assert s.open_reservations == 0 and s.reserved_usd == 0 and s.calls == 1
            for t in pending:  # a shutdown while they wait: nothing to release, nothing unknown
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await asyncio.sleep(0.1)
            s = c.state.ledger.summary()
            assert (s.unknown_calls, s.released_calls, s.open_reservations) == (0, 0, 0)
            assert len(c.reservations()) == 1 and c.state.ledger.check_consistency() == []
            c.state.close()

    run(go(), 60)


def test_stored_responses_pass_a_rate_limited_host_without_using_its_rate(tmp_path):
    async def go() -> None:
        app = llm_openai.make_app(api_keys=[KEY_VALUE])
        async with serve(app) as base:
            async with HttpClient() as http:  # first run: a fast host, five calls stored
                c = await CallerRig(tmp_path, _config(tmp_path, base, rate_requests=500, rate_period_s=1.0), http).start()
                first = await asyncio.gather(*(c.handle(_task(i)) for i in range(5)))
                c.state.close()
            assert len(app["calls"]) == 5
            # re-run (a redelivery) through a fresh client whose host allows 1 request per 60 s: the five
            # stored answers come back at once (each either took a free rate slot and gave it back unsent, or,
            # finding the slot taken, was found in the store before waiting) and the new request still finds
            # the host's single slot free or ends the run; before the store was asked ahead of a wait, a stored
            # answer whose image loaded after the new request was sent waited out the 60 s (a flaky timeout)
            async with HttpClient() as http:
                c = await CallerRig(tmp_path, _config(tmp_path, base, rate_requests=1, rate_period_s=60.0), http).start()
                # well under the host's 60 s period (a used slot would hold task 5 that long); 10 s ran out on a
                # loaded -n 4 run (session 18)
                again = await asyncio.wait_for(asyncio.gather(*(c.handle(_task(i)) for i in range(6))), timeout=40)
                c.state.close()
            assert len(app["calls"]) == 6  # exactly one new call: task 5
            assert [m[0][1]["cached"] for m in again] == [True] * 5 + [False]
            assert [m[0][1]["text"] for m in again[:5]] == [m[0][1]["text"] for m in first]

    run(go(), 60)


def test_a_stored_answer_does_not_wait_behind_a_new_request_for_the_host_rate_slot(tmp_path):
    """A redelivered task whose answer is stored returns at once even when a new request has just used the
    host's only slot (1 per 600 s): a request that would wait for a rate slot looks in the store first."""

    async def go() -> None:
        app = llm_openai.make_app(api_keys=[KEY_VALUE])
        async with serve(app) as base:
            async with HttpClient() as http:
                c = await CallerRig(tmp_path, _config(tmp_path, base, rate_requests=500, rate_period_s=1.0), http).start()
                first = await c.handle(_task(0))
                c.state.close()
            async with HttpClient() as http:
                c = await CallerRig(tmp_path, _config(tmp_path, base, rate_requests=1, rate_period_s=600.0), http).start()
                new = await asyncio.wait_for(c.handle(_task(1)), timeout=30)  # takes the host's slot for 600 s
                again = await asyncio.wait_for(c.handle(_task(0)), timeout=30)
                # one reservation per key over both runs: none was made for the stored answer
                assert sorted(k for k, _ in c.reservations()) == sorted([first[0][1]["request_key"], new[0][1]["request_key"]])
                c.state.close()
            assert len(app["calls"]) == 2  # task 0 once (first run), task 1 once: no call for the stored answer
            assert again[0][1]["cached"] is True and new[0][1]["cached"] is False
            assert again[0][1]["text"] == first[0][1]["text"]

    run(go(), 120)


def test_a_request_cancelled_while_waiting_for_its_hosts_ceiling_gives_its_models_rate_slot_back():
    """Under a host-wide ceiling a model-keyed request takes its model's rate slot, then waits for the ceiling's.
    Cancelled in that wait (nothing sent), its model slot is free again: the model's next request waits for the
    ceiling only (~1 s), not for ever behind a slot that was never stamped."""

    async def go() -> Any:
        app = make_app()
        one_per_s = HostPolicy(rate=1, period_s=1.0, concurrency=4, max_attempts=1, timeout_s=5.0)
        async with serve(app) as base:
            host = host_key(base)
            a, b = limit_key(host, "a"), limit_key(host, "b")
            async with HttpClient(policies={host: one_per_s}, model_policies={a: one_per_s, b: one_per_s},
                                  ceilings=[host]) as http:
                await http.request("GET", base + "/echo", limit=a)  # the ceiling's only slot, for ~1 s
                waiting = asyncio.create_task(http.request("GET", base + "/echo", limit=b))
                await asyncio.sleep(0.2)  # b's own slot taken, waiting for the ceiling's
                assert not waiting.done()
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                return await asyncio.wait_for(http.request("GET", base + "/echo", limit=b), timeout=10.0), app

    resp, app = run(go(), 60)
    assert resp.status == 200
    assert len(app[FAULTS_KEY].log) == 2
