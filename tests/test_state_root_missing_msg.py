"""A run whose state root points at an empty folder (``GEOAGENT_STATE`` set wrongly) while the campaign's queues
hold work names the state folder the queues were used with, the variable that moved it, and says that deleting
the queues starts over and pays again (session 21 walkthrough, finding 4).

Before: ``its state .../campaign.sqlite ... is missing; restore the state folder, or delete queues/<campaign> to
start the campaign over``: the real state folder (recorded in ``queues/<campaign>/state_root.json``) was not
named, nor the variable, and the way out offered first-hand re-pays every call of a real campaign."""

from __future__ import annotations

from _model_harness import generic_campaign, model_table
from geoagent.cli import main


def test_a_wrong_state_root_names_the_recorded_folder_and_the_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="moved", n=4, models=model_table("m"))
    # the config names its roots; a later shell sets the state root elsewhere
    text = cfg.read_text(encoding="utf-8")
    cfg.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("state =")) + "\n", encoding="utf-8")
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    from geoagent.runtime.queue import open_queue
    import anyio

    async def more():  # work left in the queues (as after an interrupted run)
        q = open_queue(tmp_path / "queues", "moved", "requests")
        try:
            await q.put("extra-1", {"index": 99})
        finally:
            await q.close()

    anyio.run(more)
    capsys.readouterr()
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "elsewhere"))
    assert main(["run", str(cfg), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert str((tmp_path / "state" / "moved").resolve()) in err, err  # the folder the queues were used with
    assert "GEOAGENT_STATE" in err and str(tmp_path / "elsewhere") in err, err
    assert "paid again" in err, err
