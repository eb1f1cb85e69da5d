"""Rates fall when a stage stops completing; the ETA tells a starved stage from a stalled one.

Walkthrough: a stage's rate was taken over its last ~64 commits, up to the last commit, never up to now. A stage
that stopped completing (its host silent, its upstream drained, its process frozen) kept its old rate in
``status`` and in the live display for ever, and the ETA timed its remaining work by that old rate: a researcher
reading ``status`` of a stalled campaign was told work was flowing. ``status`` of a scale-out run also summed the
last rates of processes that had ended or gone silent whenever no process counted as running.

Now the display rate counts the window's tasks over the time from the window's start up to now (it falls while
nothing completes), the ETA times stages by their capacity (the window's rate up to its last commit: a stage
waiting for upstream work is starved, not slower), a stage with work ready that completed nothing for a long
time makes the ETA "unknown: stage S has completed nothing for N s ...", and ``status`` carries a running
process's record on to the moment it is read. Every case below is computed by hand from commit times fed
explicitly (no sleeping): ``record_done(n, now=...)`` on the monotonic clock, records with a hand-set ``t``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_lock
from geoagent.files import append_jsonl
from geoagent.runtime.daemon import PipelineRun
from geoagent.runtime.progress import Progress, merge_records, rate_as_of
from geoagent.runtime.queue import QueueCounts, open_queue
from geoagent.runtime.worker import StageStats
from geoagent.status import campaign_status, format_eta, format_status
from tests._model_harness import generic_campaign, model_table


def _stats(name: str, started_at: float, commits: list[tuple[float, int]]) -> StageStats:
    """A stage's counters after ``commits`` (monotonic time, tasks) fed explicitly."""
    st = StageStats(name, started_at=started_at)
    for t, n in commits:
        st.record_done(n, now=t)
    return st


def test_a_stage_that_stops_completing_shows_a_falling_rate_not_its_old_one():
    # ten commits of 10 tasks, one a second, at t = 1..10 (started at 0): the window holds 90 tasks after its first
    st = _stats("geocoder", 0.0, [(float(t), 10) for t in range(1, 11)])
    assert st.rate_per_s(now=10.0) == pytest.approx(90 / 9)  # 10/s while it works
    # then nothing for 90 s: 90 tasks over the 99 s since the window's start, not the 10/s it had
    assert st.rate_per_s(now=100.0) == pytest.approx(90 / 99)
    assert st.rate_per_s(now=1000.0) == pytest.approx(90 / 999)
    # its capacity (the ETA's rate while it works) is still 10/s, and it has been idle 90 s (stall threshold:
    # 10 mean gaps of 1 s, at least 60 s)
    assert st.capacity_per_s() == pytest.approx(10.0)
    assert (st.idle_s(now=100.0), st.stall_after_s()) == (pytest.approx(90.0), 60.0)
    rec = st.as_dict(now=100.0)
    assert (rec["rate_per_s"], rec["rate_window_s"], rec["capacity_per_s"], rec["idle_s"]) == (0.909, 99.0, 10.0, 90.0)
    # a reader of the record 900 s later (status of a frozen process) carries it on to the same figure the
    # process would have written then: 90 tasks over 999 s
    assert rate_as_of(rec, 900.0) == pytest.approx(90 / 999, rel=1e-3)
    # before a second commit: the run average up to now (one commit of 5 tasks at t = 4, read at t = 10 and 50)
    one = _stats("parser", 0.0, [(4.0, 5)])
    assert (one.rate_per_s(now=10.0), one.rate_per_s(now=50.0), one.capacity_per_s()) == (0.5, 0.1, 1.25)
    assert StageStats("scorer", started_at=0.0).idle_s(now=5.0) is None  # no commit yet: not idle, not started


GEO = [("model_caller", "requests", "responses"), ("parser", "responses", None)]


def _snapshot(tmp_path: Path, responses_ready: int, parser_unreachable: dict | None = None) -> dict:
    """Progress.snapshot of a two-stage run: the caller (80 requests queued) commits 5 tasks every 5 s up to 5 s
    ago (capacity 1/s); the parser committed 10 tasks 130 s and 10 tasks 125 s ago (capacity 2/s) and nothing
    since, with ``responses_ready`` responses queued for it."""

    async def go() -> dict:
        queues = {e: open_queue(tmp_path / "q", "c", e) for e in ("requests", "responses")}
        try:
            await queues["requests"].put_many([(f"r{i}", {}) for i in range(80)])
            await queues["responses"].put_many([(f"a{i}", {}) for i in range(responses_ready)])
            # the clock is read after the queue files are made, right before the snapshot (on a loaded machine
            # making them took seconds, which the idle times and rates below then counted)
            mono = time.monotonic()
            caller = _stats("model_caller", mono - 30, [(mono - 20, 5), (mono - 15, 5), (mono - 10, 5), (mono - 5, 5)])
            parser = _stats("parser", mono - 140, [(mono - 130, 10), (mono - 125, 10)])
            if parser_unreachable:
                parser.unreachable, parser.next_probe_at = parser_unreachable, mono + 20
            runners = [SimpleNamespace(stage=SimpleNamespace(name=n, input_edge=i, output_edge=o), stats=st,
                                       budget_stopped=False) for (n, i, o), st in zip(GEO, (caller, parser))]
            run = PipelineRun("c", runners, queues)  # type: ignore[arg-type]
            return await Progress(tmp_path / "progress.jsonl", live=False).snapshot(run)
        finally:
            for q in queues.values():
                await q.close()

    return anyio.run(go)


