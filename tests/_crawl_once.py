"""A sandbox crawl run once per test session and put back, pristine, at the same path for each test.

``run_crawl_once`` runs ``run.py crawl <config>`` to completion under a root of its own and keeps a pristine copy
of its queues and state; ``restore_crawl`` puts that copy back at the same root (so every path the crawl's
manifests and queues record stays its own), removes whatever an earlier test added there, and points the data
roots at it. A config (same file, same text) is crawled once per session: later calls get the same root and
copy (modules run one after another, and every user restores the copy before reading it).

``sandbox_crawl`` does both for the shipped offline crawl (geoagent/configs/crawl_sandbox.toml): what a test that
began with ``isolated_roots`` and ``main(["crawl", <that config>, "--no-live"])`` had, without running the crawl
again (the crawl is deterministic up to its own timestamps; each test got a crawl of its own before, now a
restored copy of one, at a root of the same shape). Used by the tests/conftest.py fixture ``sandbox_crawled`` and
by module fixtures (tests/test_adversarial_inputs.py, tests/test_crawl_handoff.py, ...).
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest

SANDBOX_TOKEN = "MLY|sandbox"
#: the shipped offline crawl
SANDBOX_CRAWL_CONFIG = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"
#: (config path, config text) -> (root, pristine copy, what the crawl printed): the crawls of this session
_CRAWLED: dict[tuple[str, str], tuple[Path, Path, str]] = {}


def _point_roots(mp: pytest.MonkeyPatch, root: Path) -> None:
    mp.setenv("GEOAGENT_QUEUES", str(root / "queues"))
    mp.setenv("GEOAGENT_STATE", str(root / "state"))
    mp.setenv("MAPILLARY_TOKEN", SANDBOX_TOKEN)


def run_crawl_once(tmp_path_factory: pytest.TempPathFactory, config: Path) -> tuple[Path, Path, str]:
    """Run the crawl of ``config`` to completion, once per session for the same file and text; return (root,
    pristine copy of its queues and state, what the crawl printed). Raises AssertionError when the crawl does
    not exit 0."""
    from geoagent.cli import main

    key = (str(Path(config).resolve()), Path(config).read_text(encoding="utf-8"))
    if key in _CRAWLED:
        return _CRAWLED[key]
    root = tmp_path_factory.mktemp("crawled")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        _point_roots(mp, root)
        assert main(["crawl", str(config), "--no-live"]) == 0
    pristine = tmp_path_factory.mktemp("crawled-pristine")
    for sub in ("queues", "state"):
        shutil.copytree(root / sub, pristine / sub, symlinks=True)
    _CRAWLED[key] = (root, pristine, printed.getvalue())
    return _CRAWLED[key]


def restore_crawl(root: Path, pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the pristine crawl back at ``root`` (everything else under it removed) and point the data roots at it."""
    for entry in root.iterdir():  # what an earlier test added (its own campaigns, configs) goes too
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for sub in ("queues", "state"):
        shutil.copytree(pristine / sub, root / sub, symlinks=True)
    _point_roots(monkeypatch, root)


def sandbox_crawl(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """The shipped offline crawl (:data:`SANDBOX_CRAWL_CONFIG`), run once per session, put back pristine at its
    root with the data roots (and the sandbox's Mapillary token) pointed at it; returns (root, what the crawl
    printed on stdout)."""
    root, pristine, out = run_crawl_once(tmp_path_factory, SANDBOX_CRAWL_CONFIG)
    restore_crawl(root, pristine, monkeypatch)
    return root, out


def sandbox_crawl_for_module(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """:func:`sandbox_crawl` for a module-scoped fixture whose tests only read the crawl (or write beside it under
    the same root): restored once, the environment left as it was; returns (root, what the crawl printed)."""
    with pytest.MonkeyPatch.context() as mp:
        return sandbox_crawl(tmp_path_factory, mp)
