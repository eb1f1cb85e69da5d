"""``[backend]``: a campaign chooses where its queues and ledger/store live (:mod:`geoagent.runtime.backend`).

Before: a campaign could only use SQLite files; the Redis queue and state existed but no config reached them.
Checked here: the table's validation (errors name the key, never echo a URL), the URL read from the variable
``url_env`` names and kept out of every file and message, and a whole ``generic`` campaign run, inspected
(``status``, ``dead``) and exported through the CLI on a password-protected redis-server, leaving no queue file
and no ``campaign.sqlite`` on the machine."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from _model_harness import generic_campaign, model_table
from geoagent.config import ConfigError, ConfigWarning, config_from_dict, config_sha256, load_config
from test_queue_contract import RedisServer, _redis_binary

PASSWORD = "pw-" + "Zq8" * 6  # what a URL's password looks like; must never surface


def _doc(**backend) -> dict:
    doc = {"campaign": {"name": "b1", "kind": "generic"}, "budget": {"cap_usd": 1.0}}
    if backend:
        doc["backend"] = backend
    return doc


def test_backend_table_is_validated_naming_the_key_and_never_echoing_a_url():
    assert config_from_dict(_doc()).backend.kind == "sqlite"
    with pytest.raises(ConfigError) as ei:
        config_from_dict(_doc(kind="mysql", url_env=f"redis://:{PASSWORD}@h:6379/0", url="x"))
    text = str(ei.value)
    assert "backend.kind: expected one of 'sqlite' or 'redis', got 'mysql'" in text
    assert "backend.url_env: expected the NAME of an environment variable" in text
    assert "backend.url: unknown key (did you mean 'url_env'?)" in text
    assert PASSWORD not in text


def test_backend_changes_no_config_hash_and_warns_what_is_not_shared():
    plain = config_from_dict(_doc())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        redis = config_from_dict(_doc(kind="redis", url_env="MY_REDIS"))
    assert config_sha256(plain) == config_sha256(redis)  # the same calls and results: no drift, old hashes hold
    lines = [str(w.message) for w in seen if issubclass(w.category, ConfigWarning)]
    # provider rate limits are shared across machines now (the host-share board on Redis,
    # tests/test_hostshare_redis.py): no warning says otherwise; what is still per machine is
    assert not any("rate limits" in s for s in lines), lines
    # (session 12) what the dry run cannot count on Redis is said in its report, not on every config load
    assert not any("dry run's count of work already queued" in s for s in lines), lines


@pytest.fixture(scope="module")
def secured_redis(tmp_path_factory):
    """A redis-server that requires a password (set after start: the helper's readiness ping has none); yields
    its URL with the password in it."""
    import redis

    server = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis-pw"), "--appendonly", "no")
    server.start()
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        client.config_set("requirepass", PASSWORD)
        client.close()
        yield f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    finally:
        server.stop()


def _redis_campaign(tmp_path: Path, name: str, n: int = 20) -> Path:
    p = generic_campaign(tmp_path, name=name, n=n, models=model_table("m"), cap_usd=1.0)
    p.write_text(p.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    return p


def _cli(args: list[str], capsys) -> tuple[int, str]:
    from geoagent.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        rc = main(args)
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_unset_variable_or_unreachable_server_refuse_with_the_key_and_no_secret(tmp_path, monkeypatch, capsys):
    cfg_path = _redis_campaign(tmp_path, "b2")
    monkeypatch.delenv("GA_TEST_REDIS", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env of the repository
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 2 and "[backend] url_env" in text and "GA_TEST_REDIS" in text and "is not set" in text
    assert not (tmp_path / "state").exists() and not (tmp_path / "queues").exists()
    monkeypatch.setenv("GA_TEST_REDIS", f"redis://:{PASSWORD}@127.0.0.1:1/0")  # nothing listens on port 1
    for command in ("run", "status", "export"):
        rc, text = _cli([command, str(cfg_path)], capsys)
        assert rc == 2 and "cannot be used" in text and PASSWORD not in text, (command, text)
    monkeypatch.setenv("GA_TEST_REDIS", f"http://u:{PASSWORD}@h/")
    rc, text = _cli(["status", str(cfg_path)], capsys)
    assert rc == 2 and "does not hold a redis://" in text and PASSWORD not in text


def test_campaign_runs_and_is_read_and_exported_on_redis_with_no_local_queue_or_ledger(
        tmp_path, monkeypatch, capsys, secured_redis):
    cfg_path = _redis_campaign(tmp_path, "b3", n=20)
    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0, text
    assert "complete" in text and "calls 20" in text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = load_config(cfg_path)
    assert not (tmp_path / "queues").exists()  # the queues are on the server
    assert not (cfg.state_dir() / "campaign.sqlite").exists()  # so are the ledger and the store
    rc, text = _cli(["status", str(cfg_path)], capsys)
    assert rc == 0 and "done       20" in text and "calls 20" in text and "campaign complete" in text, text
    rc, text = _cli(["dead", str(cfg_path)], capsys)
    assert rc == 0 and "no dead-lettered work" in text
    rc, text = _cli(["export", str(cfg_path)], capsys)
    assert rc == 0 and "model_responses: 20 rows" in text, text
    # a dead letter on the server's queue is listed and requeued by `dead`, as a SQLite one is
    import asyncio

    from geoagent.runtime.redis_queue import open_redis_queue

    async def bury() -> None:
        q = open_redis_queue(secured_redis, "b3", "requests")
        try:
            await q.put("extra-task", {"x": 1})
            (task,) = await q.lease(1, 60)
            await q.dead_letter(task, "malformed: test")
        finally:
            await q.close()

    asyncio.run(bury())
    rc, text = _cli(["dead", str(cfg_path)], capsys)
    assert rc == 0 and "requests\textra-task\t" in text, text
    rc, text = _cli(["dead", "--requeue", str(cfg_path)], capsys)
    assert rc == 0 and "requeued 1 dead task;" in text, text
    rc, text = _cli(["dead", str(cfg_path)], capsys)
    assert "no dead-lettered work" in text
    # a second run finds every answer stored on the server: no new call (the requeued task is no request of
    # the plan: the run sets it aside as superseded)
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0 and "0 new model calls" in text and "dead 1 (1 superseded)" in text, text
    for f in (tmp_path / "state").rglob("*"):  # the URL's password is in no file the runs wrote
        if f.is_file():
            assert PASSWORD.encode() not in f.read_bytes(), f


def test_export_out_of_a_redis_campaign_without_a_state_folder_makes_none(tmp_path, monkeypatch, capsys,
                                                                          secured_redis):
    """``export --out DIR`` of a campaign whose ledger and store are on Redis, on a machine with no state folder of
    it (another machine ran it, or the folder was removed): the tables come from the server and go to DIR; no
    empty ``state/<campaign>/`` is left behind (it was, by opening the Redis state). A plain ``export`` still
    writes into the state folder, making it."""
    import shutil

    cfg_path = _redis_campaign(tmp_path, "b6", n=8)
    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0, text
    shutil.rmtree(tmp_path / "state")
    rc, text = _cli(["export", str(cfg_path), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0 and "model_responses: 8 rows" in text, text
    assert (tmp_path / "out" / "model_responses.parquet").is_file()
    assert not (tmp_path / "state").exists(), sorted(map(str, (tmp_path / "state").rglob("*")))
    rc, text = _cli(["export", str(cfg_path)], capsys)
    assert rc == 0 and "model_responses: 8 rows" in text, text
    assert (tmp_path / "state" / "b6" / "model_responses.parquet").is_file()


def test_replayed_geoverify_on_redis_matches_the_sqlite_run(tmp_path, monkeypatch, capsys, secured_redis, release_dir):
    """The release's recorded GeoVerify answers replayed once with each backend: the same summary figures and the
    same scored export. Before the fix of the Lua negation (``-0``), the Redis run's $0 settlements failed half-way
    ("calls 0", every answer "reused")."""
    from _crash_harness import parquet_frame
    from _model_harness import geoverify_replay_toml

    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    outs, frames = [], []
    for kind in ("sqlite", "redis"):
        folder = tmp_path / kind
        folder.mkdir()
        text = geoverify_replay_toml(folder, "gvb", release_dir)
        if kind == "redis":
            text += '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n'
        (folder / "gv.toml").write_text(text, encoding="utf-8")
        rc, out = _cli(["run", str(folder / "gv.toml")], capsys)
        assert rc == 0, out
        outs.append([line.replace(str(folder), "<folder>") for line in out.splitlines()
                     if line.startswith(("  spend", "  this run", "    release-replay"))])
        frames.append(parquet_frame(folder / "state" / "gvb" / "geoverify_scored.parquet", sort_by=("key",)))
    assert outs[0] == outs[1] and any("calls 336" in line for line in outs[0]), outs
    assert frames[0].equals(frames[1])


def test_switching_the_backend_of_a_campaign_with_state_is_refused(tmp_path, monkeypatch, capsys, secured_redis):
    """A campaign that ran (and paid) on one backend, then given the other: the new backend has none of its
    answers or spend, so the run would pay for every call again and start the cap from $0. Refused, naming both
    backends and the way out, before anything is written; `status` too (it would show an empty campaign)."""
    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    cfg_path = generic_campaign(tmp_path, name="b4", n=5, models=model_table("m"), cap_usd=1.0)
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0, text
    sqlite_text = cfg_path.read_text()
    cfg_path.write_text(sqlite_text + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    for command in ("run", "status", "export"):
        rc, text = _cli([command, str(cfg_path)], capsys)
        assert rc == 2 and "ran on the sqlite backend" in text and "[campaign] name" in text, (command, text)
    import redis

    assert not redis.Redis.from_url(secured_redis).keys("geoagent:b4:*")  # nothing was written there
    # and back: a campaign that ran on Redis, then given the default backend
    (tmp_path / "two").mkdir()
    cfg2 = generic_campaign(tmp_path / "two", name="b5", n=5, models=model_table("m"), cap_usd=1.0)
    plain = cfg2.read_text()
    cfg2.write_text(plain + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    assert _cli(["run", str(cfg2)], capsys)[0] == 0
    cfg2.write_text(plain, encoding="utf-8")
    rc, text = _cli(["run", str(cfg2)], capsys)
    assert rc == 2 and "ran on the redis backend" in text, text


def test_a_campaign_of_another_kind_under_the_same_name_on_another_machine_is_refused(
        tmp_path, monkeypatch, capsys, secured_redis, release_dir):
    """Two machines, each with its own state folder and config, share one Redis server: machine A runs ``generic``
    campaign ``same``; machine B's file is a GeoVerify campaign that happens to have the same ``[campaign] name``.
    On one machine the manifest refuses that (its queues, spend and results would mix with the other's); across
    machines B has no manifest, so the record must be on the server. Before: B's run went ahead, enqueued its plan
    into A's campaign and spent from A's ledger. Refused (run and dry run, exit 2) naming both kinds, before
    anything is written; A's campaign is untouched and still runs."""
    import redis

    from _model_harness import geoverify_replay_toml

    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    backend = '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n'
    raw_client = redis.Redis.from_url(secured_redis)
    (tmp_path / "z").mkdir()  # a first run that fails before queuing anything records no kind (as no manifest)
    rc, text = _cli(["run", str(_redis_campaign(tmp_path / "z", "same", n=0))], capsys)
    assert rc == 2 and "planned 0 requests" in text and raw_client.get("geoagent:same::campaign_kind") is None, text
    assert raw_client.get("geoagent:same::campaign_config") is None  # nor its config (the next first run records its own)
    (tmp_path / "a").mkdir()
    cfg_a = _redis_campaign(tmp_path / "a", "same", n=5)
    rc, text = _cli(["run", str(cfg_a)], capsys)
    assert rc == 0, text
    assert raw_client.get("geoagent:same::campaign_kind") == b"generic"
    before = {k: raw_client.type(k) for k in raw_client.keys("geoagent:same:*")}
    totals = raw_client.hgetall("geoagent:same::totals")
    (tmp_path / "b").mkdir()
    cfg_b = tmp_path / "b" / "gv.toml"
    cfg_b.write_text(geoverify_replay_toml(tmp_path / "b", "same", release_dir) + backend, encoding="utf-8")
    for args in (["run", "--simulate", str(cfg_b)], ["run", str(cfg_b)]):
        rc, text = _cli(args, capsys)
        assert rc == 2 and "generic" in text and "geoverify" in text and "[campaign] name" in text, (args, text)
        assert PASSWORD not in text
    assert {k: raw_client.type(k) for k in raw_client.keys("geoagent:same:*")} == before  # nothing written
    assert raw_client.hgetall("geoagent:same::totals") == totals
    raw_client.close()
    rc, text = _cli(["run", str(cfg_a)], capsys)  # the campaign's own file still runs
    assert rc == 0 and "complete" in text, text


def test_machines_sharing_a_redis_campaign_must_share_its_config_or_change_it_explicitly(
        tmp_path, monkeypatch, capsys, secured_redis):
    """Two machines run campaign ``shared`` (same name and kind) on one Redis server. Before: machine B's stale file
    (another ``max_output_tokens``) was accepted: it planned other requests into the same queues (and a re-run set
    the other machine's planned tasks aside as superseded). Now the first run records the config on the server and
    a machine whose config differs in what changes requests or results is refused (run and dry run, exit 2, naming
    the key, nothing written); one that differs only in pacing or the cap runs; ``--accept-config-change`` makes a
    deliberate change for the whole campaign (the record is updated and the run says so), after which a machine
    still on the old config is refused; a record that holds no config is refused naming both hashes."""
    import redis

    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    raw = redis.Redis.from_url(secured_redis)
    key = "geoagent:shared::campaign_config"

    def machine(sub: str, cap: float = 1.0, **model) -> Path:
        (tmp_path / sub).mkdir()
        p = generic_campaign(tmp_path / sub, name="shared", n=5, models=model_table("m", **model), cap_usd=cap)
        p.write_text(p.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
        return p

    cfg_a = machine("a")
    rc, text = _cli(["run", str(cfg_a)], capsys)
    assert rc == 0, text
    assert raw.get(key) is not None
    # only pacing and the cap differ (concurrency, rate, [budget] cap_usd): the same requests and results, so it runs
    cfg_pace = machine("pace", cap=3.0, concurrency=2, rate_requests=500)
    rc, text = _cli(["run", str(cfg_pace)], capsys)
    assert rc == 0, text
    # another max_output_tokens: other requests into the same queues
    cfg_b = machine("b", max_output_tokens=200)
    keys_before = {k: raw.type(k) for k in raw.keys("geoagent:shared:*")}
    totals = raw.hgetall("geoagent:shared::totals")
    recorded = raw.get(key)
    for args in (["run", "--simulate", str(cfg_b)], ["run", str(cfg_b)]):
        rc, text = _cli(args, capsys)
        assert rc == 2, (args, text)
        assert "models[0].max_output_tokens" in text and "100" in text and "200" in text, text
        assert "[campaign] name" in text and "--accept-config-change" in text, text
        assert PASSWORD not in text
    assert {k: raw.type(k) for k in raw.keys("geoagent:shared:*")} == keys_before  # nothing written
    assert raw.hgetall("geoagent:shared::totals") == totals and raw.get(key) == recorded
    # a deliberate change for the whole campaign
    rc, text = _cli(["run", "--accept-config-change", str(cfg_b)], capsys)
    assert rc == 0, text
    assert "config recorded for this campaign on the Redis server is replaced" in text, text
    assert "models[0].max_output_tokens: 100 -> 200" in text, text
    assert raw.get(key) != recorded
    rc, text = _cli(["run", str(cfg_b)], capsys)  # the new config runs on
    assert rc == 0, text
    rc, text = _cli(["run", str(cfg_a)], capsys)  # a machine still on the old config is refused
    assert rc == 2 and "models[0].max_output_tokens" in text, text
    # a record without its config (damaged, hand-written): refused naming both hashes
    raw.set(key, "0" * 64)
    rc, text = _cli(["run", str(cfg_b)], capsys)
    assert rc == 2 and "0" * 64 in text, text
    raw.close()


def test_the_recorded_config_hash_leaves_out_pacing_the_cap_and_scoring_but_not_a_request_setting():
    from geoagent.runtime.manifest import server_config_record

    def doc(**over) -> dict:
        d = {"campaign": {"name": "h1", "kind": "generic"}, "budget": {"cap_usd": 1.0},
             "models": [{"name": "m", "provider": "simulated", "model": "sim-1", "max_output_tokens": 100,
                         "concurrency": 4, "price_input_usd_per_mtok": 0.15, "price_output_usd_per_mtok": 0.6}]}
        for k, v in over.items():
            d[k] = v
        return d

    def h(d: dict) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigWarning)
            return server_config_record(config_from_dict(d))["results_sha256"]

    base = h(doc())
    paced = doc(budget={"cap_usd": 5.0}, hosts={"api.example.org": {"rate": 2}}, queue={"max_attempts": 3})
    paced["models"][0]["concurrency"] = 1
    assert h(paced) == base
    other = doc()
    other["models"][0]["max_output_tokens"] = 200
    assert h(other) != base
