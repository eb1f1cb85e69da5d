"""A queue file knows whose queue it is (adversarial review 25, item 4).

A ``requests.sqlite`` copied from another campaign's folder was taken as this campaign's: the run set aside 345
foreign tasks as superseded and ended ``complete``, and with a finished foreign file reported ``done 455`` for a
400-request plan. Each queue file now records its campaign and edge when first opened for writing; a file stamped
for another campaign or edge is refused, naming it, by ``run`` and by ``status``, and nothing is written to it."""

from __future__ import annotations

import shutil

import anyio
import pytest

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from geoagent.runtime.sqlite_queue import QueueFileError, SQLiteQueue


def test_a_queue_file_from_another_campaign_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = generic_campaign(tmp_path, name="mine", n=4, models=model_table("m"))
    other = generic_campaign(tmp_path, name="other", n=6, models=model_table("m"))
    assert main(["run", str(mine), "--no-live"]) == 0
    assert main(["run", str(other), "--no-live"]) == 0
    target = tmp_path / "queues" / "mine" / "requests.sqlite"
    for side in ("-wal", "-shm"):
        (target.parent / (target.name + side)).unlink(missing_ok=True)
    shutil.copy(tmp_path / "queues" / "other" / "requests.sqlite", target)
    before = target.read_bytes()
    for command in (["run", str(mine), "--no-live"], ["status", str(mine)]):
        capsys.readouterr()
        assert main(command) == 2, command
        err = " ".join(capsys.readouterr().err.split())
        assert f"{target} is the 'requests' queue of campaign 'other', not the 'requests' queue of campaign 'mine'" in err, err
    assert target.read_bytes() == before


def test_another_edges_file_is_refused_and_a_new_file_is_stamped(tmp_path):
    async def go():
        q = SQLiteQueue.open(tmp_path, "c", "responses")
        await q.put("k", {"x": 1})
        await q.close()
        shutil.copy(tmp_path / "c" / "responses.sqlite", tmp_path / "c" / "requests.sqlite")
        with pytest.raises(QueueFileError, match="is the 'responses' queue of campaign 'c', not the 'requests'"):
            SQLiteQueue.open(tmp_path, "c", "requests")
        again = SQLiteQueue.open(tmp_path, "c", "responses")  # its own name: fine
        assert (await again.counts()).ready == 1
        await again.close()

    anyio.run(go)


def test_a_file_from_before_the_stamp_is_stamped_as_opened(tmp_path):
    import sqlite3

    async def make():
        q = SQLiteQueue.open(tmp_path, "c", "requests")
        await q.put("k", {"x": 1})
        await q.close()

    anyio.run(make)
    path = tmp_path / "c" / "requests.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE queue_identity")  # as written by code from before the stamp
    conn.close()

    async def reopen():
        q = SQLiteQueue.open(tmp_path, "c", "requests")
        assert (await q.counts()).ready == 1
        await q.close()

    anyio.run(reopen)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT campaign, edge FROM queue_identity").fetchall() == [("c", "requests")]
    conn.close()
