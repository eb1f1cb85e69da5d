"""Walk27 #1 (its status half): a model caller idle because every task left on its edge was leased by a killed
process (on Redis, on another machine: back only after the visibility timeout) read "nothing ready on requests:
waiting for upstream work", though the model caller has no upstream stage. The note now says the edge's leased
tasks are held by other processes and when a stopped one's come back."""

from __future__ import annotations

from geoagent.runtime.queue import QueueCounts
from geoagent.status import idle_note


def _rec(**kw):
    return {"idle_s": 164.0, "stall_after_s": 60.0, "input_edge": "requests", "in_flight": 0, **kw}


def test_leased_by_other_processes_is_not_upstream_work():
    note = idle_note(_rec(), {"requests": QueueCounts(leased=24, done=316)})
    assert note.startswith("idle: nothing completed for 164 s (nothing ready on requests: its 24 leased task(s) "
                           "are held by other processes;"), note
    assert "visibility_timeout_s" in note and "upstream" not in note


def test_the_other_notes_are_as_before():
    assert idle_note(_rec(), {"requests": QueueCounts(done=316)}) == (
        "idle: nothing completed for 164 s (nothing ready on requests: waiting for upstream work)")
    assert idle_note(_rec(), {"requests": QueueCounts(ready=3, leased=2)}).endswith("although 3 task(s) are ready on requests")
    # this process's own leases come first (its stage record's in_flight)
    assert idle_note(_rec(in_flight=2), {"requests": QueueCounts(leased=5)}).endswith(
        "although 2 task(s) are leased (being worked on or waiting for a slot)")
    assert idle_note(_rec(idle_s=10.0), {"requests": QueueCounts(leased=5)}) == ""
