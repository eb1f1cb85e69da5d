"""A live ledger owner in another pid namespace of the same host (a container sharing the host's network and the
campaign file: same host name, pids of its own) is not taken for a crashed one.

Before: ``ledger_owners`` named the owner's machine by host name alone and judged it by pid and start time; the
other container's pid means nothing here, so opening a Ledger (start-up recovery) turned the live owner's open
reservations into unknown-outcome spend. Now the host column holds :func:`geoagent.runtime.procs.boot_id` too
(``geoagent.runtime.ledger._owner_host``). The other container is a child started in a new pid (and user)
namespace by ``unshare``; a real SQLite campaign file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from _pidns import needs_pid_namespace
from geoagent.runtime.ledger import CampaignDB, Ledger

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import sys, time
from geoagent.runtime.ledger import CampaignDB, Ledger
led = Ledger(CampaignDB(sys.argv[1]), 5.0)
led.reserve("k1", 0.1)
led.reserve("k2", 0.2)
print("held", flush=True)
time.sleep(300)
"""


@needs_pid_namespace
def test_a_live_owner_in_another_pid_namespace_keeps_its_reservations(tmp_path):
    path = tmp_path / "c.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(["unshare", "-Urpf", "--mount-proc", sys.executable, "-c", CHILD, str(path)], cwd=REPO,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "held", child.stderr.read()
        led = Ledger(CampaignDB(path))  # start-up recovery of dead owners' reservations
        try:
            recovered, open_now = led.recovered, led.summary().open_reservations
        finally:
            led.db.close()
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    assert (recovered, open_now) == (0, 2)  # the child is alive: its 2 reservations stay open (before: 2, 0)
