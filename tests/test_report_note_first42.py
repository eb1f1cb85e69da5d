"""A live rewrite writes ``report_note.txt`` (its interim line) before any CSV (live42 #2).

Before: both report writers wrote the note last, so a kill during the first live rewrite of a campaign left CSV
tables of partial sums in ``report/`` with no ``report.md`` and no ``report_note.txt``: nothing said they were
interim. A kill is stood in for by a file the writer cannot write (a folder in its place): the writer stops there,
as a killed one would, and what it left is read. The final report (no interim line) still writes its note last, so
a final rewrite cut short leaves the interim note of the tables it did not replace.
"""

from __future__ import annotations

import pytest
from _geohint_synth import synth_results

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report import CSV_NOTE_FILE
from geoagent.report import geohint as RH
from geoagent.report import geoverify as RV
from geoagent.report.live import live_interim_note


def _geoverify_scores():
    from geoagent.data.model import ARM_MAIN, BAND_SIGNAL, DECOY_BAND_LABELS
    from geoagent.geoverify.aggregate import GeoVerifyAggregator

    agg = GeoVerifyAggregator()
    agg.update([dict(trial_id=f"m-{s}-{band}", model="m", site=f"s{s}", arm=ARM_MAIN, band=band,
                     truth="yes" if band == BAND_SIGNAL else "no", verdict="yes" if s % 2 else "no", conf=3)
                for s in range(4) for band in (BAND_SIGNAL, *DECOY_BAND_LABELS)])
    return agg.scores()


def test_geoverify_interim_note_comes_before_the_csv_files(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / RV.MISSING_CSV).mkdir()  # the first file written: the writer stops there
    interim = live_interim_note()
    with pytest.raises(OSError):
        RV.write_report(_geoverify_scores(), out, plot=False, missing=[], interim=interim)
    note = (out / CSV_NOTE_FILE).read_text(encoding="utf-8")
    assert note.startswith(f"Interim report: {interim}")
    assert RV.TABLE_CSV in note and RV.MISSING_CSV in note  # the files it covers, named before they are written


def test_geohint_interim_note_comes_before_the_csv_files(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "missing.csv").mkdir()  # the first CSV written
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=7, n_sites=4))
    interim = live_interim_note()
    with pytest.raises(OSError):
        RH.write_report(agg, out, n_flips=50, n_splits=2, n_boot=0, figures=False, missing=[], interim=interim)
    note = (out / CSV_NOTE_FILE).read_text(encoding="utf-8")
    assert note.startswith(f"Interim report: {interim}") and "missing.csv" in note
    assert not list(out.glob("table*.csv"))  # stopped before the tables: the note was there first all the same


def test_a_final_report_cut_short_keeps_the_interim_note(tmp_path):
    """The final report's note (none here: no replay, no simulator) is written last, as before: cut short before
    it, the interim note of the live rewrite still stands over the tables it did not replace."""
    out = tmp_path / "report"
    scores = _geoverify_scores()
    RV.write_report(scores, out, plot=False, interim=live_interim_note())
    assert (out / CSV_NOTE_FILE).is_file()
    (out / RV.TABLE_TXT).unlink()
    (out / RV.TABLE_TXT).mkdir()  # written after the CSV, before the note
    with pytest.raises(OSError):
        RV.write_report(scores, out, plot=False)
    assert (out / CSV_NOTE_FILE).read_text(encoding="utf-8").startswith("Interim report: live report written at")
    (out / RV.TABLE_TXT).rmdir()
    RV.write_report(scores, out, plot=False)  # the final report, whole: no interim note left
    assert not (out / CSV_NOTE_FILE).exists()
