"""The two release re-score routes share one rule for what one request is and which of its lines counts
(:mod:`geoagent.geohint.release_rows`).

Before (session 12 follow-ups):

* raw route (:mod:`geoagent.geohint.raw_import`): an unreadable ``repeat`` (read as 0) made a line the "same
  request" as the line of repeat 0 and dropped it; a request logged twice kept its first line even when that
  one was cut off or did not parse and a later line was the complete answer;
* judged route (:mod:`geoagent.geohint.judged`): no duplicate-request rule and no path/site check at all (a row
  logged twice counted twice; a row whose image path names another site was imported under ``site``).

Expected values are counted by hand from the lines written here.
"""

from __future__ import annotations

import json

import pytest

from geoagent.geohint.judged import import_judged
from geoagent.geohint.judged import main as judged_main
from geoagent.geohint.raw_import import import_raw

EVIDENCE = {"infrastructure": "bollards", "vegetation": "not visible", "architecture": "stone",
            "language": "Latin", "terrain_climate_vehicles": "flat"}
OK = {"city": "Paris", "area": "1er", "building": "shop", "evidence": EVIDENCE}


def _line(raw=None, *, stop="end_turn", **more) -> str:
    d = {"path": "streetview\\s1\\111.jpg", "location": "s1", "condition": "day", "hour": 12, "model": "m",
         "lang": "en", "repeat": 0, "context": "high_15_30km_Q1", "schema": "forced_chain", "ts": 1.0,
         "raw": json.dumps(OK) if raw is None else raw, "usage": {"stop_reason": stop}, "error": None}
    d.update(more)
    return json.dumps(d)


@pytest.fixture
def release(tmp_path):
    return make_release(tmp_path)


def make_release(tmp_path):
    """A release folder: sites s1 and s2, each with a ladder holding Q1 (no answers file yet)."""
    root = tmp_path / "rel"
    (root / "ladders").mkdir(parents=True)
    (root / "sites.csv").write_text("site,city,lat,lon\ns1,Paris,48.88,2.34\ns2,Paris,48.85,2.36\n", encoding="utf-8")
    for site in ("s1", "s2"):
        (root / "ladders" / f"{site}_ladder_deepseek-en.csv").write_text(
            "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity,pageviews,n_in_cell,n_taken\n"
            "1.5-3.0km,high,,Louvre Pyramid,,Q1,2.0,5,,22,4\n", encoding="utf-8")
    return root


