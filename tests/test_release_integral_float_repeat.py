"""A release file's ``repeat`` written as an integral float (``1.0``, ``"1.0"``, as a pandas round trip writes a
column that held a missing value) is that integer, on both import routes; a non-integral or non-finite one stays
unreadable (read as 0 but its own request, :func:`geoagent.geohint.release_rows.unreadable_repeat`).

Before: ``1.0`` and ``"1.0"`` were "unreadable": read as repeat 0, kept apart from the line of repeat 1 they are.
"""
from __future__ import annotations

import pytest

from geoagent.geohint.judged import import_judged
from geoagent.geohint.raw_import import import_raw
from geoagent.geohint.release_rows import read_repeat, unreadable_repeat

from test_release_routes_one_request import HEADER, _judged, _line, _notes, _write_raw, make_release


@pytest.mark.parametrize("v, want", [(1.0, 1), ("1.0", 1), (" 2.00 ", 2), (0.0, 0), ("3.", 3), (1, 1), ("4", 4)])
def test_integral_float_is_its_integer(v, want):
    assert read_repeat(v) == want and unreadable_repeat(v) is None


@pytest.mark.parametrize("v", [1.5, "1.5", float("nan"), float("inf"), "nan", "inf", -1.0, "-1.0", "1e0", "1_0",
                               1e30, True])
def test_other_floats_stay_unreadable(v):
    assert read_repeat(v) == 0 and unreadable_repeat(v) is not None


def test_raw_route_reads_integral_float_repeats(tmp_path):
    release = make_release(tmp_path)
    _write_raw(release, [
        _line(repeat=1),      # 1
        _line(repeat=1.0),    # 2: line 1's request
        _line(repeat="1.0"),  # 3: line 1's request
        _line(repeat=1.5),    # 4: unreadable, its own request
    ])
    rows, report = import_raw(release)
    assert [(r.extra["line"], r.repeat) for r in rows] == [(1, 1), (4, 0)]
    assert sorted(_notes(report, "forced_chain_raw.jsonl")) == [2, 3]


def test_judged_route_reads_integral_float_repeats(tmp_path):
    release = make_release(tmp_path)
    row = "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,"
    _judged(release, [row + "2", row + "2.0", row + "2.5"], header=HEADER.strip() + ",repeat\n")
    rows, report = import_judged(release)
    assert [(r.extra["line"], r.repeat) for r in rows] == [(2, 2), (4, 0)]
    assert sorted(_notes(report, "answers_judged.csv")) == [3]
