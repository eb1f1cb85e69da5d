"""Several models in one model-caller stage each run at their own limit (session 9 walkthrough).

Since the HTTP layer limits each (host, model) key on its own, a slow model must not slow a fast one. The
walkthrough measured the opposite end to end: the stage leased tasks from its one FIFO ``requests`` queue into a
fixed pool of workers, and tasks of a slow model waited for their key's rate slot while holding a worker, so
the stage filled up with them (head-of-line blocking): a fast model (concurrency 4, 20/s) ran at ~4.5/s next to
a model limited to 5/s. Now the runner admits each model's tasks up to its own share (its concurrency plus a
small prefetch) and defers the rest back to the queue unsent (:mod:`geoagent.runtime.worker`, "Lanes").

Everything is measured server-side, on the OpenAI fake's own call log (per model arrival times).
"""

from __future__ import annotations

import sqlite3
import warnings
from collections import Counter

import anyio
import orjson

from _model_harness import generic_campaign, ledger_figures
from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.stage import Lane, Stage, StageContext
from geoagent.sandbox.llm_openai import make_app as openai_app
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status

KEY = "local-fair-share"


def _table(name: str, base: str, model: str, *, rate: int, concurrency: int, sampling: float = 1.0) -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "openai"\nmodel = "{model}"\nbase_url = "{base}/v1"\n'
            f'api_key_env = "FAIR_KEY"\nprice_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\n'
            f'max_output_tokens = 20\nconcurrency = {concurrency}\nrate = {{ requests = {rate}, period_s = 1.0 }}\n'
            f'sampling_rate = {sampling}\ntimeout_s = 5.0\n')


def _fast_and_slow(base: str) -> str:
    """Model a (20/s, concurrency 4, every request) and model b (2/s, concurrency 1, sampled at 0.35)."""
    return (_table("a", base, "gpt-a", rate=20, concurrency=4)
            + _table("b", base, "gpt-b", rate=2, concurrency=1, sampling=0.35))


def _max_in_window(times: list[float], window_s: float = 1.0) -> int:
    ts = sorted(times)
    best, i = 0, 0
    for j, t in enumerate(ts):
        while t - ts[i] >= window_s:
            i += 1
        best = max(best, j - i + 1)
    return best


def test_a_slow_model_does_not_hold_back_a_fast_one_in_one_stage(tmp_path, monkeypatch):
    """Model a (20/s, concurrency 4) and model b (2/s, concurrency 1) interleaved in one campaign queue, under
    ``[queue] model_pacing = "throughput"``: while b still has work, a's server-side rate is >= 70 % of its own
    20/s (before: the stage filled with b's tasks and a ran near b's pace); b never exceeds its 2/s; every request
    is answered exactly once; the ledger is sound. (The default, "plan", paces a by b's share of its work:
    :func:`test_plan_pacing_keeps_each_models_share_of_its_work_even`.)"""
    monkeypatch.setenv("FAIR_KEY", KEY)
    app = openai_app(api_keys=[KEY])

    async def go():
        async with serve(app) as base:
            cfgp = generic_campaign(tmp_path, name="fair", n=150, cap_usd=5.0, models=_fast_and_slow(base),
                                    queue={"model_pacing": "throughput"})
            cfg = load_config_quiet(cfgp)
            outcome = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return cfg, outcome

    cfg, outcome = anyio.run(go)
    assert outcome.status == "complete", outcome
    calls = [r for r in app["calls"] if r["status"] == 200]
    a = sorted(r["t_mono"] for r in calls if r["model"] == "gpt-a")
    b = sorted(r["t_mono"] for r in calls if r["model"] == "gpt-b")
    assert len(a) == 150, len(a)
    assert 30 <= len(b) <= 75, len(b)
    # b is the slow one: it still has work when a is done (or nearly), so a's span is "while both have work"
    assert b[-1] >= a[-1] - 0.5, (a[-1] - a[0], b[-1] - b[0])
    a_rate = (len(a) - 1) / (a[-1] - a[0])
    assert a_rate >= 0.7 * 20, f"model a ran at {a_rate:.1f}/s next to b (its own limit: 20/s)"
    # neither exceeds its own limit. Counted in 5-s windows: the arrivals are stamped by the fake in the same
    # event loop, and on a loaded 2-core box a handler can start a few hundred ms late, which bunches arrivals
    # in 1-s windows past what was sent (the HTTP layer's margin absorbs 100 ms); see also the mean rates
    assert _max_in_window(a, 5.0) <= 100 and _max_in_window(b, 5.0) <= 10, (_max_in_window(a, 5.0),
                                                                           _max_in_window(b, 5.0))
    assert (len(b) - 1) / (b[-1] - b[0]) <= 2.0 and a_rate <= 20.0
    # every request exactly once (billed once), nothing reserved left open
    keys = Counter(r["key"] for r in calls)
    assert keys and max(keys.values()) == 1, keys.most_common(3)
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals["reserved_nusd"] == 0 and totals["unknown_nusd"] == 0, (problems, totals)
    assert totals["results"] == len(a) + len(b)
    # the progress stream (and so ``status``) tells the models apart: which one is slow
    records = [orjson.loads(line) for line in (cfg.state_dir() / C.PROGRESS_FILE).read_bytes().splitlines()
               if line.strip()]
    live = [sd["lanes"] for r in records if not r.get("finished") for sd in r["stages"]
            if sd["stage"] == "model_caller" and sd.get("lanes") and sd["lanes"]["b"]["done"] >= 5
            and sd["lanes"]["a"]["done"] < 140]
    assert live, "no progress record with per-model rates while both models ran"
    assert all(ln["a"]["rate_per_s"] > 3 * ln["b"]["rate_per_s"] > 0 for ln in live[-3:]), live[-3:]
    text = format_status(campaign_status(cfg))
    assert f"per model (last run): a done 150, b done {len(b)}" in text, text


