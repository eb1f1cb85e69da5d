"""Hostile lines in a release's raw forced_chain file (:mod:`geoagent.geohint.raw_import`): each is one bad line,
named ``file:line`` and skipped, or read as the module doc says; none stops the route or loses the other lines.

Before (session 11, adversarial review):

1. A text field holding a lone UTF-16 surrogate (JSON ``"\\ud800"``, valid JSON that Python decodes to a ``str``
   no UTF-8 file can hold) was imported; writing ``table11.csv`` then raised UnicodeEncodeError, so the whole
   route failed with ``error: 'utf-8' codec can't encode character '\\ud800' ...`` (exit 2), naming neither file
   nor line, after some of its output files had been written.
2. A ``repeat`` of digits ``int()`` refuses (a superscript ``"²"``, which ``str.isdigit`` accepts, or more than
   4300 digits) dropped the whole answer with the interpreter's message, where the module says such a value
   reads as 0.
"""

from __future__ import annotations

import csv
import json

import pytest

from geoagent.geohint.raw_import import import_raw, main
from _one_site_release import one_site_release

OK = json.dumps({"city": "Paris", "area": "1er", "building": "shop",
                 "evidence": {"infrastructure": "bollards", "vegetation": "trees", "architecture": "stone",
                              "language": "Latin", "terrain_climate_vehicles": "flat"}})


def _line(**more) -> str:
    d = {"path": "streetview\\s1\\111.jpg", "location": "s1", "condition": "day", "hour": 12, "model": "m",
         "lang": "en", "repeat": 0, "context": "high_15_30km_Q1", "schema": "forced_chain", "ts": 1.0, "raw": OK,
         "usage": {"stop_reason": "end_turn"}, "error": None}
    d.update(more)
    return json.dumps(d)  # ensure_ascii: a lone surrogate is written as the escape "\ud800", valid JSON


@pytest.fixture
def release(tmp_path):
    root = one_site_release(tmp_path)
    return root


@pytest.mark.parametrize("field", ["model", "schema", "location", "path", "context"])
def test_a_lone_surrogate_is_one_bad_line_not_a_failed_route(release, tmp_path, capsys, field):
    """model and schema failed the route (1. above); location, path and context were already skipped (by the id
    and label checks, kept here as a guard); each such line now names its field."""
    bad = {"model": "m\ud800", "schema": "forced_chain\udc00", "location": "s1\ud800",
           "path": "streetview\\s1\\111\ud800.jpg", "context": "high_15_30km_Q1\ud800"}[field]
    (release / "forced_chain_raw.jsonl").write_text(_line() + "\n" + _line(**{field: bad}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main([str(release), str(out)]) == 0, capsys.readouterr().err
    with (out / "table11.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["Model"], r["n"]) for r in rows] == [("m", "1")]  # line 1 counted, line 2 skipped
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "forced_chain_raw.jsonl:2:" in md and f"field '{field}' is not UTF-8 text" in md, md


@pytest.mark.parametrize("repeat", ["\u00b2", "9" * 5000, "\u0663"])
def test_a_repeat_int_cannot_read_is_0_and_the_answer_is_kept(release, repeat):
    (release / "forced_chain_raw.jsonl").write_text(_line(repeat=repeat) + "\n", encoding="utf-8")
    rows, report = import_raw(release)
    assert len(rows) == 1 and rows[0].parse_ok and not report.issues
    # session 12: repeats are read from ASCII digits only (the Arabic-Indic 3 was read as 3 by int()): 0, kept
    assert rows[0].repeat == 0


def test_a_model_name_with_a_line_break_stays_in_its_markdown_row(release, tmp_path):
    """3. (adversarial review) The raw file's ``model`` is untrusted text: a line break in it ended the Markdown
    table row of report.md mid-cell (a pipe was escaped, a newline was not), so the rest of the name became a
    line of its own (here a heading). It is shown on one line; the CSV keeps the name as given."""
    name = "m\n# injected\r\nheading"
    (release / "forced_chain_raw.jsonl").write_text(_line(model=name) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main([str(release), str(out)]) == 0
    md = (out / "report.md").read_text(encoding="utf-8").splitlines()
    assert not any(ln.startswith("# injected") or ln == "heading |" or ln.startswith("heading") for ln in md), md
    rows = [ln for ln in md if ln.startswith("| m")]
    # Table 11 and 'parse' (nothing was cut off: the cut-off table shows its total row alone, session 13)
    assert len(rows) == 2 and all(ln.endswith("|") and "# injected" in ln for ln in rows), rows
    with (out / "table11.csv").open(encoding="utf-8", newline="") as fh:
        assert [r["Model"] for r in csv.DictReader(fh)] == [name]


def test_a_line_of_another_schema_is_noted_as_outside_table11(release, tmp_path):
    """4. (adversarial review) A line whose ``schema`` is not forced_chain (``forced``, or ``FORCED_CHAIN`` in
    another case) was imported and counted in the tables 'parse' and 'cutoff' but silently left out of Table 11;
    a raw file of another condition (``--file`` naming the wrong file) gave an empty Table 11 and exit 0 with no
    word. Each such schema is now noted once (file:line of its first line), and its answers still counted where
    they were."""
    # line 4 is another repeat: the same request twice would be counted once (tests/test_raw_import_request_identity.py)
    lines = [_line(), _line(schema="forced"), _line(schema="FORCED_CHAIN"), _line(schema="forced", repeat=1)]
    (release / "forced_chain_raw.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows, report = import_raw(release)
    assert len(rows) == 4
    notes = [(i.line, i.reason) for i in report.issues if i.file.endswith(".jsonl")]
    assert [ln for ln, _ in notes] == [2, 3], notes
    assert "'forced'" in notes[0][1] and "not in Table 11" in notes[0][1] and "'FORCED_CHAIN'" in notes[1][1]
