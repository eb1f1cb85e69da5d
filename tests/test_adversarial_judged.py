"""Adversarial GeoHint judged-answers files: one corrupt row never costs the import, never becomes a hit.

Each test copies the release sample into ``tmp_path``, corrupts one row of ``answers_judged_sample.csv`` and
compares the import with the clean one: that row alone is missing (reported with file and line), and the
hit count equals an independent count of the release's ``hit`` column over the remaining rows.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest

from geoagent.geohint.judged import import_judged

JUDGED = "answers_judged_sample.csv"


@pytest.fixture
def copy(release_dir, tmp_path) -> Path:
    dst = tmp_path / "release"
    shutil.copytree(release_dir, dst)
    return dst


def _rows(p: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(p.read_text(encoding="utf-8"))))


def _write(p: Path, rows: list[list[str]]) -> None:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    p.write_text(out.getvalue(), encoding="utf-8")


def _judged_issues(rep) -> list:
    return [i for i in rep.issues if i.file.endswith(JUDGED) and "not in the ladder" not in i.reason]


def test_negative_error_km_is_a_malformed_row_not_a_hit(copy, release_dir):
    clean, _ = import_judged(release_dir)
    rows = _rows(copy / JUDGED)
    h = rows[0]
    i = next(k for k, r in enumerate(rows) if k and r[h.index("resolved_level")] in ("building", "area")
             and r[h.index("hit")] == "False")
    rows[i][h.index("error_km")] = "-3.0"  # a fine-level answer: before the fix -3 km < 1 km counted as a hit
    _write(copy / JUDGED, rows)
    got, rep = import_judged(copy)
    assert len(got) == len(clean) - 1
    assert sum(r.hit for r in got) == sum(r[h.index("hit")] == "True" for r in rows[1:])
    assert [(x.line, "negative" in x.reason) for x in _judged_issues(rep)] == [(i + 1, True)]


@pytest.mark.parametrize("corruption", ["bad_utf8", "huge_field", "short_row"])
def test_one_corrupt_row_costs_that_row_only(copy, release_dir, corruption):
    clean, _ = import_judged(release_dir)
    lines = (copy / JUDGED).read_bytes().split(b"\n")
    if corruption == "bad_utf8":
        lines[5] = lines[5].replace(b",", b",\xff", 1)
    elif corruption == "huge_field":
        lines[5] = lines[5].replace(b",", b',"' + b"T" * 200_000 + b'",', 1)
    else:
        lines[5] = b",".join(lines[5].split(b",")[:2])
    (copy / JUDGED).write_bytes(b"\n".join(lines))
    got, rep = import_judged(copy)  # before the fix: UnicodeDecodeError / csv.Error / AttributeError
    assert len(got) == len(clean) - 1
    assert [x.line for x in _judged_issues(rep)] == [6]


def test_text_confidence_keeps_the_row_with_no_confidence(copy, release_dir):
    clean, _ = import_judged(release_dir)
    rows = _rows(copy / JUDGED)
    h = rows[0]
    rows[5][h.index("conf_area")], rows[5][h.index("conf_fine")] = "n/a", "high"
    _write(copy / JUDGED, rows)
    got, rep = import_judged(copy)  # before the fix: ValueError out of the import
    assert len(got) == len(clean) and _judged_issues(rep) == []
    row = next(r for r in got if r.extra["line"] == 6)
    assert row.confidence_area is None and row.confidence_building is None


def test_a_repeat_int_cannot_read_is_0_and_keeps_the_row(copy, release_dir):
    """Adversarial review s11: a ``repeat`` column value that passes ``str.isdigit`` but not ``int()`` (a
    superscript "²") dropped the row with Python's own message; it reads as 0 (as in the raw route), digits as
    their number."""
    clean, _ = import_judged(release_dir)
    rows = _rows(copy / JUDGED)
    rows[0].append("repeat")
    for k, r in enumerate(rows[1:], start=1):
        r.append({1: "\u00b2", 2: "3"}.get(k, ""))
    _write(copy / JUDGED, rows)
    got, rep = import_judged(copy)
    assert len(got) == len(clean) and not _judged_issues(rep)
    assert [g.repeat for g in got[:3]] == [0, 3, 0]
