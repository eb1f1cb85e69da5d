"""tests/conftest.py: the release folder honours $GEOAGENT_RELEASE and the pytest header says where it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import DEFAULT_RELEASE_DIR, RELEASE_ENV, find_release_dir

HERE = Path(__file__).resolve()


def test_release_dir_fixture_is_the_resolved_folder(release_dir):
    """The fixture hands out the folder find_release_dir resolves, and it holds sites.csv."""
    assert release_dir == find_release_dir()[0]
    assert (release_dir / "sites.csv").is_file()


def test_env_var_first_then_default(monkeypatch, tmp_path):
    monkeypatch.setenv(RELEASE_ENV, str(tmp_path))
    assert find_release_dir() == (tmp_path.resolve(), f"${RELEASE_ENV}")
    monkeypatch.setenv(RELEASE_ENV, "  ")  # blank: as if unset
    assert find_release_dir()[0] == DEFAULT_RELEASE_DIR
    monkeypatch.delenv(RELEASE_ENV)
    assert find_release_dir()[0] == DEFAULT_RELEASE_DIR
    assert DEFAULT_RELEASE_DIR == HERE.parents[1].parent / "shared" / "reference" / "geocontext"


def _pytest_probe(release: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, RELEASE_ENV: str(release)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",  # not -q: it hides the header
         f"{HERE}::test_release_dir_fixture_is_the_resolved_folder"],
        cwd=HERE.parents[1], env=env, capture_output=True, text=True, timeout=120,
    )


def test_header_and_fixture_follow_env_var(tmp_path):
    """A folder named by $GEOAGENT_RELEASE is used (the probe test passes on it) and named in the header;
    a missing one is named as not found and the probe is skipped, not failed."""
    fake = tmp_path / "release"
    fake.mkdir()
    (fake / "sites.csv").write_text("site,lat,lon\n", encoding="utf-8")
    found = _pytest_probe(fake)
    assert found.returncode == 0, found.stdout + found.stderr
    assert f"GeoContext release data: {fake.resolve()} (${RELEASE_ENV})" in found.stdout
    assert "1 passed" in found.stdout

    missing = tmp_path / "nowhere"
    gone = _pytest_probe(missing)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert f"GeoContext release data not found at {missing.resolve()}" in gone.stdout
    assert "tests that need it are skipped" in gone.stdout
    assert "1 skipped" in gone.stdout


def test_quiet_run_still_names_the_release_folder(tmp_path):
    """README's own test command is ``pytest -q``, which hides the header: the line also ends the run's
    output (terminal summary), so the README's "pytest says which folder was found" holds (walkthrough 9 F)."""
    fake = tmp_path / "release"
    fake.mkdir()
    (fake / "sites.csv").write_text("site,lat,lon\n", encoding="utf-8")
    env = {**os.environ, RELEASE_ENV: str(fake)}
    quiet = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         f"{HERE}::test_release_dir_fixture_is_the_resolved_folder"],
        cwd=HERE.parents[1], env=env, capture_output=True, text=True, timeout=120,
    )
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert f"GeoContext release data: {fake.resolve()} (${RELEASE_ENV})" in quiet.stdout, quiet.stdout
