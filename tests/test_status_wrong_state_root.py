"""``status`` under a state root where the campaign never ran (walkthrough): ``GEOAGENT_STATE`` (or ``[paths]
state``) pointed elsewhere than the runs used, the queues found where they are.

Before: "campaign complete: every queue drained" with no spend line, exit 0, as if the campaign were done and
free. Now one line says no state of the campaign was found under that root, naming the root, what set it and the
state folder its queues were used with (their ``state_root.json``), and status exits 2, as for a wrong queues
root; with neither queues nor state found it says "not started", as for a campaign that never ran. The real CLI
on a generic campaign with the simulated model; nothing is mocked."""

from __future__ import annotations

from pathlib import Path

from geoagent.cli import main

CONFIG = """[campaign]
name = "wst"
kind = "generic"
seed = 2
{paths}
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
[generic]
n_requests = 3
"""


def _ran(tmp_path: Path, monkeypatch, capsys, paths: str = "") -> Path:
    monkeypatch.delenv("GEOAGENT_QUEUES", raising=False)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(paths=paths), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["status", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "campaign complete" in out and "spend:" in out, out
    return cfg


def test_status_under_a_wrong_state_env_root_says_no_state_found_there_not_complete(tmp_path, monkeypatch, capsys):
    cfg = _ran(tmp_path, monkeypatch, capsys)
    wrong = tmp_path / "wrong"
    monkeypatch.setenv("GEOAGENT_STATE", str(wrong))
    assert main(["status", str(cfg)]) == 2
    out = capsys.readouterr().out
    assert "campaign complete" not in out, out
    assert f"no state of campaign wst found under the state root {wrong} (set by $GEOAGENT_STATE)" in out, out
    assert str(tmp_path / "queues" / "wst") in out, out  # the queues that hold its work
    # the folder the queues were used with, and the root to point the variable at
    assert f"point $GEOAGENT_STATE or [paths] state at {(tmp_path / 'state').resolve()}" in out, out
    assert not wrong.exists()  # status creates nothing
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))  # the advice, followed
    assert main(["status", str(cfg)]) == 0
    assert "campaign complete" in capsys.readouterr().out


def test_status_under_a_wrong_paths_state_root_names_the_key(tmp_path, monkeypatch, capsys):
    cfg = _ran(tmp_path, monkeypatch, capsys, paths='[paths]\nstate = "st1"')
    cfg.write_text(cfg.read_text().replace('state = "st1"', 'state = "st2"'), encoding="utf-8")
    assert main(["status", str(cfg)]) == 2
    out = capsys.readouterr().out
    assert "campaign complete" not in out, out
    assert (f"no state of campaign wst found under the state root {tmp_path / 'st2'} (set by [paths] state in "
            f"{cfg})") in out, out
    assert f"point $GEOAGENT_STATE or [paths] state at {(tmp_path / 'st1').resolve()}" in out, out


def test_status_with_neither_queues_nor_state_found_says_not_started_as_for_a_campaign_never_run(
        tmp_path, monkeypatch, capsys):
    cfg = _ran(tmp_path, monkeypatch, capsys)
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "wrong"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "wrongq"))
    assert main(["status", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "campaign complete" not in out and "no queues yet (campaign not started)" in out, out
