"""A fresh user's walkthrough of README.md (session 11): one test per point found, fast ones here (the
demo's own points, which need a full demo run, are in ``test_demo.py``)."""

from __future__ import annotations

from geoagent.cli import main


def test_demo_workdir_that_is_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    # before: FileExistsError traceback, exit 1; `demo --help` promises exit 2 for a bad --workdir
    f = tmp_path / "F"
    f.write_text("", encoding="utf-8")
    assert main(["demo", "--workdir", str(f), "--no-live"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --workdir") and str(f) in err[0], err
    assert "not a folder" in err[0]
    assert f.is_file()  # untouched


def test_demo_workdir_under_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    f = tmp_path / "F"
    f.write_text("", encoding="utf-8")
    assert main(["demo", "--workdir", str(f / "sub"), "--no-live"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --workdir"), err
