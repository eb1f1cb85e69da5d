"""Contract of ``WorkQueue.refund_attempts`` (geoagent.runtime.queue), on both backends (SQLite and a real
redis-server): attempts charged by failures that were not a task's fault (an unreachable host whose breaker then
opened) are given back by compare-and-set on the attempt count. A queued task (ready, or under an expired lease)
gets ``max(0, expected - attempts)``; a dead task with the refund's exact ``dead_reason`` is ready again; a task
done, held by a live lease, dead for another reason, or whose count moved on is left unchanged; a repeat refunds
nothing more. Expected values are hand-computed from the nacks each test makes."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.runtime.queue import Refund, RefundResult
from test_queue_contract import backend, raw, redis_url  # noqa: F401 - the module's fixtures (both backends)

REASON = "RetriesExhausted: 2 attempts to http://127.0.0.1:9/x failed; last: connection: Connect call failed"


async def _nack_times(q, key: str, n: int, reason: str = REASON) -> str:
    """Lease ``key`` and nack it ``n`` times (zero backoff); return the last state."""
    state = ""
    for _ in range(n):
        for _ in range(200):
            tasks = await q.lease(10, 60)
            got = [t for t in tasks if t.key == key] or None
            if others := [t for t in tasks if t.key != key]:
                await q.release(others)
            if got:
                break
            await asyncio.sleep(0.01)
        assert got, f"{key} was not leased"
        state = await q.nack(got[0], reason, backoff_s=0)
    return state


async def _attempts(q, key: str) -> int:
    """The attempt count of a ready task, read by leasing it (then released untouched)."""
    for _ in range(200):
        tasks = await q.lease(10, 60)
        mine = [t for t in tasks if t.key == key]
        others = [t for t in tasks if t.key != key]
        if others:
            await q.release(others)
        if mine:
            await q.release(mine)
            return mine[0].attempts
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} never became leasable")


def test_contract_refund_queued_and_dead_tasks_then_a_repeat_changes_nothing(backend):  # noqa: F811
    async def body(open_):
        q = open_(max_attempts=3)
        await q.put_many([("ready3", {}), ("ready1", {}), ("dead", {}), ("other", {}), ("done", {})])
        # ready3: 2 nacks (attempts 2) -> refund 2 -> 0; ready1: 2 nacks, refund 1 of them -> 1
        assert await _nack_times(q, "ready3", 2) == "ready"
        assert await _nack_times(q, "ready1", 2) == "ready"
        # dead: 3 nacks -> dead with REASON, attempts 3; other: dead by another reason
        assert await _nack_times(q, "dead", 3) == "dead"
        assert await _nack_times(q, "other", 3, reason="PermanentFailure: HTTP 404") == "dead"
        tasks = await q.lease(10, 60)
        await q.ack([t for t in tasks if t.key == "done"])
        await q.release([t for t in tasks if t.key != "done"])
        res = await q.refund_attempts([
            Refund("ready3", 2, expected=2), Refund("ready1", 1, expected=2),
            Refund("dead", 3, expected=3, dead_reason=REASON),
            Refund("other", 3, expected=3, dead_reason=REASON),  # dead for another reason: stays dead
            Refund("done", 1, expected=0),  # done: never touched
            Refund("nope", 1, expected=1),  # unknown key
        ])
        assert isinstance(res, RefundResult)
        assert sorted(res.refunded) == ["ready1", "ready3"] and res.revived == ["dead"]
        assert res.leased == [] and sorted(res.skipped) == ["done", "nope", "other"]
        counts = await q.counts()
        assert (counts.ready, counts.dead, counts.done, counts.leased) == (3, 1, 1, 0)
        assert [d.key for d in await q.dead_letters()] == ["other"]
        assert await _attempts(q, "ready3") == 0
        assert await _attempts(q, "ready1") == 1
        assert await _attempts(q, "dead") == 0
        # the same call again: every count moved on from ``expected`` -> nothing refunded twice
        again = await q.refund_attempts([Refund("ready3", 2, expected=2), Refund("ready1", 1, expected=2),
                                         Refund("dead", 3, expected=3, dead_reason=REASON)])
        assert again.refunded == [] and again.revived == [] and sorted(again.skipped) == ["dead", "ready1", "ready3"]
        assert await _attempts(q, "ready1") == 1 and await _attempts(q, "dead") == 0
        # a refund larger than the count stops at 0; an empty call does nothing
        assert (await q.refund_attempts([Refund("ready1", 5, expected=1)])).refunded == ["ready1"]
        assert await _attempts(q, "ready1") == 0
        assert await q.refund_attempts([]) == RefundResult()
        # the revived task runs like any ready task: one more nack counts from 0
        assert await _nack_times(q, "dead", 1) == "ready" and await _attempts(q, "dead") == 1

    backend.run(body)


def test_contract_refund_never_touches_a_live_lease_but_an_expired_one_is_nobodys(backend):  # noqa: F811
    async def body(open_):
        q = open_(max_attempts=5)
        await q.put_many([("live", {}), ("expired", {})])
        assert await _nack_times(q, "live", 1) == "ready" and await _nack_times(q, "expired", 1) == "ready"
        leased = {t.key: t for t in await q.lease(2, 60)}
        assert set(leased) == {"live", "expired"}
        # "expired": released and leased again for 0.2 s, then left to expire (its holder is gone)
        await q.release([leased["expired"]])
        (short,) = [t for t in await q.lease(2, 0.2) if t.key == "expired"]
        await asyncio.sleep(0.5)
        res = await q.refund_attempts([Refund("live", 1, expected=1), Refund("expired", 1, expected=1)])
        assert res.leased == ["live"] and res.refunded == ["expired"]
        # the live holder's lease is intact: its nack counts from its own count (1 -> 2), unaffected
        assert await q.nack(leased["live"], REASON, backoff_s=0) == "ready"
        assert await _attempts(q, "live") == 2
        assert await _attempts(q, "expired") == 0
        # the expired holder's lease id is now stale or still its own; either way the refund did not corrupt it
        counts = await q.counts()
        assert counts.total == 2 and counts.dead == 0 and short.key == "expired"

    backend.run(body)


def test_contract_refund_validation(backend):  # noqa: F811
    async def body(open_):
        q = open_()
        with pytest.raises(ValueError):
            await q.refund_attempts([Refund("a", 0, expected=1)])
        with pytest.raises(ValueError):
            await q.refund_attempts([Refund("a", 1, expected=1), Refund("a", 1, expected=1)])
        with pytest.raises(TypeError):
            await q.refund_attempts([("a", 1)])  # type: ignore[list-item]

    backend.run(body)


def test_redis_refund_whose_reply_was_lost_reports_what_its_first_run_did(redis_url, raw):  # noqa: F811
    """Redis only: the refund ran, its reply was lost, redis-py retried it. Without the reply record the retry
    would find every count moved on and answer "skipped"; with it the retry answers the first run's lists, and
    the attempts were given back once (read independently with a raw client)."""
    from test_queue_redis_lost_reply import _run, _warm

    async def body(q, proxy, direct):
        await _warm(q)
        await q.put_many([("a", {}), ("d", {})])
        leased = {t.key: t for t in await q.lease(2, 60)}
        assert await q.nack(leased["a"], REASON, backoff_s=0) == "ready"
        (a,) = await q.lease(1, 60)
        assert await q.nack(a, REASON, backoff_s=0) == "ready"  # a: 2 attempts
        await q.dead_letter(leased["d"], REASON)  # d: dead, 1 attempt
        # make the refund script known to the server first (redis-py loads it on NOSCRIPT), so the armed call is
        # one EVALSHA: a refund that matches nothing
        assert (await q.refund_attempts([Refund("warm-a", 1, expected=9)])).skipped == ["warm-a"]
        proxy.armed = True
        res = await q.refund_attempts([Refund("a", 2, expected=2), Refund("d", 1, expected=1, dead_reason=REASON)])
        assert proxy.dropped == 1
        return res, raw.hget(proxy.prefix + "attempts", "a"), raw.hget(proxy.prefix + "attempts", "d"), \
            await q.counts()

    res, att_a, att_d, counts = _run(redis_url, body, max_attempts=5)
    assert (res.refunded, res.revived, res.leased, res.skipped) == (["a"], ["d"], [], [])
    assert att_a is None and att_d is None  # absent = 0 attempts
    assert (counts.ready, counts.dead) == (2, 0)
