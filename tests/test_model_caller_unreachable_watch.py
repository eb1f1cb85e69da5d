"""Watch mode (``run --watch``): a model whose server was down resumes once it is back. The model caller's
unreachable-host breaker goes half-open with the runner's probe settings (``[queue] watch_probe_after_s`` /
``watch_probe_max_s``): after the cool-down ONE held task of the host is sent as a probe; while the port is closed
each probe fails unreachable (nothing billed, no attempt counted) and the cool-down doubles; once a local
OpenAI-compatible fake binds the port the probe gets through, the held tasks are handed back and every one
completes, each request key paid once, none dead-lettered. A stop during the cool-down ends the run at once.
(geoagent.workers.model_caller, "Unreachable-host breaker")

Real engine, queues, model caller, store, ledger and HTTP client against ``geoagent/sandbox/llm_openai``; the stop
is a real SIGINT to this process (the engine's signal handling, as ``run --watch`` gets it from Ctrl-C).
"""

from __future__ import annotations

import logging
import signal
import time

import anyio

from _model_harness import generic_campaign, ledger_figures, model_table, paid_keys
from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INTERRUPTED, run_campaign
from geoagent.runtime.queue import open_queue
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import free_port, serve
from geoagent.status import campaign_status, format_status
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 36, seed="sandbox-watch-n22")
LOGGER = "geoagent.workers.model_caller"


def _model(name: str, base: str) -> str:
    # the model's own HTTP retries: 2 attempts (each refused request ends in milliseconds)
    return model_table(name, base_url=base, key_var="GA_TEST_WATCH_KEY", model=f"sim-{name}", max_output_tokens=64,
                       concurrency=4, rate_requests=5000) + "max_attempts = 2\n"


def _config(tmp, name: str, n: int, models: str, probe_after_s: float, probe_max_s: float):
    # max_attempts 3: had the outage's probes counted queue attempts, the dead model's tasks would dead-letter
    return load_config(generic_campaign(tmp, name=name, n=n, cap_usd=5.0, models=models, queue={
        "max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
        "watch_probe_after_s": probe_after_s, "watch_probe_max_s": probe_max_s}))




async def _wait_for(cond, limit_s: float, what: str) -> None:
    with anyio.fail_after(limit_s):
        while not cond():
            await anyio.sleep(0.02)


