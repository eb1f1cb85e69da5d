"""Run from another folder than the campaign's, the errors say that relative paths are taken from the working
directory before advising to run the demo again, and ``export`` says where it looked (walkthrough 20, finding 1).

Before: ``run my_verify.toml`` from another folder said "crawl output not found: state/demo-crawl/sites.csv (... does
not exist); run `python run.py demo` first": following it built a second demo tree in the wrong folder; and
``export`` said "campaign my-verify has not run yet", of a campaign that had run, in another folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.data.importer import import_release

CONFIG = """\
[campaign]
name = "elsewhere-verify"
kind = "geoverify"

[paths]
release_dir = "state/demo-crawl"

[budget]
cap_usd = 1.0

[[models]]
name = "m"
provider = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "NO_SUCH_KEY_ENV"
"""


@pytest.fixture()
def elsewhere(tmp_path, monkeypatch):
    home = tmp_path / "home"
    other = tmp_path / "other"
    home.mkdir()
    other.mkdir()
    for k in ("GEOAGENT_STATE", "GEOAGENT_QUEUES", "GEOAGENT_RELEASE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(other)
    return home, other


def test_a_relative_crawl_folder_missing_here_names_the_working_directory_first(elsewhere):
    _, other = elsewhere
    with pytest.raises(FileNotFoundError) as e:
        import_release(Path("state") / "demo-crawl")
    msg = str(e.value)
    assert "taken from the folder the command runs in" in msg and str(other) in msg, msg
    assert msg.index("taken from the folder the command runs in") < msg.index("python run.py demo"), msg


def test_export_from_another_folder_says_where_it_looked(elsewhere, capsys):
    home, _ = elsewhere
    cfg = home / "v.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["export", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "has not run yet" in err and os.path.join("state", "elsewhere-verify") in err
    assert "run export from the folder the campaign ran in" in err, err
