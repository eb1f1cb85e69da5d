"""Edges of the authentication circuit breaker (model caller, engine exit 5), each through the real engine
(queues, model caller, store, ledger, HTTP client) against local OpenAI-compatible fakes that answer 401
``invalid_api_key`` to any key but their own.

* a campaign with fewer failing attempts than the breaker's threshold (few tasks, small ``max_attempts``)
  must still stop as 'authentication failed' with no task dead-lettered, so the right key completes it;
* two models where only one key is wrong: the breaker is per model, so the good model's tasks all complete
  while the wrong one's stay ready, untouched (none dead-lettered, no spend); the run ends honestly (exit 5
  naming the wrong model, its key variable and the work left for it), every reservation is closed (ledger
  consistent, nothing open, nothing unknown), and the re-run with the right key sends each request key
  exactly once in all (server-side count of 200 answers);
* a 403 that refuses the INPUT (OpenRouter's moderation error, "your input was flagged") is that request's
  permanent failure: it is dead-lettered and never opens the breaker, however many come in a row.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio

from _model_harness import generic_campaign, model_table
from geoagent.config import load_config
from geoagent.engine import EXIT_AUTH, EXIT_COMPLETE, STATUS_AUTH, run_campaign
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status
from _made_up_keys import made_up_key

GOOD_A = made_up_key("sk-", 35, seed="sandbox-good-a-n20")
GOOD_B = made_up_key("sk-", 35, seed="sandbox-good-b-n20")
WRONG = made_up_key("sk-", 35, seed="sandbox-wrong-n21")


def _model(name: str, base: str, env: str, concurrency: int) -> str:
    return model_table(name, base_url=base, key_var=env, model=f"sim-{name}", max_output_tokens=64,
                       concurrency=concurrency, rate_requests=5000)


def _config(tmp: Path, name: str, n: int, max_attempts: int, models: str) -> Path:
    return generic_campaign(tmp, name=name, n=n, cap_usd=5.0, models=models,
                            queue={"max_attempts": max_attempts, "backoff_base_s": 0.01, "backoff_max_s": 0.05})


def _ok_keys(app) -> Counter:
    return Counter(r["key"] for r in app["calls"] if r["status"] == 200)


def _ledger_check(cfg) -> tuple[list[str], dict]:
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        problems = st.ledger.check_consistency()
        totals = st.ledger.db.read("SELECT reserved_nusd, unknown_nusd FROM ledger_totals WHERE id = 1")[0]
        n_results = len(dict(st.store.iter_results("results")))
    return problems, {"reserved_nusd": totals[0], "unknown_nusd": totals[1], "results": n_results}


def test_wrong_key_on_a_campaign_smaller_than_the_breaker_threshold_dead_letters_nothing(tmp_path, monkeypatch):
    """One task, ``max_attempts = 2``: its two 401s never reach the threshold of 5 consecutive failures,
    yet they are a wrong key, not a failed task; before, the task was dead-lettered and the run did not say
    'authentication failed', and the right key then left it undone."""
    app = llm_openai.make_app(api_keys=[GOOD_A])
    monkeypatch.setenv("GA_TEST_KEY_A", WRONG)

    async def main():
        async with serve(app) as base:
            cfg = load_config(_config(tmp_path, "tiny", 1, 2, _model("gpt", base, "GA_TEST_KEY_A", 1)))
            first = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            monkeypatch.setenv("GA_TEST_KEY_A", GOOD_A)
            second = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg, first, second

    cfg, first, second = anyio.run(main)
    assert first.status == STATUS_AUTH and first.exit_code == EXIT_AUTH
    assert "authentication failed for model gpt (HTTP 401): check GA_TEST_KEY_A" in first.summary()
    assert first.counts["requests"].dead == 0
    assert second.status == "complete" and second.exit_code == EXIT_COMPLETE
    assert second.counts["requests"].done == 1 and second.counts["requests"].dead == 0
    assert list(_ok_keys(app).values()) == [1]
    problems, totals = _ledger_check(cfg)
    assert problems == [] and totals == {"reserved_nusd": 0, "unknown_nusd": 0, "results": 1}


def test_one_wrong_key_of_two_models_holds_only_that_model_and_the_rerun_sends_each_key_once(tmp_path, monkeypatch):
    n = 60
    app_a = llm_openai.make_app(api_keys=[GOOD_A])
    app_b = llm_openai.make_app(api_keys=[GOOD_B])
    monkeypatch.setenv("GA_TEST_KEY_A", GOOD_A)
    monkeypatch.setenv("GA_TEST_KEY_B", WRONG)

    async def main():
        async with serve(app_a) as base_a, serve(app_b) as base_b:
            cfg = load_config(_config(tmp_path, "two", n, 3, _model("good", base_a, "GA_TEST_KEY_A", 4)
                                      + _model("bad", base_b, "GA_TEST_KEY_B", 4)))
            first = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            after_first = _ledger_check(cfg)
            ok_a_first, calls_b_first = _ok_keys(app_a), len(app_b["calls"])
            status_text = format_status(campaign_status(cfg))  # what `run.py status` prints now
            monkeypatch.setenv("GA_TEST_KEY_B", GOOD_B)
            second = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg, first, after_first, ok_a_first, calls_b_first, status_text, second

    cfg, first, (problems1, totals1), ok_a_first, calls_b_first, status_text, second = anyio.run(main)
    assert "authentication failed (see last error): that model's tasks were left queued" in status_text
    assert "authentication failed for model bad (HTTP 401): check GA_TEST_KEY_B" in status_text
    assert WRONG not in status_text
    summary = first.summary()
    assert first.status == STATUS_AUTH and first.exit_code == EXIT_AUTH
    # the line names the refused model, its key VARIABLE and the work left for it (every one of its n tasks)
    assert f"authentication failed for model bad (HTTP 401): check GA_TEST_KEY_B; {n} request(s) of model bad not sent" in summary
    assert "model good" not in summary and WRONG not in summary and GOOD_A not in summary
    c = first.counts["requests"]
    # the good model ran to completion in the same run; the bad one's n tasks are ready again, none dead
    assert c.done == n and c.dead == 0 and c.leased == 0 and c.ready == n
    assert len(ok_a_first) == n and set(ok_a_first.values()) == {1}
    assert calls_b_first <= 4 * 4  # the breaker opened after a few waves of bad's 4 slots, then nothing was sent
    # every reservation of the run is closed: settled answers of 'good', released 401s of 'bad'
    assert problems1 == [] and totals1["reserved_nusd"] == 0 and totals1["unknown_nusd"] == 0
    assert totals1["results"] == n  # what the good model answered is kept
    assert second.status == "complete" and second.exit_code == EXIT_COMPLETE
    assert second.counts["requests"].done == 2 * n and second.counts["requests"].dead == 0
    ok_a, ok_b = _ok_keys(app_a), _ok_keys(app_b)
    assert len(ok_a) == n and set(ok_a.values()) == {1}
    assert len(ok_b) == n and set(ok_b.values()) == {1}
    problems2, totals2 = _ledger_check(cfg)
    assert problems2 == [] and totals2 == {"reserved_nusd": 0, "unknown_nusd": 0, "results": 2 * n}


def test_moderation_403_is_a_per_request_failure_and_never_opens_the_breaker(tmp_path, monkeypatch):
    """Every prompt is flagged (OpenRouter's 403 moderation body): 12 consecutive 403s, far above the
    threshold of 5, still dead-letter each request with its reason instead of stopping the model."""
    from geoagent.engine import EXIT_INCOMPLETE

    n = 12
    app = llm_openai.make_app(api_keys=[GOOD_A], moderation_flags=["street photo"])
    monkeypatch.setenv("GA_TEST_KEY_A", GOOD_A)

    async def main():
        async with serve(app) as base:
            cfg = load_config(_config(tmp_path, "mod", n, 2, _model("gpt", base, "GA_TEST_KEY_A", 2)))
            return cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    cfg, out = anyio.run(main)
    assert out.status == "incomplete" and out.exit_code == EXIT_INCOMPLETE
    assert "authentication failed" not in out.summary() and out.stop_reasons == []
    c = out.counts["requests"]
    assert c.dead == n and c.done == 0 and c.ready == 0
    # one request per task: a permanent 4xx is dead-lettered at once, not retried
    assert Counter(r["status"] for r in app["calls"]) == Counter({403: n})
    assert all("HTTP 403" in d.reason and "flagged" in d.reason for d in out.dead["requests"])
    problems, totals = _ledger_check(cfg)
    assert problems == [] and totals == {"reserved_nusd": 0, "unknown_nusd": 0, "results": 0}


def test_is_auth_failure_tells_a_refused_key_from_refused_content():
    from geoagent.workers.model_caller import is_auth_failure

    # OpenRouter's documented moderation error body (API reference, "Errors")
    moderation = ('{"error": {"code": 403, "message": "Your chosen model requires moderation and your input was '
                  'flagged", "metadata": {"reasons": ["violence"], "flagged_input": "...", "provider_name": null, '
                  '"model_slug": "openai/gpt-4o"}}}')
    assert not is_auth_failure(403, moderation)
    assert not is_auth_failure(403, '{"error": {"code": "content_policy_violation", "message": "blocked"}}')
    assert is_auth_failure(403, '{"error": {"message": "Forbidden: this key cannot use the model"}}')
    assert is_auth_failure(403, "")
    assert is_auth_failure(401, '{"error": {"code": "invalid_api_key"}}')
    assert is_auth_failure(400, '{"error": {"status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}]}}')
    assert not is_auth_failure(400, '{"error": {"message": "bad max_tokens"}}')
    assert not is_auth_failure(404, "")


def test_every_key_refused_stops_leasing_at_once_and_leaves_the_queue_untouched(tmp_path, monkeypatch):
    """One model, wrong key, a queue much larger than what is in flight: once the breaker opens, nothing else
    can run, so the model caller stops leasing (before: it leased every queued task only to hold it and
    release it again, a pass over the whole queue with its memory). The run says so and how much is left."""
    n = 3000
    app = llm_openai.make_app(api_keys=[GOOD_A])
    monkeypatch.setenv("GA_TEST_KEY_A", WRONG)

    async def main():
        async with serve(app) as base:
            cfg = load_config(_config(tmp_path, "allbad", n, 3, _model("gpt", base, "GA_TEST_KEY_A", 4)))
            return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    assert out.status == STATUS_AUTH and out.exit_code == EXIT_AUTH
    c = out.counts["requests"]
    assert c.ready == n and c.leased == 0 and c.dead == 0 and c.done == 0  # untouched, nothing lost
    line = next(line for line in out.stop_reasons if "GA_TEST_KEY_A" in line)
    assert line == ("authentication failed for model gpt (HTTP 401): check GA_TEST_KEY_A; every model's key was "
                    f"refused, so dispatching stopped: {n} request(s) left queued")
    assert len(app["calls"]) <= 4 * 4  # a few waves of 4 slots opened the breaker; nothing was sent after
    # the queue was not walked: the last progress record of the model caller shows only the tasks it had
    # leased when the breaker opened (4 slots + lease-ahead), held or released, not the whole queue
    import orjson

    from geoagent import constants as C

    last = orjson.loads((tmp_path / "state" / "allbad" / C.PROGRESS_FILE).read_bytes().splitlines()[-1])
    caller = next(s for s in last["stages"] if s["stage"] == C.STAGE_MODEL_CALLER)
    assert caller["finished"] and 0 < caller["released"] <= 4 + 4 + 32, caller
    with open_campaign_state("allbad", root=tmp_path / "state", recover=False) as st:
        assert st.ledger.check_consistency() == []
