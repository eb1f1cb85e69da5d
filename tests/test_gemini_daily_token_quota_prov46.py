"""Gemini's daily INPUT TOKEN quota (prov46 #3): a 429 ``RESOURCE_EXHAUSTED`` whose ``QuotaFailure`` names
``quotaId`` ``GenerateContentInputTokensPerModelPerDay-FreeTier`` with a non-zero ``quotaValue`` matched none of the
used-up-quota markers (``perdayperproject``, ``limit: 0,``), so it was retried as a rate limit, every task in turn, and
the tasks dead-lettered, though it clears only at the daily reset. Any ``QuotaFailure`` ``quotaId`` holding ``PerDay``
is now a used-up daily quota: the HTTP client fails it at once and the model caller stops the model as refused for
billing. Against the Gemini fake, whose injected ``quota`` fault now sends that body (with a ``RetryInfo`` wait, as
Google does)."""

from __future__ import annotations

import anyio
import orjson
import pytest
from _made_up_keys import made_up_key

from geoagent.config import load_config
from geoagent.engine import EXIT_AUTH, STATUS_AUTH, run_campaign
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError, daily_quota_failure
from geoagent.sandbox import llm_gemini
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import is_billing_failure

KEY = made_up_key("AIza", 35, seed="dailytok46")


def _quota(quota_id: str, value: str = "250000", retry: str | None = "37s") -> str:
    details = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
        "quotaId": quota_id, "quotaDimensions": {"location": "global", "model": "gemini-2.5-pro"},
        "quotaValue": value}]}]
    if retry:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry})
    return orjson.dumps({"error": {"code": 429, "message": "You exceeded your current quota, please check your plan "
                                   "and billing details. * Quota exceeded for metric: generativelanguage.googleapis."
                                   f"com/generate_content_free_tier_input_token_count, limit: {value}, model: "
                                   "gemini-2.5-pro\nPlease retry in 37.1s.", "status": "RESOURCE_EXHAUSTED",
                                   "details": details}}).decode()


DAILY_TOKENS = _quota("GenerateContentInputTokensPerModelPerDay-FreeTier")
MINUTE_TOKENS = _quota("GenerateContentInputTokensPerModelPerMinute-FreeTier")


@pytest.mark.parametrize("body, daily", [
    (DAILY_TOKENS, True),
    (MINUTE_TOKENS, False),
    (DAILY_TOKENS[:DAILY_TOKENS.index("quotaDimensions")], True),  # cut short: read from the text
    (orjson.dumps({"error": {"message": DAILY_TOKENS, "code": 429}}).decode(), True),  # a gateway's wrapped body
    (orjson.dumps({"error": {"message": MINUTE_TOKENS, "code": 429}}).decode(), False),
    ('{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": "x"}]}}', False),
    ("[1, 2]", False), ("", False), ("null", False),
])
def test_daily_quota_failure_reads_the_quota_id(body, daily):
    assert daily_quota_failure(body) is daily


def test_a_daily_token_quota_429_is_a_billing_refusal_a_per_minute_one_a_rate_limit():
    assert is_billing_failure(429, DAILY_TOKENS) is True
    assert is_billing_failure(429, MINUTE_TOKENS) is False
    assert is_billing_failure(404, DAILY_TOKENS) is False  # only a 429 says it


def test_the_http_client_does_not_retry_the_fakes_daily_token_quota_429():
    app = llm_gemini.make_app(faults=FaultConfig(rate=1.0, kinds=("quota",)), require_auth=False)

    async def main():
        async with serve(app) as base, HttpClient(default_policy=HostPolicy(max_attempts=4, backoff_base_s=0.01,
                                                                            backoff_max_s=0.02,
                                                                            max_retry_after_s=60)) as http:
            with pytest.raises(PermanentHTTPError) as e:
                await http.request("POST", base + "/v1beta/models/gemini-2.5-flash:generateContent",
                                   json={"contents": [{"parts": [{"text": "hi"}]}]})
            return e.value

    err = anyio.run(main)
    body = orjson.loads(err.body)
    (violation,) = body["error"]["details"][0]["violations"]
    assert violation["quotaId"] == "GenerateContentInputTokensPerModelPerDay-FreeTier" and violation["quotaValue"] != "0"
    assert len(app["calls"]) == 1


def test_a_gemini_campaign_stops_the_model_at_the_daily_token_quota(tmp_path, monkeypatch):
    app = llm_gemini.make_app(faults=FaultConfig(rate=1.0, kinds=("quota",)))
    monkeypatch.setenv("GEM_DAILY_KEY", KEY)
    n = 12

    async def main():
        async with serve(app) as base:
            p = tmp_path / "daily.toml"
            p.write_text(
                f'[campaign]\nname = "daily"\nkind = "generic"\nseed = 3\n\n[paths]\nqueues = "{tmp_path / "q"}"\n'
                f'state = "{tmp_path / "s"}"\n\n[queue]\nmax_attempts = 3\nbackoff_base_s = 0.01\nbackoff_max_s = 0.05\n'
                f'\n[budget]\ncap_usd = 5.0\n\n[generic]\nn_requests = {n}\n\n[[models]]\nname = "gem"\n'
                f'provider = "gemini"\nmodel = "gemini-2.0-flash"\nbase_url = "{base}"\napi_key_env = "GEM_DAILY_KEY"\n'
                "price_input_usd_per_mtok = 0.1\nprice_output_usd_per_mtok = 0.4\nmax_output_tokens = 64\n"
                "concurrency = 2\nrate = { requests = 2000, period_s = 1.0 }\ntimeout_s = 5.0\n", encoding="utf-8")
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    assert out.status == STATUS_AUTH and out.exit_code == EXIT_AUTH, out.summary()
    assert "refused model gem for billing (HTTP 429" in out.summary()
    c = out.counts["requests"]
    assert c.dead == 0 and c.done == 0 and c.ready + c.leased == n
    assert len(app["calls"]) <= 2  # the breaker opened at the first refusal: no retries of a daily quota
