"""Walkthrough, session 33: a new user's crawl and evaluations.

#1 A stopped run's ``report_note.txt`` (the note that covers the report's CSV tables) and its figures did not say
   they were interim; only the Markdown and text tables did. Now the note starts with the report's interim line
   and the figures carry an INTERIM caption line.
#2 After a budget stop the interim line said "re-run the same command to finish", which stops again at once: it
   now says to raise the cap first (and, after an authentication stop, to fix the key).
"""

from __future__ import annotations

from geoagent.engine import STATUS_AUTH, Outcome
from geoagent.report import INTERIM_FIGURE_LINE, figure_note
from geoagent.report import geoverify as RV
from geoagent.runtime.queue import QueueCounts


def _outcome(status: str, code: int) -> Outcome:
    return Outcome("c", status, code, 12, {"requests": QueueCounts(8, 0, 4, 0)}, None)


def test_the_interim_line_says_what_finishes_the_run():
    assert "(raise [budget] cap_usd, then re-run the same command to finish)" in _outcome("budget exhausted", 4).interim_note()
    assert "fix the API key variable the run's summary names, then re-run" in _outcome(STATUS_AUTH, 5).interim_note()
    interrupted = _outcome("interrupted", 130).interim_note()
    assert "(re-run the same command to finish)" in interrupted and "cap_usd" not in interrupted


def test_the_csv_note_of_an_interim_report_says_so_and_the_final_report_drops_it(tmp_path):
    interim = _outcome("budget exhausted", 4).interim_note()
    paths = RV.write_report({}, tmp_path, interim=interim)
    note = paths["csv_note"].read_text(encoding="utf-8")
    assert note.startswith(f"Interim report: {interim}\n"), note
    assert RV.TABLE_CSV in note and "the figures the interim, replay and simulator lines" in note
    final = RV.write_report({}, tmp_path)  # the finished run's report: nothing to note beside the CSVs
    assert "csv_note" not in final and not (tmp_path / "report_note.txt").exists()


def test_an_interim_figure_caption_opens_with_the_interim_line():
    assert figure_note(None, None) is None
    assert figure_note(None, None, interim=True) == INTERIM_FIGURE_LINE
    assert figure_note("replayed", "simulated", interim=True).splitlines() == [INTERIM_FIGURE_LINE, "replayed", "simulated"]


def test_the_few_cluster_note_names_the_band_when_one_statistic_comes_from_several_site_counts():
    """walk33 #6: "Here intervals from 5 sites (F) and 6 sites (F)" did not say which decoy band's F had which."""
    from types import SimpleNamespace

    from geoagent.report.geoverify import few_cluster_text

    s = SimpleNamespace(ci={"H": (0.5, 0.9), "F[0.5-1.5 km]": (0.1, 0.3), "F[3-10 km]": (0.1, 0.4), "c[3-10 km]": (0, 1)},
                        ci_sites={"H": 17, "F[0.5-1.5 km]": 5, "F[3-10 km]": 6, "c[3-10 km]": 6}, ci_exact=set(),
                        delta_1_ci=None)
    assert few_cluster_text({"m": s}).startswith(
        " Here intervals from 5 sites (F[0.5-1.5 km]) and 6 sites (F[3-10 km], c), fewer than 10 sites")


