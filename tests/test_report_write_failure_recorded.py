"""A run whose report folder is not writable ends with exit 2, one ``error:`` line and no traceback (the
traceback only under ``-v``), manifest.json records the run ``failed`` (not ``complete``), and ``status`` says
the last run ended in an error and did not rewrite the report (walkthrough 19, finding 2: the run printed a
20-line traceback, the manifest said ``complete`` and ``status`` "the last complete", while the report on disk
was the previous run's).

Real ``run.py`` subprocesses on the release replay (``geoagent/configs/geocontext_replay.toml``; skipped
without the release data). The report folder is made read-only for the one command: as root by a read-only bind
mount in a private mount namespace (as tests/test_state_read_only.py does; root ignores file modes), otherwise
by its mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "geocontext_replay.toml"
RO_MOUNT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def _cli(cwd: Path, release: Path, *args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_RELEASE": str(release)}
    for k in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        env.pop(k, None)
    return subprocess.run([*(prefix or []), sys.executable, str(REPO / "run.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


def _read_only(folder: Path, cwd: Path, release: Path, *args: str) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", RO_MOUNT, "sh", str(folder), "true"],
                               capture_output=True) if shutil.which("unshare") else None
        if probe is None or probe.returncode != 0:
            pytest.skip("root without a private mount namespace: cannot make a folder read-only")
        return _cli(cwd, release, *args, prefix=["unshare", "-m", "sh", "-c", RO_MOUNT, "sh", str(folder)])
    mode = folder.stat().st_mode
    folder.chmod(0o555)
    try:
        return _cli(cwd, release, *args)
    finally:
        folder.chmod(mode)


def test_report_folder_not_writable_is_a_failed_run_in_manifest_and_status(release_dir, tmp_path):
    first = _cli(tmp_path, release_dir, "run", str(CONFIG), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    state = tmp_path / "state" / "geocontext-replay"
    report = state / "report"
    before = {p.name: p.read_bytes() for p in report.iterdir() if p.is_file()}
    out = _read_only(report, tmp_path, release_dir, "run", str(CONFIG), "--no-live")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "Permission denied" in out.stderr or "Read-only file system" in out.stderr, out.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in report.iterdir() if p.is_file()} == before
    runs = json.loads((state / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["complete", "failed"], runs
    st = _cli(tmp_path, release_dir, "status", str(CONFIG))
    assert st.returncode == 0, st.stdout + st.stderr
    assert "the last run ended in an error" in st.stdout, st.stdout
    assert "were not rewritten" in st.stdout
