"""The model caller's ETA counts each model's own remaining tasks at that model's own rate.

Walkthrough: 9 s into a two-model run ``status`` showed ``requests: ready 176 leased 4``, ``ETA 4 s (bounded by
model_caller)``, ``model_caller: 43.58/s``, ``per model: sim-a 34.52/s done 244, fake-gpt 9.05/s done 64``: every
task left was fake-gpt's, at ~9/s, and the run took 24 s more. The stage's rate (mostly the finished fast model's)
timed the slow model's work. Now the progress record counts each model's tasks left (those queued for it when the
run started, less those it has finished or dead-lettered since) and times them by that model's rate; the stage's
own estimate stays the floor, and it is the whole estimate when per-model figures are unknown. Commit times are
fed explicitly (``record_done(n, now=...)``); the queue is a real SQLite queue, the plan record a real file.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from geoagent import constants as C
from geoagent.runtime.daemon import PipelineRun
from geoagent.runtime.progress import Progress
from geoagent.runtime.queue import open_queue
from geoagent.runtime.worker import StageStats
from geoagent.status import format_eta, format_status

GEO = [("model_caller", "requests", "responses")]


def _snapshot(tmp_path: Path, lane_work: dict | None) -> dict:
    """A model caller 9 s into a run of two models of 244 tasks each: sim-a finished all 244, fake-gpt 64;
    180 tasks (all fake-gpt's) queued."""
    mono = time.monotonic()
    st = StageStats("model_caller", started_at=mono - 9.0)
    st.lane_done = {"sim-a": 0, "fake-gpt": 0}
    for i in range(9):  # one commit a second: sim-a's 244 in the first 6 s, fake-gpt's 64 spread over 9 s
        a = 244 // 6 + (244 % 6 if i == 5 else 0) if i < 6 else 0
        g = 64 // 9 + (64 % 9 if i == 8 else 0)
        st.lane_done["sim-a"] += a
        st.lane_done["fake-gpt"] += g
        st.record_done(a + g, now=mono - 8.0 + i)
    assert st.lane_done == {"sim-a": 244, "fake-gpt": 64}

    async def go() -> dict:
        queues = {"requests": open_queue(tmp_path / "q", "c", "requests")}
        try:
            await queues["requests"].put_many([(f"r{i}", {"model": "fake-gpt"}) for i in range(180)])
            runners = [SimpleNamespace(stage=SimpleNamespace(name=n, input_edge=i, output_edge=o), stats=st,
                                       budget_stopped=False) for n, i, o in GEO]
            run = PipelineRun("c", runners, queues)  # type: ignore[arg-type]
            return await Progress(tmp_path / "progress.jsonl", live=False, lane_work=lane_work).snapshot(run)
        finally:
            await queues["requests"].close()

    return anyio.run(go)


def test_eta_times_each_model_s_tasks_left_by_its_own_rate(tmp_path):
    rec = _snapshot(tmp_path, {"model_caller": {"sim-a": 244, "fake-gpt": 244}})
    sd = rec["stages"][0]
    assert sd["capacity_per_s"] > 30  # the stage's rate: mostly the finished fast model's
    slow = sd["lanes"]["fake-gpt"]
    assert (slow["left"], sd["lanes"]["sim-a"]["left"]) == (180, 0)
    # the stage rate would say ~5 s; the slow model's 180 tasks at its own ~7/s take ~25 s
    assert rec["eta_s"] == pytest.approx(180 / slow["rate_per_s"], rel=0.02)
    assert rec["eta_s"] > 20 and rec["eta_stage"] == "model_caller"
    assert format_eta(rec).startswith(f"{rec['eta_s']:.0f} s (bounded by model_caller")


def test_eta_falls_back_to_the_stage_rate_when_per_model_figures_are_unknown(tmp_path):
    rec = _snapshot(tmp_path, None)
    sd = rec["stages"][0]
    assert "left" not in sd["lanes"]["fake-gpt"]
    assert rec["eta_s"] == pytest.approx(180 / sd["capacity_per_s"], rel=0.02)


def test_status_per_model_line_shows_each_model_s_tasks_left(tmp_path):
    rec = _snapshot(tmp_path, {"model_caller": {"sim-a": 244, "fake-gpt": 244}})
    from geoagent.runtime.queue import QueueCounts

    st = {"campaign": "c", "queues": {"requests": QueueCounts(ready=180)}, "spend": None, "progress": rec,
          "dead": {}, "running": True}
    text = format_status(st)
    line = next(ln for ln in text.splitlines() if "per model (this run):" in ln)
    assert "fake-gpt" in line and "left 180" in line and "sim-a" in line and "left 0" in line, line
    assert line.endswith("(rates over the last 10 s)"), line  # not the stage's window: they need not add up (walk45 #6)


def test_tasks_left_per_model_at_a_run_s_start_come_from_the_plan_record(tmp_path):
    """The engine's count: the recorded plan's tasks (plan_keys.tsv) still ready or leased on the requests edge."""
    from geoagent.runtime.scope import PlanRecorder, left_in_plan

    plan = [(f"a{i}", {"model": "sim-a"}) for i in range(5)] + [(f"g{i}", {"model": "fake-gpt"}) for i in range(7)]
    state = tmp_path / "state" / "c"
    list(PlanRecorder(state).wrap(plan))

    async def go() -> None:
        q = open_queue(tmp_path / "q", "c", C.EDGE_REQUESTS)
        await q.put_many(plan)
        got = await q.lease(3)  # all sim-a's
        await q.ack(got[:2])
        await q.dead_letter(got[2], "PermanentFailure: x")
        await q.lease(1)  # one leased: still left
        await q.close()

    anyio.run(go)
    assert left_in_plan(state, tmp_path / "q", "c", C.EDGE_REQUESTS) == {"sim-a": 2, "fake-gpt": 7}
    assert left_in_plan(tmp_path / "none", tmp_path / "q", "c", C.EDGE_REQUESTS) is None


def test_a_two_model_run_s_eta_covers_the_slow_model_s_work(tmp_path, monkeypatch):
    """End to end (the OpenAI fake on loopback, two models of one campaign): once the fast model has finished,
    each progress record's ETA is about the slow model's tasks left at its own rate, close to the time the run
    really took from there (before: the stage's rate, mostly the fast model's, gave a small fraction of it)."""
    import warnings

    import orjson

    from _model_harness import generic_campaign
    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.sandbox.llm_openai import make_app as openai_app
    from geoagent.sandbox.server import serve

    key = "local-" "eta-per-model"
    monkeypatch.setenv("ETA_KEY", key)
    app = openai_app(api_keys=[key])

    def table(name: str, base: str, rate: int, concurrency: int) -> str:
        return (f'\n[[models]]\nname = "{name}"\nprovider = "openai"\nmodel = "gpt-{name}"\nbase_url = "{base}/v1"\n'
                f'api_key_env = "ETA_KEY"\nprice_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\n'
                f'max_output_tokens = 20\nconcurrency = {concurrency}\nrate = {{ requests = {rate}, period_s = 1.0 }}\n'
                f'timeout_s = 5.0\n')

    async def go():
        async with serve(app) as base:
            # 80 tasks each: the slow model's take ~10 s, so records of the ETA's first
            # geoagent.runtime.worker.ETA_MIN_WINDOW_S (5 s, "estimating" before) still have its work left
            # each model at its own pace (under the default "plan" pacing the fast one would not finish first)
            cfgp = generic_campaign(tmp_path, name="eta2", n=80, cap_usd=5.0,
                                    models=table("fast", base, 200, 8) + table("slow", base, 8, 1),
                                    queue={"model_pacing": "throughput"})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cfg = load_config(cfgp)
            return cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    cfg, outcome = anyio.run(go)
    assert outcome.status == "complete", outcome.summary()
    records = [orjson.loads(line) for line in (cfg.state_dir() / C.PROGRESS_FILE).read_bytes().splitlines()
               if line.strip()]
    end = records[-1]["t"]
    checked = 0
    for r in records:
        sd = next((s for s in r["stages"] if s["stage"] == "model_caller"), None)
        lanes = (sd or {}).get("lanes") or {}
        planned = r.get("planned_by_model") or {}
        if r.get("finished") or r.get("eta_s") is None or not lanes or not planned:
            continue
        slow_left = planned["slow"] - lanes["slow"]["done"]
        if lanes["fast"]["done"] >= planned["fast"] and slow_left >= 16:
            took = end - r["t"]
            # the ETA is of the slow model's work (~8/s), not the stage's mostly-fast rate
            assert r["eta_s"] >= 0.6 * slow_left / 8.0, (r["eta_s"], lanes, took)
            assert r["eta_s"] >= 0.5 * took, (r["eta_s"], took, lanes)
            assert lanes["slow"]["left"] == slow_left and lanes["fast"]["left"] == 0, lanes
            checked += 1
    assert checked >= 1, [(r.get("eta_s"), [s.get("lanes") for s in r["stages"]]) for r in records][:6]


def _ledger_spend(tmp_path, in_flight: int = 0) -> dict:
    """The spend record of a real SQLite ledger with a $0.40 cap: 919 calls settled at $0.3069 in all, and
    ``in_flight`` calls open, each reserving $0.003."""
    from geoagent.providers.base import Usage
    from geoagent.runtime.ledger import CampaignDB, Ledger

    db = CampaignDB(tmp_path / "campaign.sqlite")
    ledger = Ledger(db, 0.40)
    try:
        for i in range(919):
            r = ledger.reserve(f"k{i}", 0.001, model="fake-gpt")
            ledger.settle(r, Usage(input_tokens=100, output_tokens=10), 0.3069 / 919)
        for i in range(in_flight):
            ledger.reserve(f"f{i}", 0.003, model="fake-gpt")
        return ledger.summary().to_json()
    finally:
        db.close()


def test_status_eta_says_when_the_budget_cap_stops_the_run_first(tmp_path):
    """newuser41 #B: at 919 calls and $0.3069 of a $0.40 cap, ``status`` gave "ETA 138 s" for all the calls left;
    the run stopped budget exhausted 268 calls later. The ETA now says when the cap is reached, from the ledger's
    own figures (a real SQLite ledger: 919 settled calls) and the real requests queue."""
    spend = _ledger_spend(tmp_path)
    rec = _snapshot(tmp_path, None)  # 180 calls queued, the model caller's capacity measured
    rec_cap = {**rec, "spend": spend}
    rate = rec["stages"][0]["capacity_per_s"]
    n = int((0.40 - 0.3069) / (0.3069 / 919))  # 278 calls fit: above the 180 left, so nothing is said
    assert n > 180 and format_eta(rec_cap) == format_eta(rec)
    rec_cap["queues"] = {**rec["queues"], "requests": {**rec["queues"]["requests"], "ready": 999}}
    text = format_eta(rec_cap)
    more = 999 * 0.3069 / 919 - (0.40 - 0.3069)  # all the calls left at the mean cost, less the cap left
    assert text.startswith(f"{rec['eta_s']:.0f} s (bounded by model_caller)"), text
    assert text.endswith(f"; the cap is reached in about {n} more calls (~{n / rate:.0f} s) of the 999 left "
                         f"(at $0.0003 per settled call); the rest needs about ${more:.4f} more"), text
    # a finished run, or one the cap has stopped already, gets no such clause
    assert "cap is reached" not in format_eta({**rec_cap, "finished": True})
    assert "cap is reached" not in format_eta({**rec_cap, "budget_stopped": True})


def test_the_cap_clause_counts_calls_in_flight_at_the_mean_cost(tmp_path):
    """review41c #5: the cap left had the calls in flight's worst-case reservations taken off while the calls left
    still counted those calls at the mean cost: with 16 calls in flight reserving $0.003 each (a real SQLite ledger)
    at a mean of $0.0003 per settled call, the clause said "about 135 more calls ... the rest needs about $0.2885
    more" for about 278 calls and $0.2405. The calls in flight are now counted at the mean cost, among the N; the
    live display's caption shows the same clause."""
    from geoagent.runtime.progress import live_table

    spend = _ledger_spend(tmp_path, in_flight=16)
    assert spend["open_reservations"] == 16 and abs(spend["remaining_usd"] - (0.40 - 0.3069 - 0.048)) < 1e-6
    rec = _snapshot(tmp_path, None)
    rec_cap = {**rec, "spend": spend,
               "queues": {**rec["queues"], "requests": {**rec["queues"]["requests"], "ready": 983, "leased": 16}}}
    mean = 0.3069 / 919
    n = int((0.40 - 0.3069) / mean)
    assert n == 278
    clause = (f"; the cap is reached in about {n} more calls (~{n / rec['stages'][0]['capacity_per_s']:.0f} s) of "
              f"the 999 left (at $0.0003 per settled call); the rest needs about ${999 * mean - (0.40 - 0.3069):.4f} "
              "more")
    assert clause.endswith("$0.2405 more")
    assert format_eta(rec_cap).endswith(clause), format_eta(rec_cap)
    assert clause in str(live_table(rec_cap, False).caption)  # the live display's caption
