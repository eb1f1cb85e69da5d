"""A trial table row whose arm or band the scorer cannot place is a malformed row naming the file, line and column,
and a truth label its arm and band contradict refuses the table at planning (break26 #5).

Before: four edited rows of the release's verify_trials (a blank band, a decoy labelled ``signal``, ``0.15-0.30km``
for ``0.15-0.3km``, arm ``Main``) imported with "0 malformed": the trials were asked and paid for, then fell out of
every rate (main arm n 165 of 170 with 2 parse failures), and the decoy labelled ``signal`` counted toward H.
Seed 000 Sec. 5.2 (Eq. 1: truth yes iff d < tau, the signal band) and Sec. 5.4 (control arms: truth no).
"""

from __future__ import annotations

import csv

import pytest

from geoagent.data.importer import import_release
from geoagent.data.model import DECOY_BAND_LABELS

HEADER = ["image_id", "site", "path", "img_lat", "img_lon", "cand", "cand_lat", "cand_lon", "fam", "d_km", "band",
          "truth", "arm", "cont"]


def _release(tmp_path, rows):
    root = tmp_path / "rel"
    root.mkdir()
    (root / "sites.csv").write_text("site,city,lat,lon\ns1,Paris,48.88,2.34\n", encoding="utf-8")
    with open(root / "verify_trials.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for i, (band, truth, arm) in enumerate(rows):
            w.writerow([f"{100 + i}", "s1", f"s1/{100 + i}.jpg", "48.88", "2.34", f"Place {i}", "48.881", "2.341", "3",
                        "0.1" if band == "signal" else "0.5", band, truth, arm, "EU"])
    return root


GOOD = [("signal", "yes", "main"), (DECOY_BAND_LABELS[1], "no", "main"), ("signal", "no", "ctrl_mismatch"),
        ("", "no", "ctrl_noimage")]
# an empty band on the main arm stays allowed (an optional column; tests/test_review_stored_rows.py), and the
# planner's truth check leaves it to tau_m's (check_tolerance)


def test_good_rows_import(tmp_path):
    rel = import_release(_release(tmp_path, GOOD))
    assert len(rel.trials) == 4 and not rel.report.issues
    (tmp_path / "b").mkdir()
    blank = import_release(_release(tmp_path / "b", [*GOOD, ("", "no", "main")]))
    assert len(blank.trials) == 5 and not blank.report.issues


@pytest.mark.parametrize("row,column,says", [
    (("0.15-0.30km", "no", "main"), "band", "got '0.15-0.30km'"),
    (("signal", "yes", "Main"), "arm", "expected one of main, ctrl_mismatch, ctrl_noimage, got 'Main'"),
])
def test_a_row_the_scorer_cannot_place_is_malformed_and_named(tmp_path, row, column, says):
    rel = import_release(_release(tmp_path, [*GOOD, row]))
    assert len(rel.trials) == 4  # the good rows only: the bad one is never asked
    (issue,) = rel.report.issues
    text = str(issue)
    assert "verify_trials.csv:6:" in text and f"column '{column}'" in text and says in text, text


@pytest.mark.parametrize("row,where", [
    (("signal", "no", "main"), "band 'signal'"),  # a decoy labelled signal counted toward H
    ((DECOY_BAND_LABELS[0], "yes", "main"), "band '0.15-0.3km'"),
    (("signal", "yes", "ctrl_mismatch"), "control arm ctrl_mismatch"),
])
def test_a_truth_label_its_arm_and_band_contradict_refuses_the_table(tmp_path, row, where):
    """As a tau_m the labels contradict (check_tolerance): the planner refuses the table, naming a trial."""
    from geoagent.geoverify.plan import check_band_truth

    rel = import_release(_release(tmp_path, [*GOOD, row]))
    assert len(rel.trials) == 5 and not rel.report.issues
    check_band_truth(rel.trials[:4])  # the good rows pass
    with pytest.raises(ValueError) as err:
        check_band_truth(rel.trials, source="verify_trials.csv")
    text = str(err.value)
    assert text.startswith("verify_trials.csv: 1 trial(s) whose truth label disagrees with their arm and band") \
        and f"({where}) labelled {row[1]!r}" in text, text


def test_raw_records_are_checked_as_the_table_is(tmp_path):
    """rev26 #12: trials a replay rebuilds from raw records (answers of trials the table lacks) were not checked:
    an arm 'Main' or a decoy labelled yes was planned and then counted in no rate, or in the wrong one."""
    import json

    from geoagent.data.importer import ImportReport, read_raw_jsonl
    from geoagent.data.model import ARM_MAIN
    from geoagent.geoverify.plan import check_band_truth

    path = tmp_path / "raw.jsonl"
    base = {"trial_id": "1|main|X", "model": "m", "raw": "yes", "image_id": "1", "site": "s1", "cand": "X"}
    recs = [{**base, "arm": "main", "band": "signal", "truth": "yes"},
            {**base, "trial_id": "2|Main|X", "arm": "Main", "band": "signal", "truth": "yes"},
            {**base, "trial_id": "3|main|X", "arm": "main", "band": "0.15-0.30km", "truth": "no"},
            {**base, "trial_id": "4|main|X", "arm": "main", "band": "signal", "truth": "maybe"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    rep = ImportReport()
    got = list(read_raw_jsonl(path, rep))
    assert [r.trial_id for r in got] == ["1|main|X"]
    assert [(i.line, i.reason.split(":")[0]) for i in rep.issues] == [(2, "column 'arm'"), (3, "column 'band'"),
                                                                       (4, "'truth'")], [str(i) for i in rep.issues]
    # a trial rebuilt from the kept record with a truth its band contradicts: refused at planning
    with pytest.raises(ValueError, match="the raw answers: 1 trial"):
        check_band_truth(_trials_of(got, ARM_MAIN, truth="no"), source="the raw answers")


def _trials_of(raw, arm, *, truth):
    """VerifyTrial objects as the replay rebuilds them from raw records (geoverify.stages.release_replay_plan)."""
    from geoagent.data.model import VerifyTrial

    return [VerifyTrial(image_id=r.image_id, site_id=r.site_id, arm=arm, cand=r.cand, img_lat=0.0, img_lon=0.0,
                        cand_lat=None, cand_lon=None, referenceability=None, d_km=None, band=r.band, truth=truth,
                        continent=None, path=None, image_ref=None) for r in raw]
