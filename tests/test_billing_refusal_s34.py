"""A used-up quota or spend limit stops the model at once and says so; Gemini's wait is read from the body.

break34 provider #6/#7. api-notes section 7: OpenAI's 429 comes in two flavours, a rate limit and an exhausted quota
(type and code ``insufficient_quota``): "Retry only the first. Retrying insufficient_quota never helps"; section 8:
Anthropic's 429 with ``error.details.error_code = "enforced_spend_limit_reached"`` "is not retryable". Both were
retried like rate limits, every task in turn, and the run ended with its tasks retried out. HTTP 402 (OpenRouter's
insufficient credits, Anthropic's ``billing_error``) dead-lettered every task one by one. Such an answer now fails at
once and stops the model as a refused key does (tasks held, not dead-lettered, the run ends with the auth exit code)
with a message that names billing, not the key. Gemini names a 429's wait only in its body (``RetryInfo.retryDelay``,
no ``Retry-After`` header; dcdpr/jp#1061): the HTTP client now reads it, so the model waits as asked.
"""

from __future__ import annotations


import anyio
import pytest
from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table

from geoagent.config import load_config
from geoagent.engine import EXIT_AUTH, STATUS_AUTH, run_campaign
from geoagent.runtime.http import HttpClient, HostPolicy, body_retry_delay
from geoagent.sandbox import llm_anthropic, llm_gemini, llm_openai
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import AuthBreaker, is_auth_failure, is_billing_failure

KEY = made_up_key("sk-", 40, seed="billing34")
N = 40


def _openai_config(tmp_path, base):
    return load_config(generic_campaign(
        tmp_path, name="quota", n=N, cap_usd=5.0,
        queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05},
        models=model_table("gpt", base_url=base, key_var="QUOTA_KEY", model="sim-gpt", max_output_tokens=64,
                           concurrency=4, rate_requests=5000)))


def test_openai_insufficient_quota_stops_the_model_without_retries_or_dead_letters(tmp_path, monkeypatch):
    app = llm_openai.make_app(faults=FaultConfig(rate=1.0, kinds=("quota",)))
    monkeypatch.setenv("QUOTA_KEY", KEY)

    async def main():
        from geoagent.status import campaign_status, format_status

        async with serve(app) as base:
            cfg = _openai_config(tmp_path, base)
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return out, format_status(campaign_status(cfg))

    out, status_text = anyio.run(main)
    # `run.py status` names the billing refusal too (review34 #5: it gave no reason for the held tasks)
    assert "billing refused (see last error): that model's tasks were left queued" in status_text
    assert "refused model gpt for billing" in status_text
    assert out.status == STATUS_AUTH and out.exit_code == EXIT_AUTH
    text = out.summary()
    assert "the provider refused model gpt for billing (HTTP 429" in text and "add credit" in text
    assert "check QUOTA_KEY" not in text and KEY not in text
    c = out.counts["requests"]
    assert c.dead == 0 and c.done == 0 and c.ready + c.leased == N
    # no request was repeated inside a delivery, and the breaker opened at the first refusal: only the calls
    # already on their way when it came back went out (at most the model's 4 slots)
    statuses = [r["status_sent"] for r in app["calls"]]
    assert statuses and set(statuses) == {429} and len(statuses) <= 4
    assert "set the key variable (for a billing refusal: add credit" in text
    bodies = {r.get("error") for r in app["calls"]}
    assert bodies <= {"insufficient_quota", None}
    assert out.spend["spent_usd"] == 0 and out.spend["unknown_usd"] == 0  # a refusal bills nothing


@pytest.mark.parametrize(("status", "body", "billing", "auth"), [
    (429, '{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", '
          '"param": null, "code": "insufficient_quota"}}', True, False),
    (429, '{"type": "error", "error": {"type": "rate_limit_error", "message": "limit", '
          '"details": {"error_code": "enforced_spend_limit_reached"}}}', True, False),
    (402, '{"error": {"code": 402, "message": "Insufficient credits"}}', True, False),
    (400, '{"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low '
          'to access the Anthropic API."}}', True, False),
    (429, '{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}',
     False, False),
    (401, '{"error": {"code": "invalid_api_key"}}', False, True),
    (500, '{"error": "insufficient_quota"}', False, False),  # a 5xx is the host's, retried
])
def test_billing_refusals_are_told_apart_from_rate_limits_and_refused_keys(status, body, billing, auth):
    assert is_billing_failure(status, body) is billing
    assert is_auth_failure(status, body) is auth


def test_a_billing_breaker_names_billing_not_the_key():
    b = AuthBreaker(threshold=1)
    opened = b.failure("claude", 429, "ANTHROPIC_API_KEY", billing=True)
    assert opened is not None and opened.billing
    assert "refused model claude for billing (HTTP 429" in opened.message()
    assert "ANTHROPIC_API_KEY" not in opened.message()


