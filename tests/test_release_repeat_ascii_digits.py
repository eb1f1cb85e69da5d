"""A release file's ``repeat`` is read from ASCII digits only, as the integral-float rule already was: a repeat
written with other decimal digits (Arabic-Indic ``"٣"``, full-width ``"３"``, Devanagari ``"३"``) is unreadable
(read as 0 but kept its own request, :func:`geoagent.geohint.release_rows.unreadable_repeat`), like ``"٣.0"``.

Before: ``str.isdecimal()`` read ``"٣"`` as 3 while ``"٣.0"`` was unreadable.
"""
from __future__ import annotations

import pytest

from geoagent.geohint.raw_import import import_raw
from geoagent.geohint.release_rows import read_repeat, unreadable_repeat

from test_release_routes_one_request import _line, _notes, _write_raw, make_release


@pytest.mark.parametrize("v", ["\u0663", "\uff13", "\u0969", "1\u0663", "\u0663.0", " \u0663 "])
def test_non_ascii_digits_are_unreadable(v):
    assert read_repeat(v) == 0 and unreadable_repeat(v) == repr(v)


@pytest.mark.parametrize("v, want", [("3", 3), (" 3 ", 3), ("3.0", 3), ("012", 12)])
def test_ascii_digits_still_read(v, want):
    assert read_repeat(v) == want and unreadable_repeat(v) is None


def test_raw_route_keeps_non_ascii_repeat_apart(tmp_path):
    release = make_release(tmp_path)
    _write_raw(release, [
        _line(repeat=3),         # 1
        _line(repeat="\u0663"),  # 2: not line 1's request (unreadable: its own)
    ])
    rows, report = import_raw(release)
    assert [(r.extra["line"], r.repeat) for r in rows] == [(1, 3), (2, 0)]
    assert rows[1].extra.get("repeat_unreadable") == repr("\u0663")
    assert not _notes(report, "forced_chain_raw.jsonl")  # no duplicate note
