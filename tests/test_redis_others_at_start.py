"""Walk27 #8: a run started on one "machine" while another machine's run of the same Redis campaign was going said
"43 requests done by earlier runs": the only sign of another run it had was this machine's run lock. A process of
any machine alive on the server (its ledger heartbeat not expired) now counts too
(:meth:`geoagent.runtime.redis_state.RedisLedger.others_alive`, read at a run's start into
``Outcome.others_at_start``: "done before this run started (another run of the campaign was already going)")."""

from __future__ import annotations

import uuid

from geoagent.engine import done_before_phrase
from geoagent.runtime.redis_state import open_redis_campaign_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture


def test_another_live_process_on_the_server_is_seen_and_a_stopped_one_is_not(tmp_path, redis_url):  # noqa: F811
    name = "oas" + uuid.uuid4().hex[:8]
    a = open_redis_campaign_state(redis_url, name, tmp_path / "machine-a")
    try:
        assert a.ledger.others_alive() is False  # alone on the server
        b = open_redis_campaign_state(redis_url, name, tmp_path / "machine-b")
        try:
            assert a.ledger.others_alive() is True and b.ledger.others_alive() is True
        finally:
            b.close()
        assert a.ledger.others_alive() is False  # b ended cleanly: its owner record is gone
        # status, export and dry runs open the ledger without recovery: they run nothing (rev27 #1)
        reader = open_redis_campaign_state(redis_url, name, tmp_path / "machine-c", recover=False)
        try:
            assert a.ledger.others_alive() is False and reader.ledger.others_alive() is True
        finally:
            reader.close()
    finally:
        a.close()
    # what the summary then says of the work the other process did
    assert "5 requests done before this run started (another run of the campaign was already going)" in (
        done_before_phrase(5, others_at_start=True))
