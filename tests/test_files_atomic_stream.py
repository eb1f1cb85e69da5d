"""The public streaming temp-file helper (:func:`geoagent.files.atomic_stream`, :func:`~geoagent.files.atomic_temp_path`).

Before, the plan record (:class:`geoagent.runtime.scope.PlanRecorder`) and the exports built their temporary files
from the private ``files._lock_temp`` / ``files._create_temp``. The helper writes to a locked temporary file, fsyncs
it, renames it over the target; a writer killed mid-stream leaves no visible partial file (only a hidden temporary
file the stale-file clean-up removes once its process is gone), and a live writer's temporary file is never removed.
Real processes, SIGKILL, no mocks.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from geoagent.files import atomic_stream, atomic_temp_path, remove_stale_temp_files

WRITER = """
import sys, time
from geoagent.files import atomic_stream
with atomic_stream(sys.argv[1], "w") as out:
    for i in range(1000):
        out.write(f"line {i}\\n")
    out.file.flush()
    print("inside", flush=True)
    time.sleep(60)
    out.write("end\\n")
"""


def _start(target: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"inside"
    return proc


def _temps(folder: Path, target: Path, pid: int) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(f".{target.name}.{pid}.") and p.name.endswith(".tmp")]


def test_a_clean_stream_is_renamed_whole_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "out.tsv"
    with atomic_stream(target) as out:
        out.write("a\tb\n")
        assert out.temp.parent == target.parent and out.temp.name.startswith(".out.tsv.")
        assert not target.exists()  # nothing visible under the target's name while streaming
        out.write("c\td\n")
    assert target.read_text() == "a\tb\nc\td\n"
    assert [p.name for p in target.parent.iterdir()] == ["out.tsv"]


def test_an_exception_or_discard_keeps_the_old_target(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_stream(target) as out:
            out.write("new, half")
            raise RuntimeError("writer failed")
    with atomic_stream(target) as out:
        out.write("new, refused")
        out.discard()
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with pytest.raises(ValueError):
        with atomic_stream(target, "a"):
            pass


def test_a_writer_killed_mid_stream_leaves_no_visible_partial_file(tmp_path):
    target = tmp_path / "plan.tsv"
    target.write_text("earlier whole file\n")
    fresh = tmp_path / "fresh.tsv"  # no earlier file: nothing at all may appear under its name
    procs = [_start(target), _start(fresh)]
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert target.read_text() == "earlier whole file\n" and not fresh.exists()
    left = _temps(tmp_path, target, procs[0].pid) + _temps(tmp_path, fresh, procs[1].pid)
    assert len(left) == 2 and all(p.read_text().startswith("line 0\n") for p in left)  # hidden partial files
    assert sorted(remove_stale_temp_files(tmp_path)) == sorted(left)  # the next run's clean-up removes them
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.tsv"]


def test_a_live_writers_temp_file_is_not_removed_by_the_cleanup(tmp_path):
    target = tmp_path / "plan.tsv"
    live = _start(target)
    try:
        mine = _temps(tmp_path, target, live.pid)
        assert len(mine) == 1
        assert remove_stale_temp_files(tmp_path) == [] and mine[0].exists()
    finally:
        live.kill()
        live.wait(10)
    assert remove_stale_temp_files(tmp_path) == mine and not target.exists()


def test_a_live_writer_in_another_pid_namespace_keeps_its_temp_by_its_lock(tmp_path):
    """A writer whose pid means nothing here (another container sharing the folder) is known by its lock: rename the
    live writer's file to carry a dead pid; the clean-up still leaves it while the lock is held."""
    target = tmp_path / "plan.tsv"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    with atomic_stream(target) as out:
        out.write("x\n")
        foreign = out.temp.with_name(out.temp.name.replace(f".{__import__('os').getpid()}.", f".{dead.pid}.", 1))
        out.temp.rename(foreign)
        assert remove_stale_temp_files(tmp_path) == [] and foreign.exists()
        foreign.rename(out.temp)


def test_atomic_temp_path_for_writers_that_take_a_name(tmp_path):
    import polars as pl

    target = tmp_path / "t.parquet"
    df = pl.DataFrame({"a": [1, 2]})
    with atomic_temp_path(target) as tmp:
        assert tmp.exists() and not target.exists()
        assert remove_stale_temp_files(tmp_path) == []  # our own, locked: never removed
        df.write_parquet(tmp)
    assert pl.read_parquet(target).equals(df) and [p.name for p in tmp_path.iterdir()] == ["t.parquet"]
    with pytest.raises(OSError):
        with atomic_temp_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise OSError("disk full")
    assert pl.read_parquet(target).equals(df) and [p.name for p in tmp_path.iterdir()] == ["t.parquet"]
