"""Cost ledger: hard cap under concurrency (coroutines and processes), settle/release/unknown, crash recovery.

Every test that uses the ledger's public interface runs against both backends (``spec``: SQLite file and
Redis, :mod:`tests._state_backends`)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import random

import pytest

from _state_backends import open_ledger, spec  # noqa: F401 - the two-backend fixture
from geoagent.providers.base import Usage
from geoagent.runtime.ledger import (
    BudgetExhausted,
    LedgerError,
    nano_to_usd,
    usd_to_nano,
)
from geoagent.runtime.stage import BudgetStop
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture


def test_nano_rounding_is_exact_for_cap_arithmetic():
    assert usd_to_nano(0.05, round_up=True) == 50_000_000
    assert 20 * usd_to_nano(0.05, round_up=True) == usd_to_nano(1.00)
    assert usd_to_nano(1e-10, round_up=True) == 1  # a sub-nano reservation still holds something
    assert nano_to_usd(usd_to_nano(0.123456789)) == pytest.approx(0.123456789)
    with pytest.raises(ValueError):
        usd_to_nano(-1.0)
    with pytest.raises(ValueError):
        usd_to_nano(float("nan"))


def test_settle_release_unknown_arithmetic(spec):
    led = open_ledger(spec, 1.0)
    r1 = led.reserve("k1", 0.30, model="m")
    r2 = led.reserve("k2", 0.30)
    r3 = led.reserve("k3", 0.30)
    s = led.summary()
    assert (s.reserved_usd, s.spent_usd, s.open_reservations) == (pytest.approx(0.9), 0.0, 3)
    with pytest.raises(BudgetExhausted) as ei:
        led.reserve("k4", 0.11)  # 0.9 + 0.11 > 1.0
    assert isinstance(ei.value, BudgetStop) and "budget exhausted" in str(ei.value)
    assert ei.value.cap_usd == 1.0 and ei.value.reserved_usd == pytest.approx(0.9)
    led.settle(r1, Usage(1000, 200), 0.012)
    led.settle(r1, Usage(1000, 200), 0.012)  # idempotent
    led.release(r2)
    led.mark_unknown(r3)
    led.release(r3)  # no effect: no longer open
    s = led.summary()
    assert s.spent_usd == pytest.approx(0.012) and s.unknown_usd == pytest.approx(0.30)
    assert s.reserved_usd == 0.0 and s.calls == 1 and s.unknown_calls == 1 and s.released_calls == 1
    assert (s.input_tokens, s.output_tokens) == (1000, 200)
    assert s.total_usd == pytest.approx(0.312) and s.remaining_usd == pytest.approx(0.688)
    # now 0.688 fits, 0.689 does not
    led.release(led.reserve("k5", 0.688))
    with pytest.raises(BudgetExhausted):
        led.reserve("k6", 0.689)
    # an overrun (actual above the reservation) is recorded
    r7 = led.reserve("k7", 0.001)
    led.settle(r7, Usage(10, 10), 0.003)
    assert led.summary().overrun_usd == pytest.approx(0.002)
    assert led.check_consistency() == []
    if spec[0] == "sqlite":
        with pytest.raises(LedgerError):
            led.settle(type(r7)(999_999, "nope", 1), Usage(), 0.0)
    else:  # a reservation the server lost (redis39 #1a): its call is booked anyway; the next reservation stops
        from geoagent.runtime.backend import ServerLostWrites

        led.settle(type(r7)(999_999, "nope", 1), Usage(), 0.001)
        assert led.summary().spent_usd == pytest.approx(0.012 + 0.003 + 0.001) and led.check_consistency() == []
        with pytest.raises(ServerLostWrites, match="lost recent writes"):
            led.reserve("k8", 0.001)
    led.db.close()


def test_cap_persists_and_reopen_keeps_spend(spec):
    led = open_ledger(spec, 2.0)
    led.settle(led.reserve("a", 0.5), Usage(1, 1), 0.4)
    led.db.close()
    again = open_ledger(spec)  # cap None: keep the stored one
    s = again.summary()
    assert s.cap_usd == 2.0 and s.spent_usd == pytest.approx(0.4) and s.calls == 1
    again.db.close()


def test_cap_under_concurrency_coroutines(spec):
    """$1.00 left, 50 concurrent requests of worst case $0.05: at most 20 start before any settles."""
    led = open_ledger(spec, 3.0)
    led.settle(led.reserve("earlier", 2.0), Usage(5, 5), 2.0)  # spent $2.00 of $3.00 -> $1.00 left

    async def main():
        gate = asyncio.Event()

        async def one(i):
            await gate.wait()
            await asyncio.sleep(random.random() * 0.01)
            try:
                return await led.areserve(f"req-{i}", 0.05)
            except BudgetExhausted:
                return None

        tasks = [asyncio.create_task(one(i)) for i in range(50)]
        await asyncio.sleep(0)
        gate.set()
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    started = [r for r in results if r is not None]
    assert len(started) == 20  # 20 x $0.05 == $1.00 exactly (integer nano-USD)
    s = led.summary()
    assert s.reserved_usd == pytest.approx(1.0) and s.committed_usd <= s.cap_usd + 1e-12
    assert led.check_consistency() == []
    led.db.close()


def _reserve_worker(spec, barrier, n: int, out) -> None:
    led = open_ledger(spec, None, recover=False)
    barrier.wait()
    got = 0
    for i in range(n):
        try:
            led.reserve(f"p{os.getpid()}-{i}", 0.05)
            got += 1
        except BudgetExhausted:
            pass
    out.put(got)
    led.db.close()


def test_cap_under_concurrency_processes(spec):
    """The same cap check holds across processes sharing the SQLite file (BEGIN IMMEDIATE) or the Redis
    server (one Lua script)."""
    setup = open_ledger(spec, 1.0)
    ctx = mp.get_context("spawn")
    n_proc, per_proc = 5, 10
    barrier, out = ctx.Barrier(n_proc), ctx.Queue()
    procs = [ctx.Process(target=_reserve_worker, args=(spec, barrier, per_proc, out)) for _ in range(n_proc)]
    for p in procs:
        p.start()
    counts = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sum(counts) == 20
    s = setup.summary()
    assert s.open_reservations == 20 and s.reserved_usd == pytest.approx(1.0)
    assert setup.check_consistency() == []
    setup.db.close()


def _crash_worker(spec, n: int, hold, release_evt) -> None:
    led = open_ledger(spec, None, recover=False)
    for i in range(n):
        led.reserve(f"crash-{i}", 0.1)
    hold.set()
    if release_evt is not None:
        release_evt.wait(60)
    os._exit(0)  # die without closing anything, as a SIGKILL would


def test_crash_recovery_converts_dead_owners_only(spec):
    base = open_ledger(spec, 5.0)
    mine = base.reserve("mine", 0.2)  # this process is alive: never converted
    ctx = mp.get_context("spawn")
    # 1) a live worker holding 2 reservations
    hold, go = ctx.Event(), ctx.Event()
    live = ctx.Process(target=_crash_worker, args=(spec, 2, hold, go))
    live.start()
    assert hold.wait(60)
    second = open_ledger(spec, None)
    assert second.recovered == 0  # the worker is alive
    assert second.summary().open_reservations == 3
    # 2) it dies with the reservations still open
    go.set()
    live.join(60)
    third = open_ledger(spec, None)
    assert third.recovered == 2
    s = third.summary()
    assert s.unknown_usd == pytest.approx(0.2) and s.unknown_calls == 2
    assert s.reserved_usd == pytest.approx(0.2) and s.open_reservations == 1  # "mine" still open
    base.settle(mine, Usage(3, 4), 0.05)
    s = third.summary()
    assert s.total_usd == pytest.approx(0.25) and s.reserved_usd == 0.0
    assert third.check_consistency() == []
    # recover_all converts open reservations of anyone else (single-daemon restart)
    other = base.reserve("x", 0.1)
    fourth = open_ledger(spec, None, recover_all=True)
    assert fourth.recovered == 1 and fourth.summary().unknown_usd == pytest.approx(0.3)
    base.settle(other, Usage(1, 1), 0.01)  # a late settle replaces the unknown amount by the actual
    assert fourth.summary().unknown_usd == pytest.approx(0.2)
    assert fourth.check_consistency() == []
    for led in (base, second, third, fourth):
        led.db.close()


def test_full_cost_three_times_cap_stops_within_cap(spec):
    """Reserve/settle loop over work whose total cost is 3x the cap: spend stays <= cap, the rest is left."""
    rng = random.Random(5)
    cap = 1.0
    led = open_ledger(spec, cap)
    worst = [rng.uniform(0.02, 0.06) for _ in range(1000)]
    actual = [w * rng.uniform(0.3, 1.0) for w in worst]
    # pick a prefix of work whose actual cost is 3x the cap
    n_work = next(i for i in range(len(actual)) if sum(actual[: i + 1]) >= 3 * cap) + 1
    done = 0
    for i in range(n_work):
        try:
            r = led.reserve(f"w{i}", worst[i])
        except BudgetExhausted:
            break
        led.settle(r, Usage(100, 10), actual[i])
        done += 1
    s = led.summary()
    assert s.spent_usd <= cap
    assert s.spent_usd == pytest.approx(sum(actual[:done]))
    assert 0 < done < n_work  # it stopped with work left over
    # it stopped only when the next worst case no longer fitted
    assert s.spent_usd + worst[done] > cap - 1e-9
    led.db.close()


def test_marking_an_unknown_outcome_again_raises_its_attempts_on_both_backends(spec):
    """redis36 #3: ``mark_unknown(r, attempts=2)`` then ``attempts=3`` kept 2 on SQLite (0.4 USD) and raised to 3 on
    Redis (0.6 USD). Both raise to the larger count now; fewer attempts change nothing."""
    led = open_ledger(spec, 5.0)
    r = led.reserve("k1", 0.20, model="m")
    led.mark_unknown(r, attempts=2)
    led.mark_unknown(r, attempts=3)
    led.mark_unknown(r, attempts=1)
    s = led.summary()
    assert s.unknown_calls == 3 and s.unknown_usd == pytest.approx(0.6)
    assert led.spend_by_model()["m"]["unknown_usd"] == pytest.approx(0.6)
    assert led.check_consistency() == []
