"""One reader of a process's start time (``geoagent.runtime.procs.proc_stat`` / ``proc_start``) for the three
places that tell a live process from a later one reusing its pid: the ledger's crash recovery, the host board's
members and the run manifest's killed runs. Each still detects pid reuse (a live pid whose process started at
another time than the one recorded is taken for gone), and a live process with its own start time is not.

Real processes and real files: this process (alive), a child that exited and was reaped (gone), a child that
exited and was not reaped yet (a zombie)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from geoagent.runtime import hostshare, manifest
from geoagent.runtime.ledger import CampaignDB, Ledger, _pid_alive
from geoagent.runtime.procs import proc_start, proc_stat

linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="start times come from Linux /proc")


def _other_start(start: str) -> str:
    return str(int(start) - 1)  # the pid's holder started at another time than the one recorded: reuse


@linux_only
def test_proc_stat_reads_this_process_and_nothing_for_a_reaped_one():
    state, start = proc_stat(os.getpid())
    assert state in "RS" and start.isdigit() and proc_start(os.getpid()) == start
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert proc_stat(child.pid) is None and proc_start(child.pid) is None
    assert proc_start(-1) is None


@linux_only
def test_ledger_recovery_takes_a_reused_pid_for_a_dead_owner(tmp_path):
    path = tmp_path / "c.sqlite"
    first = Ledger(CampaignDB(path), 5.0)
    first.reserve("k1", 0.1)
    second = Ledger(CampaignDB(path))
    assert second.recovered == 0  # its owner (this process, same start time) is alive
    me = proc_start(os.getpid())
    assert _pid_alive(os.getpid(), me) and _pid_alive(os.getpid(), None)
    assert not _pid_alive(os.getpid(), _other_start(me))
    with first.db.transaction() as conn:  # the recorded owner started at another time: the pid was reused
        conn.execute("UPDATE ledger_owners SET proc_start = ? WHERE token = ?", (_other_start(me), first.owner))
    third = Ledger(CampaignDB(path))
    assert third.recovered == 1 and third.summary().open_reservations == 0
    for led in (first, second, third):
        led.db.close()


@linux_only
def test_host_board_liveness_detects_reuse_exit_and_zombies():
    me = hostshare._proc_start(os.getpid())
    assert me == proc_start(os.getpid())
    assert hostshare._alive(os.getpid(), me) and hostshare._alive(os.getpid(), "")
    assert not hostshare._alive(os.getpid(), _other_start(me))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while (started := hostshare._proc_start(child.pid)) == "":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert hostshare._alive(child.pid, started)
        os.kill(child.pid, signal.SIGKILL)
        while (proc_stat(child.pid) or ("Z",))[0] != "Z":  # exited, not reaped: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not hostshare._alive(child.pid, started)
    finally:
        child.kill()
        child.wait(30)
    assert hostshare._proc_start(child.pid) == "" and not hostshare._alive(child.pid, started)


@linux_only
def test_manifest_takes_a_pid_held_by_a_younger_process_for_a_killed_run():
    born = manifest._pid_started_unix(os.getpid())
    assert born is not None and born <= time.time() + 30
    assert not manifest._run_process_gone({"pid": os.getpid(), "started_unix": time.time()})
    # the run started long before the process now holding its pid: that process reused it
    assert manifest._run_process_gone({"pid": os.getpid(), "started_unix": born - 1000.0})
