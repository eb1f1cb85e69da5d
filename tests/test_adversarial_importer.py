"""Adversarial release folders: one corrupt row never costs the other rows, unsafe ids never become paths.

Each test copies the release sample into ``tmp_path`` (never into the repo), corrupts one thing, imports it
and compares with the clean import: exactly the corrupted rows are missing, each reported with file, line
and reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from geoagent.data.importer import import_release

TRIALS = "verify_trials_sample.csv"
RAW = "verify_raw_sample.jsonl"


@pytest.fixture
def copy(release_dir, tmp_path) -> Path:
    dst = tmp_path / "release"
    shutil.copytree(release_dir, dst)
    return dst


def _lines(p: Path) -> list[bytes]:
    return p.read_bytes().split(b"\n")


def test_one_bad_utf8_byte_costs_one_trial_row_not_the_whole_file(copy, release_dir):
    clean = import_release(release_dir)
    lines = _lines(copy / TRIALS)
    lines[3] = lines[3].replace(b",main,", b",m\xffain,", 1)  # physical line 4
    (copy / TRIALS).write_bytes(b"\n".join(lines))
    rel = import_release(copy)
    assert len(rel.trials) == len(clean.trials) - 1
    bad = [i for i in rel.report.issues if i.file.endswith(TRIALS)]
    assert [i.line for i in bad] == [4]
    assert "UTF-8" in bad[0].reason


def test_bad_utf8_in_header_is_reported_on_line_1(copy):
    lines = _lines(copy / TRIALS)
    lines[0] = lines[0].replace(b"truth", b"tr\xffuth")
    (copy / TRIALS).write_bytes(b"\n".join(lines))
    rel = import_release(copy)
    assert rel.trials == []
    assert [(i.line, "UTF-8" in i.reason) for i in rel.report.issues if i.file.endswith(TRIALS)] == [(1, True)]


def test_trial_site_id_that_is_not_a_safe_file_name_is_rejected(copy, release_dir):
    clean = import_release(release_dir)
    text = (copy / TRIALS).read_text(encoding="utf-8").split("\n")
    assert ",amsterdam_church," in text[2]
    text[2] = text[2].replace(",amsterdam_church,", ",../../evil,", 1)
    text[3] = text[3].replace(",amsterdam_church,", ",C:\\\\x,", 1)
    (copy / TRIALS).write_text("\n".join(text), encoding="utf-8")
    rel = import_release(copy)
    assert all(".." not in t.site_id and "\\" not in t.site_id and ":" not in t.site_id for t in rel.trials)
    assert len(rel.trials) == len(clean.trials) - 2
    lines = sorted(i.line for i in rel.report.issues if i.file.endswith(TRIALS))
    assert lines == [3, 4]


def test_ladder_file_named_for_an_unsafe_site_id_is_skipped(copy):
    src = next((copy / "ladders").glob("*_ladder*.csv"))
    shutil.copy(src, copy / "ladders" / ".._ladder.csv")
    rel = import_release(copy)
    assert ".." not in rel.ladders
    assert len(rel.ladders) == 109
    assert any(i.file.endswith(".._ladder.csv") and "unsafe" in i.reason for i in rel.report.issues)


def test_duplicate_trial_rows_are_reported_and_kept_once(copy, release_dir):
    clean = import_release(release_dir)
    text = (copy / TRIALS).read_text(encoding="utf-8").split("\n")
    text.insert(5, text[1])  # the first data row again, as physical line 6
    (copy / TRIALS).write_text("\n".join(text), encoding="utf-8")
    rel = import_release(copy)
    assert len(rel.trials) == len(clean.trials)
    keys = [(t.image_id, t.arm, t.cand) for t in rel.trials]
    assert len(keys) == len(set(keys))
    dup = [i for i in rel.report.issues if i.file.endswith(TRIALS)]
    assert [i.line for i in dup] == [6] and "duplicate" in dup[0].reason


def test_duplicate_raw_records_are_reported_and_kept_once(copy, release_dir):
    clean = import_release(release_dir)
    lines = _lines(copy / RAW)
    lines.insert(3, lines[0])  # line 4 repeats line 1's (trial_id, model)
    (copy / RAW).write_bytes(b"\n".join(lines))
    rel = import_release(copy)
    assert len(rel.raw) == len(clean.raw)
    dup = [i for i in rel.report.issues if i.file.endswith(RAW)]
    assert [i.line for i in dup] == [4] and "duplicate" in dup[0].reason


def test_nan_coordinates_huge_fields_and_dotdot_paths_are_row_errors(copy, release_dir):
    clean = import_release(release_dir)
    text = (copy / TRIALS).read_text(encoding="utf-8").split("\n")
    text[1] = text[1].replace("streetview\\amsterdam_church\\", "..\\..\\etc\\", 1)
    text[2] = text[2].replace("52.37737484654", "nan", 1)
    text[3] = text[3].replace("Schreierstoren", "S" * 300_000, 1) if "Schreierstoren" in text[3] else \
        text[3].replace(",main,", "," + "x" * 300_000 + ",", 1)
    (copy / TRIALS).write_text("\n".join(text), encoding="utf-8")
    rel = import_release(copy)
    assert len(rel.trials) == len(clean.trials) - 3
    assert sorted(i.line for i in rel.report.issues if i.file.endswith(TRIALS)) == [2, 3, 4]
    assert all(t.path is None or ".." not in t.path for t in rel.trials)


@pytest.mark.parametrize("content", [b"", b"site,city,lat,lon\n"], ids=["empty", "header-only"])
def test_an_empty_sites_file_is_one_line_not_buried_under_one_per_ladder(copy, content):
    """Bad-input review (s16): an empty or header-only sites.csv gave 109 "ladder for unknown site ... imported
    anyway" lines, which buried the one real problem; now the ladders are summed up in one line."""
    (copy / "sites.csv").write_bytes(content)
    rel = import_release(copy)
    assert rel.sites == {} and len(rel.ladders) == 109
    unknown = [i for i in rel.report.issues if "unknown site" in i.reason]
    assert unknown == [], len(unknown)  # before: 109
    summed = [i for i in rel.report.issues if "109 ladder(s) imported for sites sites.csv does not hold" in i.reason]
    assert len(summed) == 1, rel.report.issues[:5]
