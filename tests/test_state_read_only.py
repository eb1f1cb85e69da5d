"""A campaign whose state or queue folder is read-only (a read-only mount, an archived copy, another user's
folder) ends ``run`` with one ``error:`` line naming the SQLite file and why, exit 2, not a traceback
(``status``, read-only, shows such a campaign and creates no file: :func:`geoagent.runtime.sqlite_wal.reading_only`): in WAL mode even a reader must make the ``-shm`` file beside the database, so SQLite answers
``unable to open database file`` (:class:`geoagent.runtime.sqlite_wal.DatabaseAccessError`). Before, both
commands died with ``sqlite3.OperationalError`` / ``QueueError`` tracebacks (exit 1).

The folder is made read-only for the command alone: as root by a read-only bind mount in a private mount
namespace (``unshare -m``; root ignores file modes), otherwise by taking the write permission away."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _sim_campaign import run_cli, sim_generic_config

REPO = Path(__file__).resolve().parents[1]
RO_MOUNT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def _config(tmp: Path) -> Path:
    return sim_generic_config(tmp, "ro", concurrency=4, n_requests=4)


_cli = run_cli


def _read_only(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``run.py ARGS`` with ``folder`` read-only for that command only."""
    if os.geteuid() == 0:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", RO_MOUNT, "sh", str(folder), "true"],
                               capture_output=True) if shutil.which("unshare") else None
        if probe is None or probe.returncode != 0:
            pytest.skip("root without a private mount namespace: cannot make a folder read-only")
        return _cli(*args, prefix=["unshare", "-m", "sh", "-c", RO_MOUNT, "sh", str(folder)])
    modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")] if p.is_dir()}
    for p in modes:
        p.chmod(0o555)
    try:
        return _cli(*args)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


@pytest.mark.parametrize("root, edge_file", [("state", "campaign.sqlite"), ("queues", "requests.sqlite")])
def test_read_only_campaign_folder_is_one_clear_error(tmp_path, root, edge_file):
    cfg = _config(tmp_path)
    first = _cli("run", str(cfg), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    folder = tmp_path / root / "ro"
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    for command in (["run", str(cfg), "--no-live"],):
        out = _read_only(folder, *command)
        text = out.stdout + out.stderr
        assert "Traceback" not in text, text[-3000:]
        assert out.returncode == 2, text[-3000:]
        errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, out.stderr
        assert str(folder / edge_file) in errors[0] and "cannot be opened for writing" in errors[0]
        assert "read-only file system" in errors[0] or "may not write" in errors[0]
    # `status` (read-only, as its --help says) shows the read-only campaign (walkthrough 19, finding 3: it
    # refused it with "cannot be opened for writing")
    seen = _read_only(folder, "status", str(cfg))
    assert seen.returncode == 0 and "Traceback" not in seen.stderr, seen.stdout + seen.stderr[-3000:]
    assert "done        4" in seen.stdout and "campaign complete" in seen.stdout, seen.stdout
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert after == before  # nothing was written
    names = sorted(p.name for p in folder.iterdir())
    again = _cli("status", str(cfg))  # writable again: the campaign reads as before
    assert again.returncode == 0 and "done" in again.stdout, again.stdout + again.stderr
    assert sorted(p.name for p in folder.iterdir()) == names  # status creates no file (no -wal / -shm left)


@pytest.mark.parametrize("root", ["state", "queues"])
def test_a_dry_run_and_dead_read_a_read_only_campaign(tmp_path, root):
    """cli36 #4, #5 and review36b #1: on a read-only campaign folder ``run --simulate`` failed ("cannot be opened for
    writing", then on ``run.lock``) and so did ``dead`` (it opened the queue files read-write); both only read."""
    cfg = _config(tmp_path)
    first = _cli("run", str(cfg), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    folder = tmp_path / root / "ro"
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    dry = _read_only(folder, "run", str(cfg), "--simulate")
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stdout[-2000:] + dry.stderr[-3000:]
    assert "0 calls to make (4 already done by earlier runs)" in dry.stdout, dry.stdout[-2000:]
    dead = _read_only(folder, "dead", str(cfg))
    assert dead.returncode == 0 and "no dead-lettered work in campaign ro" in dead.stderr, dead.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
