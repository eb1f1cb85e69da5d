"""Progress reporting (session 38).

Before: once every process of a run had ended, ``status`` summed each stage's last rate over all of the run's
processes. A run chains processes that overlap one with the next, so a process that had ended before the last one
started was summed too: ``fetch`` run by A (0-100 s, 4/s), then by C (200-400 s, 3/s), with B (50-300 s) joining them,
read 7/s, a rate no moment of the run had.
"""

from __future__ import annotations

from geoagent.runtime.progress import merge_records


def _rec(pid: int, started: float, t: float, **rates: float) -> dict:
    return {"t": t, "elapsed_s": t - started, "pid": pid, "run_id": f"r{pid}", "finished": True,
            "stages": [{"stage": name, "done": 10, "failed": 0, "dead": 0, "missing": 0, "released": 0,
                        "rate_per_s": rate, "capacity_per_s": rate, "finished": True, "input_edge": f"{name}_in"}
                       for name, rate in rates.items()],
            "queues": {}}


def test_a_finished_run_sums_a_stages_rate_over_the_processes_beside_its_last_one_only():
    a = _rec(1, 0.0, 100.0, fetch=4.0, score=1.0)
    b = _rec(2, 50.0, 300.0, score=2.0)
    c = _rec(3, 200.0, 400.0, fetch=3.0)
    merged = merge_records([c, b, a], [False, False, False])
    by = {m["stage"]: m for m in merged["stages"]}
    assert by["fetch"]["rate_per_s"] == 3.0 and by["fetch"]["rate_pids"] == [3]  # A had ended before C started
    assert by["score"]["rate_per_s"] == 3.0 and sorted(by["score"]["rate_pids"]) == [1, 2]  # A and B overlapped
    assert by["fetch"]["done"] == 20 and by["score"]["done"] == 20  # work done is summed over every process
    # processes that ran side by side to the end are all summed, as before
    d = _rec(4, 210.0, 390.0, fetch=2.5)
    merged = merge_records([c, d, b, a], [False] * 4)
    fetch = next(m for m in merged["stages"] if m["stage"] == "fetch")
    assert fetch["rate_per_s"] == 5.5 and sorted(fetch["rate_pids"]) == [3, 4]


def test_a_running_run_still_sums_its_running_processes_only():
    a = _rec(1, 0.0, 100.0, fetch=4.0)
    c = {**_rec(3, 200.0, 400.0, fetch=3.0), "finished": False}
    merged = merge_records([c, a], [True, False], now=400.0)
    fetch = merged["stages"][0]
    assert fetch["rate_pids"] == [3] and fetch["rate_per_s"] == 3.0
