"""``status`` after a run killed inside its start-up refresh of stored rows (upgrade41 #4).

Before: a GeoVerify campaign upgraded from an earlier geoagent (its swapped-image answers stored under their earlier
task keys, its plan's new keys queued) whose first upgraded run was killed (SIGKILL) while it brought the stored rows
up to date (``geoagent.geoverify.rekey`` moved them, ``geoagent.geoverify.reparse`` had not run) showed "requests:
ready 52" beside the earlier run's "run ended: complete", and said neither that the refresh was cut short nor that
those 52 requests all had stored answers, so the re-run makes no model call. Now the run's manifest entry records
when its refresh first wrote a row and when it returned (``refresh_began``, ``refresh_done``), ``status`` names a
refresh cut short, and counts the queued requests that have a stored answer.

fixstatus43 #2: below the "cut short" line, the earlier run's figures read "last progress (run ended: complete, ...)",
as if the last run had ended complete; they now say they are an earlier run's, not the cut one's (it wrote none).

End to end over the session's sandbox crawl (a real ``run.py`` killed where the re-parse begins, as
tests/test_end_cut_short41.py kills its runs), and :func:`geoagent.runtime.manifest.refresh_cut_short` over manifest
entries.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

from test_end_cut_short41 import _KILL_AT, REPO
from test_geoverify_rekey41 import _sandbox_campaign

from geoagent.runtime.manifest import REFRESH_BEGAN_KEY, REFRESH_DONE_KEY, read_manifest, refresh_cut_short

CUT = "the last run stopped inside its start-up refresh of the stored rows"


def _earlier_version(state) -> list[str]:
    """Make the finished campaign at ``state`` what an earlier geoagent left: its swapped-image rows under their
    earlier task keys, its plan record naming those, the current plan's new keys queued and not done. Returns the
    new keys."""
    from geoagent.data.model import earlier_task_id
    from geoagent.geoverify.stages import SCORED_TABLE
    from geoagent.runtime.queue import open_queue
    from geoagent.runtime.scope import plan_keys_path
    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state("gv-redraw", root=state) as st:
        moves = [(k, earlier_task_id(k), r) for k, r in st.store.iter_results(SCORED_TABLE) if "|shows=" in k]
        assert moves and st.store.move_results(SCORED_TABLE, moves) == (len(moves), 0)
    record = plan_keys_path(state / "gv-redraw")
    lines = record.read_text(encoding="utf-8").splitlines()
    record.write_text("".join(f"{m}\t{earlier_task_id(k) or k}\n" for m, _, k in (ln.partition("\t") for ln in lines)),
                      encoding="utf-8")
    keys = [k for k, _, _ in moves]

    async def reopen() -> int:
        q = open_queue(os.environ["GEOAGENT_QUEUES"], "gv-redraw", "requests")
        try:
            return await q.reopen_done(keys)
        finally:
            await q.close()

    assert asyncio.run(reopen()) == len(keys)
    return keys


def test_status_names_a_refresh_a_kill_cut_short_and_the_stored_answers_queued(sandbox_crawled, capsys):
    from geoagent.cli import main

    p, state = _sandbox_campaign(sandbox_crawled, capsys)
    keys = _earlier_version(state)
    calls0 = _calls(main, p, capsys)
    # the upgraded run, killed where the re-parse begins: the rows were moved (the refresh wrote), not re-parsed
    killed = subprocess.run([sys.executable, "-c", _KILL_AT, "geoagent.geoverify.reparse:refresh_stored_rows",
                             str(REPO / "run.py"), "run", str(p), "--no-live"],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    last = read_manifest(state / "gv-redraw")["runs"][-1]
    assert last["status"] == "running" and last[REFRESH_BEGAN_KEY] and REFRESH_DONE_KEY not in last

    assert main(["status", str(p)]) == 0
    out = capsys.readouterr().out
    # before: neither line; the queued requests read as work to pay for
    assert CUT in out and f"run {last['run_id']} on host {last['host']}, killed" in out, out
    assert "the next `run.py run CONFIG` finishes that first, before any task" in out
    assert f"all {len(keys)} requests queued have an answer stored: the next run takes those answers (no model call" \
        in out, out
    # fixstatus43 #2: the figures below are the run's before the cut one (which wrote no progress record); they read
    # "run ended: complete" under the line saying the last run was cut short
    assert ("last progress (of an earlier run, which ended: complete, as manifest.json recorded; not of the last run, "
            "which was cut short inside its start-up refresh and wrote no progress record)") in out, out
    assert "stages, earlier run only" in out and "last progress (run ended" not in out, out

    # the re-run finishes the refresh and takes the stored answers: no call; status has neither line
    assert main(["run", str(p), "--no-live"]) == 0
    capsys.readouterr()
    last = read_manifest(state / "gv-redraw")["runs"][-1]
    assert last[REFRESH_DONE_KEY] and last["status"] == "complete"
    assert _calls(main, p, capsys) == calls0
    assert main(["status", str(p)]) == 0
    out = capsys.readouterr().out
    assert CUT not in out and "have an answer stored" not in out and "campaign complete" in out, out
    assert "last progress (run ended: complete, as manifest.json recorded)" in out and "not of the last run" not in out


def _calls(main, p, capsys) -> int:
    assert main(["status", str(p)]) == 0
    out = capsys.readouterr().out
    return int(out.split("; calls ", 1)[1].split()[0])


def test_refresh_cut_short_reads_the_newest_runs_marks():
    here = socket.gethostname()
    began = {"run_id": "a", "status": "running", "host": here, "pid": 2 ** 22 + 7, REFRESH_BEGAN_KEY: "t1"}
    done = {"run_id": "b", "status": "complete", REFRESH_BEGAN_KEY: "t2", REFRESH_DONE_KEY: "t3"}
    quiet = {"run_id": "c", "status": "killed"}  # wrote nothing in its refresh, or stopped before it
    assert refresh_cut_short([began]) == began  # its process is gone: killed inside the refresh
    assert refresh_cut_short([began, quiet]) == began
    assert refresh_cut_short([began, done]) is None  # a later run finished a refresh
    assert refresh_cut_short([done, {**quiet, "status": "failed", REFRESH_BEGAN_KEY: "t4"}])["run_id"] == "c"
    alive = {**began, "pid": os.getpid(), "started_unix": 10 ** 10}  # this process: a refresh that may go on
    assert refresh_cut_short([alive]) is None
    assert refresh_cut_short([]) is None
