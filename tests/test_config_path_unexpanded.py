"""A config file named with what a shell expands but did not (session 17; carried from the session-16 note).

Before: ``run.py run '~/x.toml'`` (the ~ quoted, so the shell left it as written) said only ``~/x.toml: file not
found``, although ``/home/you/x.toml`` existed: nothing said the ~ had not been expanded. Now the error names the
cause and the path to write; so does a ``'$HOME/x.toml'`` left unexpanded by single quotes. Other missing files keep
the short message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from geoagent.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[1]


def test_a_quoted_tilde_is_named_with_the_path_to_write(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "x.toml").write_text("", encoding="utf-8")  # the file the user meant
    with pytest.raises(ConfigError) as err:
        load_config("~/x.toml")
    text = str(err.value)
    assert "file not found" in text and "not inside quotes" in text
    assert repr(str(tmp_path / "x.toml")) in text


def test_an_unexpanded_variable_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config("$HOME/x.toml")
    assert "$HOME is an environment variable the shell did not expand" in str(err.value)


def test_another_missing_file_keeps_the_short_message(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "nothere.toml"))
    assert str(err.value).endswith("file not found")


def test_the_cli_prints_it_as_one_config_error_line(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, str(REPO / "run.py"), "status", "~/x.toml"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert lines == [f"config error: ~/x.toml: file not found (a leading ~ is the home folder only where the shell "
                     f"expands it, not inside quotes: write {str(tmp_path / 'x.toml')!r} or leave the ~ unquoted)"]
