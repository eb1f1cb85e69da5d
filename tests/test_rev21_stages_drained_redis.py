"""Adversarial review of commit 38bdb89 on the Redis backend (``[backend] kind = "redis"``): a ``--stages
collector`` process whose stage drained, then another process's answers reach its input before the engine's
count; with and without a stop signal in that window. Same judgement as on SQLite: ``stages collector finished``
(exit 0), the arrivals said, nothing lost. Skips without redis (the ``redis_url`` fixture)."""

from __future__ import annotations

import os
import signal

import pytest

from _late_arrival import arrive_after_drain, hold_ready
from _model_harness import generic_campaign, model_table
from geoagent import constants as C
from geoagent.cli import main
from geoagent.runtime import worker as worker_mod
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

COLLECTOR = "collector"


@pytest.mark.parametrize("with_signal", [False, True])
def test_redis_answers_arriving_after_the_collector_drained(with_signal, redis_url, tmp_path, monkeypatch,  # noqa: F811
                                                             capsys):
    from geoagent.runtime.redis_queue import open_redis_queue

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    name = f"late-redis-{int(with_signal)}"
    cfg = generic_campaign(tmp_path, name=name, n=10, models=model_table("m"), cap_usd=1.0)
    cfg.write_text(cfg.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 0
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("n_requests = 10", "n_requests = 14"), encoding="utf-8")
    assert main(["run", str(cfg), "--stages", "model_caller", "--no-live", "--accept-config-change"]) == 0
    capsys.readouterr()

    assert len(hold_ready(lambda: open_redis_queue(redis_url, name, C.EDGE_RESPONSES))) == 4
    original = worker_mod.StageRunner._input_exhausted
    arrived = arrive_after_drain(monkeypatch, then=(lambda: os.kill(os.getpid(), signal.SIGTERM)) if with_signal
                                 else None)
    rc = main(["run", str(cfg), "--stages", COLLECTOR, "--no-live"])
    out = capsys.readouterr()
    assert arrived == [4]
    assert rc == 0, out.out + out.err
    assert f"stage {COLLECTOR} finished; campaign not complete" in out.out, out.out
    assert "4 tasks on responses queued by another process after stage collector had finished here" in out.out, out.out

    monkeypatch.setattr(worker_mod.StageRunner, "_input_exhausted", original)
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert "complete" in capsys.readouterr().out