def test_anthropic_spend_limit_429_is_not_retried_by_the_http_client():
    app = llm_anthropic.make_app(faults=FaultConfig(rate=1.0, kinds=("quota",)), require_auth=False)

    async def main():
        from geoagent.runtime.http import PermanentHTTPError

        async with serve(app) as base, HttpClient(default_policy=HostPolicy(max_attempts=4, backoff_base_s=0.01,
                                                                            backoff_max_s=0.02)) as http:
            with pytest.raises(PermanentHTTPError) as e:
                await http.request("POST", base + "/v1/messages", json={"model": "claude-x", "max_tokens": 5,
                                                                        "messages": []})
            return e.value

    err = anyio.run(main)
    assert err.status == 429 and "enforced_spend_limit_reached" in err.body_excerpt
    assert len(app["calls"]) == 1  # sent once, not retried


def test_gemini_429_wait_is_read_from_the_body_and_honoured():
    from geoagent.sandbox.faults import find_fault_state

    app = llm_gemini.make_app(faults=FaultConfig(rate=0.0, kinds=("429",), retry_after_s=1.5), require_auth=False)
    state = find_fault_state(app)

    async def main():
        # the backoff alone would retry after 0.01-0.02 s; backoff_max_s lets a 1.5 s pause wait inside the request
        policy = HostPolicy(max_attempts=3, backoff_base_s=0.01, backoff_max_s=5.0)
        async with serve(app) as base, HttpClient(default_policy=policy) as http:
            state.update(rate=1.0)

            async def heal():  # the fault clears after the first answer
                while state.total == 0:
                    await anyio.sleep(0.005)
                state.update(rate=0.0)

            async with anyio.create_task_group() as tg:
                tg.start_soon(heal)
                resp = await http.request("POST", base + "/v1beta/models/g:generateContent",
                                          json={"contents": [{"parts": [{"text": "hi"}]}]})
            return resp

    resp = anyio.run(main)
    assert resp.status == 200
    times = [r.t_mono for r in state.log]
    assert len(times) == 2 and times[1] - times[0] >= 1.5  # the 1.5 s RetryInfo wait, not the 0.01 s backoff


@pytest.mark.parametrize(("body", "seconds"), [
    ('{"error": {"code": 429, "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure"}, '
     '{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "45.837906927s"}]}}', 45.837906927),
    ('{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]}}', 2.0),
    ('{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "soon"}]}}', None),
    ('{"error": {"details": "type.googleapis.com/google.rpc.RetryInfo"}}', None),
    ("not json type.googleapis.com/google.rpc.RetryInfo", None),
    ('{"error": {"message": "slow down"}}', None),
])
def test_body_retry_delay_reads_a_retry_info_duration(body, seconds):
    assert body_retry_delay(body) == seconds


GEMINI_DAILY = ('{"error": {"code": 429, "message": "You exceeded your current quota.", "status": "RESOURCE_EXHAUSTED", '
                '"details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": '
                '"generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": '
                '"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}')
GEMINI_ZERO = ('{"error": {"code": 429, "message": "Quota exceeded for metric: generativelanguage.googleapis.com/'
               'generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro", "status": "RESOURCE_EXHAUSTED"}}')
GEMINI_MINUTE = ('{"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED", '
                 '"details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": '
                 '"GenerateRequestsPerMinutePerProjectPerModel"}]}, {"@type": "type.googleapis.com/google.rpc.RetryInfo",'
                 ' "retryDelay": "10s"}]}}')


@pytest.mark.parametrize("body, billing", [(GEMINI_DAILY, True), (GEMINI_ZERO, True), (GEMINI_MINUTE, False)])
def test_gemini_daily_or_zero_quota_is_a_billing_refusal_a_per_minute_one_a_rate_limit(body, billing):
    """providers39 #5: a used-up daily quota (or none at all for the model) was retried as a rate limit up to
    max_attempts per task, then every task dead-lettered; it clears only at the reset."""
    assert is_billing_failure(429, body) is billing


def test_gemini_quota_fault_is_not_retried_by_the_http_client():
    app = llm_gemini.make_app(faults=FaultConfig(rate=1.0, kinds=("quota",)), require_auth=False)

    async def main():
        from geoagent.runtime.http import PermanentHTTPError

        async with serve(app) as base, HttpClient(default_policy=HostPolicy(max_attempts=4, backoff_base_s=0.01,
                                                                            backoff_max_s=0.02)) as http:
            with pytest.raises(PermanentHTTPError) as e:
                await http.request("POST", base + "/v1beta/models/gemini-2.5-flash:generateContent",
                                   json={"contents": [{"parts": [{"text": "hi"}]}]})
            return e.value

    err = anyio.run(main)
    assert err.status == 429 and "PerDay" in (err.body or "")
    assert len(app["calls"]) == 1
