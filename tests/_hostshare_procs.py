"""Child processes of the host-share tests: each runs ``tests/_hostshare_child.py`` (an HttpClient plus a
HostShare on one board) with its options as JSON; started, killed and collected from asyncio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).resolve().parent / "_hostshare_child.py"


class Children:
    """Start/kill child processes; collect their output (``started``: monotonic start time per tag)."""

    def __init__(self) -> None:
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.started: dict[str, float] = {}

    async def start(self, tag: str, **opt) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.procs[tag] = await asyncio.create_subprocess_exec(
            sys.executable, str(CHILD), json.dumps({"tag": tag, **opt}), cwd=str(REPO), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        self.started[tag] = time.monotonic()

    async def wait(self, tag: str, timeout_s: float = 60.0) -> int:
        """Wait until child ``tag`` has exited (its output stays in its pipes for :meth:`finish`); its exit code."""
        return await asyncio.wait_for(self.procs[tag].wait(), timeout=timeout_s)

    async def finish(self) -> dict[str, tuple[int, str, str]]:
        """Wait for every child (60 s each at most); ``{tag: (exit code, stdout, last 3,000 chars of stderr)}``."""
        out = {}
        for tag, p in self.procs.items():
            so, se = await asyncio.wait_for(p.communicate(), timeout=60)
            out[tag] = (p.returncode, so.decode(errors="replace"), se.decode(errors="replace")[-3000:])
        return out


BOARDS = ["sqlite", "redis"]


@pytest.fixture(params=BOARDS)
def boards(request, tmp_path):
    """The board kinds a test runs on: ``(kind, new_board, child_opts)``: ``new_board()`` a fresh board for one
    HostShare (the SQLite file in tmp_path, or a RedisBoard of a campaign of this test on the module's
    redis-server, tests/test_queue_contract.py), ``child_opts`` the options of tests/_hostshare_child.py for it."""
    if request.param == "sqlite":
        from geoagent.runtime.hostshare import board_path

        board = str(board_path(tmp_path))
        return "sqlite", (lambda: board_path(tmp_path)), {"board": board}
    from geoagent.runtime.hostshare_redis import RedisBoard

    url = request.getfixturevalue("redis_url")
    campaign = "hs" + format(abs(hash(str(tmp_path))), "x")
    return "redis", (lambda: RedisBoard(url, campaign)), {"redis_url": url, "campaign": campaign}
