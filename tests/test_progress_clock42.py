"""Progress records across a step of the wall clock (live42 #4).

A progress record's ``elapsed_s`` was ``time.time() - started_at``: after the wall clock stepped back an hour, a
record's span (``t - elapsed_s``, ``t``) was inverted, :func:`geoagent.runtime.progress.read_runs` stopped early and
``status`` showed one of two running processes with "elapsed -3401 s". Now ``elapsed_s`` is monotonic and each
record carries its process's start (``started``), read once; records without it are read as before. The stream is
synthetic (as the breaker's clock.py), the snapshot the real :meth:`Progress.snapshot`'s, ``status`` the real one
over a live child process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_lock
from geoagent.files import append_jsonl
from geoagent.runtime.daemon import PipelineRun
from geoagent.runtime.progress import Progress, merge_records, read_processes, read_runs, record_span
from geoagent.status import campaign_status, format_status
from tests._model_harness import generic_campaign, model_table, progress_record as _record


def test_a_snapshot_records_its_start_and_a_monotonic_elapsed_time(tmp_path):
    """The real :meth:`Progress.snapshot`: a pipeline whose start the wall clock now reads as an hour in the
    future (it stepped back an hour since) keeps a span that starts at its start and ends after it."""

    async def snap() -> dict:
        run = PipelineRun("c", [], {})
        run.started_at += 3600.0  # the wall clock stepped back an hour since the start was read
        return await Progress(tmp_path / "progress.jsonl", live=False).snapshot(run)

    rec = anyio.run(snap)
    started, last = record_span(rec)
    assert rec["started"] == started and 0.0 <= rec["elapsed_s"] < 60.0
    assert started <= last == started + rec["elapsed_s"]
    assert rec["t"] < started  # the record's own wall time: before the start, as the clock now reads it


def _stepped_stream(path: Path, *, with_start: bool, a_until: int = 200) -> None:
    """Two processes started together, the wall clock stepped back an hour 100 s in (aggr42's clock.py); process A
    writes its records up to ``a_until`` s (killed then), B up to 199 s. ``with_start``: as this version writes them
    (``started``, a monotonic ``elapsed_s``), else as the versions before (a wall-clock ``elapsed_s``)."""
    start, step = 1_000_000.0, -3600.0
    for i in range(1, 200):
        for pid, rid in ((11, "A"), (22, "B")):
            if rid == "A" and i >= a_until:
                continue
            wall = start + i + (step if i >= 100 else 0.0)
            extra = {"started": start, "elapsed_s": float(i)} if with_start else {"elapsed_s": wall - start}
            append_jsonl(path, [{**_record(pid, rid, wall, 0.0), **extra}], fsync=False)


def test_read_runs_keeps_both_processes_across_a_step_back_of_the_wall_clock(tmp_path):
    new = tmp_path / "new.jsonl"
    _stepped_stream(new, with_start=True)
    procs = read_processes(new)
    assert sorted(r["run_id"] for r in procs) == ["A", "B"]
    assert [[r["run_id"] for r in run] for run in read_runs(new)] == [["B", "A"]]
    merged = merge_records(procs, [True, True])
    assert merged["elapsed_s"] == 199.0 and len(merged["processes"]) == 2
    # A killed before the step, B still writing after it: one run (their spans, in the start's frame, overlap);
    # before, B's span (t - elapsed_s, t) lay an hour before A's and they read as two runs, B's alone
    killed = tmp_path / "killed.jsonl"
    _stepped_stream(killed, with_start=True, a_until=60)
    procs = read_processes(killed)
    assert [r["run_id"] for r in procs] == ["B", "A"]
    merged = merge_records(procs, [True, False])
    assert merged["elapsed_s"] == 199.0 and merged["t"] == procs[0]["t"]  # the newest: B's, not A's earlier t
    # an older version's stream (no "started", a wall-clock elapsed_s) is read as before: its spans are inverted
    old = tmp_path / "old.jsonl"
    _stepped_stream(old, with_start=False)
    assert [r["run_id"] for r in read_processes(old)] == ["B"]


def test_status_shows_both_running_processes_and_a_positive_elapsed_time_after_a_step_back(tmp_path):
    cfgp = generic_campaign(tmp_path, name="c", n=10, models=model_table())
    cfg = load_config(cfgp)
    state = Path(cfg.state_dir())
    state.mkdir(parents=True, exist_ok=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        now = time.time()
        start = now + 3600.0 - 200.0  # both started 200 s ago, before the clock stepped back an hour
        append_jsonl(state / C.PROGRESS_FILE, [
            # this process's last record before the step (started + 150 s on the clock then), the other's after it
            _record(os.getpid(), "A", start + 150.0, 150.0, started=start),
            _record(other.pid, "B", now - 0.5, 199.5, started=start)], fsync=False)
        with run_lock(state):
            text = format_status(campaign_status(cfg))
    finally:
        other.kill()
        other.wait(10)
    assert "running: 2 of 2 processes" in text, text  # before: "running: 1 of 1", elapsed -3401 s
    m = re.search(r"elapsed (-?\d+) s", text)
    assert m and int(m.group(1)) == 200, text


def test_elapsed_time_counts_a_suspend_of_the_machine(tmp_path):
    """review42b #3: on Linux ``CLOCK_MONOTONIC`` stops while the machine is suspended, so ``started + elapsed_s``
    ended a suspend's seconds early and :func:`read_runs` could split one process's records. ``elapsed_s`` is now
    read on :func:`~geoagent.runtime.daemon.elapsed_clock` (``CLOCK_BOOTTIME`` where there is one), which counts a
    suspend: a pipeline whose start that clock puts 120 s back records 120 s elapsed and a span of 120 s."""
    from geoagent.runtime.daemon import elapsed_clock

    if hasattr(time, "CLOCK_BOOTTIME"):
        a = elapsed_clock()
        boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        assert a <= boot <= elapsed_clock()  # the suspend-counting clock itself, not the monotonic one
        assert boot >= time.monotonic() - 1.0  # it runs ahead of CLOCK_MONOTONIC by the suspended time, if any

    async def snap() -> dict:
        run = PipelineRun("c", [], {})
        assert abs(run.started_mono - elapsed_clock()) < 5.0  # the start is read on the same clock
        run.started_mono -= 120.0  # the pipeline started 120 s ago on that clock (a suspend included)
        run.started_at -= 120.0
        return await Progress(tmp_path / "progress.jsonl", live=False).snapshot(run)

    rec = anyio.run(snap)
    started, last = record_span(rec)
    assert 120.0 <= rec["elapsed_s"] < 180.0 and last - started == rec["elapsed_s"]
    assert abs(last - rec["t"]) < 60.0  # the span ends at the record's own time, not a suspend's seconds before
