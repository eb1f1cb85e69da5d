"""Models that call one host keep their own limits: each model is one limit key, (host, model).

Walkthrough finding (session 8): the policy of a host that several ``[[models]]`` call was whichever model came
last in the file: a model that asked for concurrency 1 got the other's 4 (against a real API: 429s), and the dry
run timed each model at its own limit, so its duration disagreed with the run. Session 8 made their calls share
the lowest limit; session 9 keys the limits per model (providers limit per model: issue 2 point 4/5), so each
model gets exactly its own entry's limit in the run and in the dry run, and keeps its own timeout and attempts.
Checked server-side against the OpenAI-compatible fake (requests in flight at once, per model).
"""

from __future__ import annotations

import warnings

import anyio
from aiohttp import web

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from geoagent.config import (ConfigWarning, host_ceilings, host_policies, load_config, model_call_policy,
                             model_limit_key, model_limit_policies, model_time_limit)
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


def test_models_on_one_host_keep_their_own_limits_in_the_run_and_the_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHARED_KEY", KEY)
    app = add_latency(make_app(api_keys=[KEY]), 0.1)
    live: dict[str, int] = {}
    peak: dict[str, int] = {}

    @web.middleware
    async def in_flight(request, handler):
        body = await request.json() if request.method == "POST" else {}
        model = str(body.get("model"))
        live[model] = live.get(model, 0) + 1
        peak[model] = max(peak.get(model, 0), live[model])
        try:
            return await handler(request)
        finally:
            live[model] -= 1

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
    assert not [t for t in texts if "call one" in t or "ceiling" in t], texts  # nothing binds below an entry
    slow, fast = model_limit_key(cfg.model("slow")), model_limit_key(cfg.model("fast"))
    pols = model_limit_policies(cfg)
    assert (pols[slow].concurrency, pols[fast].concurrency) == (1, 4)
    assert host_policies(cfg)[cfg.model("slow").host].retry_unknown_outcome is False
    # each model keeps its own timeout for its calls
    assert model_call_policy(cfg, cfg.model("slow")).timeout_s == 7.0
    assert model_call_policy(cfg, cfg.model("fast")).timeout_s == 9.0
    out = capsys.readouterr().out
    # the dry run times each at its own limit: slow 16 calls at 1 / 0.5 s = 2 calls/s (8 s), fast at 4 / 0.5 s =
    # 8 calls/s (2 s); the models run side by side, so the campaign takes the longer, 8 s
    assert "about 8 s at 2 calls/s (assuming 0.5 s per call ([[models]] expected_latency_s): the lower of " \
           "concurrency 1 / 0.5 s" in out, out
    assert "about 2 s at 8 calls/s (assuming 0.5 s per call ([[models]] expected_latency_s): the lower of " \
           "concurrency 4 / 0.5 s" in out, out
    assert "about 8 s of model calls" in out and "one limit for all" not in out, out
    # the run kept one request of slow in flight at a time, and more of fast (server-side), and finished
    assert outcome.status == "complete" and peak["gpt-a"] == 1 and peak["gpt-b"] > 1, (outcome.status, peak)


def test_entries_naming_one_model_on_one_host_share_its_lowest_limit(tmp_path):
    """Two entries of the same API model on one host (e.g. two prompts' settings) share the provider's one
    per-model limit: the lowest either sets, with a warning naming the figures."""
    models = (model_table("one", base_url="https://api.example.com", key_var="SHARED_KEY", model="gpt-a",
                          concurrency=2, rate_requests=3)
              + model_table("two", base_url="https://api.example.com", key_var="SHARED_KEY", model="gpt-a",
                            concurrency=5, rate_requests=9))
    cfgp = generic_campaign(tmp_path, name="samemodel", n=4, cap_usd=5.0, models=models)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(cfgp)
    (warn,) = [str(w.message) for w in caught if "call one model" in str(w.message)]
    assert "models 'one', 'two' call one model, 'gpt-a' on api.example.com" in warn
    assert "3 requests per 1 s and concurrency 2" in warn
    pol = model_limit_policies(cfg)[model_limit_key(cfg.model("one"))]
    assert (pol.rate, pol.period_s, pol.concurrency) == (3, 1.0, 2)


