"""A process that exited but was not reaped yet by its launcher (a zombie, ``/proc/<pid>/stat`` state ``Z``) is
dead everywhere the project asks whether a process lives.

Walkthrough: a campaign process killed (SIGKILL, OOM) under a launcher that does not reap it at once (a shell
script waiting on another job, a supervisor that polls) keeps its pid as a zombie until reaped. ``kill(pid, 0)``
still succeeds on a zombie, so the shared reader (``geoagent.runtime.procs.pid_alive``) and the ledger's crash
recovery took it for alive: its open reservations stayed held against the cap (not counted as unknown-outcome
spend by the next process), ``status`` read its process as ``silent`` instead of ``stopped``, the manifest
kept its run as running, and its temporary files were not cleaned up, all until the launcher reaped it. Only
the host board (``hostshare._alive``) already knew zombies.

Real processes: a forked child that exits at once and is not waited for (a zombie), reaped at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from geoagent.files import remove_stale_temp_files
from geoagent.runtime import manifest
from geoagent.runtime.ledger import CampaignDB, Ledger, _pid_alive
from geoagent.runtime.procs import pid_alive, proc_start, proc_stat
from geoagent.status import process_state

linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process states come from Linux /proc")


def _wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + 30
    while (proc_stat(pid) or ("?",))[0] != "Z":
        assert time.monotonic() < deadline, f"child {pid} never became a zombie: {proc_stat(pid)}"
        time.sleep(0.01)


@linux_only
def test_a_forked_child_that_exited_unreaped_is_dead_to_the_shared_reader(tmp_path):
    pid = os.fork()
    if pid == 0:  # the child: exit at once, nothing else (no pytest, no buffers flushed)
        os._exit(0)
    try:
        _wait_zombie(pid)
        started = proc_start(pid)
        assert started is not None  # a zombie's /proc entry is still there, with its start time
        assert pid_alive(pid) is False  # before: True (kill(pid, 0) succeeds on a zombie)
        assert not _pid_alive(pid, started) and not _pid_alive(pid, None)  # the ledger's owner check
        # status: its record's process is stopped (killed), not silent or running
        assert process_state({"pid": pid, "t": time.time() - 60.0}, None, time.time()) == "stopped"
        assert process_state({"pid": pid, "t": time.time()}, None, time.time()) == "stopped"
        # the run manifest: its run's process is gone
        assert manifest._run_process_gone({"pid": pid, "started_unix": time.time() - 5.0})
        # its temporary files are a dead writer's: removed by the next run
        tmp = tmp_path / f".report.json.{pid}.1.0123abcd.tmp"
        tmp.write_text("half")
        assert remove_stale_temp_files(tmp_path) == [tmp] and not tmp.exists()
    finally:
        os.waitpid(pid, 0)
    assert pid_alive(pid) is False  # reaped: gone, as before
    assert pid_alive(os.getpid()) is True  # and this process lives


@linux_only
def test_ledger_recovery_counts_a_zombie_owners_reservation_as_unknown_spend(tmp_path):
    path = tmp_path / "c.sqlite"
    Ledger(CampaignDB(path), 5.0).db.close()  # the campaign's ledger, cap 5 USD
    code = textwrap.dedent(f"""
        import os
        from geoagent.runtime.ledger import CampaignDB, Ledger
        led = Ledger(CampaignDB({str(path)!r}))
        led.reserve("k1", 0.25)  # a call in flight when the process is killed
        os._exit(0)  # killed: no settle, no release, no retire
    """)
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ})
    try:
        _wait_zombie(child.pid)  # exited, not reaped: the launcher (this test) has not waited for it
        led = Ledger(CampaignDB(path))
        # before: 0 recovered, the 0.25 USD held open as if its process still ran
        assert led.recovered == 1
        s = led.summary()
        assert (s.open_reservations, s.unknown_usd) == (0, pytest.approx(0.25))
        led.db.close()
    finally:
        child.wait(30)


@linux_only
def test_a_zombie_lease_owner_reads_as_dead_to_the_owner_lock_scan(tmp_path):
    # the lease side needs no pid check: a process's owner lock (state/<campaign>/leases/<owner>.lock, flock) is
    # let go when it exits, before it is reaped, so a zombie's leases are handed back as a dead process's
    from geoagent.engine import dead_owner_pids

    code = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from geoagent.engine import run_lock
        with run_lock(Path({str(tmp_path)!r}), owner=True):
            os._exit(0)  # killed while running
    """)
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ})
    try:
        _wait_zombie(child.pid)
        assert dead_owner_pids(tmp_path) == {child.pid}
    finally:
        child.wait(30)
