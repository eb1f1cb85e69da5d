"""Whether a process of this machine still exists (for ``status``, the run manifest and crash recovery), and
when it started (Linux ``/proc/<pid>/stat``), which tells a process from a later one that reuses its pid.

A zombie (state ``Z``: a process that exited and that its launcher has not reaped yet) is dead everywhere:
:func:`pid_alive` says False for it (``kill(pid, 0)`` alone still succeeds on a zombie), so a killed process
under a launcher that does not reap it at once frees its ledger reservations, its run and its temporary files
at once, not when it is reaped. Beyond that the callers decide liveness in their own ways on purpose: the
ledger's crash recovery (:mod:`geoagent.runtime.ledger`, :func:`process_alive`) counts a process as alive while
its pid exists with the recorded start time, the host board (:mod:`geoagent.runtime.hostshare`) also counts a pid
whose ``/proc`` entry vanished between the two checks as gone, the run manifest
(:mod:`geoagent.runtime.manifest`) compares the start time with its run's start (Unix time), and ``status`` and
the temporary-file sweep (:mod:`geoagent.files`) use :func:`pid_alive`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def pid_alive(pid: Any) -> bool | None:
    """Whether a live process with id ``pid`` exists on this machine (``kill(pid, 0)``; a process of another user
    counts): False when there is none, or when it is a zombie (``/proc/<pid>/stat`` state ``Z``: it exited and
    its launcher has not reaped it yet; where ``/proc`` cannot be read a zombie still reads as alive). None when
    ``pid`` is not a positive int or the check itself fails. A pid may since have been reused by another
    program: callers that must know compare start times (:func:`proc_start`, :func:`process_alive`) or record
    ages."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    except (OSError, OverflowError):
        return None
    st = proc_stat(pid)
    return not (st is not None and st[0] == "Z")


def process_alive(pid: int, started: str | None) -> bool:
    """Whether process ``pid``, recorded with start time ``started`` (:func:`proc_start`; None: unknown), still
    runs: :func:`pid_alive` (it exists and is no zombie) and, where both start times can be read, the process
    holding the pid started when the recorded one did (else the pid was reused: gone). A pid the check cannot
    judge (not a positive int, the check failed) counts as alive: the callers (crash recovery) must never take a
    live process for dead."""
    if pid_alive(pid) is False:
        return False
    if started is not None:
        now = proc_start(pid)
        if now is not None and now != started:
            return False  # the pid was reused by a new process
    return True


def proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of process ``pid`` from Linux ``/proc/<pid>/stat`` (fields 3 and 22: one letter,
    ``Z`` for a zombie; the start in clock ticks since boot, as text); None when it cannot be read (no such
    process, no ``/proc``: not Linux) or parsed. The start time with the pid tells a live process from a new one
    that reuses a dead one's pid. Fields are counted after the last ``)``, so a command name with spaces or
    parentheses does not shift them."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:
        fields = raw[raw.rindex(b")") + 2:].split()
        return fields[0].decode(), fields[19].decode()
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def proc_start(pid: int) -> str | None:
    """Start time of process ``pid`` (clock ticks since boot, as text: :func:`proc_stat`), or None where it
    cannot be read. Compare two readings for equality only (the same pid with another start time is another
    process)."""
    st = proc_stat(pid)
    return st[1] if st else None


def started_unix() -> float:
    """When this process started, Unix time in seconds: Linux ``/proc/self/stat``'s start (clock ticks since boot) plus
    the boot time (``/proc/stat`` ``btime``, whole seconds, so up to a second early); where either cannot be read (not
    Linux), the time this module was first imported (early in a ``run.py`` process, before any task ran). Read once
    per process. Records a process compares with it (the referenceability auditor's "logged in this run",
    fixreask46) are stamped with ``time.time()`` on the same machine."""
    global _STARTED_CACHE
    if _STARTED_CACHE is None:
        _STARTED_CACHE = process_started_unix(os.getpid()) or _IMPORTED_AT
    return _STARTED_CACHE


def process_started_unix(pid: int) -> float | None:
    """When process ``pid`` of this machine started, Unix time in seconds (as :func:`started_unix`, up to a second
    early); None where ``/proc`` cannot be read (no such process, not Linux)."""
    st = proc_stat(pid)
    try:
        ticks = int(st[1]) if st else None
        btime = next((int(line.split()[1]) for line in Path("/proc/stat").read_text(encoding="ascii").splitlines()
                      if line.startswith("btime ")), None)
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    if ticks is None or btime is None or hz <= 0:
        return None
    return btime + ticks / hz


_IMPORTED_AT = time.time()
_STARTED_CACHE: float | None = None


def boot_id() -> str | None:
    """This kernel's boot id (Linux ``/proc/sys/kernel/random/boot_id``) followed by ``"/pidns:"`` and this process's
    pid namespace (the inode number in ``/proc/self/ns/pid``, when readable); None elsewhere, or unreadable. With
    the host name, what tells "this machine" from another one whose pids mean nothing here (the Redis owner rule:
    :mod:`geoagent.runtime.redis_state`, :meth:`~geoagent.runtime.redis_queue.RedisStreamsQueue.hand_back_gone_local`).
    The pid namespace is part of it because containers of one host that share its network (``docker run --network
    host``) have the same host name and boot id but pids of their own: without it a process in one found the
    other's live worker gone, handed its leases back and counted a delivery each time. A record written before
    (a bare boot id) reads as another machine's: its leases come back after their visibility timeout. Read once
    per process."""
    global _BOOT_ID_CACHE
    if _BOOT_ID_CACHE is None:
        try:
            boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
        except OSError:
            boot = None
        if boot is not None:
            try:
                ns = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
            except OSError:
                ns = ""
            if ns.startswith("pid:[") and ns.endswith("]"):
                boot += "/pidns:" + ns[5:-1]
        _BOOT_ID_CACHE = (boot,)
    return _BOOT_ID_CACHE[0]


_BOOT_ID_CACHE: tuple[str | None] | None = None