async def _edges_done(cfg, n: int) -> bool:
    for edge in (C.EDGE_REQUESTS, C.EDGE_RESPONSES):
        q = open_queue(cfg.queues_root(), cfg.name, edge)
        try:
            c = await q.counts()
        finally:
            await q.close()
        if (c.done, c.ready, c.leased) != (n, 0, 0):
            return False
    return True


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_watch_mode_dead_model_resumes_when_its_server_comes_up_each_key_paid_once(tmp_path, monkeypatch, caplog):
    n = 20  # requests per model
    monkeypatch.setenv("GA_TEST_WATCH_KEY", KEY)
    good_app = llm_openai.make_app(api_keys=[KEY])
    dead_app = llm_openai.make_app(api_keys=[KEY])
    port = free_port()
    host = f"127.0.0.1:{port}"
    seen: dict[str, object] = {}

    async def main():
        async with serve(good_app) as good_base:
            cfg = _config(tmp_path, "watchback", n, _model("good", good_base) + _model("dead", f"http://{host}"),
                          probe_after_s=0.3, probe_max_s=0.6)
            out: dict[str, object] = {}

            async def drive():
                # the outage: the good model finishes, the dead one's probes fail twice (cool-down 0.3, 0.6 s)
                await _wait_for(lambda: len(paid_keys(good_app)) == n
                                and sum(f"host {host} still unreachable" in m for m in _messages(caplog)) >= 2,
                                60, "two failed probes")
                seen["dead_calls_during_outage"] = len(dead_app["calls"])
                async with serve(dead_app, "127.0.0.1", port):  # the model server comes up on its port
                    with anyio.fail_after(60):
                        while not await _edges_done(cfg, 2 * n):
                            await anyio.sleep(0.05)
                    signal.raise_signal(signal.SIGINT)  # Ctrl-C to the watching process
                    with anyio.fail_after(60):
                        while "outcome" not in out:
                            await anyio.sleep(0.02)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                with caplog.at_level(logging.WARNING, logger=LOGGER):
                    out["outcome"] = await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)
            return cfg, out["outcome"]

    cfg, outcome = anyio.run(main)
    # drained before the stop: a --watch process stopped then ends complete
    assert outcome.status == "complete" and outcome.exit_code == EXIT_COMPLETE, outcome.summary()
    c = outcome.counts["requests"]
    assert (c.done, c.dead, c.ready, c.leased) == (2 * n, 0, 0, 0)
    assert outcome.stop_reasons == []
    # nothing reached the dead server while it was down; afterwards each of its n keys was paid exactly once
    assert seen["dead_calls_during_outage"] == 0
    ok_good, ok_dead = paid_keys(good_app), paid_keys(dead_app)
    assert len(ok_good) == n and set(ok_good.values()) == {1} and len(good_app["calls"]) == n
    assert len(ok_dead) == n and set(ok_dead.values()) == {1} and len(dead_app["calls"]) == n
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals == {"reserved_nusd": 0, "unknown_nusd": 0, "results": 2 * n}
    msgs = _messages(caplog)
    assert any(f"model dead: host {host} unreachable (connection refused on " in m
               and m.endswith("its requests are held, next probe in 0.3 s") for m in msgs), msgs
    # the cool-down doubled after the first failed probe, and stayed at its 0.6 s cap
    still = [m for m in msgs if f"host {host} still unreachable" in m]
    assert still[0].endswith("model(s) dead wait, next probe in 0.6 s") and all(m.endswith("0.6 s") for m in still)
    assert sum(f"host {host} reachable again; model(s) dead resumed" in m for m in msgs) == 1
    # `status` afterwards: the campaign is complete, so the outage is history, not the "last error"
    text = format_status(campaign_status(cfg))
    assert "campaign complete: every queue drained, nothing dead-lettered" in text, text
    assert "last error:" not in text, text
    resolved = [ln.strip() for ln in text.splitlines() if "resolved" in ln]
    assert resolved and all(ln.startswith("earlier error (resolved: every task completed since):") for ln in resolved)
    assert any(f"model dead: host {host} unreachable" in ln for ln in resolved), resolved


def test_watch_mode_stop_during_the_cooldown_ends_at_once_with_the_dead_models_tasks_ready(tmp_path, monkeypatch,
                                                                                         caplog):
    n = 10
    monkeypatch.setenv("GA_TEST_WATCH_KEY", KEY)
    good_app = llm_openai.make_app(api_keys=[KEY])
    port = free_port()
    host = f"127.0.0.1:{port}"
    seen: dict[str, float] = {}

    async def main():
        async with serve(good_app) as good_base:
            cfg = _config(tmp_path, "watchstop", n, _model("good", good_base) + _model("dead", f"http://{host}"),
                          probe_after_s=600.0, probe_max_s=600.0)

            async def drive():
                await _wait_for(lambda: len(paid_keys(good_app)) == n
                                and any(f"host {host} unreachable" in m for m in _messages(caplog)), 60, "breaker")
                await anyio.sleep(0.3)  # well inside the 10-minute cool-down
                seen["stop_at"] = time.monotonic()
                signal.raise_signal(signal.SIGINT)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                with caplog.at_level(logging.WARNING, logger=LOGGER):
                    outcome = await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)
                seen["ended_at"] = time.monotonic()
            return cfg, outcome

    cfg, outcome = anyio.run(main)
    assert seen["ended_at"] - seen["stop_at"] < 10.0  # not the 600 s cool-down, nor the 30 s grace period
    assert outcome.status == "interrupted" and outcome.exit_code == EXIT_INTERRUPTED
    c = outcome.counts["requests"]
    # the dead model's n tasks are ready again, untouched; none dead-lettered, none left leased
    assert (c.done, c.dead, c.ready, c.leased) == (n, 0, n, 0)
    msgs = _messages(caplog)
    assert not any("still unreachable" in m or "reachable again" in m for m in msgs)  # no probe was sent
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals == {"reserved_nusd": 0, "unknown_nusd": 0, "results": n}


