"""The command's first step (``run.py`` and the installed ``geoagent`` script): import the CLI, then run it.

Importing :mod:`geoagent.cli` and what it needs takes a few tenths of a second; a Ctrl-C in that time used to print
a ``KeyboardInterrupt`` traceback from the import (chaos45 #2), since :func:`geoagent.cli.entry`, which turns an
early interrupt into one line, was not running yet. This module imports nothing of the project's at its top.
"""

from __future__ import annotations

import sys
from typing import Callable

#: the line for an interrupt while the command's modules were still being imported: nothing was opened yet
INTERRUPTED_IMPORTING = ("interrupted (Ctrl-C) while the command was starting (importing its modules): no file was "
                         "read or changed; re-run the same command")


def load_cli() -> Callable[[], None]:
    """Import and return :func:`geoagent.cli.entry`; a ``KeyboardInterrupt`` during the import prints
    :data:`INTERRUPTED_IMPORTING` and exits 130 (128 + SIGINT, as the CLI's own interrupts). A third-party package
    missing at import raises ``ModuleNotFoundError`` (``run.py`` names it and how to install)."""
    try:
        from geoagent.cli import entry as cli_entry
    except KeyboardInterrupt:
        print(INTERRUPTED_IMPORTING, file=sys.stderr)
        sys.exit(130)
    return cli_entry


def entry() -> None:
    """The installed ``geoagent`` script: :func:`load_cli`, then run the command (it exits with its code)."""
    load_cli()()
