"""Issue 2 point 3 (no half-written file in state/): a process SIGKILLed inside an atomic write leaves the
target as it was and its temporary file behind; the next run of the campaign removes it (the campaign
folder at the run lock, a crawl's shared images folder when its services start), and a live writer's
temporary file is never touched."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from geoagent.engine import run_lock
from geoagent.files import atomic_write_text, remove_stale_temp_files

CHILD = """
import sys, time
from geoagent.files import atomic_open
with atomic_open(sys.argv[1], "w") as fh:
    fh.write("half,")
    fh.flush()
    print("inside", flush=True)
    time.sleep(60)
"""


def _killed_inside_write(target: Path) -> Path:
    """Start a process writing ``target`` atomically, SIGKILL it inside the write; return its temp file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(target)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"inside"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    left = [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1 and left[0].name.startswith(f".{target.name}.{proc.pid}.")
    return left[0]


def test_run_lock_removes_temp_files_of_writers_killed_mid_write(tmp_path):
    state = tmp_path / "state" / "camp"
    atomic_write_text(state / "report" / "table1.csv", "a,b\n1,2\n")
    t1 = _killed_inside_write(state / "report" / "table1.csv")
    t2 = _killed_inside_write(state / "geohint_scored.parquet")
    live = subprocess.Popen([sys.executable, "-c", CHILD, str(state / "export" / "sites.csv")], stdout=subprocess.PIPE)
    try:
        assert live.stdout.readline().strip() == b"inside"
        other = state / "notes.tmp"  # not a name our writers make: never ours to remove
        other.write_text("x")
        with run_lock(state, owner=True):
            pass
        assert not t1.exists() and not t2.exists()
        assert (state / "report" / "table1.csv").read_text() == "a,b\n1,2\n"  # the target as it was
        assert [p.name for p in (state / "export").iterdir() if p.name.startswith(f".sites.csv.{live.pid}.")]
        assert other.exists()
    finally:
        live.kill()
        live.wait(10)
    assert [p.name for p in remove_stale_temp_files(state)] and not list((state / "export").iterdir())


def test_remove_stale_temp_files_images_folder_and_manifest_name(tmp_path):
    images = tmp_path / "images"
    t = _killed_inside_write(images / "site_a" / "100000000049.jpg")
    dead_pid = int(t.name.split(".")[3])
    manifest_tmp = tmp_path / f".manifest.json.{dead_pid}.tmp"
    manifest_tmp.write_text("{")
    lease_tmp = tmp_path / "leases" / f".{dead_pid}.0.deadbeef.tmp"  # leases/: the owner files' own clean-up
    lease_tmp.parent.mkdir()
    lease_tmp.write_text("")
    removed = remove_stale_temp_files(tmp_path)
    assert sorted(removed) == sorted([t, manifest_tmp])
    assert lease_tmp.exists()
    assert remove_stale_temp_files(tmp_path / "missing") == []


PLAN_CHILD = """
import sys, time
from geoagent.runtime.scope import PlanRecorder

def plan():
    yield ("k1", {"model": "m"})
    print("inside", flush=True)
    time.sleep(60)
    yield ("k2", {"model": "m"})

for _ in PlanRecorder(sys.argv[1]).wrap(plan()):
    pass
"""


def test_a_plan_record_killed_mid_stream_leaves_a_temp_file_the_next_run_removes(tmp_path):
    """The plan record (``plan_keys.tsv``) is written to a temporary file as the plan streams past; a process
    SIGKILLed mid-plan left ``.plan_keys.tsv.<pid>.tmp`` (now ``.plan_keys.tsv.<pid>.<thread>.<8 hex>.tmp``) behind for good (its name was none the clean-up knows:
    seen in a crash acceptance test). The next run's clean-up removes it; a live recorder's file is kept."""
    state = tmp_path / "state" / "camp"
    state.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", PLAN_CHILD, str(state)], stdout=subprocess.PIPE)
    live = subprocess.Popen([sys.executable, "-c", PLAN_CHILD, str(state)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"inside" and live.stdout.readline().strip() == b"inside"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # the record streams through geoagent.files.atomic_stream: .plan_keys.tsv.<pid>.<thread>.<8 hex>.tmp
        [dead] = [p for p in state.iterdir() if p.name.startswith(f".plan_keys.tsv.{proc.pid}.")]
        [alive] = [p for p in state.iterdir() if p.name.startswith(f".plan_keys.tsv.{live.pid}.")]
        assert dead.exists() and alive.exists()
        assert remove_stale_temp_files(state) == [dead]
        assert not dead.exists() and alive.exists()
    finally:
        live.kill()
        live.wait(10)
