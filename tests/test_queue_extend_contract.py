"""Contract of ``WorkQueue.extend`` (geoagent.runtime.queue), on both backends (SQLite and a real redis-server):
a held lease is renewed for a full visibility timeout from now, so it outlives its first deadline and is not
redelivered; a lease no longer held (re-leased after expiry, or finished) is reported and left unchanged."""

from __future__ import annotations

import asyncio

from test_queue_contract import backend, redis_url  # noqa: F401 - the module's fixtures (both backends)


def test_contract_extend_renews_held_leases_and_reports_stale_ones(backend):  # noqa: F811
    async def body(open_):
        q = open_()
        await q.put_many([("a", {}), ("b", {}), ("c", {})])
        leased = {t.key: t for t in await q.lease(3, 0.5)}
        assert await q.extend([], 0.5) == []
        for _ in range(4):  # 1.2 s in all: over twice the first deadline; a is renewed every 0.3 s
            await asyncio.sleep(0.3)
            assert await q.extend([leased["a"]], 0.5) == []
        # b and c expired (not renewed); a is still leased: only b and c come back
        again = {t.key: t for t in await q.lease(3, 60)}
        assert set(again) == {"b", "c"}
        counts = await q.counts()
        assert (counts.leased, counts.ready) == (3, 0)
        # b's old lease id is stale now; c is finished: both reported, neither changed
        await q.ack([again["c"]])
        assert sorted(await q.extend([leased["a"], leased["b"], again["c"]], 60)) == ["b", "c"]
        await q.ack([leased["a"], again["b"]])  # a's renewed lease and b's new one are both still valid
        counts = await q.counts()
        assert (counts.done, counts.leased, counts.ready) == (3, 0, 0)

    backend.run(body)