def test_eta_of_a_starved_stage_keeps_its_capacity(tmp_path):
    rec = _snapshot(tmp_path, responses_ready=0)
    parser = next(sd for sd in rec["stages"] if sd["stage"] == "parser")
    # the display rate has fallen (10 tasks over the 130 s since the window's start) ...
    assert parser["rate_per_s"] == pytest.approx(10 / 130, abs=0.002)
    assert parser["capacity_per_s"] == 2.0 and parser["idle_s"] == pytest.approx(125.0, abs=0.5)
    # ... but nothing is ready for it: it is starved, not slower. By hand, with capacities: the caller has 80
    # requests ahead at 1/s (80 s), the parser those 80 coming at 2/s (40 s): 80 s, bounded by the caller (with
    # the display rate the parser's 80 over 0.077/s would have read 1,040 s "bounded by parser")
    assert (rec["eta_s"], rec["eta_stage"]) == (pytest.approx(80.0, abs=0.1), "model_caller")
    assert "eta_stalled" not in rec
    assert format_eta(rec) == "80 s (bounded by model_caller)"


def test_eta_of_a_stage_with_work_ready_that_completes_nothing_says_it_is_stalled(tmp_path):
    rec = _snapshot(tmp_path, responses_ready=40)
    # 40 responses wait and the parser has completed nothing for 125 s (its threshold: 10 gaps of 5 s, at least
    # 60 s): its 2/s is a stale rate, so no time is given from it (it used to read "80 s (bounded by model_caller)")
    assert rec["eta_s"] is None and rec["eta_stage"] is None
    (stalled,) = rec["eta_stalled"]
    assert (stalled["stage"], stalled["ready"], stalled["input_edge"]) == ("parser", 40, "responses")
    assert re.fullmatch(r"unknown: stage parser has completed nothing for 12[5-9] s with 40 task\(s\) ready on "
                        r"responses", format_eta(rec)), format_eta(rec)
    # its host known to be down (watch mode): that wait is what the ETA names, as before
    rec = _snapshot(tmp_path / "w", responses_ready=40, parser_unreachable={"h:1": (5, "connection refused")})
    assert "eta_stalled" not in rec and format_eta(rec) == "unknown while waiting for host h:1 (stage parser)"


def _record(pid: int, run_id: str, stages: list[dict], t: float, elapsed_s: float, **extra) -> dict:
    """A progress record as :meth:`geoagent.runtime.progress.Progress.snapshot` writes it (queues: 40 requests
    ready)."""
    base = {"t": t, "campaign": "rt", "elapsed_s": elapsed_s, "stages": stages,
            "queues": {"requests": {"ready": 40, "leased": 0, "done": 20, "dead": 0},
                       "responses": {"ready": 0, "leased": 0, "done": 20, "dead": 0}},
            "spend": None, "eta_s": 20.0, "eta_stage": "model_caller", "eta_scope": None, "http": None,
            "host_labels": None, "budget_stopped": False, "finished": False, "pid": pid, "run_id": run_id}
    return {**base, **extra}


def _stage(name: str, done: int, rate: float, **extra) -> dict:
    return {"stage": name, "done": done, "failed": 0, "dead": 0, "missing": 0, "released": 0, "in_flight": 0,
            "held": 0, "rate_per_s": rate, "finished": False, "budget_stopped": False, "last_errors": [],
            "unreachable": {}, "resolved_errors": [], "input_edge": "requests", **extra}


def test_status_of_a_process_that_stopped_writing_shows_its_rate_falling_and_the_stall(tmp_path):
    """One process, alive (it holds run.lock) but its last record 300 s old: 20 tasks at 2/s over the 10 s
    before it, 40 requests still ready. ``status`` used to print ``2.00/s`` and ``ETA 20 s``."""
    cfg = load_config(generic_campaign(tmp_path, name="rt", n=60, models=model_table()))
    state = Path(cfg.state_dir())
    now = time.time()
    sd = _stage("model_caller", 20, 2.0, rate_window_s=10.0, capacity_per_s=2.0, idle_s=0.0, stall_after_s=60.0,
                in_flight=2)
    append_jsonl(state / C.PROGRESS_FILE, [_record(os.getpid(), "run-a", [sd], now - 300, 10.0)], fsync=False)
    with run_lock(state):
        text = format_status(campaign_status(cfg))
    # by hand: 20 tasks over 10 + 300 s = 0.06/s, idle 300 s with 40 requests ready
    assert re.search(r"^ +model_caller: 0\.06/s  done 20 .*idle: nothing completed for 30\d s although 40 task\(s\) "
                     r"are ready on requests$", text, re.M), text
    assert re.search(r"ETA unknown: stage model_caller has completed nothing for 30\d s with 40 task\(s\) ready on "
                     r"requests", text), text


