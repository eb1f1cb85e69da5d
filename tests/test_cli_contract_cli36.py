"""The command-line contract where cli36 (session 36) found it broken.

1. ``export`` onto a full disk: polars raises an ``OSError`` without errno, or a ``ComputeError``, reading "No space
   left on device (os error 28)", which the CLI did not know for a full disk: a traceback and exit 1 ("nothing to
   export") instead of one ``error:`` line and exit 3.
"""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

import polars as pl
import pytest

from geoagent.cli import _is_storage_full, _run_command
from geoagent.runtime.export import _with_errno


@pytest.mark.parametrize("exc", [
    OSError("No space left on device (os error 28)"),
    pl.exceptions.ComputeError("parquet: File out of specification: underlying IO error: No space left on device "
                               "(os error 28)"),
])
def test_a_polars_write_on_a_full_disk_reads_as_one(tmp_path, exc, capsys):
    got = _with_errno(exc, tmp_path / "results.parquet.tmp")
    assert isinstance(got, OSError) and got.errno == errno.ENOSPC and "results.parquet.tmp" in str(got)
    assert _is_storage_full(got)

    def fn(_args: argparse.Namespace) -> int:
        raise got from exc

    assert _run_command(argparse.Namespace(fn=fn)) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and "disk is probably full" in err, err
    assert _run_command(argparse.Namespace(fn=fn, command="export")) == 3  # review36b #6: worded for an export
    err = capsys.readouterr().err
    assert err.startswith("error: could not write the export (") and "unknown-outcome" not in err, err


def test_other_polars_errors_stay_as_they_are(tmp_path):
    exc = pl.exceptions.ComputeError("some other failure")
    assert _with_errno(exc, tmp_path / "x") is exc
    plain = OSError(errno.EACCES, "Permission denied")
    assert _with_errno(plain, tmp_path / "x") is plain


def _release_copy(release_dir, root):
    import shutil

    root.mkdir(parents=True)
    for name in ("sites.csv", "ladders", "answers_judged_sample.csv", "forced_chain_raw_sample.jsonl"):
        src = release_dir / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


def test_rescore_commands_refuse_an_unusable_out_dir_in_one_line(release_dir, tmp_path, capsys):
    """cli36 #2, #3: OUT_DIR an existing file or under one was a traceback (exit 1); the two re-score commands
    overwrote each other's report.md and cutoff.csv in a shared OUT_DIR, and wrote into the release folder itself."""
    from geoagent.geohint import judged, raw_import

    rel = _release_copy(release_dir, tmp_path / "rel")
    afile = tmp_path / "afile"
    afile.write_text("x")
    fast = ["--file", "answers_judged_sample.csv", "--flips", "20", "--splits", "4", "--n-boot", "0"]
    for out, says in ((afile, "exists and is not a folder"), (afile / "sub", "afile/sub"),
                      (rel, "holds a GeoContext release")):
        capsys.readouterr()
        assert judged.main([str(rel), str(out), *fast]) == 2, out
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and "Traceback" not in err, err
        assert raw_import.main([str(rel), str(out)]) == 2, out
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and "Traceback" not in err, err
    shared = tmp_path / "same"
    assert judged.main([str(rel), str(shared), *fast]) == 0
    before = (shared / "report.md").read_bytes()
    capsys.readouterr()
    assert raw_import.main([str(rel), str(shared)]) == 2
    assert "holds the report of `python -m geoagent.geohint.judged`" in capsys.readouterr().err
    assert (shared / "report.md").read_bytes() == before
    assert judged.main([str(rel), str(shared), *fast]) == 0  # its own folder again: fine
    # review36b #4: a GeoHint campaign's report folder (same title, no "Source:" line) is no judged report
    campaign = tmp_path / "campaign_report"
    campaign.mkdir()
    (campaign / "report.md").write_text("# GeoHint report\n\n12 scored responses, 1 site\n", encoding="utf-8")
    capsys.readouterr()
    assert judged.main([str(rel), str(campaign), *fast]) == 2
    assert "holds a GeoHint campaign's report" in capsys.readouterr().err
    assert raw_import.main([str(rel), str(campaign)]) == 2
    assert "holds a GeoHint campaign's report" in capsys.readouterr().err


