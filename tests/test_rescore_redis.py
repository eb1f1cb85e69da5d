"""A scored row deleted on the Redis backend (its hash field) is scored again by the next run, from the answer queued
for the scorer (as on SQLite: tests/test_scored_row_deleted.py); a damaged one names the redis-cli command that
deletes it. Found by review rev22; a real replay campaign on a local redis-server."""
from __future__ import annotations

import json
import re
from pathlib import Path


from geoagent.cli import main
from geoagent.runtime.redis_state import state_prefix
from test_queue_contract import redis_url  # noqa: F401

REPLAY = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geocontext_replay.toml"


def _cli(capsys, *args):
    capsys.readouterr()
    rc = main(list(args))
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_redis_deleted_row_rescored(release_dir, tmp_path, monkeypatch, capsys, redis_url):
    import redis

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    text = REPLAY.read_text().replace("../shared/reference/geocontext", str(release_dir))
    cfg = tmp_path / "r.toml"
    cfg.write_text(text + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    raw = redis.Redis.from_url(redis_url)
    h = state_prefix("geocontext-replay") + "t:geoverify_scored"
    keys = sorted(k.decode() for k in raw.hkeys(h))
    n = len(keys)
    gone = keys[5:8]
    row5 = json.loads(raw.hget(h, gone[0]))
    raw.hdel(h, *gone)
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert "3 planned tasks scored by an earlier run had no row" in err
    assert raw.hlen(h) == n
    assert json.loads(raw.hget(h, gone[0])) == row5
    assert "n parsed (main arm)" in (tmp_path / "state/geocontext-replay/report/geoverify_table.csv").read_text()
    csv = (tmp_path / "state/geocontext-replay/report/geoverify_table.csv").read_text().splitlines()[1]
    assert ",336," in csv, csv
    # a damaged row: the message names the command that deletes it; deleted so, the next run scores it again
    raw.hset(h, gone[1], "{not json")
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 2 and "Traceback" not in err, out[-2000:] + err[-2000:]
    command = re.search(r"\(redis-cli (HDEL \S+) <the row's key>\)", err)
    assert command and command.group(1) == f"HDEL {h}" and "scores it again from its queued answer" in err, err
    raw.hdel(h, gone[1])
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0 and "1 planned task scored by an earlier run had no row" in err, out[-2000:] + err[-2000:]
    assert raw.hlen(h) == n
