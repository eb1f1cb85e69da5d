"""Models that call one host share one rate limit and one concurrency cap: the lowest any of them sets.

Walkthrough finding (session 8): the HTTP layer keeps one limit per host (issue 2 point 4), and the policy of a
host that several ``[[models]]`` call was whichever model came last in the file: a model that asked for
concurrency 1 got the other's 4 (against a real API: 429s), and the dry run timed each model at its own limit,
so its duration disagreed with the run. Now their calls share the lowest limit, the config warns with the
figures, the dry run times them at the shared limit, and each model keeps its own timeout and attempts.
Checked server-side against the OpenAI-compatible fake (requests in flight at once).
"""

from __future__ import annotations

import warnings

import anyio
from aiohttp import web

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from geoagent.config import ConfigWarning, host_policies, load_config, model_call_policy
from geoagent.engine import run_campaign
from geoagent.sandbox.llm_common import add_latency
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve

KEY = "local-shared-host"


def _two_models(base: str) -> str:
    # the cautious model first: the old rule (the last entry wins) gave both the other's concurrency 4
    slow = model_table("slow", base_url=base, key_var="SHARED_KEY", model="gpt-a", concurrency=1, timeout_s=7.0)
    fast = model_table("fast", base_url=base, key_var="SHARED_KEY", model="gpt-b", concurrency=4, timeout_s=9.0)
    return slow + "expected_latency_s = 0.5\n" + fast + "expected_latency_s = 0.5\n"


def test_models_on_one_host_share_its_lowest_limit_in_the_run_and_the_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHARED_KEY", KEY)
    app = add_latency(make_app(api_keys=[KEY]), 0.1)
    live = {"now": 0, "max": 0}

    @web.middleware
    async def in_flight(request, handler):
        live["now"] += 1
        live["max"] = max(live["max"], live["now"])
        try:
            return await handler(request)
        finally:
            live["now"] -= 1

    app.middlewares.insert(0, in_flight)

    async def go():
        async with serve(app) as base:
            cfgp = generic_campaign(tmp_path, name="shared", n=16, cap_usd=5.0, models=_two_models(base))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                cfg = load_config(cfgp)
            texts = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
            outcome = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfgp, cfg, texts, outcome

    cfgp, cfg, texts, outcome = anyio.run(go)
    capsys.readouterr()
    # a dry run of a fresh copy (the finished campaign plans nothing new)
    fresh = tmp_path / "fresh.toml"
    fresh.write_text(cfgp.read_text(encoding="utf-8").replace('name = "shared"', 'name = "shared-dry"'), encoding="utf-8")
    assert main(["run", str(fresh), "--simulate", "--no-live"]) == 0
    host = cfg.model("slow").host
    (warn,) = [t for t in texts if "call one host" in t]
    assert f"models 'slow', 'fast' call one host, {host}" in warn and "concurrency 1;" in warn
    pol = host_policies(cfg)[host]
    assert pol.concurrency == 1 and pol.retry_unknown_outcome is False
    # each model keeps its own timeout for its calls
    assert model_call_policy(cfg, cfg.model("slow")).timeout_s == 7.0
    assert model_call_policy(cfg, cfg.model("fast")).timeout_s == 9.0
    out = capsys.readouterr().out
    # the dry run times both at the shared limit: 16 calls each at 1 / 0.5 s = 2 calls/s, 16 s on the host
    assert out.count("the lower of concurrency 1 / 0.5 s") == 2, out
    assert out.count("about 8 s at 2 calls/s") == 2 and "about 16 s of model calls" in out, out
    # the run kept one request in flight at a time on the host (server-side), and finished
    assert outcome.status == "complete" and live["max"] == 1, (outcome.status, live)


def test_a_hosts_entry_for_a_paid_model_host_sets_its_limit_but_never_retries_a_sent_call(tmp_path):
    cfgp = generic_campaign(tmp_path, name="hostentry", n=4, cap_usd=5.0,
                            models=_two_models("https://api.example.com") + '\n[hosts."api.example.com"]\nrate = 6\n'
                            'concurrency = 12\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(cfgp)
    pol = host_policies(cfg)["api.example.com"]
    assert (pol.rate, pol.concurrency) == (6.0, 12)  # [hosts] sets the host's own limit
    assert pol.retry_unknown_outcome is False  # paid models call it: a sent request may have been billed
