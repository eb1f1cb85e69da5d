"""One campaign's queues root belongs to one state root: a process started with the same queues but another
state root is refused at start, before it can expire the other processes' leases.

Walkthrough: every process of a campaign holds ``state/<campaign>/run.lock`` and its owner lock in
``state/<campaign>/leases/``; a process that finds no other holder of the run lock takes itself for alone and
hands back every lease in the queues (the start-up recovery of a crash). A second process started with the same
``GEOAGENT_QUEUES`` (or ``[paths] queues``) but another ``GEOAGENT_STATE`` (a copy of the state folder, a typo,
another shell's environment) found no other holder in ITS state folder and handed back the live leases of the
processes running on the first one: their tasks were done twice (and paid twice where the two state folders'
response stores differ). Now ``queues/<campaign>/state_root.json`` records the state folder the queues belong
to, and a run with another state folder (while the recorded one exists) exits 2 naming both folders and the
fixes. The documented scale-out (``--stages`` processes sharing both roots) and moving both roots together
(``GEOAGENT_QUEUES`` / ``GEOAGENT_STATE`` pointed at the moved folders) still run.
"""

from __future__ import annotations

import shutil
from pathlib import Path


from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import campaign_run_lock
from geoagent.runtime.sqlite_queue import SQLiteQueue
from tests._model_harness import generic_campaign, model_table


def _campaign(tmp_path: Path) -> Path:
    return generic_campaign(tmp_path, name="paired", n=4, models=model_table())


def test_a_second_state_root_on_the_same_queues_is_refused_and_leaves_the_live_leases_alone(
        tmp_path, monkeypatch, capsys):
    cfg_path = _campaign(tmp_path)
    assert main(["run", str(cfg_path), "--no-live"]) == 0  # the campaign's first run, state in tmp/state
    other = tmp_path / "state-copy"
    shutil.copytree(tmp_path / "state", other)  # a copy of the state folder: its own campaign.sqlite
    capsys.readouterr()
    cfg = load_config(cfg_path)
    # a process of the campaign is running on tmp/state (its owner lock held) with a task leased
    with campaign_run_lock(cfg, sweep_s=None):
        q = SQLiteQueue.open(cfg.queues_root(), cfg.name, "requests")
        q.put_many_sync([("extra", {"model": "m"})])
        held = q.lease_sync(1, 300.0)
        assert [t.key for t in held] == ["extra"]
        monkeypatch.setenv("GEOAGENT_STATE", str(other))
        code = main(["run", str(cfg_path), "--no-live"])
        err = capsys.readouterr().err
        monkeypatch.delenv("GEOAGENT_STATE")
        # before: it ran (exit 0 or 3), and its start-up recovery handed back the live process's lease
        assert code == 2, err
        qdir = (tmp_path / "queues" / "paired").resolve()
        assert str(qdir) in err and str((tmp_path / "state" / "paired").resolve()) in err
        assert str((other / "paired").resolve()) in err and "GEOAGENT_STATE" in err
        # the fix it offers for a copied state folder is deleting the record, never a folder holding results
        assert f"delete the record {qdir / 'state_root.json'}" in " ".join(err.split()) and "remove it" not in err
        assert q.counts_sync().leased == 1  # the running process's lease is intact
        q.ack_sync(held)  # and still its own
        q.close_sync()


def test_scale_out_processes_and_roots_moved_together_still_run(tmp_path, monkeypatch):
    cfg_path = _campaign(tmp_path)
    # two --stages processes sharing both roots (one after the other here): the same pair, no refusal
    assert main(["run", str(cfg_path), "--no-live", "--stages", "model_caller"]) in (0, 3)
    assert main(["run", str(cfg_path), "--no-live"]) == 0
    # both roots moved together, pointed at by the environment: the record follows the move
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(str(tmp_path / "queues"), moved / "queues")
    shutil.move(str(tmp_path / "state"), moved / "state")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(moved / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(moved / "state"))
    assert main(["run", str(cfg_path), "--no-live"]) == 0
    record = moved / "queues" / "paired" / "state_root.json"
    assert str((moved / "state" / "paired").resolve()) in record.read_text()
    # queues of a version before the record (none there): the next run records its state folder at its start
    record.unlink()
    assert main(["run", str(cfg_path), "--no-live"]) == 0
    assert str((moved / "state" / "paired").resolve()) in record.read_text()


def test_a_dry_run_records_nothing(tmp_path):
    cfg_path = _campaign(tmp_path)
    assert main(["run", str(cfg_path), "--simulate"]) == 0
    assert not (tmp_path / "queues" / "paired" / "state_root.json").exists()


