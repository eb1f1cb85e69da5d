"""Pid namespaces for tests of a live process in another container on the same kernel (``unshare -Urpf``)."""
from __future__ import annotations

import shutil
import subprocess

import pytest


def unshare_ok() -> bool:
    """Whether ``unshare -Urpf --mount-proc`` (an unprivileged user + pid namespace) works here."""
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "-Urpf", "--mount-proc", "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_pid_namespace = pytest.mark.skipif(not unshare_ok(), reason="no unprivileged pid namespaces here (unshare -Urpf)")
