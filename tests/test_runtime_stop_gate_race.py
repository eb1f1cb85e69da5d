"""A stop that lands while send gates are settling their reservations never cuts a request once it is sent.

Walkthrough defect (session 8): Ctrl-C of a GeoHint campaign left a few reservations as unknown-outcome spend
every time, and their calls were paid again on resume. ``ModelCaller.stop_requested`` cancels the cancel scope
of each call whose gate has no reservation yet; a gate whose database job had already finished (its result
waiting for the event loop) still took its reservation and sent the request, and the scope's cancellation,
which anyio delivers again at every later await inside the scope, then cut that request in flight.
Everything is real here: the stage, its runner, the HTTP client, SQLite queues and state, the OpenAI fake.
"""

from __future__ import annotations

import anyio
import pytest

from geoagent.runtime.daemon import open_edge_queues
from geoagent.runtime.http import HttpClient
from geoagent.runtime.store import open_campaign_state
from geoagent.runtime.worker import StageRunner
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import ModelCaller
from tests._model_harness import apply_host_policies, caller_context, photo_task, run, write_model_config

KEY = "sk-gate-race"
N_TASKS = 600
CONCURRENCY = 64


async def _stopped_run(tmp_path, base, app, stop_after: int, round_: int) -> dict:
    cfg = write_model_config(tmp_path / f"race{round_}.toml", base, name=f"race{round_}", key_var="RACE_KEY",
                             concurrency=CONCURRENCY, rate_requests=100000, cap_usd=50.0)
    state = open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=cfg.budget.cap_usd)
    try:
        async with HttpClient() as http:
            apply_host_policies(cfg, http)
            stage = ModelCaller(concurrency=CONCURRENCY)
            queues = open_edge_queues(tmp_path / "queues", cfg.name, [stage])
            try:
                inq = queues["requests"]
                await inq.put_many([(t.key, t.payload) for t in (photo_task(i) for i in range(N_TASKS))])
                runner = StageRunner(stage, inq, queues["responses"], caller_context(cfg, http, state), grace_s=30.0,
                                     lease_ahead=True, visibility_timeout_s=120.0)

                async def stopper() -> None:
                    while len(app["calls"]) < stop_after:
                        await anyio.sleep(0)
                    runner.request_stop()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(stopper)
                    await runner.run()
                    tg.cancel_scope.cancel()
            finally:
                for q in queues.values():
                    await q.close()
        await anyio.sleep(0.2)  # fire-and-forget releases of abandoned reservations reach the database
        return {"ledger": state.ledger.summary()}
    finally:
        state.close()


def test_a_stop_among_settling_gates_cuts_no_sent_request(tmp_path, monkeypatch):
    """Several stops at different moments of a 64-wide zero-latency run (every moment has gates whose database
    job just finished): no reservation may end unknown-outcome, none may stay open."""
    monkeypatch.setenv("RACE_KEY", KEY)

    async def main() -> list[dict]:
        out = []
        for round_, stop_after in enumerate(range(30, 600, 45)):
            app = make_app(api_keys=[KEY])
            async with serve(app) as base:
                out.append(await _stopped_run(tmp_path, base, app, stop_after, round_))
        return out

    results = run(main(), timeout_s=240)
    unknown = [(r["ledger"].unknown_calls, r["ledger"].open_reservations) for r in results]
    assert all(u == (0, 0) for u in unknown), unknown
