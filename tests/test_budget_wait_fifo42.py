"""The model caller's budget wait near the cap is first come first served per model (fifo42).

A call whose reservation does not fit beside the calls in flight waits for them to settle. Before, each waiting call
polled the ledger on its own, and a call that came later could reserve the room an earlier one waited for: a GeoHint
run stopped at the cap held context answers whose image's baseline (queued before them) was never sent
(tests/test_lanes_plan_prefix_walk39.py). Now the calls of one model waiting for room form a line in the process
(``geoagent.workers.model_caller._BudgetLines``): a later call of the model queues behind it, even one small enough
to fit now; a waiter that is cancelled or stopped leaves the line; another model's calls are not held by it; a
queued waiter whose own wait runs out stops with the line's refusal; a head whose key is in flight in another
process leaves the line, and the next call goes (fixrev42 #7).

Set-up: the local OpenAI fake (geoagent/sandbox/llm_openai) behind a middleware that holds the answers while its
``hold`` event is clear. Prices: input free, output $100 per 1M tokens, so a call's worst case is its
``max_output_tokens`` x $0.0001: X and A $0.05 (500 tokens), B $0.01 (100); the cap is $0.08. With X in flight, A
does not fit ($0.05 + $0.05 > $0.08) but fits once X settles (its answer costs far less than $0.05); B would fit
beside X ($0.06), and before this change it went ahead of A.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import anyio
import pytest
from _made_up_keys import made_up_key
from _model_harness import CallerRig, write_model_config
from aiohttp import web

from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import Abandoned
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve

KEY_VAR = "FIFO42_OPENAI_KEY"
CAP_USD = 0.08
#: a second model on the same fake, as cheap (its own line: a waiter of "m" must not hold it up)
SECOND_MODEL = """
[[models]]
name = "n"
provider = "openai"
model = "gpt-sim-n"
base_url = "{base}/v1"
api_key_env = "{key_var}"
price_input_usd_per_mtok = 0.0
price_output_usd_per_mtok = 100.0
max_output_tokens = 100
concurrency = 8
rate = {{ requests = 500, period_s = 1.0 }}
"""


class Hold:
    """A middleware for the fake: records each request's prompt as it arrives and holds its answer while ``hold``
    is clear."""

    def __init__(self) -> None:
        self.arrived: list[str] = []
        self.hold = asyncio.Event()
        self.hold.set()

    def middleware(self):
        @web.middleware
        async def held(request: web.Request, handler):
            if request.path == "/v1/chat/completions":
                body = await request.json()
                self.arrived.append(str(body["messages"][-1]["content"]))
                await self.hold.wait()
            return await handler(request)

        return held


def _task(name: str, max_output_tokens: int, model: str = "m") -> Task:
    return Task(key=name, payload={"model": model, "prompt": f"Where was photo {name} taken? Name the city.",
                                   "params": {"max_output_tokens": max_output_tokens}}, attempts=0, lease_id="x")


async def _until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout_s, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _line(rig: CallerRig, model: str = "m") -> int:
    """How many calls of ``model`` wait in its budget-wait line."""
    return len(rig.stage._budget_lines.waiting.get(model, {}))


async def _x_in_flight(tmp_path, base: str, http: HttpClient, mw: Hold, extra: str = ""
                       ) -> tuple[CallerRig, asyncio.Task]:
    """The rig, after a first call was answered (the first-bill probe: later calls of the kind go without it), with X
    sent and held at the fake (its $0.05 reserved)."""
    cfg = write_model_config(tmp_path / "c.toml", base, name="fifo", key_var=KEY_VAR, cap_usd=CAP_USD, price_in=0.0,
                             price_out=100.0, max_output_tokens=100, concurrency=8, extra=extra)
    rig = await CallerRig(tmp_path, cfg, http).start()
    await rig.handle(_task("W", 100))
    mw.hold.clear()
    x = asyncio.create_task(rig.handle(_task("X", 500)))
    await _until(lambda: len(mw.arrived) == 2, "X at the fake")
    return rig, x


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_VAR, made_up_key("sk-", 40, seed="fifo42"))
    mw = Hold()
    app = make_app(seed=5)
    app.middlewares.insert(0, mw.middleware())
    return mw, app


async def _a_then_b_in_line(rig: CallerRig) -> tuple[asyncio.Task, asyncio.Task]:
    """Start A (500 tokens: waits for room beside X) and then B (100: would fit beside X); return their tasks once A
    heads the model's line and B is queued behind it."""
    a = asyncio.create_task(rig.handle(_task("A", 500)))
    await _until(lambda: _line(rig) == 1, "A in the line")
    b = asyncio.create_task(rig.handle(_task("B", 100)))
    await _until(lambda: _line(rig) == 2, "B queued behind A")
    return a, b