def test_status_counts_no_ended_or_silent_process_rate_as_live(tmp_path):
    """A scale-out run: process a ended (its last rate 4/s), process b silent (its pid alive, no record for 60 s,
    last rate 3/s), nobody else running: ``status`` used to print ``model_caller: 7.00/s`` under "running: 0 of
    2 processes". With a third process running at 1.5/s, only that one's rate counts (as before)."""
    cfg = load_config(generic_campaign(tmp_path, name="rt", n=60, models=model_table()))
    state = Path(cfg.state_dir())
    now = time.time()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ended = _record(os.getpid(), "run-a", [_stage("model_caller", 12, 4.0)], now - 30, 50.0, finished=True)
        silent = _record(alive.pid, "run-b", [_stage("model_caller", 8, 3.0)], now - 60, 15.0)
        append_jsonl(state / C.PROGRESS_FILE, [silent, ended], fsync=False)  # in time order
        with run_lock(state):
            text = format_status(campaign_status(cfg))
        assert "running: 0 of 2 processes" in text and "processes: 0 running, 1 ended, 1 silent" in text, text
        assert re.search(r"^ +model_caller: 0\.00/s  done 20 .*\(2 processes, none running: no rate counted\)$",
                         text, re.M), text
        running = _record(os.getpid(), "run-c", [_stage("model_caller", 5, 1.5)], now - 0.5, 40.0)
        append_jsonl(state / C.PROGRESS_FILE, [running], fsync=False)
        with run_lock(state):
            text = format_status(campaign_status(cfg))
        assert re.search(r"^ +model_caller: 1\.50/s  done 25 .*\(3 processes, 1 running\)$", text, re.M), text
    finally:
        alive.kill()
        alive.wait(10)


def test_merged_rates_and_eta_of_running_processes_are_read_now():
    """merge_records carries each running process's rate on to ``now``; a process whose stage is stalled adds
    no capacity to the ETA, and a stage stalled in every running process makes the ETA unknown."""
    pipeline = [("model_caller", "requests", "responses"), ("collector", "responses", None)]
    counts = {"requests": QueueCounts(ready=60, done=20), "responses": QueueCounts(done=20)}
    # a: 2/s over its last 10 s, working; b: 2/s over 10 s, but idle 100 s with work ready (stalled)
    a = _record(1, "a", [_stage("model_caller", 10, 2.0, rate_window_s=10.0, capacity_per_s=2.0, idle_s=0.0,
                                stall_after_s=60.0)], 1000.0, 10.0)
    b = _record(2, "b", [_stage("model_caller", 10, 0.167, rate_window_s=120.0, capacity_per_s=2.0, idle_s=100.0,
                                stall_after_s=60.0)], 1000.0, 120.0)
    merged = merge_records([a, b], [True, True], pipeline=pipeline, counts=counts, now=1010.0)
    (mc,) = merged["stages"]
    # by hand, read 10 s later: a 2 x 10 / 20 = 1.0/s, b 0.167 x 120 / 130 = 0.154/s; capacity a's 2/s only
    assert mc["rate_per_s"] == pytest.approx(1.0 + 0.167 * 120 / 130, abs=0.002)
    assert (mc["capacity_per_s"], mc["idle_s"]) == (2.0, 10.0)
    assert merged["eta_s"] == 30.0 and "eta_stalled" not in merged  # 60 ready over a's 2/s
    # a stalls too (idle 10 + 60 s): the stage is stalled in every running process
    merged = merge_records([a, b], [True, True], pipeline=pipeline, counts=counts, now=1060.0)
    assert merged["eta_s"] is None and [s["stage"] for s in merged["eta_stalled"]] == ["model_caller"]
    assert format_eta(merged).startswith("unknown: stage model_caller has completed nothing for 60 s with 60 task(s) "
                                         "ready on requests"), format_eta(merged)


def test_live_display_shows_the_falling_rate_the_idle_time_and_the_stalled_eta(tmp_path, capsys):
    rec = _snapshot(tmp_path, responses_ready=40)
    progress = Progress(tmp_path / "progress.jsonl", live=True)
    progress._render(rec, final=False)
    progress._live.stop()
    out = capsys.readouterr().out
    # the parser's row: 10 tasks over 130 s (0.08/s, not its old 2.0) and idle 125 s; the caller's row not idle
    assert re.search(r"│ parser +│ +20 │ +0 │ +0 │ +0 │ +0\.08 │ +12[5-9] s │", out), out
    # (the snapshot's clock runs during the test: a loaded machine adds a second or two, 0.74-0.75/s)
    assert re.search(r"│ model_caller +│ +20 │ +0 │ +0 │ +0 │ +0\.7[3-5] │ +│", out), out
    caption = " ".join(out.split())  # the caption wraps at the table's width
    assert re.search(r"ETA unknown: stage parser has completed nothing for 12[5-9] s with 40 task\(s\) ready on "
                     r"responses", caption), out
