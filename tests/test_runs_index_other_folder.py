"""A config kept outside the project folder, run from a second folder, is refused like one run from a subfolder
(walkthrough 25, item 2).

The walker kept ``cfg/tired4.toml`` beside the project, ran it from the project folder (state in
``project/state/tired4``), then from the folder above: the dry run planned 340 calls with no word of the $0.4967
already spent, the run started a second copy and paid 32 calls whose answers were stored in the first, and
``status`` said "not started". The folder search only looked at the config's folder and those above it. Each run
now records where it ran from in a per-user index (:mod:`geoagent.runtime.runs_index`), and ``run``,
``--simulate``, ``status``, ``dead`` and ``export`` from elsewhere name that folder; absolute roots or another
``[campaign] name`` still run a copy on purpose."""

from __future__ import annotations

from geoagent.cli import main

CONFIG = """[campaign]
name = "elsewhere"
kind = "generic"
seed = 2
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 50
[generic]
n_requests = 4
"""


def _ran_from_project(tmp_path, monkeypatch):
    """A config in ``cfg/``, run from ``project/`` with the data roots relative; returns (config, project, other)."""
    for var in ("GEOAGENT_QUEUES", "GEOAGENT_STATE"):
        monkeypatch.delenv(var, raising=False)
    cfg_dir, project, other = tmp_path / "cfg", tmp_path / "project", tmp_path / "other"
    for d in (cfg_dir, project, other):
        d.mkdir()
    cfg = cfg_dir / "c.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    monkeypatch.chdir(project)
    assert main(["run", str(cfg), "--no-live"]) == 0
    return cfg, project, other


def test_a_config_kept_elsewhere_is_not_started_again_from_another_folder(tmp_path, monkeypatch, capsys):
    cfg, project, other = _ran_from_project(tmp_path, monkeypatch)
    assert (project / "state" / "elsewhere" / "campaign.sqlite").is_file()
    monkeypatch.chdir(other)
    for command in (["run", str(cfg), "--no-live"], ["run", str(cfg), "--simulate", "--no-live"],
                    ["status", str(cfg)], ["dead", str(cfg)], ["export", str(cfg)]):
        capsys.readouterr()
        assert main(command) == 2, command
        captured = capsys.readouterr()
        said = " ".join((captured.out + captured.err).split())
        assert f"it ran in {project}" in said, (command, said)
    assert not (other / "state").exists() and not (other / "queues").exists()  # nothing started there
    # on purpose: absolute roots run a separate copy
    monkeypatch.setenv("GEOAGENT_QUEUES", str(other / "q"))
    monkeypatch.setenv("GEOAGENT_STATE", str(other / "s"))
    assert main(["run", str(cfg), "--no-live"]) == 0


def test_the_index_can_be_turned_off(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_RUNS_INDEX", "")
    cfg, _, other = _ran_from_project(tmp_path, monkeypatch)
    monkeypatch.chdir(other)
    assert main(["status", str(cfg)]) == 0  # no index: the campaign is not known here
    assert "not started" in capsys.readouterr().out


def test_no_home_folder_means_no_index_not_a_traceback(tmp_path, monkeypatch):
    """Review rev25 (7): with HOME unset and no passwd entry, ``Path.home()`` raises RuntimeError, and ``run`` and
    ``status`` ended in a traceback."""
    from pathlib import Path

    from geoagent.config import config_from_dict
    from geoagent.runtime import runs_index

    monkeypatch.delenv("GEOAGENT_RUNS_INDEX", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)

    def no_home(cls=None):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", classmethod(no_home))
    assert runs_index.index_path() is None
    import tomllib

    cfg = config_from_dict(tomllib.loads(CONFIG), source=str(tmp_path / "c.toml"))
    runs_index.record_run_folder(cfg)  # nothing, no error
    assert runs_index.run_folders(cfg) == []


def test_a_run_refused_for_a_missing_key_records_no_run_folder(tmp_path, monkeypatch, capsys):
    """Session 36 (noticed): a run refused for a missing API key was still recorded in the runs index, as if the
    config ran in that folder. The folder is now recorded after the key check."""
    import os
    from pathlib import Path

    for var in ("GEOAGENT_QUEUES", "GEOAGENT_STATE", "GEOAGENT_TEST_ABSENT_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "k.toml"
    cfg.write_text(CONFIG.replace('provider = "simulated"', 'provider = "openai"\nbase_url = "https://api.example.invalid/v1"\n'
                                   'api_key_env = "GEOAGENT_TEST_ABSENT_KEY"'),
                   encoding="utf-8")
    index = Path(os.environ["GEOAGENT_RUNS_INDEX"])
    assert main(["run", str(cfg), "--no-live"]) == 2
    assert "GEOAGENT_TEST_ABSENT_KEY" in capsys.readouterr().err
    assert not index.exists() or str(tmp_path) not in index.read_text(encoding="utf-8")
