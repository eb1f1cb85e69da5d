"""A replicator's walkthrough of seed 000 from the release sample with the two re-score routes (session 12).

Before:

1. the judged route keyed a request on (site, path, model, schema, context, lang) with no repeat column in the
   released file, so a request asked several times (the release's analysis scripts count every row:
   ``analysis/two_regimes.py`` ``load`` and ``model_tables.py`` ``groupby(...).size``) kept its first row only;
2. its report.md never said which file it read, that it is a sample, or that condition v1 is the paper's
   permissive control schema, not the forced schema its tables use (App. A.1);
3. tables were left out silently (``nocontext_near``, ``building_vs_nocontext``, Tables 8-10) and the empty
   regime figure had no caption saying why;
4. README gave no expected values on the sample and quoted the paper's nocontext_near values without models;
5. Table 11's note read "also 1 context answer";
6. the note on answers whose QID is in no ladder did not say the release's analysis drops them too.
"""

from __future__ import annotations

from geoagent.geohint.judged import import_judged

from tests.test_release_routes_one_request import HEADER, _judged, _notes, make_release

# --- 1: rows sharing a request are its repeats when the file has no repeat column -------------------------

def test_rows_sharing_a_request_without_a_repeat_column_are_successive_repeats(tmp_path):
    release = make_release(tmp_path)
    _judged(release, [
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",      # 2: repeat 0
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,2e,bar,0.5,0.5,3.0,area,2e,False",        # 3: repeat 1
        "s1,m2,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",     # 4: other model
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True",      # 5: repeat 2
    ])
    rows, report = import_judged(release)
    assert [(r.extra["line"], r.repeat) for r in rows] == [(2, 0), (3, 1), (4, 0), (5, 2)]
    notes = _notes(report, "answers_judged.csv")
    assert len(notes) == 1, notes
    (note,) = notes.values()
    assert "2 rows" in note and "repeat" in note and "no 'repeat' column" in note


def test_with_a_repeat_column_a_row_logged_twice_still_counts_once(tmp_path):
    release = make_release(tmp_path)
    _judged(release, [
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True,0",    # 2
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,2e,bar,0.5,0.5,3.0,area,2e,False,0",      # 3: line 2 again
        "s1,m,forced,en,none,streetview\\s1\\111.jpg,Paris,2e,bar,0.5,0.5,3.0,area,2e,False,1",      # 4: repeat 1
    ], header=HEADER.strip() + ",repeat\n")
    rows, report = import_judged(release)
    assert [(r.extra["line"], r.repeat) for r in rows] == [(2, 0), (4, 1)]
    notes = _notes(report, "answers_judged.csv")
    assert sorted(notes) == [3] and "counted once, at line 2" in notes[3]
