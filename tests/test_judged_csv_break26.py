"""The judged GeoHint CSV reader refuses rows it used to read wrong (break26 #6, #8).

#6: one stray quote mark in ``answers_judged.csv`` made the csv module read lines 3 and 4 as one record with line
4's values, no note: line 3's request (error 1.203 km, no hit) carried line 4's error and hit, and line 4 was lost.
#8: a blank ``model`` or ``schema`` became model or condition ``''``, and an ``error_km`` of ``inf``/``nan`` read
as missing (a miss) while ``abc`` was a malformed row. Over a copy of the release's judged sample (skipped without).
"""

from __future__ import annotations

import csv
import io
import shutil

import pytest

from geoagent.geohint.judged import import_judged


def _copy(release_dir, tmp_path, edit):
    root = tmp_path / "rel"
    root.mkdir(parents=True)
    for name in ("sites.csv", "ladders"):
        src = release_dir / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    lines = (release_dir / "answers_judged_sample.csv").read_text(encoding="utf-8").splitlines(True)[:40]
    header = lines[0].rstrip("\r\n").split(",")
    edit(lines, header)
    (root / "answers_judged.csv").write_text("".join(lines), encoding="utf-8")
    return root, len(lines) - 1


def _set(lines, header, line_no, column, value):
    """Set one cell of one line, through the csv module (fields may be quoted and hold commas)."""
    (parts,) = list(csv.reader([lines[line_no - 1]]))
    parts[header.index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(parts)
    lines[line_no - 1] = out.getvalue()


def test_a_stray_quote_leaves_both_lines_out_with_a_note(release_dir, tmp_path):
    clean, n = _copy(release_dir, tmp_path / "a", lambda lines, h: None)
    base, _ = import_judged(clean)

    def stray(lines, header):
        parts = lines[2].split(",")
        parts[header.index("city")] = '"' + parts[header.index("city")]
        lines[2] = ",".join(parts)

    root, _ = _copy(release_dir, tmp_path / "b", stray)
    res, rep = import_judged(root)
    assert len(res) == len(base) - 2  # lines 3 and 4 out, none read with the other's values
    assert {r.extra["line"] for r in res}.isdisjoint({3, 4})
    notes = [str(i) for i in rep.issues if i.line == 3]
    assert any("a quoted field runs from line 3 to line 4 (a stray quote mark?)" in t for t in notes), notes


@pytest.mark.parametrize("column,value,says", [
    ("model", "", "column 'model' is empty"),
    ("schema", " ", "column 'schema' is empty"),
    ("error_km", "inf", "column 'error_km': not a finite number: 'inf'"),
    # session 36: "nan" is a missing number; this row resolved at the area level, and has no distance
    ("error_km", "nan", "column 'error_km' is missing ('nan') for an answer resolved at 'area'"),
    ("error_km", "", "column 'error_km' is missing ('') for an answer resolved at 'area'"),
    ("error_km", "far", "column 'error_km': not a number: 'far'"),
])
def test_a_blank_name_or_a_non_finite_error_is_a_malformed_row(release_dir, tmp_path, column, value, says):
    clean, _ = _copy(release_dir, tmp_path / "a", lambda lines, h: None)
    base, _ = import_judged(clean)
    root, _ = _copy(release_dir, tmp_path / "b", lambda lines, h: _set(lines, h, 5, column, value))
    res, rep = import_judged(root)
    assert len(res) == len(base) - 1 and 5 not in {r.extra["line"] for r in res}
    assert any(i.line == 5 and says in str(i) for i in rep.issues), [str(i) for i in rep.issues]


def test_a_blank_line_costs_no_row(release_dir, tmp_path):
    """rev26 #6: the first version of the stray-quote check took the row after a blank line (which the csv reader
    skips) for a record over two lines, and left it out with a false note."""
    clean, _ = _copy(release_dir, tmp_path / "a", lambda lines, h: None)
    base, base_rep = import_judged(clean)
    root, _ = _copy(release_dir, tmp_path / "b", lambda lines, h: lines.insert(5, "\n"))
    res, rep = import_judged(root)
    assert len(res) == len(base)
    assert not any("quoted field" in str(i) for i in rep.issues), [str(i) for i in rep.issues]
