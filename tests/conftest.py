"""Shared pytest fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# the checkout's root first on sys.path, wherever pytest was started (cd tests, an absolute path, an IDE, the pytest
# script): test modules import their helpers as ``tests._x`` too, and the suite tests this checkout's ``geoagent``,
# not one installed from another folder (adversarial review s18)
if str(REPO_ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(REPO_ROOT))
# pytest reads each test module's assertion-rewritten code from tests/__pycache__ whatever the setting, but writes it
# only while bytecode writing is on: under PYTHONDONTWRITEBYTECODE=1 (set on this project's machines) every pytest
# process rewrote all ~550 test modules again, ~26 s of CPU each (9.9 s with the cache; session 19). The cache is
# git-ignored; subprocesses the tests start keep the environment's setting.
sys.dont_write_bytecode = False
#: where CI keeps the public GeoContext release (``../shared/reference/geocontext`` from the repo root)
DEFAULT_RELEASE_DIR = REPO_ROOT.parent / "shared" / "reference" / "geocontext"
#: the environment variable that overrides the release folder (as for campaigns, see README)
RELEASE_ENV = "GEOAGENT_RELEASE"


def find_release_dir() -> tuple[Path, str]:
    """(release folder to use, where it came from): ``$GEOAGENT_RELEASE`` when set and non-empty, else
    ``../shared/reference/geocontext`` next to the repository. The folder may not exist."""
    env = os.environ.get(RELEASE_ENV, "").strip()
    if env:
        return Path(env).expanduser().resolve(), f"${RELEASE_ENV}"
    return DEFAULT_RELEASE_DIR, "default location"


def release_available(path: Path) -> bool:
    """Whether ``path`` looks like a GeoContext release folder (it has ``sites.csv``)."""
    return (path / "sites.csv").is_file()


def pytest_report_header(config) -> str:
    """One header line saying where the release data were found, or that tests needing them are skipped."""
    return _release_line()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The same line at the end of the run: ``pytest -q`` (the README's command) hides the header."""
    if config.get_verbosity() < 0:
        terminalreporter.write_line(_release_line())


def _release_line() -> str:
    path, source = find_release_dir()
    if release_available(path):
        return f"GeoContext release data: {path} ({source})"
    return (f"GeoContext release data not found at {path} ({source}): tests that need it are skipped "
            f"(set ${RELEASE_ENV} to the release folder to run them)")


# no index of run folders outside a test's own (below): session fixtures (the demo run once per session) and their
# subprocesses would otherwise write to the user's ~/.local/state/geoagent/runs_index.jsonl (rev25 #9)
os.environ["GEOAGENT_RUNS_INDEX"] = ""


@pytest.fixture(autouse=True)
def _own_runs_index(tmp_path_factory, monkeypatch):
    """Every test gets an index of run folders of its own (:mod:`geoagent.runtime.runs_index`; subprocesses it
    starts inherit the variable): tests run the same config files from many folders, and the user's own index
    under ``~/.local/state`` stays untouched."""
    monkeypatch.setenv("GEOAGENT_RUNS_INDEX", str(tmp_path_factory.mktemp("runs-index") / "runs_index.jsonl"))


@pytest.fixture(scope="session")
def release_dir() -> Path:
    """The public GeoContext release folder (``$GEOAGENT_RELEASE``, else ``../shared/reference/geocontext``);
    skips when it holds no ``sites.csv``."""
    path, source = find_release_dir()
    if not release_available(path):
        pytest.skip(f"GeoContext release data not found at {path} ({source}; set ${RELEASE_ENV})")
    return path


@pytest.fixture
def sandbox_crawled(tmp_path_factory, monkeypatch) -> tuple[Path, str]:
    """(root, what the crawl printed): the shipped offline crawl (geoagent/configs/crawl_sandbox.toml) finished
    under ``root`` (``root / "state" / "crawl-sandbox"``), the data roots and MAPILLARY_TOKEN pointed at it, as
    ``isolated_roots`` plus that crawl leave them; crawled once per session and restored for each test
    (tests/_crawl_once.py)."""
    from tests._crawl_once import sandbox_crawl

    return sandbox_crawl(tmp_path_factory, monkeypatch)


@pytest.fixture
def isolated_roots(tmp_path, monkeypatch) -> Path:
    """Point the queue and state roots at a temporary folder for one test."""
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    return tmp_path


# the run fails when it adds to the checkout's state/ or queues/ (tests/_repo_guard.py)
@pytest.fixture
def refused_port():
    """A loopback TCP port that refuses connections for the whole test: bound here and never listening, so no
    other test process can take it (a port from ``free_port()`` is free only until someone binds it: a parallel
    test's server once did, mid-run, and the host "down" answered)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


from _repo_guard import pytest_sessionfinish, pytest_sessionstart  # noqa: E402,F401
