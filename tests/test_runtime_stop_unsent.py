"""A stop request sends no new model call: requests not yet through the send gate are released unsent.

Walkthrough defect: with concurrency 4 against a slow model server, Ctrl-C kept sending new paid calls for
the whole grace period (tasks leased ahead or waiting for the host's slot were treated as in flight).
Everything here is real: the model-caller stage, its runner, the HTTP client, SQLite queues and state, and
the OpenAI-compatible fake (in this process, so the server-side counts are exact at the moment of the stop).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import orjson
import pytest
from aiohttp import web

from geoagent import constants as C
from geoagent.cli import main
from geoagent.runtime.daemon import open_edge_queues
from geoagent.runtime.http import HttpClient
from geoagent.runtime.store import open_campaign_state
from geoagent.runtime.worker import StageRunner
from geoagent.sandbox.llm_common import add_latency
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import free_port, serve, wait_ready
from geoagent.workers.model_caller import ModelCaller
from tests._model_harness import (
    apply_host_policies,
    billed,
    caller_context,
    cost_usd,
    generic_campaign,
    model_table,
    photo_task,
    run,
    write_model_config,
)

KEY = "sk-stop-test"
N_TASKS = 40
HOST_CONCURRENCY = 4
LATENCY_S = 0.5


def _counting_app() -> tuple[web.Application, dict[str, int]]:
    """The fake with ``LATENCY_S`` of model time and server-side counts of requests received / answered."""
    app = add_latency(make_app(api_keys=[KEY]), LATENCY_S)
    seen = {"received": 0, "answered": 0}

    @web.middleware
    async def count(request: web.Request, handler):  # outermost: counts on arrival, before the latency
        seen["received"] += 1
        try:
            return await handler(request)
        finally:
            seen["answered"] += 1

    app.middlewares.insert(0, count)
    return app, seen


async def _run_stage(tmp_path, base, seen, *, stop_after_received: int | None, stage_concurrency: int | None = None) -> dict:
    """Run the model caller over the campaign's ``requests`` queue (filled with ``N_TASKS`` the first time);
    stop it once the server received ``stop_after_received`` requests (None: run to the end).
    ``stage_concurrency``: the model caller's (None: its default, from the models)."""
    cfg = write_model_config(tmp_path / "stop.toml", base, name="stopc", key_var="STOP_KEY",
                             concurrency=HOST_CONCURRENCY, rate_requests=1000, cap_usd=5.0)
    state = open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=cfg.budget.cap_usd)
    out: dict = {}
    try:
        async with HttpClient() as http:
            apply_host_policies(cfg, http)
            ctx = caller_context(cfg, http, state)
            stage = ModelCaller(concurrency=stage_concurrency)
            queues = open_edge_queues(tmp_path / "queues", cfg.name, [stage])
            try:
                inq = queues["requests"]
                await inq.put_many([(t.key, t.payload) for t in (photo_task(i) for i in range(N_TASKS))])  # idempotent
                runner = StageRunner(stage, inq, queues["responses"], ctx, grace_s=30.0, lease_ahead=True,
                                     visibility_timeout_s=120.0)

                async def stopper() -> None:
                    while seen["received"] < stop_after_received:
                        await anyio.sleep(0.005)
                    # server and client share this loop: nothing moves between these reads and the stop
                    out["received_at_stop"] = seen["received"]
                    out["server_in_flight_at_stop"] = seen["received"] - seen["answered"]
                    out["t_stop"] = time.monotonic()
                    runner.request_stop()
                    out["leased_at_stop"] = (await inq.counts()).leased

                async with anyio.create_task_group() as tg:
                    if stop_after_received is not None:
                        tg.start_soon(stopper)
                    out["stats"] = await runner.run()
                    tg.cancel_scope.cancel()
                out["t_end"] = time.monotonic()
                out["concurrency"] = stage.concurrency
                out["counts"] = await inq.counts()
                left = await inq.lease(N_TASKS, 60.0)
                out["ready_attempts"] = [t.attempts for t in left]
                if left:
                    await inq.release(left)
            finally:
                for q in queues.values():
                    await q.close()
        out["ledger"] = state.ledger.summary()
    finally:
        state.close()
    return out


