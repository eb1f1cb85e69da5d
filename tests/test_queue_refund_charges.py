"""Refunds by charge ids (``WorkQueue.refund_attempts`` with ``Refund.of_charges``; ``nack(..., charge=...)``), on
both backends (SQLite and a real redis-server): a charged nack records its charge id on the task; a refund gives
back exactly the attempts of the named charges still recorded, once, whatever the order in which several chargers
(processes, each its own HTTP client and streak) refund; nothing after ``requeue_dead`` (which clears the charges)
or after the task finished; a dead task is revived only by the refund naming the charge that dead-lettered it.
Several handles on one queue stand for several processes. Expected counts are hand-computed from the nacks.
"""

from __future__ import annotations

import asyncio

import pytest

from geoagent.runtime.queue import Refund, RefundResult
from test_queue_contract import backend, raw, redis_url  # noqa: F401 - the contract's fixtures (both backends)
from test_queue_refund_contract import REASON, _attempts, _nack_times


async def _lease_key(q, key: str, vt: float = 60):
    """Lease ``key`` (other tasks leased meanwhile are released untouched)."""
    for _ in range(200):
        tasks = await q.lease(10, vt)
        got = [t for t in tasks if t.key == key]
        if others := [t for t in tasks if t.key != key]:
            await q.release(others)
        if got:
            return got[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} was not leased")


async def _charged_nack(q, key: str, charge: str, reason: str = REASON) -> str:
    """Lease ``key`` and nack it once (zero backoff) recording ``charge``; return the new state."""
    return await q.nack(await _lease_key(q, key), reason, backoff_s=0, charge=charge)


def _lists(res: RefundResult) -> tuple[list[str], list[str], list[str], list[str]]:
    return res.refunded, res.revived, res.leased, res.skipped


@pytest.mark.parametrize("earlier_refunds_last", [True, False])
def test_two_chargers_of_one_task_both_get_their_attempt_back_in_either_order(backend, earlier_refunds_last):  # noqa: F811
    """A charges ``t`` (count 1), B charges it (count 2). Whichever refunds first, each refund gives back its own
    attempt: 2 -> 1 -> 0. (By expected count A's refund, expecting 1, was skipped when it came first: count 2.)"""

    async def body(open_):
        qa, qb = open_(max_attempts=5), open_(max_attempts=5)
        assert qa.supports_charges and qb.supports_charges
        await qa.put("t", {})
        assert await _charged_nack(qa, "t", "A.1") == "ready"
        assert await _charged_nack(qb, "t", "B.1") == "ready"
        order = [(qa, "A.1"), (qb, "B.1")]
        if not earlier_refunds_last:
            order.reverse()
        results = [await q.refund_attempts([Refund.of_charges("t", [c])]) for q, c in order]
        return results, await _attempts(qa, "t")

    results, attempts = backend.run(body)
    assert [_lists(r) for r in results] == [(["t"], [], [], [])] * 2
    assert [r.given for r in results] == [{"t": 1}, {"t": 1}]
    assert attempts == 0


def test_a_repeated_refund_and_a_refund_of_another_tasks_charge_give_nothing(backend):  # noqa: F811
    """``t`` charged 3 times (A.1, A.2 by A, B.1 by B): A's refund of its two gives back 2 (3 -> 1); the same refund
    again gives nothing (skipped, still 1); A's charges named on ``u`` (never charged them) give nothing; B's still
    gives back its one (1 -> 0). A charge id is only ever given back once."""

    async def body(open_):
        q = open_(max_attempts=5)
        await q.put_many([("t", {}), ("u", {})])
        for c in ("A.1", "B.1", "A.2"):
            assert await _charged_nack(q, "t", c) == "ready"
        assert await _charged_nack(q, "u", "U.1") == "ready"
        first = await q.refund_attempts([Refund.of_charges("t", ["A.1", "A.2"])])
        again = await q.refund_attempts([Refund.of_charges("t", ["A.1", "A.2"]), Refund.of_charges("u", ["A.1"])])
        mid = await _attempts(q, "t"), await _attempts(q, "u")
        b = await q.refund_attempts([Refund.of_charges("t", ["B.1", "A.1"])])
        return first, again, mid, b, await _attempts(q, "t"), await _attempts(q, "u")

    first, again, mid, b, t_after, u_after = backend.run(body)
    assert _lists(first) == (["t"], [], [], []) and first.given == {"t": 2}
    assert _lists(again) == ([], [], [], ["t", "u"]) and again.given == {}
    assert mid == (1, 1)
    assert _lists(b) == (["t"], [], [], []) and b.given == {"t": 1}
    assert (t_after, u_after) == (0, 1)


def test_refund_after_requeue_dead_or_after_done_changes_nothing(backend):  # noqa: F811
    """``t`` dead-lettered by three charged nacks (max 3); ``dead --requeue`` resets it (0) and clears the charges;
    one new uncharged failure (1). The late refund of the three charges (even asking for revival) finds none
    recorded: skipped, ``t`` stays at 1. ``d`` charged once, then done: its refund is skipped, it stays done."""

    async def body(open_):
        q = open_(max_attempts=3)
        await q.put_many([("t", {}), ("d", {})])
        for c in ("A.1", "A.2", "A.3"):
            state = await _charged_nack(q, "t", c)
        assert state == "dead"
        assert await q.requeue_dead(["t"]) == 1
        assert await _nack_times(q, "t", 1, reason="HTTP 500") == "ready"
        assert await _charged_nack(q, "d", "D.1") == "ready"
        await q.ack(await _lease_key(q, "d"))
        res = await q.refund_attempts([Refund.of_charges("t", ["A.1", "A.2", "A.3"], dead_reason=REASON),
                                       Refund.of_charges("d", ["D.1"])])
        return res, await _attempts(q, "t"), await q.counts()

    res, attempts, counts = backend.run(body)
    assert _lists(res) == ([], [], [], ["t", "d"]) and res.given == {}
    assert attempts == 1
    assert (counts.ready, counts.done, counts.dead, counts.leased) == (1, 1, 0, 0)


