#!/usr/bin/env python3
"""geoagent command line: ``python run.py --help``.

Thin wrapper so the CLI works from a checkout without installing; the installed entry point is ``geoagent``.
Run by a Python that lacks one of the project's packages (outside the project's ``.venv``), it prints one line
naming the package and how to install (README "Set up on a fresh machine") and exits 2, instead of a
``ModuleNotFoundError`` traceback; a Python older than :data:`MIN_PYTHON` gets one line saying so (this file
stays readable by Python 3.8: no annotation is evaluated).
"""

from __future__ import annotations

import signal
import sys

#: a Ctrl-C during start-up is held back until the CLI is imported (geoagent._start.load_cli ends the command then, in
#: one line): imports interrupted part-way printed a traceback, and one inside orjson's set-up crashed Python
#: (review45a #2, #3); None where SIGINT is not Python's own (ignored in a background job): left as it is
_HELD: list | None = None
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    _HELD = []
    signal.signal(signal.SIGINT, lambda signum, frame: _HELD.append(signum))

import importlib.util  # noqa: E402 - after the handler above
from pathlib import Path  # noqa: E402

#: ``pyproject.toml`` ``[project] dependencies`` (distribution name -> import name), in its order; checked
#: before the import so a package imported late (polars, matplotlib) is named at start, not mid-run
DEPENDENCIES = {
    "aiohttp": "aiohttp",
    "anyio": "anyio",
    "asyncio-throttle": "asyncio_throttle",
    "tenacity": "tenacity",
    "orjson": "orjson",
    "polars": "polars",
    "numpy": "numpy",
    "scipy": "scipy",
    "pydantic": "pydantic",
    "python-dotenv": "dotenv",
    "rich": "rich",
    "matplotlib": "matplotlib",
    "pillow": "PIL",
}

#: ``pyproject.toml`` ``requires-python``
MIN_PYTHON = (3, 11)

INSTALL_HINT = ("activate the project's environment (. .venv/bin/activate) or run .venv/bin/python run.py ...; "
                "to create it: python3 -m venv .venv && .venv/bin/pip install -q -e .")


def missing_dependency() -> str | None:
    """The first of :data:`DEPENDENCIES` (distribution name) this Python cannot import, else None.

    Looks the packages up without importing them (``importlib.util.find_spec``), a few milliseconds."""
    for dist, module in DEPENDENCIES.items():
        try:
            if importlib.util.find_spec(module) is None:
                return dist
        except (ImportError, ValueError):  # ValueError: a module in sys.modules with no spec
            return dist
    return None


def _refuse(package: str) -> None:
    print(f"error: geoagent needs the package {package!r}, which this Python ({sys.executable}) does not have: "
          f"{INSTALL_HINT}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    if sys.version_info < MIN_PYTHON:  # a distribution's older python3 outside the project's .venv
        need = ".".join(map(str, MIN_PYTHON))
        print(f"error: geoagent needs Python {need} or newer; this Python ({sys.executable}) is "
              f"{sys.version.split()[0]}: run .venv/bin/python run.py ..., or create the environment with a newer "
              f"one: python{need} -m venv .venv && .venv/bin/pip install -q -e .", file=sys.stderr)
        sys.exit(2)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    missing = missing_dependency()
    if missing is not None:
        _refuse(missing)
    from geoagent._start import load_cli  # imports nothing else: a Ctrl-C while the CLI is imported is one line

    try:
        entry = load_cli(_HELD)
    except ModuleNotFoundError as exc:  # a third-party package not in DEPENDENCIES; our own modules traceback
        if not exc.name or exc.name.split(".")[0] == "geoagent":
            raise
        _refuse(exc.name.split(".")[0])
    entry()
