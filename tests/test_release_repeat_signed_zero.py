"""A ``repeat`` of minus zero is a signed form on both import routes: unreadable, its own request.

The rule (:mod:`geoagent.geohint.release_rows`): an integral float is that integer, but signed forms stay
unreadable. The judged route reads CSV text, where ``"-0.0"`` is unreadable; the raw route reads JSON, where
``-0.0`` arrives as a float and was read as repeat 0, so the same value written in the raw file was taken for a
second copy of the repeat-0 line and dropped.
"""
from __future__ import annotations

import json

from geoagent.geohint.raw_import import import_raw
from geoagent.geohint.release_rows import read_repeat, unreadable_repeat

from test_release_routes_one_request import _line, _notes, _write_raw, make_release


def test_minus_zero_float_is_unreadable_as_its_text():
    assert unreadable_repeat("-0.0") is not None
    assert read_repeat(-0.0) == 0 and unreadable_repeat(-0.0) is not None


def test_raw_route_keeps_a_minus_zero_repeat_apart_from_repeat_0(tmp_path):
    release = make_release(tmp_path)
    minus_zero = _line(repeat=0).replace('"repeat": 0', '"repeat": -0.0')
    assert json.loads(minus_zero)["repeat"] == 0.0
    _write_raw(release, [_line(repeat=0), minus_zero])
    rows, report = import_raw(release)
    assert [r.extra["line"] for r in rows] == [1, 2]
    assert rows[1].extra.get("repeat_unreadable") == "-0.0"
    assert not _notes(report, "forced_chain_raw.jsonl")
