"""The raw-import route (:mod:`geoagent.geohint.raw_import`) counts each request once and checks that a line's
image path names its own site.

Before (session 12): two lines for the same request (same image, model, schema, context, repeat, language and
light: the release file's request fields, ``../shared/reference/geocontext/SOURCE.md``) were both counted, so
Table 11 and the parse and cut-off tables double-counted an answer logged twice; and a line whose ``path``
(``streetview\\<site>\\<id>.jpg``) names another site than its ``location`` was imported under ``location``
without a word. Now, as for every other bad line: the second line of a request is named ``file:line`` with the
line it repeats and skipped (the first is counted), and a line whose path and location disagree is named and
skipped (which site it belongs to cannot be told).
"""

from __future__ import annotations

import csv
import json

import pytest

from geoagent.geohint.raw_import import import_raw, main

OK = {"city": "Paris", "area": "1er", "building": "shop",
      "evidence": {"infrastructure": "bollards", "vegetation": "not visible", "architecture": "stone",
                   "language": "Latin", "terrain_climate_vehicles": "flat"}}


def _line(raw=None, **more) -> str:
    d = {"path": "streetview\\s1\\111.jpg", "location": "s1", "condition": "day", "hour": 12, "model": "m",
         "lang": "en", "repeat": 0, "context": "high_15_30km_Q1", "schema": "forced_chain", "ts": 1.0,
         "raw": json.dumps(OK) if raw is None else raw, "usage": {"stop_reason": "end_turn"}, "error": None}
    d.update(more)
    return json.dumps(d)


@pytest.fixture
def release(tmp_path):
    root = tmp_path / "rel"
    (root / "ladders").mkdir(parents=True)
    (root / "sites.csv").write_text("site,city,lat,lon\ns1,Paris,48.88,2.34\ns2,Paris,48.85,2.36\n", encoding="utf-8")
    for site in ("s1", "s2"):
        (root / "ladders" / f"{site}_ladder_deepseek-en.csv").write_text(
            "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity,pageviews,n_in_cell,n_taken\n"
            "1.5-3.0km,high,,Louvre Pyramid,,Q1,2.0,5,,22,4\n", encoding="utf-8")
    return root


def _write(release, lines):
    (release / "forced_chain_raw.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _notes(report):
    return {i.line: i.reason for i in report.issues if i.file.endswith("forced_chain_raw.jsonl")}


def test_a_request_logged_twice_is_counted_once_and_both_lines_are_named(release, tmp_path, capsys):
    other = json.dumps({**OK, "area": "2e"})
    _write(release, [
        _line(),                                   # 1
        _line(repeat=1),                           # 2: another repeat: another request
        _line(context="none"),                     # 3: no hint: another request
        _line(ts=2.0, raw=other),                  # 4: line 1's request again (a retry logged too), another answer
        _line(model="m2"),                         # 5: another model
        _line(),                                   # 6: line 1 again, word for word
        _line(lang="zh"),                          # 7: another prompt language
    ])
    rows, report = import_raw(release)
    assert [r.extra["line"] for r in rows] == [1, 2, 3, 5, 7]  # the first line of each request
    notes = _notes(report)
    assert sorted(notes) == [4, 6]
    for ln in (4, 6):
        assert "forced_chain_raw.jsonl:1" in notes[ln] and "same request" in notes[ln] and "counted once" in notes[ln]
    assert "answer differs" in notes[4] and "answer differs" not in notes[6]
    out = tmp_path / "out"
    assert main([str(release), str(out)]) == 0
    with (out / "table11.csv").open(encoding="utf-8") as fh:
        t11 = {r["Model"]: r for r in csv.DictReader(fh)}
    assert t11["m"]["n"] == "4" and t11["m2"]["n"] == "1"  # was 6: lines 4 and 6 counted again
    with (out / "parse.csv").open(encoding="utf-8") as fh:
        assert [r["n"] for r in csv.DictReader(fh) if r["Model"] == "All"] == ["5"]
    printed = capsys.readouterr().out
    assert "forced_chain_raw.jsonl:4:" in printed and "forced_chain_raw.jsonl:6:" in printed


def test_a_bad_first_line_does_not_hide_its_retry(release):
    # a failed call logged, then its retry: the failure is a bad line, the retry the request's one answer
    _write(release, [json.dumps({**json.loads(_line()), "raw": None, "error": "HTTP 529"}), _line(ts=2.0)])
    rows, report = import_raw(release)
    assert [r.extra["line"] for r in rows] == [2]
    assert "API call failed" in _notes(report)[1] and 2 not in _notes(report)


def test_a_path_naming_another_site_is_named_and_skipped(release, tmp_path):
    _write(release, [
        _line(),                                                     # 1
        _line(path="streetview\\s2\\111.jpg", location="s1"),        # 2: image of s2 filed under s1
        _line(path="streetview/s2/222.jpg", location="s2"),          # 3: agrees (forward slashes)
        _line(path="222.jpg", location="s2", repeat=1),              # 4: no site in the path: nothing to check
    ])
    rows, report = import_raw(release)
    assert [(r.extra["line"], r.site) for r in rows] == [(1, "s1"), (3, "s2"), (4, "s2")]
    notes = _notes(report)
    assert sorted(notes) == [2]
    assert "'s2'" in notes[2] and "'s1'" in notes[2] and "path" in notes[2] and "location" in notes[2]
    out = tmp_path / "out"
    assert main([str(release), str(out)]) == 0
    assert "forced_chain_raw.jsonl:2:" in (out / "report.md").read_text(encoding="utf-8")


def test_the_real_sample_has_no_duplicate_and_no_mismatch(release_dir):
    name = "forced_chain_raw_sample.jsonl"
    if not (release_dir / name).is_file():
        pytest.skip(f"{name} not in {release_dir}")
    rows, report = import_raw(release_dir, filename=name)
    assert len(rows) == 7
    assert [i.line for i in report.issues if i.file.endswith(name)] == [3]  # only the ladder note (Q746647)
