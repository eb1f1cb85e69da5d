"""Child process for tests/test_runtime_hostshare.py: one campaign process calling one host.

Usage: ``python tests/_hostshare_child.py '<json options>'`` with keys ``url``, ``board``, ``tag``,
``rate``, ``period_s``, ``concurrency``, ``duration_s``, ``workers`` (optional ``max_attempts``,
``backoff_max_s``, ``params``: more query parameters for every request; ``redis_url`` + ``campaign``: the
board on Redis instead of the ``board`` file; ``boot``: a boot id of its own, i.e. another "machine" whose pids
the others cannot check; ``until_file``: a path whose appearance ends the sending before ``duration_s`` is up, so
a test can keep a child sending until another child is done). Opens an :class:`HttpClient` plus a
:class:`HostShare` on ``board`` (as ``engine.open_services`` does), prints ``ready`` once the share is running,
then has ``workers`` tasks call ``url?w=<tag>`` as fast as the limits allow for ``duration_s`` seconds (or until
``until_file`` exists), and prints one JSON line
``{"tag", "ok", "errors"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time


async def main(opt: dict) -> None:
    from geoagent.runtime.hostshare import HostShare
    from geoagent.runtime.http import HostPolicy, HttpClient, HttpError

    policy = HostPolicy(
        rate=opt["rate"],
        period_s=opt.get("period_s", 1.0),
        concurrency=opt["concurrency"],
        max_attempts=opt.get("max_attempts", 5),
        backoff_base_s=0.05,
        backoff_max_s=opt.get("backoff_max_s", 10.0),
        timeout_s=10.0,
    )
    ok = errors = 0
    board = opt.get("board")
    if opt.get("redis_url"):
        from geoagent.runtime.hostshare_redis import RedisBoard

        board = RedisBoard(opt["redis_url"], opt["campaign"])
    async with HttpClient(default_policy=policy) as http:
        share = HostShare(board, http)
        if opt.get("boot"):
            share.boot = opt["boot"]
        await share.__aenter__()
        print("ready", flush=True)
        end = time.monotonic() + opt["duration_s"]
        until = opt.get("until_file")

        def sending() -> bool:
            return time.monotonic() < end and not (until and os.path.exists(until))

        async def worker(w: int) -> None:
            nonlocal ok, errors
            while sending():
                try:
                    await http.request("GET", opt["url"], params={"w": opt["tag"], "k": str(w), **opt.get("params", {})})
                    ok += 1
                except HttpError:
                    errors += 1

        await asyncio.gather(*(worker(w) for w in range(opt["workers"])))
        await share.close()
    print(json.dumps({"tag": opt["tag"], "ok": ok, "errors": errors}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
