"""``status`` / the live display say "ETA estimating" right after a start or resume, not an absurd time.

Walkthrough (session 13): the ETA timed each stage by its capacity over its window of recent commits; with one
commit the window started at the stage's start, so the start-up (opening the state, planning, the first call's
connection: tens of seconds) was counted as work, and with two commits a moment apart the rate of that moment was
taken for the stage's. Right after a start or resume ``status`` thus read, for the same 80 requests left, "ETA
4,640 s" (one task done 58 s after the start) or "ETA 8 s" (two tasks 0.1 s apart). Now a stage's rate is used for
the ETA only once it has :data:`~geoagent.runtime.worker.ETA_MIN_COMPLETIONS` completions after its first commit over at
least :data:`~geoagent.runtime.worker.ETA_MIN_WINDOW_S` seconds (the start-up before its first commit never counts);
until then the ETA says "estimating" and what it has measured so far. Commit times are fed explicitly (no sleeping).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from geoagent.runtime.daemon import PipelineRun
from geoagent.runtime.progress import Progress, merge_records
from geoagent.runtime.queue import QueueCounts, open_queue
from geoagent.runtime.worker import ETA_MIN_COMPLETIONS, ETA_MIN_WINDOW_S, StageStats
from geoagent.status import format_eta

GEO = [("model_caller", "requests", "responses"), ("collector", "responses", None)]


def _stats(name: str, started_at: float, commits: list[tuple[float, int]]) -> StageStats:
    st = StageStats(name, started_at=started_at)
    for t, n in commits:
        st.record_done(n, now=t)
    return st


def _snapshot(tmp_path: Path, caller: list[tuple[float, int]], collector: list[tuple[float, int]],
              started_ago_s: float = 60.0) -> dict:
    """Progress.snapshot of a two-stage run with 80 requests queued; commit times are seconds before now."""

    async def go() -> dict:
        queues = {e: open_queue(tmp_path / "q", "c", e) for e in ("requests", "responses")}
        try:
            await queues["requests"].put_many([(f"r{i}", {}) for i in range(80)])
            mono = time.monotonic()
            stats = [_stats(n, mono - started_ago_s, [(mono - ago, k) for ago, k in commits])
                     for (n, _, _), commits in zip(GEO, (caller, collector))]
            runners = [SimpleNamespace(stage=SimpleNamespace(name=n, input_edge=i, output_edge=o), stats=st,
                                       budget_stopped=False) for (n, i, o), st in zip(GEO, stats)]
            run = PipelineRun("c", runners, queues)  # type: ignore[arg-type]
            return await Progress(tmp_path / "progress.jsonl", live=False).snapshot(run)
        finally:
            for q in queues.values():
                await q.close()

    return anyio.run(go)


def test_thresholds_are_documented_values():
    assert (ETA_MIN_COMPLETIONS, ETA_MIN_WINDOW_S) == (5, 5.0)


def test_one_completion_after_a_slow_start_says_estimating(tmp_path):
    # started 60 s ago, the first task done 2 s ago (58 s of start-up): the old ETA was 80 x 58 s = 4,640 s
    rec = _snapshot(tmp_path, caller=[(2.0, 1)], collector=[(1.5, 1)])
    assert rec["eta_s"] is None
    text = format_eta(rec)
    assert text.startswith("estimating"), text
    assert "model_caller: 0 of 5 completions over 0 of 5 s measured" in text, text


def test_a_burst_of_two_quick_commits_says_estimating(tmp_path):
    # two tasks 0.1 s apart: the old ETA was 80 / (1 / 0.1 s) = 8 s
    rec = _snapshot(tmp_path, caller=[(2.0, 1), (1.9, 1)], collector=[(1.5, 2)])
    assert rec["eta_s"] is None and format_eta(rec).startswith("estimating"), format_eta(rec)
    caller = next(sd for sd in rec["stages"] if sd["stage"] == "model_caller")
    assert caller["eta_ready"] is False and caller["eta_measured_done"] == 1


def test_enough_completions_over_the_window_give_a_time_without_the_start_up(tmp_path):
    # started 60 s ago; first commit 21 s ago, then 4 tasks every 5 s: 16 tasks after the first over 20 s = 0.8/s
    caller = [(21.0, 4), (16.0, 4), (11.0, 4), (6.0, 4), (1.0, 4)]
    collector = [(20.0, 4), (15.0, 4), (10.0, 4), (5.0, 4), (0.5, 4)]
    rec = _snapshot(tmp_path, caller=caller, collector=collector)
    assert rec["eta_s"] == pytest.approx(80 / 0.8, abs=0.5) and rec["eta_stage"] == "model_caller"
    assert "eta_estimating" not in rec
    assert format_eta(rec) == "100 s (bounded by model_caller)"
    # the same completions counted from the start (20 tasks over 59 s) would have said 236 s


def test_merged_status_of_a_scale_out_run_also_estimates():
    """merge_records (``status`` of several processes): a stage no running process has measured enough is
    estimating; older records without the field keep their rate (as before)."""
    pipeline = [("model_caller", "requests", None)]

    def rec(pid: int, **sd: object) -> dict:
        stage = {"stage": "model_caller", "done": 2, "failed": 0, "dead": 0, "missing": 0, "released": 0,
                 "in_flight": 0, "held": 0, "rate_per_s": 5.0, "capacity_per_s": 5.0, "idle_s": 0.0,
                 "stall_after_s": 60.0, "finished": False, "budget_stopped": False, "last_errors": [],
                 "unreachable": {}, "resolved_errors": [], "input_edge": "requests", **sd}
        return {"t": 1000.0, "campaign": "c", "elapsed_s": 3.0, "stages": [stage],
                "queues": {"requests": {"ready": 40, "leased": 0, "done": 4, "dead": 0}}, "spend": None,
                "eta_s": None, "eta_stage": None, "eta_scope": None, "http": None, "host_labels": None,
                "budget_stopped": False, "finished": False, "pid": pid, "run_id": f"r{pid}"}

    counts = {"requests": QueueCounts(ready=40, done=4)}
    young = [rec(1, eta_ready=False, eta_measured_done=1, eta_measured_s=0.5),
             rec(2, eta_ready=False, eta_measured_done=1, eta_measured_s=2.0)]
    merged = merge_records(young, running=[True, True], now=1000.0, counts=counts, pipeline=pipeline)
    assert merged["eta_s"] is None and format_eta(merged).startswith("estimating"), format_eta(merged)
    ready = [young[0], rec(2, eta_ready=True, eta_measured_done=30, eta_measured_s=6.0)]
    merged = merge_records(ready, running=[True, True], now=1000.0, counts=counts, pipeline=pipeline)
    assert merged["eta_s"] == pytest.approx(40 / 5.0, abs=0.1)  # only the measured process's capacity counts
    old = [rec(1), rec(2)]  # records of an older version: no eta_ready, their capacities as before
    merged = merge_records(old, running=[True, True], now=1000.0, counts=counts, pipeline=pipeline)
    assert merged["eta_s"] == pytest.approx(40 / 10.0, abs=0.1)


def test_the_live_displays_estimating_eta_fits_one_line_of_an_80_column_terminal():
    """The live display's caption said "ETA estimating (model_caller: 5 of 5 completions over 0 of 5 s measured;
    parser: 0 of 5 completions over 0 of 5 s measured)" inside a table about 65 columns wide, between the spend
    and the legend: 4 wrapped lines on an 80-column terminal. Now the ETA has a line of its own, in a compact
    form that keeps each stage's completions and seconds measured of those needed, and fits."""
    from rich.console import Console

    from geoagent.runtime.progress import live_table

    rec = {"campaign": "demo", "elapsed_s": 3.0, "spend": {"spent_usd": 0.01, "cap_usd": 1.0},
           "stages": [{"stage": s, "done": d, "in_flight": 1, "failed": 0, "dead": 0, "rate_per_s": 1.0}
                      for s, d in (("model_caller", 5), ("parser", 0))],
           "eta_s": None,
           "eta_estimating": [{"stage": "model_caller", "done": 5, "over_s": 0.2},
                              {"stage": "parser", "done": 0, "over_s": 0.0}]}
    console = Console(width=80, record=True, color_system=None)
    console.print(live_table(rec, final=False))
    lines = console.export_text().splitlines()
    eta = [ln for ln in lines if "ETA" in ln]
    assert len(eta) == 1, lines
    assert eta[0].strip() == "ETA estimating: model_caller 5/5 done, 0/5 s; parser 0/5 done, 0/5 s", lines
    # the line after it is the legend's own line, not the rest of the ETA
    after = lines[lines.index(eta[0]) + 1].strip()
    assert after.startswith("leased:"), lines
    assert all(len(ln) <= 80 for ln in lines), lines
    # `status` keeps the long form
    assert format_eta(rec) == ("estimating (model_caller: 5 of 5 completions over 0 of 5 s measured; parser: 0 of 5 "
                               "completions over 0 of 5 s measured)")
    # a --stages process's live display: its scope is said in a few words
    assert format_eta({**rec, "eta_scope": ["model_caller"]}, compact=True).endswith(
        " [stage(s) model_caller only, with the work upstream]")
