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

import csv

from geoagent.geohint.judged import import_judged, replicate_report

from tests.test_release_routes_one_request import HEADER, _judged, _notes, make_release
from _docs import docs_text


def _readme() -> str:
    return " ".join(docs_text().split())


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


# --- 2, 3, 6: the judged report says what it read and what it withholds -------------------------------------

def _sample_report(release_dir, tmp_path):
    out = tmp_path / "out"
    replicate_report(release_dir, out, n_flips=10, n_splits=2, figures=True, n_boot=0)
    return " ".join((out / "report.md").read_text(encoding="utf-8").split())


def test_the_judged_report_names_its_file_its_schema_and_the_sample(release_dir, tmp_path):
    md = _sample_report(release_dir, tmp_path)
    head = md[:1500]
    assert "Source: answers_judged_sample.csv" in head
    assert "a sample" in head
    assert "permissive control schema" in head and "App. A.1" in head
    assert "not comparable with the paper's Tables 1-7" in head


def test_a_forced_file_gets_no_comparability_warning(tmp_path):
    release = make_release(tmp_path)
    _judged(release, ["s1,m,forced,en,high_15_30km_Q1,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True"])
    out = tmp_path / "out"
    replicate_report(release, out, n_flips=10, n_splits=2, figures=False, n_boot=0)
    md = " ".join((out / "report.md").read_text(encoding="utf-8").split())
    assert "Source: answers_judged.csv" in md and "not comparable" not in md and "a sample" not in md


def test_the_judged_report_says_which_tables_it_withholds_and_why(release_dir, tmp_path):
    md = _sample_report(release_dir, tmp_path)
    assert "Withheld:" in md
    withheld = md[md.index("Withheld:"):][:900]
    for name in ("nocontext_near", "building_vs_nocontext", "Table 3", "Tables 8-9", "Tables 10-11"):
        assert name in withheld, name
    assert "no no-context answers" in withheld and "forced_warn" in withheld and "forced_chain" in withheld
    cap = md[md.index("![hit rate by band]"):][:700]
    assert "no regime line" in cap.lower() and "plot is empty" in cap


def test_the_note_on_unladdered_answers_cites_the_release_filter(release_dir, tmp_path):
    md = _sample_report(release_dir, tmp_path)
    assert "30 context responses" in md
    note = md[md.index("30 context responses"):][:700]
    assert "two_regimes.py" in note and "tier and band" in note


# --- 4, 5: README and Table 11's note -------------------------------------------------------------------------

def test_readme_gives_the_sample_expected_values_and_the_paper_values_with_models():
    text = _readme()
    assert "n 150, 180, 202, 202, 202" in text and "68.7, 47.8, 26.7, 14.9, 7.4" in text
    for pair in ("claude-opus-5 +4.8", "gemini-flash -3.9", "qwen3-vl-235b +8.9", "qwen3-vl-8b +11.0",
                 "claude-haiku-4-5 +19.3"):
        assert pair in text, pair
    assert "cannot reproduce the paper's Tables 1-10" in text


def test_readme_says_plainly_how_table11_counts_against_the_release_script():
    text = _readme()
    assert "Same as the release's `analysis/chain_compliance.py`:" in text
    assert "Different:" in text and "on the full release" in text


def test_table11_note_reads_including(release_dir, tmp_path):
    from geoagent.geohint.raw_import import main

    assert main([str(release_dir), str(tmp_path / "raw")]) == 0
    md = " ".join((tmp_path / "raw" / "report.md").read_text(encoding="utf-8").split())
    assert "including 1 context answer" in md and "also 1 context answer" not in md


def test_sample_table1_values(release_dir, tmp_path):
    out = tmp_path / "t1"
    replicate_report(release_dir, out, n_flips=10, n_splits=2, figures=False, n_boot=0)
    rows = list(csv.DictReader((out / "table1.csv").open(encoding="utf-8")))
    got = [(r["Model"], int(r["n"]), round(100 * float(r["Hit rate (fraction)"]), 1)) for r in rows]
    assert got == [("gemini-flash", 150, 68.7), ("claude-opus-5", 180, 47.8), ("qwen3-vl-8b", 202, 26.7),
                   ("qwen3-vl-235b", 202, 14.9), ("claude-haiku-4-5", 202, 7.4)]
