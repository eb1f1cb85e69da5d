"""``status`` of a campaign it finds no queues for names the folder it looked in (walkthrough 9, item C).

Before, ``cd /tmp && python run.py status my/verify_lisbon.toml`` said ``no queues yet (campaign not started)`` for
a finished campaign: the data roots are relative to the working directory (documented), so status looked in
/tmp/queues. Now the line names the absolute folder and says the roots are relative to the working directory
unless the config's [paths] (or $GEOAGENT_QUEUES / $GEOAGENT_STATE) set them.
"""

from __future__ import annotations

from geoagent.cli import main

CONFIG = """[campaign]
name = "where"
kind = "generic"
seed = 2
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[generic]
n_requests = 3
"""


def _ran_in_project(tmp_path, monkeypatch) -> tuple:
    """The campaign run in ``project/`` (relative data roots, the working folder): ``(project, elsewhere, config)``,
    ``elsewhere`` an empty folder beside it; the working folder stays ``project``."""
    monkeypatch.delenv("GEOAGENT_QUEUES", raising=False)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    ran, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    ran.mkdir()
    elsewhere.mkdir()
    cfg = ran / "c.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    monkeypatch.chdir(ran)
    assert main(["run", str(cfg), "--no-live"]) == 0
    return ran, elsewhere, cfg


def test_status_names_the_absolute_folder_it_looked_in(tmp_path, monkeypatch, capsys):
    ran, elsewhere, cfg = _ran_in_project(tmp_path, monkeypatch)
    assert (ran / "queues" / "where").is_dir()
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    assert main(["status", str(cfg)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"no queues yet (campaign not started) in {elsewhere / 'queues' / 'where'}" in out, out
    assert "relative to the working directory" in out and "[paths]" in out, out
    monkeypatch.chdir(ran)  # from the folder it ran in, status finds it
    assert main(["status", str(cfg)]) == 0
    assert "no queues yet" not in capsys.readouterr().out


def test_dead_from_another_folder_names_the_folder_and_says_the_roots_are_relative(tmp_path, monkeypatch, capsys):
    """``dead`` run from another folder than the campaign's (relative data roots): before, a bare "campaign where
    not started (no queues yet): nothing dead-lettered" where ``status`` and ``export`` say the roots are relative to
    the working directory; now the same hint, naming the folder it looked in and the command to run."""
    ran, elsewhere, cfg = _ran_in_project(tmp_path, monkeypatch)
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    for args in (["dead", str(cfg)], ["dead", "--requeue", str(cfg)]):
        assert main(args) == 0
        out = capsys.readouterr().out
        assert len(out.strip().splitlines()) == 1, out  # one line
        assert str(elsewhere / "queues" / "where") in out, out
        assert f"relative to the working directory, {elsewhere}," in out and "[paths]" in out, out
        assert "run dead from the folder the campaign ran in" in out, out
    assert not (elsewhere / "queues").exists() and not (elsewhere / "state").exists()
    monkeypatch.chdir(ran)  # from the folder it ran in, dead finds it
    assert main(["dead", str(cfg)]) == 0
    assert capsys.readouterr().out.strip() == "no dead-lettered work in campaign where"