def _write_raw(release, lines):
    (release / "forced_chain_raw.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _notes(report, name):
    return {i.line: i.reason for i in report.issues if i.file.endswith(name)}


# --- 1a: an unreadable repeat never collides with a real one ------------------------------------------------

def test_an_unreadable_repeat_is_not_the_same_request_as_repeat_0(release):
    _write_raw(release, [
        _line(),                 # 1: repeat 0
        _line(repeat="²"),       # 2: unreadable (read as 0): another request than line 1, was dropped as line 1's
        _line(repeat=-1),        # 3: unreadable too, and another value than line 2's
        _line(repeat="²"),       # 4: line 2 again, word for word: the same request
        _line(repeat="0"),       # 5: a readable 0: line 1's request
    ])
    rows, report = import_raw(release)
    assert [r.extra["line"] for r in rows] == [1, 2, 3]
    assert [r.repeat for r in rows] == [0, 0, 0]  # still read as 0 (the existing rule), only told apart
    notes = _notes(report, "forced_chain_raw.jsonl")
    assert sorted(notes) == [4, 5]
    assert "forced_chain_raw.jsonl:2" in notes[4] and "forced_chain_raw.jsonl:1" in notes[5]


# --- 1b: of a request logged twice, the complete answer counts ---------------------------------------------

def test_a_complete_later_line_replaces_a_cut_off_or_unparsed_first_line(release):
    cut = json.dumps(OK)[:40]
    _write_raw(release, [
        _line(cut, stop="max_tokens"),                       # 1: cut off at the token limit
        _line(ts=2.0),                                       # 2: its retry, complete: counts instead of line 1
        _line("I cannot tell.", repeat=1),                   # 3: finished but nothing parsed
        _line(repeat=1, ts=3.0),                             # 4: its retry, complete: counts instead of line 3
        _line(repeat=2),                                     # 5: complete
        _line(cut, stop="max_tokens", repeat=2, ts=4.0),     # 6: a cut-off retry of a complete line: line 5 stays
    ])
    rows, report = import_raw(release)
    assert [r.extra["line"] for r in rows] == [2, 4, 5]
    assert all(r.parse_ok for r in rows)
    notes = _notes(report, "forced_chain_raw.jsonl")
    assert sorted(notes) == [1, 3, 6]
    assert "forced_chain_raw.jsonl:2" in notes[1] and "cut off" in notes[1] and "complete" in notes[1]
    assert "forced_chain_raw.jsonl:4" in notes[3] and "did not parse" in notes[3]
    assert "forced_chain_raw.jsonl:5" in notes[6] and "counted once, at line 5" in notes[6]


def test_an_api_error_logged_with_text_gives_way_to_a_clean_retry(release):
    _write_raw(release, [_line(error="HTTP 529 overloaded"), _line(ts=2.0)])
    rows, report = import_raw(release)
    assert [r.extra["line"] for r in rows] == [2]
    assert "API error" in _notes(report, "forced_chain_raw.jsonl")[1]


# --- 2: the judged route applies the same rules -------------------------------------------------------------

HEADER = "site,model,schema,lang,context,path,city,area,place,conf_area,conf_fine,error_km,resolved_level,resolved_label,hit\n"


def _judged(release, rows: list[str], header: str = HEADER):
    (release / "answers_judged.csv").write_text(header + "".join(r + "\n" for r in rows), encoding="utf-8")


def test_the_judged_route_counts_a_request_once_and_prefers_the_parsed_row(release):
    _judged(release, [
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,0",      # 2
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,2e,bar,0.5,0.5,3.0,area,2e,False,0",        # 3: line 2 again
        "s1,m,forced,en,high_15_30km_Q1,streetview\\s1\\111.jpg,,,,,,,,,False,0",                     # 4: unparsed
        "s1,m,forced,en,high_15_30km_Q1,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,0",  # 5
        "s1,m2,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,0",     # 6: other model
    ], header=HEADER.strip() + ",repeat\n")  # a repeat column: the duplicate rule applies (no column: repeats)
    rows, report = import_judged(release)
    assert [r.extra["line"] for r in rows] == [2, 5, 6]
    notes = _notes(report, "answers_judged.csv")
    assert sorted(notes) == [3, 4]
    assert "answers_judged.csv:2" in notes[3] and "counted once, at line 2" in notes[3] and "answer differs" in notes[3]
    assert "answers_judged.csv:5" in notes[4] and "did not parse" in notes[4]


def test_the_judged_route_skips_a_path_naming_another_site(release, tmp_path):
    _judged(release, [
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",      # 2
        "s1,m,forced,en,none,streetview\\s2\\222.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",      # 3: s2's image
        "s2,m,forced,en,none,222.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",                     # 4: no folder
    ])
    rows, report = import_judged(release)
    assert [(r.extra["line"], r.site) for r in rows] == [(2, "s1"), (4, "s2")]
    notes = _notes(report, "answers_judged.csv")
    assert sorted(notes) == [3] and "'s2'" in notes[3] and "'s1'" in notes[3] and "path" in notes[3]
    assert judged_main([str(release), str(tmp_path / "out"), "--flips", "10", "--splits", "2", "--n-boot", "0"]) == 0


def test_the_judged_route_tells_an_unreadable_repeat_apart(release):
    _judged(release, [
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,0",     # 2
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,x",     # 3: unreadable
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,1",     # 4
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,1",     # 5: line 4 again
    ], header=HEADER.strip() + ",repeat\n")
    rows, report = import_judged(release)
    assert [r.extra["line"] for r in rows] == [2, 3, 4]
    assert sorted(_notes(report, "answers_judged.csv")) == [5]
