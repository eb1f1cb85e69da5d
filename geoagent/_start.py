"""The command's first step (``run.py`` and the installed ``geoagent`` script): import the CLI, then run it.

Importing :mod:`geoagent.cli` and what it needs takes a few tenths of a second; a Ctrl-C in that time used to print
a ``KeyboardInterrupt`` traceback from the import (chaos45 #2), since :func:`geoagent.cli.entry`, which turns an
early interrupt into one line, was not running yet; and one landing while ``orjson``'s extension module initialised
crashed the interpreter (review45a #2: exit -11). This module imports only ``signal`` and ``sys`` (built in, no
``typing``: its import alone is a window of ~15 ms), and holds a Ctrl-C back until those imports are done.
"""

from __future__ import annotations

import importlib
import signal
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads the name so)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

#: the line for an interrupt while the command's modules were still being imported: nothing was opened yet
INTERRUPTED_IMPORTING = ("interrupted (Ctrl-C) while the command was starting (importing its modules): no file was "
                         "read or changed; re-run the same command")


def hold_sigint() -> list[int] | None:
    """Swap Python's SIGINT handler for one that notes the signal in the list returned; None (nothing swapped) where
    SIGINT is not Python's own handler (ignored: a background job; or set by the host program)."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    return noted


def load_cli(held: list[int] | None = None) -> Callable[[], None]:
    """Import and return :func:`geoagent.cli.entry`, with the modules its command imports first (``orjson``, through
    :mod:`geoagent.runtime.daemon`), SIGINT held back meanwhile (:func:`hold_sigint`; ``held``: the caller holds it
    already, its list). Then Python's handler is back and a SIGINT that came ends the command:
    :data:`INTERRUPTED_IMPORTING` on stderr, exit 130 (128 + SIGINT, as the CLI's own interrupts). A third-party
    package missing at import raises ``ModuleNotFoundError`` (``run.py`` names it and how to install)."""
    noted = held if held is not None else hold_sigint()
    came = False
    try:
        from geoagent.cli import entry as cli_entry
        importlib.import_module("geoagent.runtime.daemon")  # orjson's set-up must not take a KeyboardInterrupt
    except KeyboardInterrupt:  # SIGINT not held (not Python's own handler before): the same line
        came = True
    finally:
        if noted is not None:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if came or noted:
        print(INTERRUPTED_IMPORTING, file=sys.stderr)
        sys.exit(130)
    return cli_entry


def entry() -> None:
    """The installed ``geoagent`` script: :func:`load_cli`, then run the command (it exits with its code)."""
    load_cli()()