def _shares(a: list[float], b: list[float]) -> list[tuple[float, float]]:
    """(a's share of its calls, b's share of its) after each call of either, in time order."""
    events = sorted([(t, 0) for t in a] + [(t, 1) for t in b])
    na = nb = 0
    out = []
    for _, which in events:
        na, nb = na + (which == 0), nb + (which == 1)
        out.append((na / len(a), nb / len(b)))
    return out


def test_plan_pacing_keeps_each_models_share_of_its_work_even(tmp_path, monkeypatch):
    """The default ``[queue] model_pacing = "plan"`` (walk32 #4: a sampled model ran far ahead through its share of
    the plan, so a budget stop held it 81 % done beside another 16 % done): the same two models as above, a fast
    (20/s) with 150 tasks and b slow (2/s) with about 52. The run takes as long as b's work (as before: b is the
    slowest), a is spread over it, and at every moment the two models' shares of their calls stay within a few
    tasks of each other; every request is still answered exactly once."""
    monkeypatch.setenv("FAIR_KEY", KEY)
    app = openai_app(api_keys=[KEY])

    async def go():
        async with serve(app) as base:
            cfg = load_config_quiet(generic_campaign(tmp_path, name="paced", n=150, cap_usd=5.0,
                                                     models=_fast_and_slow(base)))
            return cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    cfg, outcome = anyio.run(go)
    assert outcome.status == "complete", outcome
    calls = [r for r in app["calls"] if r["status"] == 200]
    a = sorted(r["t_mono"] for r in calls if r["model"] == "gpt-a")
    b = sorted(r["t_mono"] for r in calls if r["model"] == "gpt-b")
    assert len(a) == 150 and 30 <= len(b) <= 75, (len(a), len(b))
    worst = max(abs(sa - sb) for sa, sb in _shares(a, b))
    # a lane's worth of slack (a: 4 of 150; b: 1 of ~52) plus the calls in flight and the deferral delay (1 s: up to
    # 2 of b's calls, 4 % of its work)
    assert worst <= 0.15, worst
    assert abs(a[-1] - b[-1]) <= 3.0, (a[-1] - a[0], b[-1] - b[0])  # a spread over b's whole run
    keys = Counter(r["key"] for r in calls)
    assert max(keys.values()) == 1
    problems, totals = ledger_figures(cfg)
    assert problems == [] and totals["results"] == len(a) + len(b)


