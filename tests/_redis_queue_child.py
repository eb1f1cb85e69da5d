"""A consumer process for the Redis queue tests (``tests/test_queue_contract.py``).

``python tests/_redis_queue_child.py URL CAMPAIGN EDGE hold N VT``: lease ``N`` tasks for ``VT`` s, print
one JSON line ``{"leased_at": unix s, "tasks": [[key, lease_id], ...]}`` and then wait to be killed.

``python tests/_redis_queue_child.py URL CAMPAIGN EDGE drain N VT``: lease (for ``VT`` s) and ack until ``N``
tasks were acked or 30 s passed, then print ``{"got_at": unix s, "tasks": [[key, lease_id, attempts], ...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from geoagent.runtime.redis_queue import open_redis_queue


async def main(url: str, campaign: str, edge: str, mode: str, n: int, vt: float) -> None:
    queue = open_redis_queue(url, campaign, edge)
    try:
        if mode == "hold":
            leased_at = time.time()
            tasks = await queue.lease(n, vt)
            print(json.dumps({"leased_at": leased_at, "tasks": [[t.key, t.lease_id] for t in tasks]}), flush=True)
            await asyncio.sleep(3600)
        got: list[list] = []
        deadline = time.monotonic() + 30
        first_at = None
        while len(got) < n and time.monotonic() < deadline:
            tasks = await queue.lease(n - len(got), vt)
            if not tasks:
                await asyncio.sleep(0.05)
                continue
            first_at = first_at or time.time()
            await queue.ack(tasks)
            got += [[t.key, t.lease_id, t.attempts] for t in tasks]
        print(json.dumps({"got_at": first_at, "tasks": got}), flush=True)
    finally:
        await queue.close()


if __name__ == "__main__":
    url, campaign, edge, mode, n, vt = sys.argv[1:7]
    asyncio.run(main(url, campaign, edge, mode, int(n), float(vt)))
