"""Progress reporting (session 37, progress37).

Before:

* #2 the live display's spend line showed settled spend alone: a run whose calls were cut by connection resets read
  "spend $0.0084 / cap $0.0200" beside "BUDGET EXHAUSTED - draining", though $0.0116 of unknown-outcome spend counted
  against the cap too;
* #3 after a budget stop the display still showed "ETA 23 s" (the rest waits for a higher cap, no time says when it
  ends), and the run's final progress record kept ``eta_s: 22.5`` and the final frame " - draining";
* #5 two processes appending to one JSONL file (``--stages`` processes writing ``progress.jsonl``) could leave empty
  lines: the look at the file's last byte and the write were not one step (195 of 12,000 lines, 4 writers of
  20 KB records), and a naive reader raised on them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
from pathlib import Path

import anyio
import orjson
from _model_harness import generic_campaign, model_table
from aiohttp import web
from rich.console import Console

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET, run_campaign
from geoagent.files import append_jsonl
from geoagent.runtime.progress import live_table, spend_caption


def _render(rec: dict, final: bool) -> list[str]:
    console = Console(width=100, record=True, color_system=None)
    console.print(live_table(rec, final=final))
    return console.export_text().splitlines()


def _record(**extra) -> dict:
    return {"campaign": "c", "elapsed_s": 20.0, "stages": [{"stage": "model_caller", "done": 9, "in_flight": 2,
                                                            "failed": 0, "dead": 0, "rate_per_s": 1.0}],
            "spend": {"spent_usd": 0.00837, "unknown_usd": 0.01156, "reserved_usd": 0.0, "cap_usd": 0.02},
            "eta_s": None, **extra}


def test_the_spend_line_counts_unknown_outcome_and_reserved_spend():
    assert spend_caption({"spent_usd": 0.00837, "unknown_usd": 0.01156, "reserved_usd": 0.0, "cap_usd": 0.02}) == (
        "spend $0.0084 settled + $0.0116 unknown-outcome / cap $0.0200")
    assert spend_caption({"spent_usd": 0.01, "unknown_usd": 0.0, "reserved_usd": 0.002, "cap_usd": 0.02}) == (
        "spend $0.0100 settled + $0.0020 reserved / cap $0.0200")
    assert spend_caption({"spent_usd": 0.01, "cap_usd": 0.02}) == "spend $0.0100 settled / cap $0.0200"
    lines = _render(_record(budget_stopped=True), final=False)
    assert any("spend $0.0084 settled + $0.0116 unknown-outcome / cap $0.0200" in ln for ln in lines), lines


def test_no_eta_after_a_budget_stop_and_no_draining_in_the_final_frame():
    draining = _render(_record(budget_stopped=True, eta_s=None), final=False)
    assert not any("ETA" in ln for ln in draining), draining
    assert any("BUDGET EXHAUSTED - draining" in ln for ln in draining), draining
    # another stage's own cap (the geocoder's Nominatim request cap) leaves the model calls going: their ETA stays
    # (review37b #4: the first version hid it for what could be hours of paid calls)
    geocoder_cap = _render(_record(budget_stopped=True, eta_s=503.0, eta_stage="model_caller"), final=False)
    assert any("ETA 503 s" in ln for ln in geocoder_cap), geocoder_cap
    final = _render(_record(budget_stopped=True, finished=True), final=True)
    assert any("BUDGET EXHAUSTED" in ln for ln in final) and not any("draining" in ln for ln in final), final


def test_a_budget_stopped_runs_records_carry_no_eta(tmp_path):
    cfg = load_config(generic_campaign(tmp_path, name="bud37", n=60, cap_usd=0.0003,
                                       models=model_table("sim", max_output_tokens=300, concurrency=2)))
    out = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.exit_code == EXIT_BUDGET
    records = [orjson.loads(line) for line in (cfg.state_dir() / C.PROGRESS_FILE).read_bytes().splitlines() if line]
    stopped = [r for r in records if r.get("budget_stopped")]
    assert stopped and stopped[-1]["finished"]
    assert all(r["eta_s"] is None and r["eta_stage"] is None for r in stopped)  # before: the final record said 22.5 s


def _writer(path: str, tag: int, n: int) -> None:
    for i in range(n):
        append_jsonl(path, [{"w": tag, "i": i, "pad": "x" * 20_000}], fsync=False)


def test_concurrent_appenders_leave_no_empty_line(tmp_path: Path):
    path = tmp_path / "progress.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), tag, 800)) for tag in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a newline
    body = lines[:-1]
    assert len(body) == 3200 and all(body), sum(not ln for ln in body)
    assert sorted((r["w"], r["i"]) for r in map(orjson.loads, body)) == [(w, i) for w in range(4) for i in range(800)]


def test_the_eta_is_no_shorter_than_the_rate_limit_allows(tmp_path, monkeypatch):
    """#1: with a rate limit of a long window (here 10 per 5 s) the stage's capacity, measured up to its last commit,
    was the burst's rate, and the ETA came out about half the time left (30 per 15 s: "ETA 31 s" with 64 s left).
    The model caller now says how fast its models' limits allow (``rate_ceiling_per_s``) and the ETA uses no more."""
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.server import serve

    from _made_up_keys import made_up_key

    key = made_up_key("sk-", 40, seed="progress37-eta")
    monkeypatch.setenv("P37_KEY", key)
    app = llm_openai.make_app(api_keys=[key])
    rng = random.Random(37)

    @web.middleware
    async def model_time(request, handler):  # answers of one burst come back spread over 0.1-0.9 s, as models do
        await asyncio.sleep(rng.uniform(0.1, 0.9))
        return await handler(request)

    app.middlewares.insert(0, model_time)

    async def main():
        async with serve(app) as base:
            path = generic_campaign(tmp_path, name="eta37", n=40,
                                    models=model_table("gpt", base_url=base, key_var="P37_KEY", concurrency=16,
                                                       rate_requests=10))
            path.write_text(path.read_text(encoding="utf-8").replace(
                "rate = { requests = 10, period_s = 1.0 }", "rate = { requests = 10, period_s = 5.0 }"), encoding="utf-8")
            cfg = load_config(path)
            await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg

    cfg = anyio.run(main)
    records = [orjson.loads(line) for line in (cfg.state_dir() / C.PROGRESS_FILE).read_bytes().splitlines() if line]
    timed = [r for r in records if r.get("eta_s") is not None and not r.get("finished")]
    assert timed, records
    for r in timed:
        left = r["queues"]["requests"]["ready"] + r["queues"]["requests"]["leased"]
        assert r["eta_s"] >= left / (10 / 5.0) - 0.5, (r["eta_s"], left, r["stages"][0]["capacity_per_s"])