def load_config_quiet(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_config(path)


class _TwoLanes(Stage):
    """A stage with a fast lane (cap 2) and a slow one (cap 1: each task waits 0.5 s, like a 2/s rate limit)."""

    name = "lanes"
    input_edge = "a"
    output_edge = None
    concurrency = 3

    def __init__(self):
        self.calls: Counter[str] = Counter()
        self.fast_done_at: list[float] = []

    def lanes(self):
        return {"fast": Lane(cap=2), "slow": Lane(cap=1, rate_per_s=2.0)}

    def lane_of(self, task):
        return task.payload.get("lane")

    async def handle(self, task, ctx):
        self.calls[task.key] += 1
        if task.payload["lane"] == "slow":
            await anyio.sleep(0.5)
        else:
            await anyio.sleep(0.01)
            self.fast_done_at.append(anyio.current_time())
        return []


def test_lanes_let_the_fast_lane_pass_a_slow_backlog_and_a_stop_leaves_deferred_tasks_untouched(tmp_path):
    """40 slow-lane tasks queued before 40 fast-lane ones (the worst order): the fast lane finishes in about a
    second instead of after the slow backlog (20 s); a stop then leaves every unfinished task ready with no
    attempt counted (deferrals count none), nothing leased, and no task was handled twice."""
    stage = _TwoLanes()

    async def main():
        queues = open_edge_queues(tmp_path / "q", "t", [stage])
        await queues["a"].put_many([(f"s{i}", {"lane": "slow"}) for i in range(40)]
                                   + [(f"f{i}", {"lane": "fast"}) for i in range(40)])
        holder = []
        t0 = anyio.current_time()

        async def tick(view):
            if not holder:
                holder.extend(view.runners)

        async def stopper():
            await anyio.sleep(3.0)
            for r in holder:
                r.request_stop()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stopper)
            run = await run_pipeline("t", [stage], queues, StageContext("t"), handle_signals=False, tick=tick,
                                     tick_interval_s=0.1, grace_s=1.0)
        counts = await queues["a"].counts()
        path = queues["a"].path
        await queues["a"].close()
        return run, counts, path, t0

    run, counts, path, t0 = anyio.run(main)
    conn = sqlite3.connect(path)
    try:  # state 0: ready (deferred tasks are ready, not before their slot)
        left = conn.execute("SELECT key, attempts FROM tasks WHERE state = 0").fetchall()
    finally:
        conn.close()
    assert len(stage.fast_done_at) == 40 and max(stage.fast_done_at) - t0 < 2.0, max(stage.fast_done_at) - t0
    slow_done = sum(1 for k in stage.calls if k.startswith("s"))
    assert 3 <= slow_done <= 8, slow_done  # the slow lane went on at its own pace meanwhile
    assert max(stage.calls.values()) == 1
    assert counts.leased == 0 and counts.done == 40 + slow_done and counts.ready == 40 - slow_done
    assert all(attempts == 0 for _, attempts in left) and len(left) == 40 - slow_done
    assert run.stats()[0].deferred > 0


def test_a_budget_stop_holds_the_same_share_of_each_models_work(tmp_path, monkeypatch, capsys):
    """Walk32 #4: model b sampled at 0.2 beside a at 1.0, equal limits; stopped by the cap at about 40 % of the
    spend. Before, b's lane ran at a's call rate and so through its five times smaller share of the plan five times
    faster (81 % of b's calls answered beside 16 % of a's). Now both stop at about the same share, and the dry run's
    forecast of calls before the cap says the same."""
    import re

    from _model_harness import run_cli
    from geoagent.sandbox.llm_common import add_latency

    monkeypatch.setenv("FAIR_KEY", KEY)

    def models(base: str) -> str:
        return (_table("a", base, "gpt-a", rate=200, concurrency=2)
                + _table("b", base, "gpt-b", rate=200, concurrency=2, sampling=0.2))

    async def full_run():
        async with serve(add_latency(openai_app(api_keys=[KEY]), 0.02)) as base:
            return await run_campaign(load_config_quiet(generic_campaign(
                tmp_path / "full", name="full", n=120, cap_usd=5.0, models=models(base))),
                live=False, handle_signals=False, export=False)

    (tmp_path / "full").mkdir()
    full = anyio.run(full_run)
    assert full.status == "complete"
    cap = full.spend["spent_usd"] * 0.4
    # the dry run (no call made: any address will do)
    (tmp_path / "dry").mkdir()
    rc, dry, _ = run_cli(generic_campaign(tmp_path / "dry", name="dry", n=120, cap_usd=cap,
                                          models=models("http://127.0.0.1:9")), capsys, "--simulate")
    assert rc == 0 and 'paced by each model\'s share of its calls ([queue] model_pacing = "plan")' in dry, dry
    m = re.search(r"per model: a (\d+) of (\d+), b (\d+) of (\d+)", dry)
    assert m, dry
    fa, na, fb, nb = map(int, m.groups())

    async def capped_run():
        async with serve(add_latency(openai_app(api_keys=[KEY]), 0.02)) as base:
            return await run_campaign(load_config_quiet(generic_campaign(
                tmp_path, name="capped", n=120, cap_usd=cap, models=models(base))),
                live=False, handle_signals=False, export=False)

    out = anyio.run(capped_run)
    assert out.status == "budget exhausted", out.summary()
    planned, got = out.planned_by_model, out.answered_by_model
    assert planned["a"] == na == 120 and planned["b"] == nb and 10 <= nb <= 40, (planned, na, nb)
    share = {k: got[k] / planned[k] for k in planned}
    assert 0.15 <= share["a"] <= 0.7 and abs(share["a"] - share["b"]) <= 0.15, (got, planned)
    assert abs(fa / na - fb / nb) <= 0.15, (fa, na, fb, nb)


