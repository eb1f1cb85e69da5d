"""``status`` reads the campaign's SQLite figures as of one moment (race45 #6: while a run wrote, its stored answers
and settled calls came from reads of different moments and disagreed in 578 of 2,491 looks).

:meth:`geoagent.runtime.ledger.CampaignDB.snapshot` holds one read transaction: a writer's commits in between are not
seen until it ends. Checked with two real connections (WAL), the look opened read-only as ``status`` opens it."""

from __future__ import annotations

from geoagent.runtime.ledger import CampaignDB
from geoagent.runtime.sqlite_wal import reading_only
from geoagent.runtime.store import open_campaign_state


def test_a_snapshot_sees_one_moment_while_another_connection_commits(tmp_path):
    with open_campaign_state("snap", root=tmp_path, cap_usd=1.0) as writer:
        writer.store.put_result("t", "k0", {"x": 0})
        with reading_only():
            look = CampaignDB(tmp_path / "snap" / "campaign.sqlite")
        try:
            count = "SELECT COUNT(*) FROM results"
            with look.snapshot():
                before = look.read(count)[0][0]
                writer.store.put_result("t", "k1", {"x": 1})  # committed by the run meanwhile
                assert look.read(count)[0][0] == before == 1
                with look.snapshot():  # nested: the same moment
                    assert look.read(count)[0][0] == 1
            assert look.read(count)[0][0] == 2  # after the block: the file as it is now
        finally:
            look.close()


def test_status_opens_its_state_reads_in_one_snapshot(tmp_path):
    """The look ``status`` takes (:func:`geoagent.status._one_moment`) is a snapshot on SQLite; its reads of the
    ledger and the store inside it agree with each other."""
    from geoagent.status import _one_moment

    with open_campaign_state("snap2", root=tmp_path, cap_usd=1.0) as writer:
        with reading_only(), open_campaign_state("snap2", root=tmp_path, recover=False) as state, _one_moment(state):
            first = state.store.count_results("t")
            writer.store.put_result("t", "k", {"x": 1})
            assert state.store.count_results("t") == first == 0
            assert state.db._conn.in_transaction
        assert writer.store.count_results("t") == 1
