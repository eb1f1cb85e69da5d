#!/usr/bin/env python3
"""geoagent command line: ``python run.py --help``.

Thin wrapper so the CLI works from a checkout without installing; the installed entry point is ``geoagent``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from geoagent.cli import entry  # noqa: E402

if __name__ == "__main__":
    entry()
