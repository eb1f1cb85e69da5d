"""A trial table or sites.csv none of whose rows can be read refuses the run (break28 #4).

Before: such a file (emptied, its header without the ``truth`` column, a header that is not UTF-8) was one "N
malformed" line of the import note; the GeoVerify run planned 0 requests, ended "complete" with exit 0, and rewrote
the report as one of no data over the last good one (the stored answers were "left out of scoring"). Now the plan
refuses it naming the file, the line and the reason (exit 2), and the queues, the stored answers and the last
report are left as they were.

End to end on a copy of the release sample (a GeoVerify replay campaign, as ``tests/test_geoverify_live_missing.py``).
"""

from __future__ import annotations

import shutil

import pytest

from geoagent.cli import main
from geoagent.data.importer import check_plannable, import_release
from _model_harness import geoverify_replay_toml


def _copy_release(src, dst):
    dst.mkdir()
    for name in ("sites.csv", "verify_trials_sample.csv", "verify_raw_sample.jsonl"):
        shutil.copy(src / name, dst / name)
    shutil.copytree(src / "ladders", dst / "ladders")
    return dst


@pytest.mark.parametrize("damage", ["empty", "no_truth_column", "header_not_utf8", "every_row_bad"])
def test_a_rerun_over_an_unusable_trial_table_is_refused_and_keeps_the_report(tmp_path, release_dir, capsys, damage):
    rel = _copy_release(release_dir, tmp_path / "rel")
    cfg = tmp_path / "gv.toml"
    cfg.write_text(geoverify_replay_toml(tmp_path, "gv-bad-table", rel, replay_path=rel / "verify_raw_sample.jsonl"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    report = tmp_path / "state" / "gv-bad-table" / "report" / "geoverify_table.md"
    good = report.read_text(encoding="utf-8")
    table = rel / "verify_trials_sample.csv"
    text = table.read_bytes()
    header, _, rows = text.partition(b"\n")
    if damage == "empty":
        table.write_bytes(b"")
    elif damage == "no_truth_column":
        cols = header.decode().split(",")
        table.write_bytes(",".join("verdict" if c == "truth" else c for c in cols).encode() + b"\n" + rows)
    elif damage == "header_not_utf8":
        table.write_bytes(b"\xff" + text)
    else:  # every row one field short
        table.write_bytes(header + b"\n" + b"\n".join(r.rsplit(b",", 1)[0] for r in rows.splitlines() if r) + b"\n")
    capsys.readouterr()
    assert main(["run", str(cfg), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "verify_trials_sample.csv" in err and "nothing was run" in err, err
    if damage != "every_row_bad":
        assert "line 1:" in err, err
    else:
        assert "none of its" in err and "row(s) could be read" in err, err
    assert report.read_text(encoding="utf-8") == good  # the last report is left as it was
    table.write_bytes(text)  # fixed: the campaign goes on as before, every answer stored
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()


def test_check_plannable_hand_cases(tmp_path, release_dir):
    rel = _copy_release(release_dir, tmp_path / "rel")
    check_plannable(import_release(rel), trials=True)  # the sample itself: nothing to say
    (rel / "sites.csv").write_text("site_id,name\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"sites\.csv: line 1: header lacks required column"):
        check_plannable(import_release(rel), trials=False)
    # a plan made from the trial table alone (GeoVerify trials = "release") runs; the summary shows the problem
    check_plannable(import_release(rel), trials=True, sites=False)
    (rel / "sites.csv").write_text("site,city,lat,lon\n", encoding="utf-8")  # a header only: no file problem
    check_plannable(import_release(rel), trials=False)
