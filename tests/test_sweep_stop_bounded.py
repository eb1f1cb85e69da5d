"""Rev27 #2: on Redis the dead-owner sweep goes to the server every 5 s; with the server gone, a scan sits in the
clients' retry window (45 s), and the end of a run waited for it (the owner and run locks let go 39.8 s after the
run's work ended, measured). The stop now waits for a scan under way for at most ``SWEEP_STOP_WAIT_S``."""

from __future__ import annotations

import threading
import time

from geoagent import engine


def test_stop_waits_for_a_stuck_scan_no_longer_than_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "SWEEP_STOP_WAIT_S", 0.5)
    entered, release = threading.Event(), threading.Event()

    def stuck() -> None:  # a scan held up by a server that does not answer
        entered.set()
        release.wait(30)

    sweep = engine._DeadOwnerSweep(tmp_path, lambda owners: None, 0.05, stuck)
    try:
        assert entered.wait(10)
        t0 = time.monotonic()
        sweep.stop()
        assert time.monotonic() - t0 < 5.0
    finally:
        release.set()


def test_a_scan_that_ends_in_time_is_waited_for(tmp_path):
    calls = []
    sweep = engine._DeadOwnerSweep(tmp_path, lambda owners: None, 0.02, lambda: calls.append(time.monotonic()))
    deadline = time.monotonic() + 10
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sweep.stop()
    assert len(calls) >= 3  # each_sweep runs after every scan
    n = len(calls)
    time.sleep(0.1)
    assert len(calls) == n  # and none after the stop
