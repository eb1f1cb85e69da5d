"""Ctrl-C while a run waits for the campaign's plan lock ends it at once (review44e #4).

The plan lock (``state/<campaign>/plan.lock``, :class:`geoagent.engine.PlanLock`) is held by a run from its config
check to its manifest's record of its start. A second run waited for it with a blocking sleep inside the event loop,
so its first Ctrl-C took effect only when the other process let the lock go (28 s in the review); now the wait polls
with ``anyio.sleep`` and a cancellation ends it. The folder the lock lives in is the holder's: the interrupted run
leaves it in place."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]


def _holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (its ``/proc/<pid>/fd`` links)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:
            continue
    return False


def test_ctrl_c_while_waiting_for_the_plan_lock_ends_the_run_at_once(tmp_path):
    cfgp = generic_campaign(tmp_path, name="locked", n=5, models=model_table("m"))
    state = tmp_path / "state" / "locked"
    state.mkdir(parents=True)
    holder = open(state / "plan.lock", "a+b")
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process of the campaign is planning
    try:
        env = {**os.environ, "GEOAGENT_RUNS_INDEX": str(tmp_path / "runs.json")}
        # the child takes SIGINT as Python's default: started from a shell's background job (a fresh clone's CI run
        # with `... &`), the test inherits SIGINT ignored, and so would the run, which then rightly ignored it
        run = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], cwd=REPO,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # started, and waiting for the lock: it holds plan.lock open (a fixed sleep sent the signal too early on a
        # loaded machine, a fresh clone beside a CI run)
        deadline = time.monotonic() + 120
        while not _holds_open(run.pid, state / "plan.lock"):
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the run never reached the plan lock"
            time.sleep(0.1)
        time.sleep(0.5)  # in its wait loop
        t0 = time.monotonic()
        run.send_signal(signal.SIGINT)
        try:
            out, err = run.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            run.kill()
            raise AssertionError("the first Ctrl-C did not end a run waiting for the plan lock") from None
        assert time.monotonic() - t0 < 25, "the run ended only long after its Ctrl-C"
        assert run.returncode == 130, (out, err[-2000:])
        assert "Traceback" not in err, err[-2000:]
        assert (state / "plan.lock").exists()  # the holder's folder and lock file stay
    finally:
        holder.close()
