"""The value a missing-template error tells the user to write is valid TOML naming the file, whatever the folder's
name holds (a backslash, as a Windows path has, or a double quote).

Before: ``write prompt_template = "<folder>\\x\\my_claim.txt"`` put the path in a TOML basic string as it was,
where a backslash starts an escape (``\\U...`` is an error, ``\\t`` a tab) and a quote ends the string: written as
told, the config no longer loaded, or named another file.
"""
from __future__ import annotations

import re
import tomllib

import pytest

from geoagent.paths import config_path_problem


@pytest.mark.parametrize("folder", ["cfg\\Users", 'cfg"q', "cfg\\tab", "cfg 'single'"])
def test_suggested_value_reads_back_as_the_file(tmp_path, monkeypatch, folder):
    cfg_dir = tmp_path / folder
    cfg_dir.mkdir()
    (cfg_dir / "my_claim.txt").write_text("{candidate}\n")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    text = config_path_problem("geoverify.prompt_template", "my_claim.txt", str(cfg_dir / "v.toml"))
    m = re.search(r"write (prompt_template = .+?) or run the command from", text)
    assert m, text
    assert tomllib.loads(m.group(1))["prompt_template"] == str(cfg_dir / "my_claim.txt"), m.group(1)
