"""A Ctrl-C while ``run.py`` still imports the CLI is one line and exit 130, not a ``KeyboardInterrupt`` traceback
(chaos45 #2: SIGINT 0.1-0.15 s after start printed the import's traceback, exit 1; at 0.2-0.3 s a ``status`` was told
"before the run started its workers ... re-run the same command to start or resume", the run's wording).

The signal is sent once the child has loaded ``unicodedata``'s extension module (``/proc/<pid>/maps``), which the
CLI's import pulls in near its end (``geoagent.textfmt``); the CLI module's own body then still runs for tens of ms.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geoagent._start import INTERRUPTED_IMPORTING

REPO = Path(__file__).resolve().parents[1]
STATUS_LINE = "interrupted (Ctrl-C): `status` only reads the campaign's files; nothing was changed"


def _loaded(pid: int, name: str) -> bool:
    try:
        return name in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_ctrl_c_while_the_cli_is_imported_is_one_line(tmp_path):
    lines = []
    for _ in range(5):
        child = subprocess.Popen([sys.executable, str(REPO / "run.py"), "status", str(tmp_path / "none.toml")],
                                 cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 # the child must take SIGINT as Python's default (an xdist worker may ignore it)
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while not _loaded(child.pid, "unicodedata") and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 130 and "Traceback" not in err, (child.returncode, err[-3000:])
        last = err.strip().splitlines()[-1]
        assert last in (INTERRUPTED_IMPORTING, STATUS_LINE), err[-3000:]
        lines.append(last)
    assert INTERRUPTED_IMPORTING in lines, lines  # the import's window was hit, and said so


@pytest.mark.parametrize("argv, expected", [
    (["run.py", "status", "x.toml"], "`status` only reads"),
    (["run.py", "-v", "dead", "x.toml"], "`dead` only reads"),
    (["run.py", "dead", "x.toml", "--requeue"], "before the run started its workers"),
    (["run.py", "run", "x.toml", "--simulate"], "dry run"),
    (["run.py", "run", "x.toml"], "before the run started its workers"),
    (["run.py", "--version"], "nothing was read or changed"),  # review45b #2
    (["run.py", "status", "--help"], "nothing was read or changed"),
])
def test_an_interrupt_before_the_command_line_is_parsed_reads_it_as_typed(monkeypatch, argv, expected):
    """review45a #3 (c): ``main`` parses the command line first, but an interrupt inside that parse (a few ms) found
    no parsed command and gave a ``status`` the run's line."""
    from geoagent import cli

    monkeypatch.setattr(cli, "_COMMAND", None)
    monkeypatch.setattr(sys, "argv", argv)
    assert expected in cli._interrupted_early_line()