def test_rate_ceiling_of_the_model_caller():
    from geoagent.config import config_from_dict
    from geoagent.workers.model_caller import _rate_limits

    def _rate_ceiling(cfg, models, providers):
        return _rate_limits(cfg, models, providers)[0]

    class _Http:  # a provider that sends over HTTP (what the model caller reads of it)
        supports_before_send = True

        def __init__(self, url: str) -> None:
            self.base_url = url

    def cfg(models, hosts=None):
        d = {"campaign": {"name": "c", "kind": "generic"}, "budget": {"cap_usd": 1.0}, "models": models}
        if hosts:
            d["hosts"] = hosts
        return config_from_dict(d)

    priced = {"price_input_usd_per_mtok": 0.15, "price_output_usd_per_mtok": 0.6}
    a = {"name": "a", "provider": "openai", "model": "ma", "base_url": "https://api.example.org/v1",
         "rate": {"requests": 30, "period_s": 15.0}, **priced}
    b = {"name": "b", "provider": "openai", "model": "mb", "base_url": "https://api.example.org/v1",
         "rate": {"requests": 2, "period_s": 1.0}, **priced}
    providers = {"a": _Http("https://api.example.org/v1"), "b": _Http("https://api.example.org/v1")}
    c1 = cfg([a])
    assert _rate_ceiling(c1, c1.models, providers) == 2.0
    c2 = cfg([a, b])
    assert _rate_ceiling(c2, c2.models, providers) == 4.0  # two models, each its own limit key
    c3 = cfg([a, b], hosts={"api.example.org": {"rate": 3, "period_s": 1.0}})
    assert _rate_ceiling(c3, c3.models, providers) == 3.0  # the host's ceiling over both
    sim = cfg([{"name": "s", "provider": "simulated", "model": "sim-1"}])
    assert _rate_ceiling(sim, sim.models, {}) is None  # answered offline: no limit paces it
    # review37b #1: models with no rate or concurrency of their own on a host with a [hosts] entry share the host's
    # one key: 2/s for both, not 2/s each
    bare = [{k: v for k, v in m.items() if k != "rate"} for m in (a, b)]
    c4 = cfg(bare, hosts={"api.example.org": {"rate": 10, "period_s": 5.0}})
    stage, lanes = _rate_limits(c4, c4.models, providers)
    assert stage == 2.0 and lanes == {"a": 2.0, "b": 2.0}
    c5 = cfg([a, b])
    assert _rate_limits(c5, c5.models, providers)[1] == {"a": 2.0, "b": 2.0}  # 30 per 15 s; 2 per 1 s
    mixed = cfg([a, {"name": "s", "provider": "simulated", "model": "sim-1"}])
    stage, lanes = _rate_limits(mixed, mixed.models, {"a": providers["a"]})
    assert stage is None and lanes == {"a": 2.0}  # the offline model is unbounded; the HTTP one keeps its lane cap


