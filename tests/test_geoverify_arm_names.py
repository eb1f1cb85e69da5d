"""One display name per GeoVerify control arm, and the same delta_1 text, in the console and the tables.

Walkthrough: the swapped-image control arm read "mismatched-image" in the read-out, "control: swapped image"
in the table and ``ctrl_mismatch`` in the CSV; delta_1 read "none [none, none]" in the console summary but
"none" in the terminal table (rich took the bracket for markup and dropped it); "unmatched decoys 4" was
never explained. Hand-made counts; d' checked with scipy."""

from __future__ import annotations

import re

import polars as pl
from scipy.stats import norm

from geoagent.data.model import BAND_SIGNAL
from geoagent.geoverify.campaign import GeoVerifyCampaign
from geoagent.report import geoverify as R
from geoagent.scoring import sdt

B0, B1 = "0.15-0.3km", "0.3-0.7km"


def _cells(rows):
    return pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")


def _flat_scores():
    """Five sites (the fewest with a bootstrap interval) answering every trial yes half the time: d' = 0 in every
    band, so delta_1 is none in every bootstrap resample; controls at two of them: swapped image F 6/8 (> 20 %),
    gray field F 2/8."""
    rows = []
    for site in ("s1", "s2", "s3", "s4", "s5"):
        rows += [("m", site, "main", BAND_SIGNAL, "yes", 1, 1, 0),
                 ("m", site, "main", B0, "no", 1, 1, 0),
                 ("m", site, "main", B1, "no", 1, 1, 0)]
    for site in ("s1", "s2"):
        rows += [("m", site, "ctrl_mismatch", None, "no", 3, 1, 0),
                 ("m", site, "ctrl_noimage", None, "no", 1, 3, 0)]
    return sdt.score(_cells(rows), bands=(B0, B1), n_boot=50, seed=1, pooled=False)


def _summary(scores) -> list[str]:
    camp = GeoVerifyCampaign()
    camp._scores = scores
    return camp.summary_lines(None, None, None)


def test_delta_1_reads_the_same_in_console_and_terminal_table():
    scores = _flat_scores()
    d = norm.ppf((5 + 0.5) / (10 + 1)) - norm.ppf((5 + 0.5) / (10 + 1))  # H = F = 5/10 in both bands (log-linear)
    assert [b.d_prime for b in scores["m"].bands] == [d, d] and d < 1
    assert scores["m"].delta_1 is None and scores["m"].delta_1_ci == ("none", "none")
    line = next(ln for ln in _summary(scores) if ln.strip().startswith("m:"))
    # none, with a range of none to none: "none" in all three, no brackets (session 12); 10 trials per band, so
    # the small-n mark stays (walk26 D1)
    assert re.search(r"delta_1 none † +controls", line), line
    table = R.render_terminal(scores)
    row = next(ln for ln in table.splitlines() if ln.strip("│ ").startswith("delta_1"))
    assert row.split("│")[2].strip() == "none †", row
    assert "| delta_1 | none † |" in R.render_markdown(scores)

def test_swapped_image_is_the_one_display_name_of_ctrl_mismatch():
    scores = _flat_scores()
    s = scores["m"]
    assert s.controls["ctrl_mismatch"][:2] == (8, 6) and s.readout.verdict == "invalid"  # 6/8 = 75 % > 20 %
    reasons = "; ".join(s.readout.reasons)
    assert "swapped-image control F 75.0% > 20%" in reasons and "mismatched" not in reasons
    lines = _summary(scores)
    text = "\n".join(lines)
    assert "mismatched" not in text
    legend = next(ln for ln in lines if "(k/n) after H and F" in ln)
    assert "swapped image = arm ctrl_mismatch" in legend and "gray field = arm ctrl_noimage" in legend
    table = R.render_terminal(scores)
    assert "control: swapped image" in table and "mismatched" not in table
    assert "'control: swapped image' is arm ctrl_mismatch" in " ".join(R.LEGEND)
    assert "'control: gray field' is arm ctrl_noimage" in " ".join(R.LEGEND)
    csv_rows = R.render_csv(scores).splitlines()
    assert any(r.startswith("Response rates,control: swapped image,") for r in csv_rows)


def test_gray_field_read_out_and_not_run_notes_use_the_display_names():
    r = sdt.readout(0.5, 1.5, 0.30, 0.10, 0.32)
    assert r.verdict == "invalid" and r.reasons == ("gray-field control F 32.0% within 5 points of main-arm F 30.0%",)
    r = sdt.readout(0.5, 1.5, 0.30, None, None)
    assert "swapped-image control not run" in r.reasons and "gray-field control not run" in r.reasons


def test_built_trials_line_explains_unmatched_decoys():
    from geoagent.geoverify.trials import BuildReport

    camp = GeoVerifyCampaign()
    camp._scores = {}

    class Plan:  # the attributes summary_lines reads from a plan
        import_report = type("IR", (), {"imported": {"x": 1}, "issues": []})()
        import_counts = "1 site"
        duplicate_notes: list = []
        build_report = BuildReport(unmatched_decoys=4)
        unreplayed: list = []  # session 12: trials a replay model could not replay
        replay_notes: list = []  # session 36: recorded answers not replayed as recorded

    camp._plan = Plan()
    from geoagent.config import config_from_dict

    cfg = config_from_dict({"campaign": {"name": "gv-names", "kind": "geoverify"}, "budget": {"cap_usd": 1.0},
                            "models": [{"name": "a", "provider": "simulated", "model": "m"}]})
    line = next(ln for ln in camp.summary_lines(cfg, None, None) if "built trials" in ln)
    assert "unmatched decoys 4 (drawn from any referenceability tier: none of their band was within one tier" in line
