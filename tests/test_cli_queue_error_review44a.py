"""review44a #7: a queue error out of a stage's task group ends the command with one ``error:`` line naming the queue
file (exit 2, as a damaged queue file found at open), not an ``ExceptionGroup`` traceback."""

from __future__ import annotations

import argparse
import time

import anyio
import orjson

from geoagent.cli import _run_command
from geoagent.runtime.sqlite_queue import SQLiteQueue, queue_path
from tests.test_queue_lane_lease_walk39 import _v3_file


def _stage_command(call):
    """A command (``args.fn``) whose one stage awaits ``call()`` inside the stages' task group, as a campaign's
    pipeline does: a queue error out of it reaches the CLI as an ``ExceptionGroup``."""
    async def pipeline() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            tg.start_soon(anyio.sleep, 30)

    def fn(_args: argparse.Namespace) -> int:
        anyio.run(pipeline)
        return 0

    return fn


def test_a_queue_error_of_a_stage_is_one_error_line_naming_the_file(tmp_path, capsys):
    path = queue_path(tmp_path, "camp", "requests")
    _v3_file(path, [("a0", orjson.dumps({"model": "a"}), 0)], time.time() - 5)
    q = SQLiteQueue(path, migrate=False)  # a read-only look at a version-3 file cannot lease by lane: QueueError

    try:
        assert _run_command(argparse.Namespace(fn=_stage_command(lambda: q.lease_lanes(4, 60, {"a": 4})))) == 2
    finally:
        q.close_sync()
    err = capsys.readouterr().err
    assert err.startswith("error: queue 'requests': leasing by lane needs schema version 4") and str(path) in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and "re-run the same command" in err


def test_a_queue_file_locked_too_long_says_re_run_exit_3(tmp_path, capsys):
    """review44f #4: a queue file whose write lock another process held past the busy timeout is nothing to fix: the
    line says re-run, and the exit is 3 (re-run), not 2 (a config or path error)."""
    import sqlite3

    path = queue_path(tmp_path, "camp", "requests")
    q = SQLiteQueue(path, busy_timeout_s=0.2)
    q.put_many_sync([("a0", {"model": "a"})])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock

    try:
        assert _run_command(argparse.Namespace(fn=_stage_command(lambda: q.lease(4, 60)))) == 3
    finally:
        other.execute("ROLLBACK")
        other.close()
        q.close_sync()
    err = capsys.readouterr().err
    assert err.startswith("error: queue 'requests'") and "held the queue file's lock too long" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and "re-run the same command" in err
