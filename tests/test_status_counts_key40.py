"""Mid-run ``status`` says why its three counts of calls differ (newuser39 #8a).

A running campaign shows the spend line's ``calls`` (settled model calls), each queue's ``done`` and the http
lines' requests (retries and calls on the wire included); they disagree while the run goes, which was explained only
for a stopped run.
"""

from __future__ import annotations

import time

from geoagent.runtime.queue import QueueCounts
from geoagent.status import format_status


def _st(running, finished=False):
    rec = {"t": time.time(), "finished": finished, "stages": [],
           "http": {"127.0.0.1:9": {"requests": 12, "retries": 2, "errors": {"http 429": 2}}}}
    return {"campaign": "k", "queues": {"requests": QueueCounts(ready=3, leased=4, done=8, dead=0)},
            "progress": rec, "running": running,
            "spend": {"spent_usd": 0.01, "unknown_usd": 0.0, "reserved_usd": 0.002, "cap_usd": 1.0, "calls": 9}}


def test_a_running_campaign_explains_its_counts_and_a_finished_one_does_not():
    live = format_status(_st(True))
    assert "calls 9" in live and "12 requests, 2 retries" in live
    assert ("(while a run goes these counts differ: spend's calls are settled model calls, a queue's done its tasks "
            "handed on, http requests every request sent, retries and calls on the wire included)") in live
    assert "while a run goes" not in format_status(_st(False, finished=True))
    assert "while a run goes" not in format_status(_st(False))
