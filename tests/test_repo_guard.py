"""``tests/_repo_guard.py`` fails a test run that adds to the checkout's ``state/`` or ``queues/`` and names what
it added; a run that adds nothing, or only writes into entries already there, passes (session 18)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _pytest(root: Path, body: str) -> subprocess.CompletedProcess:
    (root / "state").mkdir(exist_ok=True)
    (root / "state" / "old-campaign").mkdir(exist_ok=True)
    probe = root / "probe" / "test_probe.py"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text(f"from pathlib import Path\n\ndef test_probe():\n    root = Path({str(root)!r})\n{body}\n",
                     encoding="utf-8")
    env = {**os.environ, "GEOAGENT_REPO_GUARD_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests._repo_guard",
                           "--rootdir", str(probe.parent), str(probe)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_a_run_that_adds_to_state_or_queues_fails_and_names_it(tmp_path):
    run = _pytest(tmp_path, "    (root / 'state' / 'gh-x' / 'report').mkdir(parents=True)\n"
                            "    (root / 'queues').mkdir()\n    (root / 'queues' / 'gh-x').mkdir()")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert "wrote into the repository's data roots" in run.stdout
    assert "queues/gh-x, state/gh-x" in run.stdout, run.stdout


def test_a_run_that_adds_nothing_passes(tmp_path):
    run = _pytest(tmp_path, "    (root / 'state' / 'old-campaign' / 'more.txt').write_text('x')\n"
                            "    (root / 'probe' / 'elsewhere').mkdir()\n    (root / '.hidden-cache').mkdir()")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "data roots" not in run.stdout


def test_a_run_that_adds_to_the_root_folder_fails_and_names_it(tmp_path):
    """Review rev24 (4): a test passing ``state_dir="unused"`` made ``unused/pageviews_cache.sqlite`` in the
    checkout's root; the guard watched ``state/`` and ``queues/`` only, and a commit took the file in."""
    run = _pytest(tmp_path, "    (root / 'unused').mkdir()\n    (root / 'unused' / 'x.sqlite').write_text('x')")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "wrote into the repository's data roots or its root folder" in run.stdout
    assert ": unused;" in run.stdout, run.stdout


def test_the_suite_loads_the_guard():
    """The suite's conftest takes the plugin's hooks, so the README's test command runs it."""
    import _repo_guard
    import conftest

    assert conftest.pytest_sessionstart is _repo_guard.pytest_sessionstart
    assert conftest.pytest_sessionfinish is _repo_guard.pytest_sessionfinish


def test_the_suite_runs_from_another_working_directory(tmp_path):
    """Adversarial review s18: the conftest imported the guard as ``tests._repo_guard``, a name found only when the
    checkout's root is on ``sys.path`` (``python -m pytest`` started in it, or ``$PYTHONPATH``). Started anywhere
    else (``python -m pytest /path/to/tests/...``, ``cd tests && pytest``, an IDE) or as the ``pytest`` script,
    every run died collecting the conftest: ``ModuleNotFoundError: No module named 'tests'``. The test helpers'
    own folder is on ``sys.path`` (pytest's rootdir-relative conftest import), as for ``_model_harness``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout's root would hide the defect
    if subprocess.run([sys.executable, "-c", "import geoagent"], cwd=tmp_path, env=env).returncode:
        pytest.skip("geoagent is importable here only through $PYTHONPATH (not installed)")
    node = f"{Path(__file__).resolve()}::test_the_suite_loads_the_guard"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr  # before: exit 4, ModuleNotFoundError: No module named 'tests'
    assert "1 passed" in run.stdout


def test_a_run_that_removes_from_state_or_queues_fails_and_names_it(tmp_path):
    """Adversarial review s18: the guard compared only what was added, so a test that deleted ``state/README.md``
    (tracked) or a researcher's campaign folder under ``state/`` passed, though the guard's promise is that a run
    leaves those folders as it found them, and a removal is the worse of the two."""
    run = _pytest(tmp_path, "    import shutil\n    shutil.rmtree(root / 'state' / 'old-campaign')")
    assert run.returncode == 1, run.stdout + run.stderr  # before: 0
    assert "1 passed" in run.stdout
    assert "removed state/old-campaign" in run.stdout, run.stdout


def test_the_users_own_files_in_the_root_folder_do_not_count(tmp_path):
    """walk45 #2: a config saved in the project folder while the suite ran (``my_hint.toml``, as the docs invite,
    and the editor's ``my_hint.toml.bak``) failed the run as if a test had written it. The root-level patterns of
    ``.gitignore`` (a user's own files) do not count; any other new root entry still does."""
    quiet = _pytest(tmp_path, "    (root / 'my_hint.toml').write_text('x')\n"
                              "    (root / 'my_hint.toml.bak').write_text('x')\n"
                              "    (root / 'redis_2m.toml').write_text('x')\n    (root / 'worker.pid').write_text('1')")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "data roots" not in quiet.stdout
    # said all the same (review45a #7: a test that wrote one would otherwise go unseen)
    assert "note: my_hint.toml, my_hint.toml.bak, redis_2m.toml, worker.pid appeared in" in quiet.stdout, quiet.stdout
    loud = _pytest(tmp_path, "    (root / 'my_hint.txt').write_text('x')")
    assert loud.returncode == 1, loud.stdout + loud.stderr
    assert "root folder" in loud.stdout and "my_hint.txt" in loud.stdout
    assert "or another process wrote there while the tests ran" in loud.stdout
