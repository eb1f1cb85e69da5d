"""``run.py dead``, ``status`` and the run summary name the two retry layers apart: queue deliveries
(``deliveries=N``) and HTTP attempts within one delivery; the stored reason text is kept as it was.

A generic campaign runs through the real engine against the OpenAI-compatible fake answering 500 to every
request, with 2 HTTP attempts per delivery (``[[models]] max_attempts``)."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from _model_harness import generic_campaign, model_table
from geoagent.cli import _load, main
from geoagent.engine import run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.faults import FaultConfig, find_fault_state
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, dead_letters, describe_reason, format_status
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 33, seed="sandbox-good-n20")
N = 3
HTTP_ATTEMPTS = 2


def test_dead_status_and_summary_say_deliveries_and_http_attempts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    app = llm_openai.make_app(faults=FaultConfig(rate=1.0, kinds=("500",)), api_keys=[KEY])

    async def go():
        async with serve(app) as base:
            models = model_table("gpt", base_url=base, key_var="OPENAI_API_KEY", model="sim-gpt") + \
                f"max_attempts = {HTTP_ATTEMPTS}\n"
            path = generic_campaign(tmp_path, name="deadw", n=N, cap_usd=5.0, models=models,
                                    queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.02})
            cfg = _load(str(path))
            return path, cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    path, cfg, out = anyio.run(go)
    dead = [d for items in dead_letters(cfg).values() for d in items]
    assert len(dead) == N
    # stored data as it was: the model caller's own words
    assert all(d.reason.startswith(f"Missing: retries exhausted after {HTTP_ATTEMPTS} attempts") for d in dead)
    # every delivery made HTTP_ATTEMPTS requests to the fake: deliveries = requests seen / HTTP_ATTEMPTS
    per_key_deliveries = Counter({d.key: d.attempts for d in dead})
    faulted = [r for r in find_fault_state(app).records() if r.fault == "500"]
    assert len(faulted) == HTTP_ATTEMPTS * sum(per_key_deliveries.values())
    capsys.readouterr()
    assert main(["dead", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == N
    for line in lines:
        edge, key, deliveries, reason = line.split("\t")
        assert edge == "requests" and deliveries == f"deliveries={per_key_deliveries[key]}"
        assert reason.startswith(f"Missing: retries exhausted after {HTTP_ATTEMPTS} HTTP attempt(s) in the last delivery: ")
        assert "attempts=" not in line
    status = format_status(campaign_status(cfg))
    assert f"(deliveries {dead[0].attempts}): Missing: retries exhausted after {HTTP_ATTEMPTS} HTTP attempt(s)" in status
    assert "(attempts " not in status and f"after {HTTP_ATTEMPTS} attempts" not in status
    assert (f"last error: Missing: retries exhausted after {HTTP_ATTEMPTS} HTTP attempt(s) in the last delivery"
            in status)  # the progress record's last errors, worded the same way
    summary = out.summary()
    assert f"retries exhausted after {HTTP_ATTEMPTS} HTTP attempt(s) in the last delivery" in summary
    assert f"after {HTTP_ATTEMPTS} attempts" not in summary


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("Missing: retries exhausted after 1 attempts: http 500",
         "Missing: retries exhausted after 1 HTTP attempt(s) in the last delivery: http 500"),
        ("RetriesExhausted: 3 attempts to https://api.example.org/v1/x failed; last: http 503",
         "RetriesExhausted: 3 HTTP attempt(s) to https://api.example.org/v1/x failed; last: http 503"),
        ("PermanentFailure: HTTP 400: bad request", "PermanentFailure: HTTP 400: bad request"),
        (None, ""),
    ],
)
def test_describe_reason_rewords_only_the_http_attempt_counts(stored, shown):
    assert describe_reason(stored) == shown
