"""A sandbox crawl run once per test module and put back, pristine, at the same path for each test.

``run_crawl_once`` runs ``run.py crawl <config>`` to completion under a root of its own and keeps a pristine copy
of its queues and state; ``restore_crawl`` puts that copy back at the same root (so every path the crawl's
manifests and queues record stays its own), removes whatever an earlier test added there, and points the data
roots at it. Used by module-scoped fixtures (tests/test_adversarial_inputs.py, tests/test_crawl_handoff.py).
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest

SANDBOX_TOKEN = "MLY|sandbox"


def _point_roots(mp: pytest.MonkeyPatch, root: Path) -> None:
    mp.setenv("GEOAGENT_QUEUES", str(root / "queues"))
    mp.setenv("GEOAGENT_STATE", str(root / "state"))
    mp.setenv("MAPILLARY_TOKEN", SANDBOX_TOKEN)


def run_crawl_once(tmp_path_factory: pytest.TempPathFactory, config: Path) -> tuple[Path, Path, str]:
    """Run the crawl of ``config`` to completion; return (root, pristine copy of its queues and state, what the
    crawl printed). Raises AssertionError when the crawl does not exit 0."""
    from geoagent.cli import main

    root = tmp_path_factory.mktemp("crawled")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        _point_roots(mp, root)
        assert main(["crawl", str(config), "--no-live"]) == 0
    pristine = tmp_path_factory.mktemp("crawled-pristine")
    for sub in ("queues", "state"):
        shutil.copytree(root / sub, pristine / sub, symlinks=True)
    return root, pristine, printed.getvalue()


def restore_crawl(root: Path, pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the pristine crawl back at ``root`` (everything else under it removed) and point the data roots at it."""
    for entry in root.iterdir():  # what an earlier test added (its own campaigns, configs) goes too
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for sub in ("queues", "state"):
        shutil.copytree(pristine / sub, root / sub, symlinks=True)
    _point_roots(monkeypatch, root)
