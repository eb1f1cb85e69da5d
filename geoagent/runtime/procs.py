"""Whether a process of this machine still exists (for ``status``, the run manifest and crash recovery), and
when it started (Linux ``/proc/<pid>/stat``), which tells a process from a later one that reuses its pid.

The callers decide liveness from these in their own ways on purpose: the ledger's crash recovery
(:mod:`geoagent.runtime.ledger`) counts a process as alive while its pid exists with the recorded start time,
the host board (:mod:`geoagent.runtime.hostshare`) also counts a zombie (state ``Z``: exited, not yet reaped) and
a pid whose ``/proc`` entry vanished between the two checks as gone, and the run manifest
(:mod:`geoagent.runtime.manifest`) compares the start time with its run's start (Unix time).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def pid_alive(pid: Any) -> bool | None:
    """Whether a process with id ``pid`` exists on this machine (``kill(pid, 0)``; a process of another user
    counts). None when ``pid`` is not a positive int or the check itself fails. A pid may since have been reused
    by another program: callers that must know compare start times (``/proc/<pid>/stat``) or record ages."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except (OSError, OverflowError):
        return None
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
