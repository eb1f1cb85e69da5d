"""The judged route's no-repeat-column rule numbers rows by the same request the duplicate rule uses
(:func:`geoagent.geohint.release_rows.request_identity`): "none", "None" and an empty context are one request
(no context), so their rows are repeats 0, 1, 2 and all count; before, they were numbered by the raw label (each 0)
and then all but one were dropped as the same request."""

from __future__ import annotations

from geoagent.geohint.judged import import_judged
from tests.test_release_routes_one_request import _judged, _notes, make_release


def test_no_context_spelled_three_ways_is_one_request_repeated(tmp_path):
    release = make_release(tmp_path)
    _judged(release, [
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",   # 2: repeat 0
        "s1,m,forced,en,None,streetview\\s1\\111.jpg,Paris,2e,bar,0.5,0.5,3.0,area,2e,False",     # 3: repeat 1
        "s1,m,forced,en,,streetview/s1/111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",          # 4: repeat 2
    ])
    rows, report = import_judged(release)
    assert [(r.extra["line"], r.repeat) for r in rows] == [(2, 0), (3, 1), (4, 2)]
    notes = _notes(report, "answers_judged.csv")
    assert list(notes) == [3] and "2 rows" in notes[3], notes