@pytest.mark.parametrize("stage_concurrency", [None, 32])
def test_stop_sends_no_new_model_call_and_the_rerun_pays_each_key_once(tmp_path, monkeypatch, stage_concurrency):
    """None: the stage sized by its model (4 slots); 32: 28 tasks wait in the HTTP layer for the host's
    4 slots when the stop comes, and must not be sent."""
    monkeypatch.setenv("STOP_KEY", KEY)

    async def main() -> tuple[dict, int, dict, list]:
        app, seen = _counting_app()
        async with serve(app) as base:
            first = await _run_stage(tmp_path, base, seen, stop_after_received=6, stage_concurrency=stage_concurrency)
            received_first = seen["received"]
            second = await _run_stage(tmp_path, base, seen, stop_after_received=None)
        return first, received_first, second, list(app["calls"])

    first, received_first, second, calls = run(main(), timeout_s=120)

    # the stage is sized by the model's concurrency (4), not the old default of 64 (+32 leased ahead)
    if stage_concurrency is None:
        assert first["concurrency"] == HOST_CONCURRENCY
        # slots + lease-ahead of at most one per slot, plus answered tasks still leased until their group
        # commit acks them (the runner acks every 64 tasks or 50 ms; on a loaded machine that can lag)
        answered_at_stop = first["received_at_stop"] - first["server_in_flight_at_stop"]
        assert first["leased_at_stop"] <= 2 * HOST_CONCURRENCY + answered_at_stop

    # after the stop the server got only requests that had passed the send gate before it: at most the
    # host's concurrency slots not held by requests the server was already working on
    after_stop = received_first - first["received_at_stop"]
    assert after_stop <= HOST_CONCURRENCY - first["server_in_flight_at_stop"], (after_stop, first)
    # ... and the run ended once those were answered (about one latency), not after the 30 s grace period
    assert first["t_end"] - first["t_stop"] < 10.0

    c = first["counts"]
    assert c.leased == 0 and c.dead == 0 and c.done == first["stats"].done
    assert c.done == received_first  # every request the server got was answered, stored and acked
    assert c.ready == N_TASKS - c.done > 0
    assert set(first["ready_attempts"]) == {0} and len(first["ready_attempts"]) == c.ready  # released untouched
    led = first["ledger"]
    assert led.unknown_calls == 0 and led.unknown_usd == 0.0 and led.open_reservations == 0
    assert led.calls == c.done

    # the re-run did the rest; the server saw each request key exactly once, every one billed once
    assert second["counts"].done == N_TASKS and second["counts"].ready == 0
    keys = Counter(rec["key"] for rec in calls)
    assert len(keys) == N_TASKS and set(keys.values()) == {1}
    paid = billed(calls)
    assert len(paid) == N_TASKS
    led = second["ledger"]
    assert led.unknown_calls == 0 and led.calls == N_TASKS
    expected = sum(cost_usd(r["input_tokens"], r["output_tokens"]) for r in paid)
    assert abs(led.spent_usd - expected) < 1e-9


def test_ctrl_c_of_a_run_sends_no_new_call_and_the_rerun_finishes_each_key_once(tmp_path, monkeypatch, capsys):
    """The walkthrough's repro through ``run.py``: a generic campaign with concurrency 4 against the fake
    (its own process, 1 s of model time per call), SIGINT after a few calls. Before the fix the run went on
    sending 4 new calls a second until the 30 s grace period ended."""
    repo = Path(__file__).resolve().parents[1]
    latency_s = 1.0
    port = free_port("127.0.0.1")
    log = tmp_path / "calls.jsonl"
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", str(latency_s * 1000), "--api-key", KEY, "--log", str(log)], cwd=repo)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        n = 100
        cfgp = generic_campaign(tmp_path, name="ctrlc", n=n, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="STOP_KEY", concurrency=HOST_CONCURRENCY,
                                                   timeout_s=20.0))
        proc = subprocess.Popen([sys.executable, str(repo / "run.py"), "run", str(cfgp), "--no-live"], cwd=repo,
                                env={"STOP_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not (log.is_file() and len(log.read_bytes().splitlines()) >= 8):
                assert proc.poll() is None and time.monotonic() < deadline, "no calls answered in time"
                time.sleep(0.05)
            t_sig = time.time()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            t_end = time.time()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err[-2000:]
        recs = [orjson.loads(line) for line in log.read_bytes().splitlines()]
        # a record is written when the answer goes out, one latency after the request came in
        arrived_after = [r for r in recs if r["t_wall"] - latency_s > t_sig + 0.05]
        assert len(arrived_after) <= HOST_CONCURRENCY, (len(arrived_after), len(recs))
        assert t_end - t_sig < 10.0  # the sent calls finished; nothing waited for the 30 s grace period
        with sqlite3.connect(tmp_path / "state" / "ctrlc" / C.CAMPAIGN_DB) as conn:
            calls, unknown = conn.execute("SELECT calls, unknown_calls FROM ledger_totals WHERE id = 1").fetchone()
        assert unknown == 0 and calls == len(recs)  # every call sent was answered and settled, none cut off
        assert f"this run: {calls} new model calls" in out, out

        # the re-run sends the rest (more slots, same request keys), each request key once in all
        monkeypatch.setenv("STOP_KEY", KEY)
        cfgp.write_text(cfgp.read_text().replace(f"concurrency = {HOST_CONCURRENCY}\n", "concurrency = 32\n"))
        assert main(["run", str(cfgp), "--no-live"]) == 0
        assert f"this run: {n - calls} new model calls; 0 answers reused (stored by an earlier run, used instead of a call)" in capsys.readouterr().out
        keys = Counter(orjson.loads(line)["key"] for line in log.read_bytes().splitlines())
        assert len(keys) == n and set(keys.values()) == {1}
    finally:
        server.terminate()
        server.wait(10)
