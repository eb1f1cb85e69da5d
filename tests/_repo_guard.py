"""A test run leaves the repository's own data roots, and its root folder's entries, as it found them (session 18).

Every test points its campaigns at temporary folders (``isolated_roots``, ``[paths]``, ``--workdir``). One that
does not writes into ``state/`` or ``queues/`` of the checkout, where a researcher's real campaigns live, and
nothing failed when one did: a whole-suite run left ``state/gh-crash/report`` behind (the GeoHint live report
ignored ``[paths] state``; ``tests/test_geohint_live_report_dir.py``). This plugin lists those two folders when the
session starts and again when it ends (in the controlling process under pytest-xdist) and fails the run, naming
each entry, when one appeared or one that was there is gone (``removed state/README.md``). Entries already there
(a demo run earlier in the checkout) are left alone and do not count. ``$GEOAGENT_REPO_GUARD_ROOT`` names another
root to watch (its own test, ``tests/test_repo_guard.py``). Without it the guard also watches the folder the run
was started in when that is not the checkout's root (``cd tests``, an IDE): a campaign's default roots are
``state/`` and ``queues/`` of the working directory, so that is where a leaking test writes (adversarial review s18).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

ROOT_ENV = "GEOAGENT_REPO_GUARD_ROOT"
#: the folders of the root that a test run must not add to
WATCHED = ("state", "queues")
_STASH = pytest.StashKey[dict[Path, dict[str, set[str]]]]()


def _roots() -> list[Path]:
    """``$GEOAGENT_REPO_GUARD_ROOT`` alone when set; else the checkout's root, and the working directory when it
    is another folder (where the default relative ``state/`` and ``queues/`` lie)."""
    env = os.environ.get(ROOT_ENV, "").strip()
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parents[1]
    cwd = Path.cwd().resolve()
    return [here] if cwd == here else [here, cwd]


def _users_own() -> tuple[str, ...]:
    """The root-level patterns of the checkout's ``.gitignore`` (``/my_*.toml``, ``/redis_*.toml``, ``/*.pid``: a
    user's own campaign files, as the docs name them), without the slash; none when it cannot be read."""
    try:
        lines = (Path(__file__).resolve().parents[1] / ".gitignore").read_text(encoding="utf-8").splitlines()
    except OSError:
        return ()
    return tuple(ln.strip()[1:] for ln in lines if ln.strip().startswith("/") and "/" not in ln.strip()[1:])


#: an editor's copy of a file: ``my_hint.toml.bak``, ``my_hint.toml~``, ``.orig``, ``.swp``
_BACKUP_ENDS = ("", ".bak", ".orig", "~", ".swp")


def _users_own_file(name: str, own: tuple[str, ...]) -> bool:
    """Whether root entry ``name`` is named as the user's own files are (:func:`_users_own`, or an editor's copy)."""
    return any(fnmatch.fnmatchcase(name, pat + end) for pat in own for end in _BACKUP_ENDS)


def _listing(root: Path) -> dict[str, set[str]]:
    """Entries of each watched folder, and (key ``""``) the root's own entries but hidden ones (``.pytest_cache``,
    ``.venv``) and ``__pycache__``: a test that passed a relative path (``state_dir="unused"``) wrote a folder into
    the checkout's root, which the guard did not see and a commit took in (review rev24, 4)."""
    out = {name: {p.name for p in (root / name).iterdir()} if (root / name).is_dir() else set() for name in WATCHED}
    out[""] = {p.name for p in root.iterdir() if not p.name.startswith(".") and p.name != "__pycache__"} \
        if root.is_dir() else set()
    return out


def _named(folder: str, entry: str) -> str:
    return f"{folder}/{entry}" if folder else entry


def _controller(session: pytest.Session) -> bool:
    return not hasattr(session.config, "workerinput")  # an xdist worker has it


def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session):
        session.config.stash[_STASH] = {root: _listing(root) for root in _roots()}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    listings = session.config.stash.get(_STASH, None)
    if listings is None:
        return
    lines, notes = [], []
    own = _users_own()
    for root, before in listings.items():
        after = _listing(root)
        added = sorted(_named(name, entry) for name, now in after.items() for entry in now - before[name])
        # new root files named as the user's own (walk45 #2: a config saved while the suite ran failed it): said,
        # not failed; a test that wrote one would still show here (review45a #7)
        theirs = [a for a in added if "/" not in a and _users_own_file(a, own)]
        added = [a for a in added if a not in theirs]
        if theirs:
            notes.append(f"note: {', '.join(theirs)} appeared in {root} while the tests ran: named as your own files "
                         "are (.gitignore), so not counted against the run; a test must never write there")
        removed = sorted(f"removed {_named(name, entry)}" for name, now in after.items() for entry in before[name] - now)
        if added or removed:
            lines.append(f"the test run wrote into the repository's data roots or its root folder ({root}): "
                         f"{', '.join(added + removed)}; "
                         "a test must use temporary folders (isolated_roots, [paths], --workdir): failing the run "
                         "(or another process wrote there while the tests ran: run campaigns elsewhere meanwhile)")
    if not lines and not notes:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in notes + lines:
        if reporter is not None:
            reporter.write("\n")  # after the progress line, which xdist leaves unterminated
            reporter.write_line(line, red=line in lines, yellow=line in notes)
        else:  # pragma: no cover - pytest without its terminal
            print(line)
    if lines and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
