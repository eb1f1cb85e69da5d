"""One finished ``run.py demo``, run once per pytest run (tests/_once_per_run.py), copied into each test that
starts from a finished demo.

The demo (a crawl, a GeoVerify and a GeoHint campaign on the local fakes; 20-40 s on 2 cores) runs as
``python run.py demo --workdir <tmp>/work --no-live`` with every ``GEOAGENT_*`` variable unset; ``<tmp>/work`` is
then renamed to ``<tmp>/pristine``, so the folder the demo recorded no longer exists and a copy placed anywhere is
a demo workdir moved away from where it ran (a run that still used a recorded path would find nothing there).
Nobody works in the pristine folder: each test copies it (:func:`copy_fresh_demo`).

Used by tests/test_adversarial_s11_adv4.py (demos re-run in a moved workdir) and by the tests that run their own
campaign over the demo's crawl as the docs say, "after the demo" (tests/test_walk_s17.py,
tests/test_walkthrough_s12_msgs.py): each ran a demo of its own before, the same demo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _once_per_run import once_per_run

REPO = Path(__file__).resolve().parents[1]


def run_demo_subprocess(workdir: Path) -> subprocess.CompletedProcess:
    """``python run.py demo --workdir WORKDIR --no-live`` from WORKDIR's parent, no ``GEOAGENT_*`` variable set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") or k == "GEOAGENT_RUNS_INDEX"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, str(REPO / "run.py"), "demo", "--workdir", str(workdir), "--no-live"],
                          cwd=workdir.parent, env=env, capture_output=True, text=True, timeout=300)


def fresh_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(pristine folder, the workdir the demo ran in and recorded, which no longer exists) of this run's one
    fresh demo; run here if no test of this run has asked for it yet. Fails (AssertionError) when the demo does
    not exit 0."""

    def build(base: Path) -> None:
        first = run_demo_subprocess(base / "work")
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        (base / "work").rename(base / "pristine")

    base = once_per_run(tmp_path_factory, "fresh-demo", build)
    return base / "pristine", base / "work"


def copy_fresh_demo(demo: tuple[Path, Path], to: Path) -> Path:
    """Copy the pristine demo workdir (its ``queues/`` and ``state/``) to ``to`` (made, or merged into what is
    there) and return ``to``."""
    shutil.copytree(demo[0], to, symlinks=True, dirs_exist_ok=True)
    return to
