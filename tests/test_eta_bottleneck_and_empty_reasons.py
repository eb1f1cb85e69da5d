"""ETA names the stage that drains slowest, and failure reasons never read as a bare ``"TimeoutError: "``.

Walkthrough: with the model caller as the bottleneck the ETA line said "bounded by aggregator" (the last stage
is fed no faster than the caller answers, so its time left, all the work still coming over its arrival rate,
was the largest), and a call cut by its timeout was reported as ``outcome unknown: timeout after the request
was sent (TimeoutError: )``. The ETA cases are computed by hand; the timeout goes through the real HTTP client
against the OpenAI-compatible fake with model time added.
"""

from __future__ import annotations

import anyio
import pytest

from geoagent.runtime.http import HostPolicy, HttpClient, OutcomeUnknown, RetriesExhausted, exception_text
from geoagent.runtime.progress import pipeline_eta
from geoagent.runtime.queue import QueueCounts
from geoagent.sandbox.llm_common import add_latency
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from geoagent.status import format_eta

GEOVERIFY = [("model_caller", "requests", "responses"), ("parser", "responses", "answers"),
             ("scorer", "answers", "scored"), ("aggregator", "scored", None)]


def test_eta_names_the_model_caller_when_downstream_stages_only_keep_pace():
    # 1,000 requests queued, 200 answered at 10/s; every stage downstream keeps up (nothing waits on its input)
    # and so is measured at about the caller's rate (the aggregator a bit lower: its window saw idle time)
    counts = {"requests": QueueCounts(ready=996, leased=4, done=200), "responses": QueueCounts(done=200),
              "answers": QueueCounts(done=200), "scored": QueueCounts(ready=1, done=199)}
    rates = {"model_caller": 10.0, "parser": 10.0, "scorer": 10.0, "aggregator": 9.0}
    eta, stage = pipeline_eta([(n, i, o, rates[n]) for n, i, o in GEOVERIFY], counts)
    # by hand: the caller has 1000 ahead (100 s); the aggregator 1000 + 1 over 9/s = 111.2 s: the end of the
    # pipeline (the number), but the aggregator drains as fast as answers arrive: the caller bounds it
    assert eta == pytest.approx(1001 / 9.0)
    assert stage == "model_caller"
    assert format_eta({"eta_s": eta, "eta_stage": stage}) == "111 s (bounded by model_caller)"


def test_eta_keeps_naming_a_downstream_stage_that_is_really_slower_or_backlogged():
    # the scorer runs at 2/s against 10/s answers: genuinely slower (its rate under 0.8 x the parser's)
    counts = {"requests": QueueCounts(ready=100, done=100), "responses": QueueCounts(done=100),
              "answers": QueueCounts(ready=2, done=98), "scored": QueueCounts(done=98)}
    rates = {"model_caller": 10.0, "parser": 10.0, "scorer": 2.0, "aggregator": 10.0}
    eta, stage = pipeline_eta([(n, i, o, rates[n]) for n, i, o in GEOVERIFY], counts)
    assert stage == "scorer" and eta == pytest.approx((2 + 100) / 2.0)
    # a backlog: 500 answers wait for a scorer as fast as the parser (50 s of its work queued)
    counts = {"requests": QueueCounts(ready=100, done=500), "responses": QueueCounts(done=500),
              "answers": QueueCounts(ready=500), "scored": QueueCounts()}
    rates = {"model_caller": 10.0, "parser": 10.0, "scorer": 10.0, "aggregator": 20.0}
    eta, stage = pipeline_eta([(n, i, o, rates[n]) for n, i, o in GEOVERIFY], counts)
    # by hand: scorer 500 queued + 100 still upstream (yield 1) over 10/s = 60 s; aggregator 600 / 20 = 30 s
    assert (eta, stage) == (pytest.approx(60.0), "scorer")


def test_exception_text_never_leaves_an_empty_message():
    assert exception_text(TimeoutError()) == "TimeoutError (no message)"
    assert exception_text(TimeoutError(), hint="request exceeded total timeout 20 s") == \
        "TimeoutError (no message): request exceeded total timeout 20 s"
    assert exception_text(ValueError("bad x")) == "ValueError: bad x"
    assert exception_text(ValueError("  ")) == "ValueError (no message)"


def test_a_timed_out_call_says_which_timeout(tmp_path):
    async def go() -> list[str]:
        app = add_latency(make_app(api_keys=["k"]), 3.0)
        out = []
        async with serve(app) as base:
            host = base.split("//", 1)[1]
            for unknown_is_final in (True, False):
                pol = HostPolicy(timeout_s=0.4, max_attempts=1, retry_unknown_outcome=not unknown_is_final)
                async with HttpClient({host: pol}) as http:
                    with pytest.raises((OutcomeUnknown, RetriesExhausted)) as ei:
                        await http.request("POST", f"{base}/v1/chat/completions", headers={"Authorization": "Bearer k"},
                                           json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
                    out.append(str(ei.value))
        return out

    paid, free = anyio.run(go)
    for text in (paid, free):
        assert "TimeoutError: )" not in text and "TimeoutError: ;" not in text, text
        assert "TimeoutError (no message): request exceeded total timeout 0.4 s" in text, text