def _reserved_in_order(rig: CallerRig, answers: dict[str, list]) -> list[str]:
    """The task names in the order the ledger made their reservations."""
    by_key = {out[0][1]["request_key"]: name for name, out in answers.items()}
    return [by_key[key] for key, _state in rig.reservations() if key in by_key]


def test_a_later_call_that_fits_waits_behind_an_earlier_one(tmp_path, fake):
    """A waits for room beside X; B, which would fit beside X, comes later and queues behind A: A is reserved and
    sent first (before: B at once, A after X settled)."""
    mw, app = fake

    async def main():
        async with serve(app) as base, HttpClient() as http:
            rig, x = await _x_in_flight(tmp_path, base, http, mw)
            a, b = await _a_then_b_in_line(rig)
            assert len(mw.arrived) == 2  # neither was sent while X holds the room
            mw.hold.set()
            order = _reserved_in_order(rig, dict(zip("XAB", await asyncio.wait_for(asyncio.gather(x, a, b), 10.0))))
            assert _line(rig) == 0
            rig.state.close()
            return order

    order = anyio.run(main)
    assert order == ["X", "A", "B"], order
    arrived = [p for p in fake[0].arrived if "photo A" in p or "photo B" in p]
    assert ["photo A" in p for p in arrived] == [True, False]  # the fake saw A's request first


def test_a_cancelled_waiter_leaves_the_line(tmp_path, fake):
    """A (heading the line) is cancelled: B, queued behind it, is not stalled; it is sent once X settles."""
    mw, app = fake

    async def main():
        async with serve(app) as base, HttpClient() as http:
            rig, x = await _x_in_flight(tmp_path, base, http, mw)
            a, b = await _a_then_b_in_line(rig)
            a.cancel()
            with pytest.raises(asyncio.CancelledError):
                await a
            assert _line(rig) == 1  # B alone, now at the head
            mw.hold.set()
            outs = await asyncio.wait_for(asyncio.gather(x, b), 10.0)
            assert _line(rig) == 0
            states = [s for _key, s in rig.reservations()]
            rig.state.close()
            return outs, states

    outs, states = anyio.run(main)
    assert [o[0][0] for o in outs] == ["X", "B"]
    assert states == ["settled"] * 3  # W, X, B: A reserved nothing


def test_a_stop_request_gives_every_waiter_up_unsent(tmp_path, fake):
    """A stop request while A and B wait in the line: both are abandoned at once (released untouched), nothing was
    reserved for them, and X, already sent, still finishes."""
    mw, app = fake

    async def main():
        async with serve(app) as base, HttpClient() as http:
            rig, x = await _x_in_flight(tmp_path, base, http, mw)
            a, b = await _a_then_b_in_line(rig)
            t0 = time.monotonic()
            rig.stage.stop_requested()
            got = await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), 5.0)
            took_s = time.monotonic() - t0
            mw.hold.set()
            out_x = await asyncio.wait_for(x, 10.0)
            states = [s for _key, s in rig.reservations()]
            line = _line(rig)
            rig.state.close()
            return got, took_s, out_x, states, line

    got, took_s, out_x, states, line = anyio.run(main)
    assert all(isinstance(g, Abandoned) for g in got), got
    assert took_s < 1.0  # woken by the stop, not at the end of a poll or of budget_wait_s
    assert out_x[0][0] == "X" and states == ["settled", "settled"] and line == 0
    assert len(fake[0].arrived) == 2  # W and X only


def test_a_waiter_of_one_model_does_not_hold_up_another_model(tmp_path, fake):
    """The lines are per model: while A of model m waits for room, a call of model n that fits beside X is reserved
    and answered at once (the runner's lanes keep models apart; the dry run's schedule assumes the same)."""
    mw, app = fake

    async def main():
        async with serve(app) as base, HttpClient() as http:
            rig, x = await _x_in_flight(tmp_path, base, http, mw,
                                        extra=SECOND_MODEL.format(base=base, key_var=KEY_VAR))
            a = asyncio.create_task(rig.handle(_task("A", 500)))
            await _until(lambda: _line(rig) == 1, "A in the line")
            n = asyncio.create_task(rig.handle(_task("N", 100, model="n")))
            await _until(lambda: len(mw.arrived) == 3, "N at the fake")  # sent while A still waits
            assert _line(rig) == 1 and _line(rig, "n") == 0 and not a.done()
            mw.hold.set()
            outs = await asyncio.wait_for(asyncio.gather(x, a, n), 10.0)
            order = _reserved_in_order(rig, dict(zip("XAN", outs)))
            rig.state.close()
            return order

    assert anyio.run(main) == ["X", "N", "A"]


