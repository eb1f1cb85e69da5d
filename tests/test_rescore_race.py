"""rescore_lost_rows and a scorer of another process at work (rev22 finding 1): the first version read the table's
keys, then reopened; a scorer of another process (a --stages scale-out) that wrote a task's row and acked the task in
between had that task reopened (scored a second time, free) and the info line said its row was "removed outside
geoagent", though nothing was removed. Now only tasks done at one read and rowless at a later one are reopened. Deterministic: the other
process's write lands just after the scan read past the key, its ack just before the reopen (on a table of 10^6
rows the scan alone takes ~1.5 s on this machine, each batch its own read transaction)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from geoagent.engine import rescore_lost_rows
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import StageContext
from geoagent.runtime.store import open_campaign_state

TABLE, EDGE = "geoverify_scored", "answers"


class Kind:
    def __init__(self, keys):
        self.keys = keys

    def scored_rows(self, ctx):
        return TABLE, EDGE, None, self.keys


def test_a_task_scored_meanwhile_by_another_process_is_not_reopened(tmp_path):
    st = open_campaign_state("c", root=tmp_path / "state")
    keys = [f"k{i}" for i in range(6)]

    async def body():
        q = open_queue(tmp_path / "queues", "c", EDGE)
        await q.put_many([(k, {"k": k}) for k in keys])
        first = await q.lease(4, 600)  # k0..k3 scored (row, then ack) before this process starts
        st.store.put_results(TABLE, [(t.key, {"k": t.key}) for t in first])
        await q.ack(first)
        held = {t.key: t for t in await q.lease(2, 600)}  # k4, k5: leased by the other process's scorer
        real_keys, real_done_among, real_reopen = st.store.result_keys, q.done_among, q.reopen_done
        acked: list[str] = []

        def scan(table, **kw):
            yield from real_keys(table, **kw)
            st.store.put_result(TABLE, "k4", {"k": "k4"})  # the other process's scorer writes k4's row ...

        async def other_scorer_acks():  # ... and acks k4, before this process's next look at the queue
            if not acked:
                acked.append("k4")
                await q.ack(held["k4"])

        async def done_among(ks):
            await other_scorer_acks()
            return await real_done_among(ks)

        async def reopen(ks):
            await other_scorer_acks()
            return await real_reopen(ks)

        st.store.result_keys, q.done_among, q.reopen_done = scan, done_among, reopen
        ctx = StageContext("c", services={"store": st.store})
        lines = await rescore_lost_rows(SimpleNamespace(name="c"), Kind(frozenset(keys)), ctx, {EDGE: q})
        counts = await q.counts()
        await q.close()
        return lines, counts

    lines, counts = asyncio.run(body())
    assert st.store.get_result(TABLE, "k4") == {"k": "k4"}  # no row is missing
    assert lines == [] and (counts.ready, counts.leased, counts.done) == (0, 1, 5), (lines, counts)  # was: k4 reopened, "removed outside geoagent"
