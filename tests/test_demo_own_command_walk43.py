"""Walk43 #7: the demo's summary names the commands as the user ran the program.

README's set-up runs ``.venv/bin/python run.py demo`` and never activates the virtual environment, yet the demo's
summary said "configs (filled in; `python run.py status|dead|export FILE` works on each)": a bare ``python`` there
lacks the project's dependencies. The summary (and its resume line) now names the interpreter that ran the demo:
relative to the working directory when inside it, ``python`` when that is the one ``PATH`` finds, else its
absolute path; ``geoagent`` for the installed entry point. Checked in a real ``run.py`` subprocess under a
virtual-environment-like folder (a link to this interpreter) and against ``own_command`` itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from geoagent import demo

REPO = Path(__file__).resolve().parents[1]

#: prints what the demo's summary would name, run as ``run.py`` is (its argv[0] the script as typed)
PROBE = "import sys; sys.argv[0] = {argv0!r}; from geoagent.demo import own_command; print(own_command())"


def _probe(python: str, cwd: Path, argv0: str, path_env: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": path_env}
    got = subprocess.run([python, "-c", PROBE.format(argv0=argv0)], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def test_the_summary_names_the_interpreter_as_the_user_typed_it(tmp_path):
    # a project folder with its own .venv/bin/python (a link to this interpreter, as a venv's is)
    venv_bin = tmp_path / "proj" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    proj = tmp_path / "proj"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    no_python = str(tmp_path / "empty-bin")  # a PATH on which no "python" is found
    # README's way: the venv's interpreter typed from the project folder, not activated
    assert _probe(".venv/bin/python", proj, "run.py", no_python) == ".venv/bin/python run.py"
    # an activated environment: PATH finds that interpreter as "python"
    assert _probe(".venv/bin/python", proj, "run.py", str(venv_bin)) == "python run.py"
    # from another folder: the interpreter's absolute path, run.py as typed
    abs_python = str(venv_bin / "python")
    assert _probe(abs_python, elsewhere, "../proj/run.py", no_python) == f"{abs_python} ../proj/run.py"
    # walk44 A3: run.py typed as an absolute path from a folder above the project (the interpreter lies inside the
    # working directory): the interpreter is absolute too, not "proj/.venv/bin/python /abs/proj/run.py"
    assert _probe(abs_python, tmp_path, str(proj / "run.py"), no_python) == f"{abs_python} {proj / 'run.py'}"
    # ... also typed relative to that folder
    assert _probe("proj/.venv/bin/python", tmp_path, str(proj / "run.py"), no_python) == \
        f"{abs_python} {proj / 'run.py'}"
    # an activated environment keeps "python"
    assert _probe(abs_python, tmp_path, str(proj / "run.py"), str(venv_bin)) == f"python {proj / 'run.py'}"
    # the installed entry point
    assert _probe(abs_python, elsewhere, str(venv_bin / "geoagent"), no_python) == "geoagent"


def test_the_resume_line_uses_the_same_command(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["run.py", "demo"])
    monkeypatch.chdir(tmp_path)
    assert demo._resume_cmd(None) == f"{demo.own_command()} demo"
    assert demo._resume_cmd(Path("w")) == f"{demo.own_command()} demo --workdir w"
