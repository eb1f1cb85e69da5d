"""``run.py`` run by a Python older than the project's ``requires-python`` says so in one line (exit 2).

Before: under Python 3.8 or 3.9 (a distribution's ``python3`` outside the project's ``.venv``, the case the
missing-package line is for) it stopped at its own annotation ``-> str | None`` with ``TypeError: unsupported
operand type(s) for |``, a traceback, before any check ran. The interpreter test runs where an old Python is
installed (pyenv here); the version rule itself is checked everywhere.
"""
from __future__ import annotations

import glob
import re
import runpy
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _old_pythons() -> list[str]:
    found = [shutil.which(f"python3.{m}") for m in (8, 9, 10)]
    found += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.[89]*/bin/python3.[89]")))
    out = []
    for p in found:
        if p and p not in out:
            r = subprocess.run([p, "-c", "import sys; print(sys.version_info < (3, 11))"], capture_output=True,
                               text=True, timeout=30)
            if r.returncode == 0 and r.stdout.strip() == "True":
                out.append(p)
    return out


def test_min_python_is_pyproject_s():
    ns = runpy.run_path(str(REPO / "run.py"), run_name="not_main")
    spec = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert spec == ">=" + ".".join(map(str, ns["MIN_PYTHON"]))


@pytest.mark.parametrize("python", _old_pythons() or [pytest.param(None, marks=pytest.mark.skip("no old Python"))])
def test_old_python_gets_one_line(python):
    r = subprocess.run([python, "-S", "-I", str(REPO / "run.py"), "--help"], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert re.match(r"error: geoagent needs Python 3\.11 or newer; this Python \(.+\) is 3\.\d+", lines[0]), lines[0]
    assert "-m venv .venv" in lines[0], lines[0]