def test_a_scored_row_names_the_photo_shown():
    """walk33 #7: a swapped-image control's scored row named only the claim's photo (``image_id``, which defines the
    truth); the photo the model saw took a join through the request's meta. ``image_shown`` says it."""
    from geoagent.geoverify.parse import parse_verdict
    from geoagent.geoverify.score import SCORED_FIELDS, scored_row

    base = {"image_id": "100000001883", "site": "torino_birch", "band": "signal", "cand": "Mole", "truth": "no"}
    rows = {arm: scored_row({**base, "arm": arm, "image_ref": ref, "trial_id": f"t|{arm}"}, "m", parse_verdict("No."))
            for arm, ref in (("main", "100000001883"), ("ctrl_mismatch", "100010002408"),
                             ("ctrl_noimage", "blank:gray"))}
    assert {a: r["image_shown"] for a, r in rows.items()} == {
        "main": "100000001883", "ctrl_mismatch": "100010002408", "ctrl_noimage": None}
    assert all(r["image_id"] == "100000001883" and tuple(r) == SCORED_FIELDS for r in rows.values())
    unnamed = scored_row({**base, "arm": "ctrl_mismatch", "trial_id": "t"}, "m", parse_verdict("No."))
    assert unnamed["image_shown"] is None  # the public release's trial table names no swapped photo


def test_a_stop_at_the_geocoders_nominatim_cap_says_its_own_fix(release_dir, tmp_path, monkeypatch):
    """Docs audit 33: a GeoHint run stopped by ``[geohint.geocoder] nominatim_max_requests`` ended 'budget exhausted'
    with "raise [budget] cap_usd and re-run", which changes nothing, and never named the Nominatim cap."""
    from geoagent.status import campaign_status, format_status
    from test_geohint_campaign import _run

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    # answers from the cache only: the first Nominatim look-up stops the run
    out, cfg = _run(release_dir, lambda raw: raw["geohint"]["geocoder"].update(nominatim_max_requests=0))
    assert out.status == "budget exhausted", out.summary()
    text = out.summary()
    assert "nominatim_max_requests" in text and "raise [budget] cap_usd" not in text, text
    assert "nominatim_max_requests" in out.interim_note() and "cap_usd" not in out.interim_note()
    shown = format_status(campaign_status(cfg))  # status says the same fix, not the USD cap's
    assert "to go on: the geocoder's Nominatim request cap" in shown and "raise [budget] cap_usd" not in shown, shown


def test_review33_reparse_keeps_image_shown_and_a_context_window_stop_names_no_output_limit_fix():
    """review33 #4: a scored row parsed again (a new parser version) lost its ctrl_mismatch ``image_shown``; #5: an
    empty answer that filled the context window was told to raise max_output_tokens."""
    from geoagent.geoverify.parse import parse_verdict
    from geoagent.geoverify.reparse import reparsed_row
    from geoagent.geoverify.score import scored_row

    trial = {"trial_id": "t", "image_id": "100000001883", "site": "s", "arm": "ctrl_mismatch", "band": "signal",
             "truth": "no", "cand": "Mole", "image_ref": "100010002408"}
    row = scored_row(trial, "m", parse_verdict('{"verdict": "no"}'))
    row.update(parser_version=5, raw='{"verdict": "no"}')
    again = reparsed_row(row, None)
    assert again is not None and again["image_shown"] == "100010002408" and again["parser_version"] > 5
    cut = scored_row(trial, "m", parse_verdict(""), finish_reason="model_context_window_exceeded")
    assert "context window" in cut["parse_reason"] and "raise max_output_tokens" not in cut["parse_reason"]
    assert "raise max_output_tokens" in scored_row(trial, "m", parse_verdict(""), finish_reason="length")["parse_reason"]


def test_the_few_cluster_note_names_the_column_when_a_band_statistic_comes_from_several_site_counts():
    from types import SimpleNamespace

    from geoagent.report.geoverify import few_cluster_text

    def col(n):
        return SimpleNamespace(ci={"F[3-10 km]": (0.1, 0.4)}, ci_sites={"F[3-10 km]": n}, ci_exact=set(), delta_1_ci=None)

    assert few_cluster_text({"a": col(5), "b": col(6)}).startswith(
        " Here intervals from 5 sites (F[3-10 km] of a) and 6 sites (F[3-10 km] of b), fewer than 10 sites")
    assert few_cluster_text({"a": col(5), "b": col(5)}).startswith(" Here intervals from 5 sites (F), fewer than 10")