@pytest.mark.parametrize("killer_first", [True, False])
def test_dead_task_is_revived_by_the_refund_of_the_charge_that_killed_it_and_both_refunds_count(backend,  # noqa: F811
                                                                                               killer_first):
    """Max 3: one uncharged failure (1, not refundable), A charges (2), B's charge dead-letters ``t`` (3). A's refund
    (its nack did not dead-letter: no revival asked) gives back 1 and leaves ``t`` dead; B's refund (naming the
    killing charge) revives it. In either order ``t`` ends ready with exactly the uncharged attempt (1)."""

    async def body(open_):
        q = open_(max_attempts=3)
        await q.put("t", {})
        assert await _nack_times(q, "t", 1, reason="HTTP 500") == "ready"
        assert await _charged_nack(q, "t", "A.1") == "ready"
        assert await _charged_nack(q, "t", "B.1") == "dead"
        a, b = Refund.of_charges("t", ["A.1"]), Refund.of_charges("t", ["B.1"], dead_reason=REASON)
        out = []
        for r in ((b, a) if killer_first else (a, b)):
            res = await q.refund_attempts([r])
            dead = [(d.key, d.attempts) for d in await q.dead_letters()]
            out.append((_lists(res), res.given, dead))
        return out, await _attempts(q, "t"), await q.counts()

    out, attempts, counts = backend.run(body)
    revive = ((([], ["t"], [], []), {"t": 1}))
    if killer_first:
        assert out == [(*revive, []), ((["t"], [], [], []), {"t": 1}, [])]
    else:  # A first: still dead (by B's charge), one attempt less
        assert out == [((["t"], [], [], []), {"t": 1}, [("t", 2)]), (*revive, [])]
    assert attempts == 1
    assert (counts.ready, counts.dead) == (1, 0)


def test_killing_charge_without_revival_asked_stays_dead_and_live_lease_waits(backend):  # noqa: F811
    """``t`` dead by charge K.1: a refund naming K.1 with ``dead_reason=None`` gives the attempt back but leaves it
    dead. ``h`` charged once (H.1), then leased by a live holder: its refund is ``leased`` (unchanged) and, once
    the holder released it, the same refund gives the attempt back."""

    async def body(open_):
        q = open_(max_attempts=1)
        await q.put_many([("t", {}), ("h", {})])
        assert await _charged_nack(q, "t", "K.1") == "dead"
        q5 = open_(max_attempts=5)
        assert await _charged_nack(q5, "h", "H.1") == "ready"
        held = await _lease_key(q5, "h")
        r1 = await q.refund_attempts([Refund.of_charges("t", ["K.1"]), Refund.of_charges("h", ["H.1"])])
        await q5.release(held)
        r2 = await q.refund_attempts([Refund.of_charges("h", ["H.1"])])
        return r1, r2, [(d.key, d.attempts) for d in await q.dead_letters()], await _attempts(q5, "h")

    r1, r2, dead, h_attempts = backend.run(body)
    assert _lists(r1) == (["t"], [], ["h"], []) and r1.given == {"t": 1}
    assert _lists(r2) == (["h"], [], [], []) and r2.given == {"h": 1}
    assert dead == [("t", 0)] and h_attempts == 0


def test_charge_validation(backend):  # noqa: F811
    async def body(open_):
        q = open_()
        await q.put("t", {})
        task = await _lease_key(q, "t")
        with pytest.raises(ValueError):
            await q.nack(task, REASON, charge="")
        with pytest.raises(ValueError):
            await q.refund_attempts([Refund.of_charges("t", ["a", "a"])])
        with pytest.raises(ValueError):
            await q.refund_attempts([Refund("t", 2, None, None, ("a",))])  # attempts != number of charges
        with pytest.raises(ValueError):
            await q.refund_attempts([Refund("t", 1)])  # neither expected nor charges
        await q.release(task)

    backend.run(body)


def test_redis_charge_refund_whose_reply_was_lost_reports_what_its_first_run_did(redis_url, raw):  # noqa: F811
    """Redis only: a refund by charge ids ran, its reply was lost, redis-py retried it. The retry answers from the
    reply record (refunded, given 2) although the charges are gone by then, and the attempts went back once (read
    with a raw client: the attempts and charges fields are absent)."""
    from test_queue_redis_lost_reply import _run, _warm

    async def body(q, proxy, direct):
        await _warm(q)
        await q.put("a", {})
        for c in ("A.1", "A.2"):
            assert await _charged_nack(q, "a", c) == "ready"
        assert (await q.refund_attempts([Refund.of_charges("warm-a", ["z"])])).skipped == ["warm-a"]  # script known
        proxy.armed = True
        res = await q.refund_attempts([Refund.of_charges("a", ["A.1", "A.2"])])
        assert proxy.dropped == 1
        return res, raw.hget(proxy.prefix + "attempts", "a"), raw.hget(proxy.prefix + "charges", "a")

    res, att, charges = _run(redis_url, body, max_attempts=5)
    assert _lists(res) == (["a"], [], [], []) and res.given == {"a": 2}
    assert att is None and charges is None
