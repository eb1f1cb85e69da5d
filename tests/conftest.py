"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
RELEASE_DIR = REPO_ROOT.parent / "shared" / "reference" / "geocontext"


@pytest.fixture(scope="session")
def release_dir() -> Path:
    """The public GeoContext release folder (``../shared/reference/geocontext``); skips when absent."""
    if not (RELEASE_DIR / "sites.csv").is_file():
        pytest.skip(f"GeoContext release data not found at {RELEASE_DIR}")
    return RELEASE_DIR


@pytest.fixture
def isolated_roots(tmp_path, monkeypatch) -> Path:
    """Point the queue and state roots at a temporary folder for one test."""
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    return tmp_path
