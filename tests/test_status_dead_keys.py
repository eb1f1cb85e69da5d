"""``status`` shows dead-lettered task keys whole, as ``run.py dead`` does (walkthrough: it cut them at 24
characters, ``dead requests/100010003206|main|Tiger  (deliveries 2)``, so two tasks of one image could not be
told apart). (geoagent.status.format_status)"""

from __future__ import annotations

from geoagent.runtime.queue import DeadLetter, QueueCounts
from geoagent.status import format_status

KEY = "100010003206|main|Tiger Stadium|near|0007"


def test_status_dead_line_shows_the_whole_key():
    st = {"campaign": "c", "queues": {"requests": QueueCounts(done=3, dead=1)},
          "dead": {"requests": [DeadLetter(KEY, {}, 2, "PermanentFailure: http 400 bad request")]}}
    line, = [ln for ln in format_status(st).splitlines() if ln.startswith("  dead ")]
    assert line == f"  dead requests/{KEY} (deliveries 2): PermanentFailure: http 400 bad request"