def test_dead_lists_read_only_and_says_nothing_to_list_on_stderr(tmp_path, monkeypatch, capsys):
    """cli36 #4, #11: ``dead`` (no ``--requeue``) opened the queue files read-write (and failed on a read-only
    archive); "no dead-lettered work" went to stdout, so ``dead CONFIG | wc -l`` read 1 task."""
    import os
    import time

    from _model_harness import generic_campaign, model_table
    from geoagent.cli import main

    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="deadro", n=4, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    qdir = tmp_path / "queues" / "deadro"
    for f in qdir.iterdir():  # closed whole: no -wal beside a queue file
        if f.name.endswith(("-wal", "-shm")):
            f.unlink()
    before = {f.name: f.stat().st_mtime_ns for f in qdir.iterdir()}
    dir_before = qdir.stat().st_mtime_ns
    time.sleep(0.05)
    capsys.readouterr()
    assert main(["dead", str(cfg)]) == 0
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.strip() == "no dead-lettered work in campaign deadro"
    assert {f.name: f.stat().st_mtime_ns for f in qdir.iterdir()} == before  # nothing made, nothing touched
    assert qdir.stat().st_mtime_ns == dir_before
    os.chmod(qdir, 0o555)  # an archived campaign (root ignores the mode: the check above is the one that counts)
    try:
        assert main(["dead", str(cfg)]) == 0
    finally:
        os.chmod(qdir, 0o755)


def test_a_dry_run_of_a_campaign_that_ran_writes_nothing(tmp_path, monkeypatch, capsys):
    """cli36 #5: ``run --simulate`` registered a ledger owner in campaign.sqlite (and removed it), joined the
    host-share board and ran the schema script: the file changed, and the dry run failed on a read-only archive.
    The docs say its ledger is read, nothing written."""
    import time

    from _model_harness import generic_campaign, model_table
    from geoagent.cli import main

    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="dryro", n=6, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    cfg.write_text(cfg.read_text().replace("n_requests = 6", "n_requests = 9"))  # 3 more to estimate
    for root in (tmp_path / "state" / "dryro", tmp_path / "queues" / "dryro"):
        for f in root.iterdir():
            if f.name.endswith(("-wal", "-shm")):
                f.unlink()

    def snapshot():
        return {str(p): p.stat().st_mtime_ns for root in (tmp_path / "state", tmp_path / "queues")
                for p in [root, *root.rglob("*")]}

    before = snapshot()
    time.sleep(0.05)
    capsys.readouterr()
    assert main(["run", str(cfg), "--simulate"]) == 0
    out = capsys.readouterr().out
    assert "3 calls to make" in out or "3 call" in out, out[-2000:]
    after = snapshot()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [], changed


