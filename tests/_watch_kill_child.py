"""Test helper (tests/test_crawl_watch_kill_between_steps.py): ``run.py crawl CONFIG --watch --no-live`` in this
process, SIGKILLed by itself at one point of queueing the city ``KEY`` that its watcher reads from the edited
config: ``before_put`` (as the watcher puts it on the ``cities`` queue, before the queue commits it) or
``after_put`` (as soon as the queue has committed it). Nothing else is changed: the real queue runs, and the
process dies as a power cut would take it, with no ``finally`` or exit handler run.

Usage: ``python tests/_watch_kill_child.py CONFIG KEY before_put|after_put``."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    config, key, when = sys.argv[1], sys.argv[2], sys.argv[3]
    assert when in ("before_put", "after_put"), when
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    real_put = SQLiteQueue.put

    async def put(self, k, payload):  # the real put, with a kill point on one side of it
        if k == key and when == "before_put":
            os.kill(os.getpid(), signal.SIGKILL)
        out = await real_put(self, k, payload)
        if k == key and when == "after_put":
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    SQLiteQueue.put = put
    from geoagent.cli import main as cli_main

    return cli_main(["crawl", config, "--watch", "--no-live"])


if __name__ == "__main__":
    sys.exit(main())