def test_host_breaker_half_open_transitions(caplog):
    """Hand-traced: open -> cool-down -> one held task handed back as the probe -> failed (cool-down doubled,
    capped) -> no verdict (next task probes at once) -> got through (closed, every held task handed back)."""
    from geoagent.workers.model_caller import HostBreaker

    b = HostBreaker(threshold=2)
    b.configure(watch=True, probe_after_s=0.0, probe_max_s=0.0)
    b.set_host("a", "h:1")
    b.set_host("b", "h:1")
    b.set_host("c", "h:2")
    assert b.failure("a", "h:1", 2, "connection: refused") is not None
    for key, model in [("k1", "a"), ("k2", "a"), ("k3", "b")]:
        b.hold(model, key)
    # the cool-down (0 s here) is over: exactly one held task is handed back to probe the host; no second one
    # while it is asked for (another only after a cool-down of at least 1 s)
    first = b.resumed()
    assert len(first) == 1 and first[0] in {"k1", "k2", "k3"} and b.resumed() == []
    assert b.try_probe("b", first[0]) is True
    assert b.try_probe("a", "other") is False  # one probe per host at a time
    assert b.try_probe("c", "k9") is False  # h:2 is not open
    b.probe_done("b", False, 7, "connection: Connect call failed")  # unreachable again
    assert b.is_open("a").streak == 7 and b.next_probe_at["h:1"] <= time.monotonic()  # cool-down 0 * 2, cap 0
    b.hold("b", first[0])  # held again
    assert b.try_probe("a", "k1") is True
    b.probe_done("a", None)  # stopped / answered from the store: no verdict, the host stays open
    assert b.is_open("a") is not None and b.try_probe("b", "k3") is True
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        b.probe_done("b", True)
    assert b.is_open("a") is None and b.is_open("b") is None
    assert sorted(b.resumed()) == ["k1", "k2", "k3"] and b.resumed() == []
    assert b.held("a") == b.held("b") == 0
    assert "host h:1 reachable again; model(s) a, b resumed" in _messages(caplog)
    # a burst run never probes: the breaker stays open for the rest of the run
    burst = HostBreaker(threshold=1)
    burst.set_host("a", "h:1")
    burst.failure("a", "h:1", 1, "connection: refused")
    burst.hold("a", "k1")
    assert burst.try_probe("a", "k1") is False and burst.resumed() == [] and burst.is_open("a") is not None


def test_host_breaker_cooldown_doubles_up_to_its_cap():
    from geoagent.workers.model_caller import HostBreaker

    b = HostBreaker(threshold=1)
    b.configure(watch=True, probe_after_s=10.0, probe_max_s=35.0)
    b.set_host("a", "h:1")
    t0 = time.monotonic()
    b.failure("a", "h:1", 1, "connection: refused")
    assert 10.0 <= b.next_probe_at["h:1"] - t0 <= 10.5
    assert b.try_probe("a", "k") is False  # still cooling down
    waits = []
    for _ in range(3):
        b.next_probe_at["h:1"] = 0.0  # pretend the cool-down is over
        assert b.try_probe("a", "k") is True
        t = time.monotonic()
        b.probe_done("a", False)
        waits.append(round(b.next_probe_at["h:1"] - t))
    assert waits == [20, 35, 35]  # 10 -> 20 -> 40 capped at 35