def test_a_lane_is_timed_by_no_more_than_its_rate_limit():
    """review37b #2: with a fast model beside it, a lane limited to 10 per 5 s was timed at its burst's 2.85/s."""
    from geoagent.runtime.progress import lanes_eta

    lanes = {"a": {"done": 60, "dead": 0, "rate_per_s": 900.0}, "b": {"done": 20, "dead": 0, "rate_per_s": 2.852}}
    start = {"a": 60, "b": 60}
    assert round(lanes_eta(start, lanes), 1) == round(40 / 2.852, 1)
    assert lanes_eta(start, lanes, ceilings={"a": 1000.0, "b": 2.0}) == 20.0


def test_status_caps_merged_capacities_and_a_stopped_model_caller_has_no_eta():
    """review37b #3: status merges a --stages run's records; their summed capacities ran past the rate limit, and a
    budget-stopped model caller still had an ETA there."""
    import time as _time

    from geoagent.runtime.progress import merge_records

    now = _time.time()

    def rec(pid, cap, stopped=False):
        return {"t": now, "campaign": "c", "pid": pid, "run_id": f"r{pid}", "elapsed_s": 10.0,
                "queues": {"requests": {"ready": 20, "leased": 0, "done": 20, "dead": 0}},
                "stages": [{"stage": "model_caller", "input_edge": "requests", "done": 10, "in_flight": 0,
                            "failed": 0, "dead": 0, "rate_per_s": cap, "capacity_per_s": cap, "eta_ready": True,
                            "idle_s": 0.1, "stall_after_s": 30.0, "finished": False, "budget_stopped": stopped,
                            "rate_ceiling_per_s": 2.0}],
                "finished": False, "budget_stopped": stopped}

    merged = merge_records([rec(1, 1.6), rec(2, 1.7)], [True, True], now=now)
    assert merged["eta_s"] == 10.0, merged["eta_s"]  # 20 left at the 2/s limit, not at 3.3/s
    stopped = merge_records([rec(1, 1.6, stopped=True), rec(2, 1.7)], [True, True], now=now)
    assert stopped["eta_s"] is None
