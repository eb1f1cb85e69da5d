"""Break27 (statistics audit) findings 2 and 3 on the GeoVerify read-out (:func:`geoagent.scoring.sdt.readout`).

2. A control arm that ran but whose answers all failed to parse (refusals on the gray field) has no F; the
   read-out said "control not run", as if the trials had never been sent. It now says the arm's F is undefined
   and how many of its answers did not parse.
3. A reason's number was rounded onto the threshold it is compared with ("nearest-band d' 2.00 > 2", "F 20.0 % >
   20 %", "0.50 < 0.5") or printed as "-0.00"; it now gets the decimals that show its side of the threshold.
"""

from __future__ import annotations

import re

import polars as pl
import pytest

from geoagent.scoring import sdt


def _cells(arm: str, *, parsed_control: bool) -> pl.DataFrame:
    rows = []
    for s in range(6):
        site = f"s{s}"
        rows.append(dict(model="m", site=site, arm="main", band="signal", truth="yes", n_yes=8, n_no=2, n_fail=0))
        for b in sdt.DECOY_BAND_LABELS:
            rows.append(dict(model="m", site=site, arm="main", band=b, truth="no", n_yes=3, n_no=7, n_fail=0))
        # the control arm ran: 5 trials per site, every answer unparsed (or, for the reference, every one parsed)
        rows.append(dict(model="m", site=site, arm=arm, band=sdt.DECOY_BAND_LABELS[0], truth="no",
                         n_yes=1 if parsed_control else 0, n_no=4 if parsed_control else 0,
                         n_fail=0 if parsed_control else 5))
    return pl.DataFrame(rows)


@pytest.mark.parametrize("arm,what,other", [("ctrl_mismatch", "swapped-image", "gray-field"),
                                            ("ctrl_noimage", "gray-field", "swapped-image")])
def test_a_control_arm_whose_answers_all_failed_to_parse_is_not_called_not_run(arm, what, other):
    sc = sdt.score(_cells(arm, parsed_control=False), pooled=False)["m"]
    assert sc.n_parse_failures == 30 and sc.controls[arm][0] == 0
    assert f"{what} control F undefined: none of its 30 answers parsed" in sc.readout.reasons, sc.readout.reasons
    assert f"{what} control not run" not in sc.readout.reasons
    assert f"{other} control not run" in sc.readout.reasons  # the arm with no trial at all: not run, as before
    # the same arm with parsed answers has an F and no note of either kind
    parsed = sdt.score(_cells(arm, parsed_control=True), pooled=False)["m"]
    assert parsed.controls[arm][0] == 30 and not any(what in r for r in parsed.readout.reasons), parsed.readout.reasons


def _number(reason: str, after: str) -> float:
    return float(re.search(re.escape(after) + r" (-?\d+(?:\.\d+)?)", reason).group(1))


@pytest.mark.parametrize("near,far,f_mis,verdict,after,check", [
    (2.004, 2.5, 0.1, "uninformative", "nearest-band d'", lambda x: x > 2),
    (2.0000004, 2.5, 0.1, "uninformative", "nearest-band d'", lambda x: x > 2),  # beyond 6 decimals: said as 2.000000
    (0.4996, 1.8, 0.1, "informative", "nearest-band d'", lambda x: x < 0.5),
    (0.3, 1.5004, 0.1, "informative", "farthest", lambda x: x > 1.5),
    (1.0, 1.8, 201 / 1004, "invalid", "swapped-image control F", lambda x: x > 20),
])
def test_a_reasons_number_is_on_the_side_of_the_threshold_it_states(near, far, f_mis, verdict, after, check):
    ro = sdt.readout(near, far, 0.3, f_mis, 0.1)
    assert ro.verdict == verdict
    x = _number(ro.reasons[0], after)
    if near == 2.0000004:  # the widening stops at 4 more decimals: the value is that close to the threshold
        assert ro.reasons[0].startswith("nearest-band d' 2.000000 > 2"), ro.reasons
    else:
        assert check(x), ro.reasons[0]


def test_ordinary_values_keep_their_usual_decimals_and_no_negative_zero():
    ro = sdt.readout(2.37, 2.5, 0.3, 0.257, 0.1)
    assert ro.reasons == ("swapped-image control F 25.7% > 20%",)
    assert sdt.readout(2.37, 2.5, 0.3, 0.1, 0.1).reasons == ("nearest-band d' 2.37 > 2",)
    informative = sdt.readout(-0.004, 1.8, 0.3, 0.1, 0.1)
    assert informative.reasons == ("nearest-band d' 0.00 < 0.5, farthest 1.80 > 1.5",)
    assert sdt.readout(1.0, 1.8, 0.0, 0.1, -0.0).reasons[0].startswith("gray-field control F 0.0% within 5 points")


def test_the_unparsed_count_is_of_the_noise_trials_the_controls_f_counts():
    """rev27 #5: a control row of truth 'yes' (hand-made cells; the planner refuses it) is outside the arm's F, so
    its unparsed answers are not in the note's count either."""
    cells = _cells("ctrl_noimage", parsed_control=False)
    extra = pl.DataFrame([dict(model="m", site="s0", arm="ctrl_noimage", band=sdt.DECOY_BAND_LABELS[0], truth="yes",
                               n_yes=0, n_no=0, n_fail=7)])
    sc = sdt.score(pl.concat([cells, extra]), pooled=False)["m"]
    assert "gray-field control F undefined: none of its 30 answers parsed" in sc.readout.reasons, sc.readout.reasons


def test_the_table_says_how_many_sites_are_behind_h_and_f():
    """walk27b #3: the GeoVerify table gave no site count per column (only the interval notes, without saying which
    F row had which); rows 'sites, signal trials' and 'sites, decoy trials' now do, with or without a bootstrap."""
    from geoagent.report.geoverify import _rows

    cells = _cells("ctrl_mismatch", parsed_control=True)
    # site s5 has no parsed signal answer (all its signal answers failed to parse): 5 signal sites, 6 decoy sites
    cells = cells.with_columns(
        n_yes=pl.when((pl.col("site") == "s5") & (pl.col("band") == "signal")).then(0).otherwise(pl.col("n_yes")),
        n_no=pl.when((pl.col("site") == "s5") & (pl.col("band") == "signal")).then(0).otherwise(pl.col("n_no")),
        n_fail=pl.when((pl.col("site") == "s5") & (pl.col("band") == "signal")).then(10).otherwise(pl.col("n_fail")))
    for n_boot in (0, 50):
        scores = sdt.score(cells, n_boot=n_boot)
        assert scores["m"].sites["H"] == 5 and scores["m"].sites["F"] == 6
        rows = {label: fmt for _sec, label, _get, fmt, _key in _rows(scores)}
        assert rows["sites, signal trials"](scores["m"]) == "5" and rows["sites, decoy trials"](scores["m"]) == "6"
