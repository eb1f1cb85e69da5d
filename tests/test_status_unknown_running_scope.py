"""``status`` whose run state is unknown (no run.lock: "running, or killed before its last record") does not call
the stage lines "this run": they may be a killed run's.

Before: "last progress (running, or killed before its last record)" and under it "stages, this run only".
"""
from __future__ import annotations

from geoagent.runtime.queue import QueueCounts
from geoagent.status import format_status


def _status(running):
    return format_status({
        "campaign": "c", "queues": {"requests": QueueCounts(2, 3, 5, 0)}, "spend": None, "dead": {},
        "running": running,
        "progress": {"campaign": "c", "elapsed_s": 12, "t": 0, "stages": [
            {"stage": "model_caller", "rate_per_s": 1.0, "done": 5, "failed": 0, "dead": 0,
             "input_edge": "requests", "lanes": {"a": {"done": 5, "rate_per_s": 1.0}}}]}})


def test_unknown_run_state_says_this_or_the_last_run():
    out = _status(None)
    assert "running, or killed before its last record" in out, out
    assert "stages, this or the last run only" in out and "this run only" not in out, out
    assert "per model (this or the last run)" in out, out


def test_a_running_run_is_this_run():
    out = _status(True)
    assert "stages, this run only" in out and "per model (this run)" in out, out
