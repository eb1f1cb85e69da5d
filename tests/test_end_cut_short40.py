"""``status`` over a run killed after its last task but before it began writing its end (review40a #5).

The check of the final report and export skipped a run without the marks and read an earlier run's
``end_written``: "campaign complete" over files that lack the killed run's rows.
"""

from __future__ import annotations

import os
import socket

from geoagent.runtime.manifest import END_WRITTEN_KEY, WRITING_END_KEY, end_cut_short

HERE = socket.gethostname()


def test_a_killed_newest_run_without_marks_is_cut_short():
    done = {"status": "complete", END_WRITTEN_KEY: True}
    assert end_cut_short([done]) is None
    killed = {"status": "killed"}
    assert end_cut_short([done, killed]) is killed
    forced = {"status": "forced exit"}
    assert end_cut_short([done, forced]) is forced
    # still "running" in the manifest, its process gone (a pid no process holds)
    gone = {"status": "running", "host": HERE, "pid": 2 ** 22 + 12345, "started_at": "2026-12-05T00:00:00Z"}
    assert end_cut_short([done, gone]) is gone
    # a live process of this machine (this one) is not judged: status says a run is still going
    live = {"status": "running", "host": HERE, "pid": os.getpid(), "started_at": "2099-01-01T00:00:00Z"}
    assert end_cut_short([done, live]) is None
    # a run that began writing and did not finish; one of an earlier geoagent that ended without the marks
    writing = {"status": "running", WRITING_END_KEY: "2026-12-05T00:00:00Z"}
    assert end_cut_short([done, writing]) is writing
    assert end_cut_short([{"status": "complete"}]) is None
    assert end_cut_short([killed, {"status": "complete"}]) is None


def test_a_sigterm_after_the_runs_recorded_end_is_ignored_until_a_run_starts():
    """review40a #6: after the manifest recorded the run's end, the loop's teardown still ran under the command's
    SIGTERM handler, which read a signal there as an interrupt before the workers started (exit 130)."""
    import signal

    import pytest

    from geoagent import cli
    from geoagent.runtime.daemon import end_recorded, mark_end_recorded

    ended_before = cli._WORK_ENDED  # an earlier test's command in this worker may have left it set
    try:
        cli._WORK_ENDED = False
        mark_end_recorded()
        assert end_recorded()
        cli._interrupt_on_term(signal.SIGTERM, None)  # ignored: nothing raised
        mark_end_recorded(False)  # a run starts
        with pytest.raises(KeyboardInterrupt):
            cli._interrupt_on_term(signal.SIGTERM, None)
    finally:
        mark_end_recorded(False)
        cli._TERM_RECEIVED = False
        cli._WORK_ENDED = ended_before
