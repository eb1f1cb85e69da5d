"""Build an expensive, read-only test input once per pytest run, whichever xdist worker asks first.

A module-scoped fixture runs once per worker process that gets one of the module's tests: under ``-n 4`` the
tests of one module are spread over the workers, so a fixture of ~30 s (a whole demo, a campaign) ran two or
three times per run. ``once_per_run(tmp_path_factory, name, build)`` runs ``build(folder)`` once for the whole run
under a lock that every worker shares; a later caller (another worker, or the same one) waits for the lock and
gets the same folder. For inputs the tests only read: a test that changes them must copy them first.

The folder lies under the run's own temporary root (``pytest-N``, shared by its workers, never by another run);
without xdist, under the process's ``basetemp``. A build that raises leaves no folder behind: the next caller
builds again (and so fails the same way, with its own traceback).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's basetemp is <run root>/popen-gwN; the run root is shared by this run's workers only
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``build`` filled for ``name`` in this pytest run; built here if no worker has built it yet."""
    root = _run_root(tmp_path_factory) / "once-per-run"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (also if this process dies)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that raised part way
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder
