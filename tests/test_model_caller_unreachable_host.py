"""A model whose server cannot be reached (connection refused on a closed loopback port: a local vLLM/Ollama
server not started, a typo in ``base_url``) stops that model only: its tasks stay queued (ready, never
dead-lettered as missing), every other model's work runs to the end, the run ends ``incomplete`` with a line
naming the model, the host and what to check, and the same command with the server up completes the rest,
each request key paid once. (geoagent.workers.model_caller, "Unreachable-host breaker")

Every campaign runs the real engine (queues, model caller, store, ledger, HTTP client) against the local
OpenAI-compatible fake (``geoagent/sandbox/llm_openai``) and a port nothing listens on.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from _model_harness import generic_campaign, ledger_figures, model_table, paid_keys
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INCOMPLETE, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import free_port, serve
from geoagent.status import campaign_status, format_status
from geoagent.workers.model_caller import HostBreaker
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 35, seed="sandbox-host-n22")
#: the dead model's HTTP retries: 2 attempts, backoff a few ms (each unreachable request ends in milliseconds)
FAST_RETRIES = "max_attempts = 2\n"


def _model(name: str, base: str, concurrency: int = 4) -> str:
    return model_table(name, base_url=base, key_var="GA_TEST_HOST_KEY", model=f"sim-{name}", max_output_tokens=64,
                       concurrency=concurrency, rate_requests=5000) + FAST_RETRIES


def _config(tmp: Path, name: str, n: int, models: str, max_attempts: int = 5) -> Path:
    # the queue's backoff is short so nacked tasks come back within the run (they are then held)
    return generic_campaign(tmp, name=name, n=n, cap_usd=5.0, models=models,
                            queue={"max_attempts": max_attempts, "backoff_base_s": 0.01, "backoff_max_s": 0.05})




def test_a_dead_model_host_is_left_queued_while_the_other_model_completes_and_the_rerun_pays_each_key_once(
        tmp_path, monkeypatch):
    n = 40  # generic plan: n requests per model
    monkeypatch.setenv("GA_TEST_HOST_KEY", KEY)
    good_app = llm_openai.make_app(api_keys=[KEY])
    dead_app = llm_openai.make_app(api_keys=[KEY])
    port = free_port()
    dead_base = f"http://127.0.0.1:{port}"

    async def main():
        async with serve(good_app) as good_base:
            cfg = load_config(_config(tmp_path, "hostdown", n, _model("good", good_base) + _model("dead", dead_base)))
            first = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            after_first = ledger_figures(cfg)
            good_calls_first = len(good_app["calls"])
            status_text = format_status(campaign_status(cfg))  # what `run.py status` prints now
            holds = [sd.get("host_holds") for sd in campaign_status(cfg)["progress"]["stages"]
                     if sd.get("stage") == "model_caller"]
            async with serve(dead_app, "127.0.0.1", port):  # the server is started
                second = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg, first, after_first, good_calls_first, (status_text, holds), second

    cfg, first, (problems1, totals1), good_calls_first, (status_text, holds), second = anyio.run(main)
    # the final progress record carries the held model as data (HostBreaker.holding): status names it from there
    assert [[(h["model"], h["host"], h["held"]) for h in hs] for hs in holds] == [[("dead", f"127.0.0.1:{port}", n)]]
    assert (f"a model's host unreachable (model dead: host 127.0.0.1:{port} unreachable (" in status_text
            and "that model's tasks were left queued" in status_text), status_text
    assert f"model dead: host 127.0.0.1:{port} unreachable" in status_text
    assert first.status == "incomplete" and first.exit_code == EXIT_INCOMPLETE
    c = first.counts["requests"]
    # the good model's n tasks all completed; the dead model's n are ready again, none dead, none leased
    assert (c.done, c.dead, c.leased, c.ready) == (n, 0, 0, n)
    assert good_calls_first == n and len(paid_keys(good_app)) == n
    line = next(ln for ln in first.stop_reasons if "unreachable" in ln)
    assert line == (f"model dead: host 127.0.0.1:{port} unreachable (connection refused on 5 consecutive requests); "
                    f"check [[models]] base_url of 'dead' / is the server running?; {n} request(s) of model dead "
                    "left queued; re-run the same command to resume")
    assert line in first.summary() and "model good" not in first.summary()
    assert KEY not in first.summary()
    # nothing was billed for the calls that never left: every reservation released, no unknown spend
    assert problems1 == [] and totals1 == {"reserved_nusd": 0, "unknown_nusd": 0, "results": n}
    # the same command with the server up: the dead model's n tasks complete, the good model's are not re-sent
    assert second.status == "complete" and second.exit_code == EXIT_COMPLETE
    assert second.counts["requests"].done == 2 * n and second.counts["requests"].dead == 0
    assert second.stop_reasons == []
    ok_good, ok_dead = paid_keys(good_app), paid_keys(dead_app)
    assert len(ok_good) == n and set(ok_good.values()) == {1}
    assert len(ok_dead) == n and set(ok_dead.values()) == {1}
    assert len(good_app["calls"]) == n  # no second call to the good host
    problems2, totals2 = ledger_figures(cfg)
    assert problems2 == [] and totals2 == {"reserved_nusd": 0, "unknown_nusd": 0, "results": 2 * n}


def test_every_model_unreachable_stops_quickly_with_nothing_dead_lettered(tmp_path, monkeypatch):
    """Two models on one closed host and a third on another: a queue far larger than what is in flight. Both
    hosts' breakers open after a few requests each, the model caller stops leasing (no model can run), the run
    ends in seconds with the whole queue ready (none dead-lettered, nothing spent), and the lines name both
    hosts and their models."""
    n = 2000
    monkeypatch.setenv("GA_TEST_HOST_KEY", KEY)
    p1, p2 = free_port(), free_port()
    b1, b2 = f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"

    async def main():
        cfg = load_config(_config(tmp_path, "alldown", n, _model("a", b1) + _model("b", b1) + _model("c", b2)))
        t0 = time.monotonic()
        out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
        return cfg, out, time.monotonic() - t0

    cfg, out, elapsed_s = anyio.run(main)
    assert out.status == "incomplete" and out.exit_code == EXIT_INCOMPLETE
    c = out.counts["requests"]
    assert (c.ready, c.leased, c.dead, c.done) == (3 * n, 0, 0, 0)  # untouched, nothing lost
    # bounded: a few milliseconds per refused request, the queue's 0.01-0.05 s backoff; generous margin for CI
    assert elapsed_s < 60
    lines = [ln for ln in out.stop_reasons if "unreachable" in ln]
    assert len(lines) == 2
    by_host = {p1: next(ln for ln in lines if f"127.0.0.1:{p1}" in ln), p2: next(ln for ln in lines if f"127.0.0.1:{p2}" in ln)}
    assert by_host[p1].startswith(f"models a, b: host 127.0.0.1:{p1} unreachable (connection refused on ")
    assert "check [[models]] base_url of 'a', 'b' / is the server running?" in by_host[p1]
    assert by_host[p2].startswith(f"model c: host 127.0.0.1:{p2} unreachable (connection refused on ")
    # the last line says how many requests were left in the queue: all of them
    assert lines[-1].endswith(f"no model can run any more, so dispatching stopped: {3 * n} request(s) left queued; "
                              "re-run the same command to resume")
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals == {"reserved_nusd": 0, "unknown_nusd": 0, "results": 0}


def test_a_task_on_its_last_attempt_is_held_not_dead_lettered_below_the_threshold(tmp_path, monkeypatch):
    """One task, ``[queue] max_attempts = 2``: two unreachable requests never reach the threshold of 5, yet the
    task is not dead-lettered (nothing was ever sent): its last attempt opens the breaker and it stays ready."""
    monkeypatch.setenv("GA_TEST_HOST_KEY", KEY)
    port = free_port()

    async def main():
        cfg = load_config(_config(tmp_path, "tiny", 1, _model("m", f"http://127.0.0.1:{port}", 1), max_attempts=2))
        return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    assert out.status == "incomplete" and out.exit_code == EXIT_INCOMPLETE
    c = out.counts["requests"]
    assert (c.ready, c.dead, c.done) == (1, 0, 0)
    assert any(ln.startswith(f"model m: host 127.0.0.1:{port} unreachable (connection refused on 2 consecutive "
                             "requests)") for ln in out.stop_reasons)


def test_host_breaker_opens_per_host_for_every_model_on_it():
    b = HostBreaker(threshold=3)
    b.set_host("a", "h:1")
    b.set_host("b", "h:1")
    b.set_host("c", "h:2")
    b.set_host("offline", None)
    assert b.failure("a", "h:1", 1, "connection: refused") is None
    assert b.failure("b", "h:1", 2, "connection: refused") is None
    assert b.is_open("a") is None and b.is_open("b") is None
    down = b.failure("a", "h:1", 3, "connection: Connect call failed")  # third request in a row to h:1
    assert down is not None and down.models == ["a", "b"] and down.streak == 3
    assert b.is_open("a") is down and b.is_open("b") is down  # both models on the host stop
    assert b.is_open("c") is None and b.is_open("offline") is None
    assert b.failure("c", "h:2", 1, "timeout: connect", last_attempt=True) is not None  # last attempt: opens
    b.hold("a", "k1")
    b.hold("a", "k1")  # the same task held again after its lease expired counts once
    b.hold("b", "k2")
    assert b.report_lines() == [
        "models a, b: host h:1 unreachable (connection refused on 3 consecutive requests); check [[models]] "
        "base_url of 'a', 'b' / is the server running?; 1 request(s) of model a, 1 of model b left queued; re-run "
        "the same command to resume",
        "model c: host h:2 unreachable (connect timeout on 1 request); check [[models]] base_url of 'c' / is the "
        "server running?; 0 request(s) of model c left queued; re-run the same command to resume",
    ]


def test_a_model_without_base_url_unreachable_names_network_access_not_a_server(tmp_path, monkeypatch):
    """newuser41 #C: a model with no base_url calls its provider's own public API (api.openai.com); when that host
    cannot be reached (no network, DNS, a proxy) the line said "check [[models]] base_url of 'gpt-4o-mini' / is the
    server running?", a server nobody runs. It now names network access to that host. The provider's own API is
    pointed at a closed local port here (the provider defaults table, as an offline machine's DNS failure would
    leave it unreachable); the model beside it, with a base_url, keeps the server hint."""
    from geoagent.providers import settings

    monkeypatch.setenv("GA_TEST_HOST_KEY", KEY)
    own, mine = free_port(), free_port()
    monkeypatch.setitem(settings.DEFAULT_BASE_URLS, "openai", f"http://127.0.0.1:{own}/v1")
    public = _model("pub", "http://x").replace('base_url = "http://x/v1"\n', "")
    assert "base_url" not in public

    async def main():
        cfg = load_config(_config(tmp_path, "pubdown", 20, public + _model("mine", f"http://127.0.0.1:{mine}")))
        assert cfg.model("pub").base_url is None
        return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    assert out.status == "incomplete" and out.exit_code == EXIT_INCOMPLETE
    line = next(ln for ln in out.stop_reasons if ln.startswith("model pub: "))
    assert line.startswith(f"model pub: host 127.0.0.1:{own} unreachable (connection refused on "), line
    assert (f"; check network / DNS / proxy access to 127.0.0.1:{own} ('pub' has no [[models]] base_url: it calls "
            "its provider's own API); ") in line and "is the server running" not in line, line
    other = next(ln for ln in out.stop_reasons if ln.startswith("model mine: "))
    assert "check [[models]] base_url of 'mine' / is the server running?" in other, other