def test_pacing_does_not_hold_the_others_back_for_a_failing_models_backoff(tmp_path, monkeypatch):
    """Break of the pacing rule: model b's connections drop after each request is sent for its first two seconds
    (outcome unknown: the call may have been billed, so it is not retried within the request), so each of its tasks
    goes back to the queue for its retry backoff (5 s here). Counted by finished and
    in-hand tasks alone, b's share stayed at 0 and a waited out b's backoff; tasks waiting for their retry count as
    taken, so a runs through meanwhile, and the run takes no longer than b's work."""
    import time

    from aiohttp import web

    monkeypatch.setenv("FAIR_KEY", KEY)
    app = openai_app(api_keys=[KEY])
    failing_until: list[float] = []

    @web.middleware
    async def fail_b(request, handler):
        if request.path.endswith("/chat/completions"):
            body = await request.json()
            if body.get("model") == "gpt-b" and time.monotonic() < failing_until[0]:
                # the connection drops after the request was sent: outcome unknown, the task goes back to the queue
                request.transport.close()
                return web.Response(status=500)
        return await handler(request)

    app.middlewares.append(fail_b)

    async def go():
        async with serve(app) as base:
            models = (_table("a", base, "gpt-a", rate=500, concurrency=4)
                      + _table("b", base, "gpt-b", rate=500, concurrency=4))
            cfg = load_config_quiet(generic_campaign(tmp_path, name="backoff", n=40, cap_usd=5.0, models=models,
                                                     queue={"backoff_base_s": 5.0, "backoff_max_s": 5.0}))
            failing_until.append(time.monotonic() + 2.0)
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return out

    out = anyio.run(go)
    assert out.status == "complete", out.summary()
    ok = [r for r in app["calls"] if r["status"] == 200]
    a = sorted(r["t_mono"] for r in ok if r["model"] == "gpt-a")
    b = sorted(r["t_mono"] for r in ok if r["model"] == "gpt-b")
    assert len(a) == 40 and len(b) == 40
    # every one of a's calls before b's first answer (b's tasks come back from their backoff after 5 s)
    assert a[-1] < b[0], (a[-1] - a[0], b[0] - a[0])


def test_the_pacing_rule_lets_a_lane_run_a_few_tasks_ahead():
    """:func:`geoagent.runtime.worker.pace_ahead`, the one rule of the runner and of the dry run's replay: a lane may
    run up to 8 of its tasks (its cap if lower) ahead of the lowest other lane's share, in whole tasks."""
    from geoagent.runtime.worker import PACE_SLACK_TASKS, pace_ahead

    assert PACE_SLACK_TASKS == 8
    assert not pace_ahead(7, 100, 16, 0.0) and pace_ahead(8, 100, 16, 0.0)  # the 8th task ahead is the last one
    assert not pace_ahead(1, 100, 2, 0.0) and pace_ahead(2, 100, 2, 0.0)  # a cap of 2: two tasks ahead at most
    assert not pace_ahead(57, 100, 16, 0.5) and pace_ahead(58, 100, 16, 0.5)