def test_a_queued_waiter_that_times_out_stops_with_the_lines_refusal(tmp_path, fake):
    """B queues behind A, the head; B's own wait (``budget_wait_s``, counted from its first try) ends while A still
    heads the line: B stops with BudgetStop and the ledger's refusal the line met (what ``status`` merges with the
    other refusals at the cap), unsent and unreserved; A keeps its place and is sent once X settles (fixrev42 #7)."""
    from geoagent.runtime.stage import BudgetStop

    mw, app = fake

    async def main():
        async with serve(app) as base, HttpClient() as http:
            rig, x = await _x_in_flight(tmp_path, base, http, mw)
            a = asyncio.create_task(rig.handle(_task("A", 500)))  # its wait: the default 600 s
            await _until(lambda: _line(rig) == 1, "A in the line")
            rig.stage.budget_wait_s = 0.3  # B's wait, read when B starts waiting, ends long before A's
            t0 = time.monotonic()
            b = asyncio.create_task(rig.handle(_task("B", 100)))
            got = await asyncio.wait_for(asyncio.gather(b, return_exceptions=True), 5.0)
            took_s = time.monotonic() - t0
            line, a_done, arrived = _line(rig), a.done(), len(mw.arrived)
            mw.hold.set()
            outs = await asyncio.wait_for(asyncio.gather(x, a), 10.0)
            states = [s for _key, s in rig.reservations()]
            rig.state.close()
            return got[0], took_s, line, a_done, arrived, outs, states

    stop, took_s, line, a_done, arrived, outs, states = anyio.run(main)
    assert isinstance(stop, BudgetStop) and not isinstance(stop, Abandoned), stop
    # the line's refusal: A's ($0.05 this call beside X's $0.05), not a sentence about B's own $0.01
    assert str(stop).startswith("budget exhausted: spent $") and "reserved $0.050000 + this call $0.050000 > cap " \
        "$0.080000" in str(stop), stop
    assert 0.3 <= took_s < 2.0  # B's own limit, not A's
    assert line == 1 and not a_done and arrived == 2  # A still heads the line; B sent nothing
    assert [o[0][0] for o in outs] == ["X", "A"]
    assert states == ["settled"] * 3  # W, X, A: B reserved nothing


def test_a_head_whose_key_is_in_flight_elsewhere_leaves_the_line_and_the_next_goes(tmp_path, fake):
    """A heads the line; then another process of the campaign holds A's request key in flight (its own reservation:
    a redelivered task). A's wait is then for that call, not for budget room, so A leaves the line and B, queued
    behind it, is woken and sent at once beside X (it fits); A tries again once the other call is over (fixrev42 #7).
    """
    from geoagent.runtime.ledger import Ledger

    mw, app = fake

    async def main():
        async with serve(app) as base, HttpClient() as http:
            rig, x = await _x_in_flight(tmp_path, base, http, mw)
            a, b = await _a_then_b_in_line(rig)
            a_key = next(iter(rig.stage._budget_lines.waiting["m"]))._args[2]  # the head's request key
            # another process's ledger on the campaign's file (an owner of its own), holding A's key in flight
            other = Ledger(rig.state.db, cap_usd=CAP_USD, recover=False)
            held = other.reserve(a_key, 0.001, model="m")
            await _until(lambda: len(mw.arrived) == 3, "B at the fake")  # B went while X is still held
            assert "photo B" in mw.arrived[-1] and not a.done() and _line(rig) == 0  # A waits outside the line
            other.release(held)  # the other call ended unsent: A looks again
            mw.hold.set()
            outs = await asyncio.wait_for(asyncio.gather(x, a, b), 10.0)
            order = _reserved_in_order(rig, dict(zip("XAB", outs)))
            states = [s for _key, s in rig.reservations()]
            rig.state.close()
            return order, outs, states

    order, outs, states = anyio.run(main)
    # the other process's reservation of A's key (released), then B, reserved and sent before A's own
    assert order == ["X", "A", "B", "A"], order
    assert states == ["settled", "settled", "released", "settled", "settled"]  # W, X, A elsewhere, B, A
    assert [o[0][0] for o in outs] == ["X", "A", "B"]
