"""Whether a process of this machine still exists (for ``status``, the run manifest and crash recovery)."""

from __future__ import annotations

import os
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
