"""``status`` of a campaign it finds no queues for names the folder it looked in (walkthrough 9, item C).

Before, ``cd /tmp && python run.py status my/verify_lisbon.toml`` said ``no queues yet (campaign not started)`` for
a finished campaign: the data roots are relative to the working directory (documented), so status looked in
/tmp/queues. Now the line names the absolute folder and says the roots are relative to the working directory
unless the config's [paths] (or $GEOAGENT_QUEUES / $GEOAGENT_STATE) set them.

And where the campaign's queues or state lie under its config file's folder (or a folder above it), ``status``,
``dead`` and ``export`` name that folder and exit 2 (walkthrough 22, item 6: they said "not started" / "nothing
dead-lettered" and exited 0 about a campaign that had run there, which misled a script checking ``dead``).
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


def _ran_elsewhere_line(out: str, command: str, ran, elsewhere) -> None:
    assert f"under the working directory {elsewhere}" in out, out
    assert f"but it ran in {ran}" in out and f"run {command} from {ran}" in out, out
    assert "relative to the working directory" in out, out


def test_status_from_another_folder_names_the_folder_the_campaign_ran_in_and_exits_2(tmp_path, monkeypatch, capsys):
    ran, elsewhere, cfg = _ran_in_project(tmp_path, monkeypatch)
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    assert main(["status", str(cfg)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    _ran_elsewhere_line(out, "status", ran, elsewhere)
    assert "not started" not in out, out
    assert not (elsewhere / "queues").exists() and not (elsewhere / "state").exists()
    monkeypatch.chdir(ran)  # from the folder it ran in, status finds it
    assert main(["status", str(cfg)]) == 0
    assert "no queues yet" not in capsys.readouterr().out


def test_the_folder_is_found_above_the_config_files_folder(tmp_path, monkeypatch, capsys):
    """The usual layout: configs in a subfolder, the campaign run from the project folder above it."""
    monkeypatch.delenv("GEOAGENT_QUEUES", raising=False)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    ran, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (ran / "configs").mkdir(parents=True)
    elsewhere.mkdir()
    cfg = ran / "configs" / "c.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    monkeypatch.chdir(ran)
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    assert main(["export", str(cfg)]) == 2
    _ran_elsewhere_line(" ".join(capsys.readouterr().err.split()), "export", ran, elsewhere)
    assert not (elsewhere / "state").exists()


def test_status_names_the_absolute_folder_it_looked_in_when_the_campaign_ran_nowhere_it_can_see(tmp_path, monkeypatch,
                                                                                                capsys):
    ran, elsewhere, cfg = _ran_in_project(tmp_path, monkeypatch)
    monkeypatch.chdir(elsewhere)
    other = elsewhere / "c.toml"  # a copy of the config beside no run: "not started", exit 0
    other.write_text(CONFIG, encoding="utf-8")
    capsys.readouterr()
    assert main(["status", str(other)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"no queues yet (campaign not started) in {elsewhere / 'queues' / 'where'}" in out, out
    assert "relative to the working directory" in out and "[paths]" in out, out
    assert main(["dead", str(other)]) == 0
    out = capsys.readouterr().err  # nothing to list: said on stderr (cli36 #11)
    assert str(elsewhere / "queues" / "where") in out and "run dead from the folder the campaign ran in" in out, out


def test_dead_from_another_folder_names_the_folder_the_campaign_ran_in_and_exits_2(tmp_path, monkeypatch, capsys):
    """``dead`` run from another folder than the campaign's (relative data roots): before, a bare "campaign where
    not started (no queues yet): nothing dead-lettered", exit 0; now it names the folder the campaign ran in, exit 2."""
    ran, elsewhere, cfg = _ran_in_project(tmp_path, monkeypatch)
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    for args in (["dead", str(cfg)], ["dead", "--requeue", str(cfg)]):
        assert main(args) == 2
        cap = capsys.readouterr()
        err = " ".join(cap.err.split())
        assert cap.out == "" and len(cap.err.strip().splitlines()) == 1, cap
        _ran_elsewhere_line(err, "dead", ran, elsewhere)
    assert not (elsewhere / "queues").exists() and not (elsewhere / "state").exists()
    monkeypatch.chdir(ran)  # from the folder it ran in, dead finds it
    assert main(["dead", str(cfg)]) == 0
    cap = capsys.readouterr()  # stdout lists dead tasks only (cli36 #11)
    assert cap.out == "" and cap.err.strip() == "no dead-lettered work in campaign where"


def test_run_from_another_folder_is_refused_where_the_campaign_ran_beside_its_config(tmp_path, monkeypatch, capsys):
    """Walkthrough 23, item 1: ``run`` from another folder started a second copy of a finished campaign in the
    working directory (fresh queues, state, ledger and cap) and sent every call again; ``--simulate`` estimated all
    of them. Now both refuse (exit 2), name the folder the campaign ran in, and create nothing here."""
    ran, elsewhere, cfg = _ran_in_project(tmp_path, monkeypatch)
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    for args in (["run", str(cfg), "--no-live"], ["run", str(cfg), "--simulate"]):
        assert main(args) == 2
        err = " ".join(capsys.readouterr().err.split())
        _ran_elsewhere_line(err, "it", ran, elsewhere)
        assert "$GEOAGENT_QUEUES and $GEOAGENT_STATE" in err, err  # how to run a separate copy here on purpose
    assert not (elsewhere / "queues").exists() and not (elsewhere / "state").exists()
    # a separate copy here, on purpose: absolute roots
    monkeypatch.setenv("GEOAGENT_QUEUES", str(elsewhere / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(elsewhere / "state"))
    assert main(["run", str(cfg), "--no-live"]) == 0


def test_a_symlinked_config_is_searched_from_the_project_it_is_used_in(tmp_path, monkeypatch, capsys):
    """Review rev23b (2): ``project/configs/c.toml`` a link to ``shared/c.toml``: the search went up from the link's
    target (``shared/``), found nothing, and ``run`` from another folder started a second copy there."""
    monkeypatch.delenv("GEOAGENT_QUEUES", raising=False)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    shared, ran, elsewhere = tmp_path / "shared", tmp_path / "project", tmp_path / "elsewhere"
    for d in (shared, ran / "configs", elsewhere):
        d.mkdir(parents=True)
    (shared / "c.toml").write_text(CONFIG, encoding="utf-8")
    cfg = ran / "configs" / "c.toml"
    cfg.symlink_to(shared / "c.toml")
    monkeypatch.chdir(ran)
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    assert main(["run", "../project/configs/c.toml", "--no-live"]) == 2
    _ran_elsewhere_line(" ".join(capsys.readouterr().err.split()), "it", ran, elsewhere)
    assert main(["status", "../project/configs/c.toml"]) == 2
    assert not (elsewhere / "queues").exists() and not (elsewhere / "state").exists()