def test_a_hosts_entry_for_a_paid_model_host_sets_its_limit_but_never_retries_a_sent_call(tmp_path):
    cfgp = generic_campaign(tmp_path, name="hostentry", n=4, cap_usd=5.0,
                            models=_two_models("https://api.example.com") + '\n[hosts."api.example.com"]\nrate = 6\n'
                            'concurrency = 12\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(cfgp)
    pol = host_policies(cfg)["api.example.com"]
    assert (pol.rate, pol.concurrency) == (6.0, 12)  # [hosts] sets the host's own limit
    assert host_ceilings(cfg) == {"api.example.com"}  # a ceiling over the models' own limit keys
    assert set(model_limit_policies(cfg)) == {"api.example.com/gpt-a", "api.example.com/gpt-b"}
    assert pol.retry_unknown_outcome is False  # paid models call it: a sent request may have been billed


def test_the_dry_run_times_models_under_a_hosts_ceiling_together(tmp_path, monkeypatch, capsys):
    """``[hosts."H"] rate = 4`` over models a (20/s) and b (5/s): each model's line names its own limit and the
    ceiling it shares, and the campaign's time is the ceiling's: 32 calls at 4/s = 8 s, not each model alone."""
    monkeypatch.setenv("SHARED_KEY", KEY)
    models = (model_table("a", base_url="https://api.example.com", key_var="SHARED_KEY", model="gpt-a",
                          rate_requests=20) + "expected_latency_s = 0.01\n"
              + model_table("b", base_url="https://api.example.com", key_var="SHARED_KEY", model="gpt-b",
                            rate_requests=5) + "expected_latency_s = 0.01\n"
              + '\n[hosts."api.example.com"]\nrate = 4\nconcurrency = 8\n')
    cfgp = generic_campaign(tmp_path, name="ceildry", n=16, cap_usd=5.0, models=models)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["run", str(cfgp), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "its rate limit of 20 per 1 s, its host's [hosts] ceiling 4 per 1 s (shared with 'b'))" in out, out
    assert "its rate limit of 5 per 1 s, its host's [hosts] ceiling 4 per 1 s (shared with 'a'))" in out, out
    assert out.count("about 4 s at 4 calls/s") == 2 and "about 8 s of model calls" in out, out


def test_a_hosts_entry_for_the_hostname_alone_is_the_ceiling_of_a_model_host_on_any_port(tmp_path):
    """``[hosts."localhost"]`` matches localhost:8000 (any port, as the HTTP client reads it): it is that model
    host's ceiling, with the entry's limits, not the models' lowest under the host:port key."""
    base = "http://localhost:8000"
    models = (model_table("a", base_url=base, key_var="SHARED_KEY", model="m-a", concurrency=6, rate_requests=20)
              + model_table("b", base_url=base, key_var="SHARED_KEY", model="m-b", concurrency=2, rate_requests=5)
              + '\n[hosts."localhost"]\nrate = 8\nconcurrency = 7\n')
    cfgp = generic_campaign(tmp_path, name="hostnameceil", n=4, cap_usd=5.0, models=models)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(cfgp)
    pol = host_policies(cfg)["localhost:8000"]
    assert (pol.rate, pol.concurrency) == (8.0, 7)
    assert host_ceilings(cfg) == {"localhost:8000"}
    pols = model_limit_policies(cfg)
    assert (pols["localhost:8000/m-a"].rate, pols["localhost:8000/m-b"].concurrency) == (20, 2)


def test_under_a_ceiling_an_entry_without_limits_shares_its_models_key_without_a_warning(tmp_path):
    """Under ``[hosts."H"]``, entry 'one' sets gpt-a's rate and 'two' (gpt-a too) sets nothing: the HTTP layer
    paces both by gpt-a's key (the provider's one limit), so the dry run counts 'two' under that key as well,
    and nothing conflicts (no warning); 'three' (gpt-b, no limits of its own) has no key: the ceiling alone."""
    import textwrap

    base = "https://api.example.com"
    bare = textwrap.dedent(f'''
        [[models]]
        name = "NAME"
        provider = "openai"
        model = "MODEL"
        base_url = "{base}/v1"
        api_key_env = "SHARED_KEY"
        price_input_usd_per_mtok = 0.15
        price_output_usd_per_mtok = 0.60
        ''')
    models = (model_table("one", base_url=base, key_var="SHARED_KEY", model="gpt-a", concurrency=3, rate_requests=2)
              + bare.replace("NAME", "two").replace("MODEL", "gpt-a")
              + bare.replace("NAME", "three").replace("MODEL", "gpt-b")
              + '\n[hosts."api.example.com"]\nrate = 50\nconcurrency = 20\n')
    cfgp = generic_campaign(tmp_path, name="mixed", n=4, cap_usd=5.0, models=models)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(cfgp)
    assert not [str(w.message) for w in caught if "call one model" in str(w.message) or "ceiling" in str(w.message)]
    assert set(model_limit_policies(cfg)) == {"api.example.com/gpt-a"}
    pol = model_limit_policies(cfg)["api.example.com/gpt-a"]
    assert (pol.rate, pol.concurrency) == (2, 3)
    assert model_time_limit(cfg, cfg.model("two"))[:3] == (2, 1.0, 3)
    assert model_time_limit(cfg, cfg.model("three")) == (50, 1.0, 20, None)