def test_a_dry_run_predicts_the_refusal_of_another_queues_root(tmp_path, monkeypatch, capsys):
    """cli36 #6: with ``GEOAGENT_QUEUES`` pointing elsewhere than the folder the earlier runs kept their queues in
    (which still holds them), the dry run estimated against the empty folder and exited 0; the run then refused
    (exit 2). Both refuse now, naming the recorded folder."""
    from _model_harness import generic_campaign, model_table
    from geoagent.cli import main

    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="qroot", n=4, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "elsewhere"))
    for extra in (["--simulate"], ["--no-live"]):
        capsys.readouterr()
        assert main(["run", str(cfg), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert "its earlier runs kept their queues in" in err and str(tmp_path / "queues" / "qroot") in err, err
    assert not (tmp_path / "elsewhere").exists() or not any((tmp_path / "elsewhere").rglob("*.sqlite"))


@pytest.mark.parametrize("argv", [["dead", "c.toml", "--re"], ["run", "c.toml", "--sim"], ["export", "c.toml", "--o", "x"],
                                  ["run", "c.toml", "--st", "model_caller"]])
def test_option_abbreviations_are_refused(argv, capsys):
    """cli36 #8: argparse's prefix matching took ``dead CONFIG --re`` for ``--requeue`` (a write)."""
    from geoagent.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser("run.py").parse_args(argv)
    assert exit_.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_a_refused_write_whose_awaiter_is_gone_logs_no_unretrieved_future(tmp_path):
    """cli36 #7: a run on a full disk printed its one error line, then up to 31 "Future exception was never
    retrieved ... OperationalError('database or disk is full')" tracebacks: the jobs of a failed group commit whose
    awaiting tasks had ended. Such an error is marked retrieved; an awaiter still receives it."""
    import asyncio
    import gc
    import sqlite3

    from geoagent.runtime.ledger import CampaignDB

    db = CampaignDB(tmp_path / "c.sqlite")

    def full():
        raise sqlite3.OperationalError("database or disk is full")

    seen: list[dict] = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: seen.append(ctx))
        db.submit_async(full)  # nobody awaits it
        awaited = db.submit_async(full)
        with pytest.raises(sqlite3.OperationalError):
            await awaited
        await asyncio.sleep(0.05)
        gc.collect()
        await asyncio.sleep(0)

    try:
        asyncio.run(main())
    finally:
        db.close()
    gc.collect()
    assert not [c for c in seen if "never retrieved" in str(c.get("message"))], seen


def test_a_toml_name_with_no_file_here_says_the_packaged_one_is_used(tmp_path, monkeypatch):
    """cli36 #12: ``status crawl_sandbox.toml`` from a folder without that file silently loaded the packaged one."""
    from geoagent.config import ConfigWarning, load_config

    monkeypatch.chdir(tmp_path)
    with pytest.warns(ConfigWarning, match=r"crawl_sandbox\.toml: no such file in .*; using the packaged"):
        cfg = load_config("crawl_sandbox.toml")
    assert cfg.name == "crawl-sandbox"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_config("crawl_sandbox")  # a bare name asks for the packaged file: no warning


def test_export_to_an_unusable_out_folder_names_out_not_the_data_roots(capsys):
    """cli36 #14: an export refused by a read-only --out folder said "(check [paths] in the config and
    $GEOAGENT_STATE / $GEOAGENT_QUEUES)". The error is the one the export raised there (a read-only mount, which a
    test run as root cannot make, so it is raised here as the file system raised it)."""
    def fn(_args: argparse.Namespace) -> int:
        raise OSError(errno.EROFS, "Read-only file system", "/mnt/ro/out/.results.parquet.tmp")

    assert _run_command(argparse.Namespace(fn=fn, out="/mnt/ro/out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "check the folder given to --out" in err and "[paths]" not in err, err
    assert _run_command(argparse.Namespace(fn=fn)) == 2  # a command without --out: the data roots
    assert "check [paths] in the config" in capsys.readouterr().err

    def state(_args: argparse.Namespace) -> int:  # review36b #3: the campaign's own file, exported elsewhere
        raise OSError(errno.EROFS, "Read-only file system", "/mnt/ro/state/c/campaign.sqlite")

    assert _run_command(argparse.Namespace(fn=state, out="/tmp/writable/out")) == 2
    assert "check [paths] in the config" in capsys.readouterr().err


def test_a_misspelt_folder_variable_is_said_to_be_none(tmp_path, monkeypatch, capsys):
    """cli36 #13: ``GEOAGENT_STATE_DIR`` (for ``GEOAGENT_STATE``) was silently ignored: the state stayed in ./state."""
    from geoagent.cli import main, near_miss_env_lines

    assert near_miss_env_lines({"GEOAGENT_STATE": "a", "GEOAGENT_TEST_KEY": "k", "GEOAGENT_REDIS_URL": "u"}) == []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_STATE_DIR", str(tmp_path / "s"))
    main(["status", "generic_demo"])
    err = capsys.readouterr().err
    assert "warning: $GEOAGENT_STATE_DIR is set but geoagent reads no such variable: did you mean $GEOAGENT_STATE" in err


def test_export_of_a_large_table_onto_a_full_disk_is_one_line(tmp_path, monkeypatch):
    """review36b #2: tables of ``BATCH_ROWS`` rows or more are written in parts (``_write_batched``), which read a full
    disk as a traceback and exit 1 after the first fix. A real 16 KiB tmpfs as ``--out`` (root, a private mount
    namespace; skipped elsewhere), the batch size lowered to 2 rows so that a small campaign takes that path."""
    import os
    import shutil
    import subprocess
    import sys

    from _model_harness import generic_campaign, model_table
    from geoagent.cli import main

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount a small tmpfs")
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="bigx", n=6, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    full = tmp_path / "full"
    full.mkdir()
    script = ("import sys; import geoagent.runtime.export as e; e.BATCH_ROWS = 2; from geoagent.cli import main; "
              f"sys.exit(main(['export', {str(cfg)!r}, '--out', {str(full / 'o')!r}]))")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no private mount namespace here")
    repo = str(Path(__file__).resolve().parents[1])
    got = subprocess.run(["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size=16k tmpfs "{full}" && '
                          f'exec "{sys.executable}" -c "$0"', script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": repo}, cwd=tmp_path, timeout=120)
    assert got.returncode == 3, got.stderr[-3000:]
    assert "Traceback" not in got.stderr and "error: could not write the export (" in got.stderr, got.stderr[-3000:]
