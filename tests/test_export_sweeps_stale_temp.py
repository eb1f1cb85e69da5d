"""``run.py export`` removes the temporary files an earlier export killed mid-write left behind (adversarial
review 25, item 5: ``.model_responses.parquet.<pid>.<thread>.<rand>.tmp`` survived the next export; only the next
``run`` swept it). A temporary file of a live process is left alone."""

from __future__ import annotations

import os
import subprocess
import sys

from _model_harness import generic_campaign, model_table
from geoagent.cli import main


def test_export_removes_a_killed_exports_temporary_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="sweep", n=4, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    folder = tmp_path / "state" / "sweep"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs: the killed export's
    stale = folder / f".model_responses.parquet.{gone.pid}.140000000000000.a1b2c3d4.tmp"
    live = folder / f".results.parquet.{os.getpid()}.140000000000000.a1b2c3d4.tmp"
    for f in (stale, live):
        f.write_bytes(b"half a parquet file")
    assert main(["export", str(cfg)]) == 0
    assert not stale.exists() and live.exists()


def test_export_out_sweeps_that_folder_only(tmp_path, monkeypatch):
    """Review rev25 (11): ``--out`` was swept recursively, so ``--out ~`` walked (and cleaned) anyone's tree."""
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="sweepout", n=4, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    out = tmp_path / "out"
    (out / "someone-else").mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    top = out / f".results.parquet.{gone.pid}.140000000000000.a1b2c3d4.tmp"
    deep = out / "someone-else" / f".data.parquet.{gone.pid}.140000000000000.a1b2c3d4.tmp"
    for f in (top, deep):
        f.write_bytes(b"half a file")
    assert main(["export", str(cfg), "--out", str(out)]) == 0
    assert not top.exists() and deep.exists()
