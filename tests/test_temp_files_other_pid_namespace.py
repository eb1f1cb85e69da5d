"""A live writer in another pid namespace (another container sharing the campaign folder on this machine) keeps
its temporary file (adversarial review, session 9).

:func:`geoagent.files.remove_stale_temp_files` took a temporary file for a killed writer's when the pid in its
name did not exist here. A process in another pid namespace (a second container of the campaign on one machine,
whose ``flock`` owner locks and queue files work across the namespaces) names its files with ITS pid, which here
is another process or none: the run start of this container removed the other's temporary file while it was
writing, and the other's rename then failed (``FileNotFoundError``; its report or export not written). Now each
writer holds an exclusive ``flock`` on its temporary file until it is renamed, and a file whose lock is held is
never removed, whatever its pid says; a killed writer's lock is gone with it (tests/test_crash_temp_files.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geoagent.engine import run_lock
from geoagent.runtime.procs import pid_alive

REPO = Path(__file__).resolve().parents[1]
WRITER = """
import sys, time
from geoagent.files import atomic_open
try:
    with atomic_open(sys.argv[1], "w") as fh:
        fh.write("part 1,")
        fh.flush()
        print("inside", flush=True)
        time.sleep(float(sys.argv[2]))
        fh.write("part 2")
    print("written", flush=True)
except Exception as exc:
    print("failed", type(exc).__name__, flush=True)
"""
NS_PID = 31000  # the writer's pid in its namespace is NS_PID + 1 (ns_last_pid)


def _can_unshare() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    r = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "sh", "-c",
                        f"echo {NS_PID} > /proc/sys/kernel/ns_last_pid && sh -c 'echo $$'"],
                       capture_output=True, text=True, timeout=30)
    return r.returncode == 0 and r.stdout.strip() == str(NS_PID + 1)


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare(1) with pid namespaces")
def test_a_run_start_keeps_the_temp_file_of_a_writer_in_another_pid_namespace(tmp_path):
    assert pid_alive(NS_PID + 1) is False, "pick another NS_PID: that pid runs here"
    state = tmp_path / "state" / "camp"
    state.mkdir(parents=True)
    target = state / "report.md"
    script = (f"echo {NS_PID} > /proc/sys/kernel/ns_last_pid && "
              f"env PYTHONPATH={REPO} {sys.executable} -c '{WRITER}' {target} 3; true")
    proc = subprocess.Popen(["unshare", "-p", "-f", "--mount-proc", "sh", "-c", script], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "inside"
        (tmp,) = [p for p in state.iterdir() if p.name.endswith(".tmp")]
        assert tmp.name.startswith(f".report.md.{NS_PID + 1}.")  # a pid that does not exist here
        with run_lock(state, owner=True):  # this container's run starts while the other writes
            assert tmp.exists(), "a live writer's temporary file was removed"
        assert proc.stdout.readline().strip() == "written"
    finally:
        proc.wait(30)
    assert target.read_text() == "part 1,part 2"
    assert not [p for p in state.iterdir() if p.name.endswith(".tmp")]


def test_a_killed_writers_file_is_still_removed_once_its_lock_is_gone(tmp_path):
    """The lock check keeps only live writers' files: a writer SIGKILLed mid-write (lock released by the
    kernel) still has its temporary file removed by the next run start, right after the kill."""
    import signal

    state = tmp_path / "state" / "camp"
    state.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(state / "report.md"), "60"], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "inside"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    t0 = time.monotonic()
    with run_lock(state, owner=True):
        pass
    assert not [p for p in state.iterdir() if p.name.endswith(".tmp")]
    assert time.monotonic() - t0 < 10
