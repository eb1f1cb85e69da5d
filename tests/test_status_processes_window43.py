"""``status`` finds a process whose progress records lie further back than it reads (fixstatus43 #3).

``status`` reads the progress stream back from its end for at most
:data:`geoagent.runtime.progress.READ_WINDOW_BYTES` (8 MiB, across ``progress.jsonl.1``). Each running process appends
about 1-4 KB a second, so beside a busy process (or several) a process that wrote nothing for a while, stalled, or
one that ended long before the others, had its last record pushed out of that window: ``status`` then showed the busy
process alone as the whole run ("last progress (running)", its counts only, no ``processes:`` lines), with the
stalled process, alive and holding tasks, nowhere. Now the processes ``manifest.json`` records on this machine tell
``status`` whom to look for further back (a byte search for their run id, the rest of the stream unparsed).

The stream here is larger than the window: filler records of the busy process, written as the engine writes them
(``append_jsonl``); the stalled process is a real live child that recorded its run in the manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_lock
from geoagent.files import append_jsonl, rotate_jsonl
from geoagent.runtime.manifest import Manifest, local_run_processes
from geoagent.runtime.progress import READ_WINDOW_BYTES, latest_records_of, read_processes
from geoagent.status import campaign_status, format_status
from tests._model_harness import generic_campaign, model_table, progress_record

REPO = Path(__file__).resolve().parents[1]

#: the stalled process: records its run in the campaign's manifest as a run does, says its run id, then waits
STALLED = """
import sys, time
from geoagent.config import load_config
from geoagent.runtime.manifest import Manifest
print(Manifest(load_config(sys.argv[1])).start_run(command="run"), flush=True)
time.sleep(120)
"""

#: bytes of padding per filler record: with the fields, about 4 KB a record, as a busy process's with many hosts
PAD = "x" * 3800


def _filler(n: int, pid: int, run_id: str, t0: float, t1: float, started: float) -> list[dict]:
    """``n`` records of the busy process, ``t`` from ``t0`` to ``t1`` (s)."""
    return [progress_record(pid, run_id, t, t - started, started=started, pad=PAD)
            for t in (t0 + (t1 - t0) * i / max(1, n - 1) for i in range(n))]


def _backdate(state: Path, run_id: str, by_s: float) -> None:
    """Move the start of ``run_id``'s manifest entry ``by_s`` seconds back: the stalled process has been quiet that
    long (less than the manifest's 30 s allowance for a pid born after its run's start)."""
    path = state / C.MANIFEST_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    entry = next(r for r in data["runs"] if r["run_id"] == run_id)
    entry["started_unix"] -= by_s
    path.write_text(json.dumps(data), encoding="utf-8")


def test_status_finds_a_stalled_live_process_beyond_the_window(tmp_path):
    cfgp = generic_campaign(tmp_path, name="c", n=10, models=model_table())
    cfg = load_config(cfgp)
    state = Path(cfg.state_dir())
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    stalled = subprocess.Popen([sys.executable, "-c", STALLED, str(cfgp)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        stalled_run = stalled.stdout.readline().strip()
        assert stalled_run, "the stalled process recorded no run"
        _backdate(state, stalled_run, 25.0)
        busy_run = Manifest(cfg).start_run(command="run")  # this process is the busy one
        now = time.time()
        n = READ_WINDOW_BYTES // 4000 + 600  # past the window
        append_jsonl(state / C.PROGRESS_FILE,
                     [progress_record(stalled.pid, stalled_run, now - 23.0, 1.0, started=now - 24.0)]
                     + _filler(n, os.getpid(), busy_run, now - 22.0, now - 0.2, now - 22.5), fsync=False)
        assert (state / C.PROGRESS_FILE).stat().st_size > READ_WINDOW_BYTES + 1_000_000
        with run_lock(state):
            text = format_status(campaign_status(cfg))
    finally:
        stalled.kill()
        stalled.wait(10)
    # before: "last progress (running)", model_caller done 5 (the busy process's), no processes lines
    assert "processes: 1 running, 0 ended, 1 silent" in text, text
    assert f"pid {stalled.pid} [model_caller]: silent (" in text, text
    assert "model_caller: 1.00/s  done 10  retried 0  dead 0  (2 processes, 1 running)" in text, text


def _rec(run_id: str, t: float, started: float, done: int = 1, **extra) -> dict:
    return {"t": t, "started": started, "elapsed_s": t - started, "run_id": run_id, "pid": 1, "campaign": "c",
            "stages": [{"stage": "model_caller", "done": done}], "queues": {}, **extra}


def test_read_processes_looks_back_for_known_processes_only(tmp_path):
    """A live process and one that ended while the busy one ran are found past the window (in the rotated file
    here); one that ended before the busy one started, and one that started after the window's oldest record (it
    wrote nothing yet), are not added; nor is anything without ``known``."""
    path = tmp_path / "progress.jsonl"
    append_jsonl(path, [_rec("old", 60.0, 40.0, finished=True),  # ended before the busy one started
                        _rec("live", 101.0, 100.0, done=7), _rec("overlap", 104.0, 95.0, done=3, finished=True)],
                 fsync=False)
    append_jsonl(path, [_rec("busy", 102.0 + i * 0.01, 102.0, pad=PAD) for i in range(1500)], fsync=False)
    assert rotate_jsonl(path, 1)  # all of it in progress.jsonl.1 now
    append_jsonl(path, [_rec("busy", 200.0 + i * 0.01, 102.0, pad=PAD) for i in range(1500)], fsync=False)
    window = 4 * 1024 * 1024  # a smaller window than the default keeps the stream small
    assert [r["run_id"] for r in read_processes(path, window)] == ["busy"]
    known = [{"run_id": "live", "started": 99.0, "alive": True, "ended": None},
             {"run_id": "overlap", "started": 94.0, "alive": False, "ended": 105.0},
             {"run_id": "old", "started": 39.0, "alive": False, "ended": 61.0},
             {"run_id": "new", "started": 300.0, "alive": True, "ended": None}]
    got = read_processes(path, window, known=known)
    assert [(r["run_id"], r["stages"][0]["done"]) for r in got] == [("busy", 1), ("overlap", 3), ("live", 7)]
    assert set(latest_records_of(path, ["live", "old", "none"])) == {"live", "old"}
    assert latest_records_of(tmp_path / "absent.jsonl", ["live"]) == {}


def test_local_run_processes_reads_this_machines_run_entries():
    import socket

    here = socket.gethostname()
    runs = [{"run_id": "a", "host": here, "command": "run", "status": "running", "pid": os.getpid(),
             "started_unix": time.time() - 5},
            {"run_id": "b", "host": here, "command": "run", "status": "complete", "pid": 2 ** 22 + 5,
             "started_unix": 10.0, "duration_s": 4.5},
            {"run_id": "c", "host": here + "-other", "status": "running", "started_unix": 1.0},  # another machine
            {"run_id": "d", "host": here, "status": "killed", "started_unix": 2.0}, "junk"]
    got = {p["run_id"]: p for p in local_run_processes(runs)}
    assert set(got) == {"a", "b", "d"}
    assert got["a"]["alive"] and got["a"]["ended"] is None
    assert not got["b"]["alive"] and got["b"]["ended"] == 14.5
    assert not got["d"]["alive"] and got["d"]["ended"] is None  # killed: its end is unknown, never looked for
