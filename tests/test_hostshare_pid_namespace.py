"""A live member of the host-share board in another pid namespace of the same kernel (a container sharing the
host's network and the campaign's state folder: same host name and boot id, pids of its own) is not "gone".

Before: the SQLite board named the machine by the kernel boot id alone and judged every row of that boot by its
pid and start time; the other container's pid means nothing here (absent, or another process), so each process
marked the other's live row gone at every tick: the row dropped out after its hold time, the process re-joined as
new, and the shares (and turns) were computed without it (tick after tick the board held new rows and departed
ones). Now the identity holds the pid namespace (:func:`geoagent.runtime.procs.boot_id`): a row of this kernel in
another pid namespace is judged by its heartbeat only. The other container is a child
(``tests/_hostshare_child.py``) started in a new pid (and user) namespace by ``unshare``.

The Redis board (``geoagent/runtime/hostshare_redis.py``) checks the pids of rows of "this machine" (host name and
the same identity) as well; its case runs the same containers on one local redis-server (s16: it had the identity
but no test of its own)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys

import pytest

from _hostshare_procs import CHILD, REPO
from _pidns import needs_pid_namespace
from geoagent.runtime.hostshare import HostShare, board_path
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.echo import make_app
from geoagent.sandbox.server import serve
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

CAMPAIGN = "pidns-board"


def _members(board) -> list[tuple[int, object]]:
    """(seq, gone_at) of every member row of the board: a SQLite file, or a Redis URL (rows ``<prefix>m:<seq>``)."""
    if isinstance(board, str) and board.startswith("redis://"):
        import redis

        from geoagent.runtime.hostshare_redis import board_prefix

        prefix = board_prefix(CAMPAIGN) + "m:"
        with contextlib.closing(redis.Redis.from_url(board)) as client:
            rows = [(int(k.decode()[len(prefix):]), client.hget(k, "gone_at")) for k in client.scan_iter(prefix + "*")]
        return sorted((seq, None if g is None else g.decode()) for seq, g in rows)
    with contextlib.closing(sqlite3.connect(board, timeout=5)) as c:
        return c.execute("SELECT seq, gone_at FROM members ORDER BY seq").fetchall()


@needs_pid_namespace
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_live_member_in_another_pid_namespace_stays_a_member(tmp_path, backend, request):
    if backend == "redis":
        from geoagent.runtime.hostshare_redis import RedisBoard

        url = request.getfixturevalue("redis_url")
        board, child_board, where = RedisBoard(url, CAMPAIGN), {"redis_url": url, "campaign": CAMPAIGN}, url
    else:
        board = board_path(tmp_path)
        child_board, where = {"board": str(board)}, board
    policy = HostPolicy(rate=20, period_s=1.0, concurrency=2, timeout_s=10.0)

    async def go():
        app = make_app()
        async with serve(app) as base:
            url = base + "/echo"
            opt = dict(tag="C", url=url, **child_board, rate=20, concurrency=2, workers=1, duration_s=60.0,
                       until_file=str(tmp_path / "stop"))
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            child = await asyncio.create_subprocess_exec(
                "unshare", "-Urpf", "--mount-proc", sys.executable, str(CHILD), json.dumps(opt), cwd=str(REPO),
                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
            try:
                line = await asyncio.wait_for(child.stdout.readline(), 30)
                assert line.strip() == b"ready", (line, await child.stderr.read())
                async with HttpClient(default_policy=policy) as http, HostShare(board, http):
                    # joined: two members of the host (before: no join ever completed, this waited for ever)
                    await asyncio.wait_for(http.request("GET", url), 20)
                    seen = []
                    for _ in range(12):  # 3 s: a dozen ticks of each process, past a hold time
                        await asyncio.sleep(0.25)
                        seen.append(await asyncio.to_thread(_members, where))
            finally:
                (tmp_path / "stop").touch()
                try:
                    await asyncio.wait_for(child.wait(), 20)
                except asyncio.TimeoutError:
                    os.killpg(child.pid, signal.SIGKILL)
                    await child.wait()
        return seen

    seen = asyncio.run(go())
    # the same two rows throughout, neither marked gone (before: the child's and ours were marked gone in turn)
    assert all(s == seen[0] for s in seen), seen
    assert len(seen[0]) == 2 and all(gone is None for _, gone in seen[0]), seen[0]
