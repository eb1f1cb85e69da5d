"""The model caller's host breaker refunds the queue attempts its streak charged (geoagent.workers.model_caller,
"Unreachable-host breaker"; geoagent.runtime.worker, "Refunds"): a model whose server is down (the OpenAI fake's
port, closed) has its first 4 unreachable requests nacked (one attempt each) and the 5th opens the breaker; those
4 attempts are given back, so after each of two runs with the server down every task is ready with 0 attempts
(without the refund: 4, then 8 in all), and the run with the server up completes every task, each key paid once.

Real engine, queues, store, ledger and HTTP client against ``geoagent/sandbox/llm_openai``."""

from __future__ import annotations

import logging

import anyio

from _model_harness import generic_campaign, ledger_figures, model_table, paid_keys
from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INCOMPLETE, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import free_port, serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 36, seed="sandbox-refund-n21")


async def _attempts(cfg) -> dict[str, int]:
    from test_runtime_unreachable_host_refund import _attempts as attempts_of_edge

    return await attempts_of_edge(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)


def test_model_host_breaker_refunds_the_streak_and_reruns_with_the_host_down_keep_attempts(
        tmp_path, monkeypatch, caplog):
    n = 6
    monkeypatch.setenv("GA_TEST_REFUND_KEY", KEY)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    app = llm_openai.make_app(api_keys=[KEY])
    models = model_table("m", base_url=base, key_var="GA_TEST_REFUND_KEY", model="sim-m", max_output_tokens=64,
                         concurrency=1, rate_requests=5000) + "max_attempts = 2\n"
    cfg = load_config(generic_campaign(tmp_path, name="refund", n=n, cap_usd=5.0, models=models, queue={
        "max_attempts": 5, "backoff_base_s": 0.01, "backoff_max_s": 0.05}))

    async def main():
        downs = []
        for _ in range(2):
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            downs.append((out, await _attempts(cfg)))
        async with serve(app, "127.0.0.1", port):
            up = await run_campaign(cfg, live=False, handle_signals=False, export=False)
        return downs, up

    with caplog.at_level(logging.WARNING, logger="geoagent.runtime.worker"):
        downs, up = anyio.run(main)
    for out, attempts in downs:
        assert out.status == "incomplete" and out.exit_code == EXIT_INCOMPLETE
        c = out.counts["requests"]
        assert (c.ready, c.dead, c.leased, c.done) == (n, 0, 0, 0)
        assert len(attempts) == n and set(attempts.values()) == {0}
        assert any(f"model m: host 127.0.0.1:{port} unreachable (connection refused on 5 consecutive requests)" in ln
                   for ln in out.stop_reasons)
    refunds = [r.getMessage() for r in caplog.records if "refunded" in r.getMessage()]
    assert len(refunds) == 2 and all(
        f"host 127.0.0.1:{port} was down: refunded 4 queue attempts that its unreachable failures had charged to "
        "4 tasks before the breaker opened" in ln for ln in refunds)
    assert up.status == "complete" and up.exit_code == EXIT_COMPLETE
    assert up.counts["requests"].done == n and up.counts["requests"].dead == 0
    paid = paid_keys(app)
    assert len(paid) == n and set(paid.values()) == {1}
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals == {"reserved_nusd": 0, "unknown_nusd": 0, "results": n}
