"""A wrong API key stops the run (authentication circuit breaker), and a re-run with the right key completes.

Every campaign runs the real engine (queues, model caller, store, ledger, HTTP client) against the local
OpenAI-compatible fake (``geoagent/sandbox/llm_openai``), which answers 401 ``invalid_api_key`` to any key
but the one it was given.
"""

from __future__ import annotations

from _made_up_keys import made_up_key

from pathlib import Path

import anyio

from _model_harness import generic_campaign, model_table
from geoagent.config import load_config
from geoagent.engine import EXIT_AUTH, EXIT_COMPLETE, STATUS_AUTH, run_campaign
from geoagent.runtime.manifest import read_manifest
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import AUTH_FAILURES_TO_STOP, AuthBreaker

GOOD_KEY = made_up_key("sk-", 33, seed="sandbox-good-n20")
WRONG_KEY = made_up_key("sk-", 33, seed="sandbox-wrong-n19")
N_REQUESTS = 300
CONCURRENCY = 8


def _config(tmp: Path, base_url: str) -> Path:
    return generic_campaign(tmp, name="auth", n=N_REQUESTS, cap_usd=5.0,
                            queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05},
                            models=model_table("gpt", base_url=base_url, key_var="OPENAI_API_KEY", model="sim-gpt",
                                               max_output_tokens=64, concurrency=CONCURRENCY, rate_requests=5000))


def test_wrong_key_stops_the_run_without_dead_letters_and_the_right_key_completes(tmp_path, monkeypatch):
    app = llm_openai.make_app(api_keys=[GOOD_KEY])
    monkeypatch.setenv("OPENAI_API_KEY", WRONG_KEY)

    async def main():
        async with serve(app) as base:
            cfg = load_config(_config(tmp_path, base))
            first = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            calls_wrong = len(app["calls"])
            monkeypatch.setenv("OPENAI_API_KEY", GOOD_KEY)
            second = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg, first, calls_wrong, second, len(app["calls"]) - calls_wrong

    cfg, first, calls_wrong, second, calls_right = anyio.run(main)
    assert first.status == STATUS_AUTH and first.exit_code == EXIT_AUTH
    summary = first.summary()
    assert "authentication failed for model gpt (HTTP 401): check OPENAI_API_KEY" in summary
    assert WRONG_KEY not in summary and GOOD_KEY not in summary
    # no task was dead-lettered: the breaker released them, and the failures before it opened were retried
    c = first.counts["requests"]
    assert c.dead == 0 and c.done == 0 and c.ready + c.leased == N_REQUESTS
    # dispatching stopped after the K-th failure: only the calls under way by then went out (a few waves of
    # the host's CONCURRENCY slots while the first K answers came back), not one per planned task (300
    # before the breaker)
    assert AUTH_FAILURES_TO_STOP <= calls_wrong <= 4 * CONCURRENCY
    assert first.spend["spent_usd"] == 0 and first.spend["unknown_usd"] == 0  # 401s are not billed
    runs = read_manifest(cfg.state_dir())["runs"]
    assert runs[0]["status"] == STATUS_AUTH
    # the same command with the right key completes every task, each called once
    assert second.status == "complete" and second.exit_code == EXIT_COMPLETE
    assert second.counts["requests"].done == N_REQUESTS and second.counts["requests"].dead == 0
    assert calls_right == N_REQUESTS
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        assert len(dict(st.store.iter_results("results"))) == N_REQUESTS


def test_breaker_counts_consecutive_auth_failures_per_model_and_a_success_resets_it():
    b = AuthBreaker(threshold=3)
    # two failures, a success, two failures: never three in a row, stays closed
    assert b.failure("a", 401, "A_KEY") is None
    assert b.failure("a", 401, "A_KEY") is None
    b.success("a")
    assert b.failure("a", 403, "A_KEY") is None
    assert b.failure("a", 403, "A_KEY") is None
    # another model's failures do not add to a's streak
    assert b.failure("b", 401, None) is None
    assert b.is_open("a") is None
    opened = b.failure("a", 403, "A_KEY")  # third in a row
    assert opened is not None and b.is_open("a") is opened
    assert opened.message() == "authentication failed for model a (HTTP 403): check A_KEY"
    b.success("a")  # an open breaker stays open for the run
    assert b.is_open("a") is opened
    assert b.messages() == [opened.message()]


def test_gemini_wrong_key_400_api_key_invalid_also_stops_the_run(tmp_path, monkeypatch):
    from geoagent.sandbox import llm_gemini

    # Gemini answers a wrong key with 400 INVALID_ARGUMENT / API_KEY_INVALID, not 401
    app = llm_gemini.make_app(api_keys=[made_up_key("AIza", 35, seed="good")])
    monkeypatch.setenv("GEMINI_API_KEY", made_up_key("AIza", 35, seed="wrong"))

    async def main():
        async with serve(app) as base:
            text = _config(tmp_path, base).read_text()
            text = (text.replace('provider = "openai"', 'provider = "gemini"').replace(f'"{base}/v1"', f'"{base}"')
                    .replace("OPENAI_API_KEY", "GEMINI_API_KEY").replace(f"n_requests = {N_REQUESTS}", "n_requests = 40"))
            p = tmp_path / "gemini.toml"
            p.write_text(text)
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    assert out.status == STATUS_AUTH and out.exit_code == EXIT_AUTH
    assert "authentication failed for model gpt (HTTP 400): check GEMINI_API_KEY" in out.summary()
    assert out.counts["requests"].dead == 0 and out.counts["requests"].ready + out.counts["requests"].leased == 40
