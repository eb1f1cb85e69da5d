"""Read-out resting on few control trials (reviewer finding, session 9): "invalid: swapped-image control F
66.7% > 20%" from 1 swapped-image trial per model carried no small-n flag; the d' dagger covered d' only.
The control-arm checks now use the d' convention (fewer than SMALL_N_TRIALS trials) and say so."""

import polars as pl

from geoagent.report.geoverify import SMALL_N_MARK, render_markdown, render_terminal, small_n_warnings
from geoagent.scoring.sdt import SMALL_N_TRIALS, readout, score


def _cells(n_mis: int, yes_mis: int) -> pl.DataFrame:
    rows = [("m", "s1", "main", "signal", "yes", 40, 10, 0)]
    rows += [("m", "s1", "main", b, "no", 10, 40, 0) for b in ("0.15-0.3km", "0.3-0.7km", "0.7-1.5km",
                                                              "1.5-3.0km", "3.0-6.0km")]
    rows += [("m", "s1", "ctrl_mismatch", "0.3-0.7km", "no", yes_mis, n_mis - yes_mis, 0)]
    rows += [("m", "s1", "ctrl_noimage", "0.3-0.7km", "no", 0, 30, 0)]
    return pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"],
                        orient="row")


def test_readout_flags_control_check_on_few_trials():
    ro = readout(0.3, 1.6, 0.4, 2 / 3, 0.0, n_mismatch=3, n_blank=30)
    assert ro.verdict == "invalid" and ro.small_n
    assert any("3 swapped-image control trials" in r and f"fewer than {SMALL_N_TRIALS}" in r for r in ro.reasons)
    big = readout(0.3, 1.6, 0.4, 0.5, 0.0, n_mismatch=SMALL_N_TRIALS, n_blank=30)
    assert big.verdict == "invalid" and not big.small_n
    assert not any("fewer than" in r for r in big.reasons)


def test_report_marks_readout_resting_on_few_control_trials():
    scores = score(_cells(3, 2))
    sc = scores["m"]
    assert sc.readout.verdict == "invalid" and sc.readout.small_n
    md = render_markdown(scores)
    assert f"| pre-registered | invalid {SMALL_N_MARK} |" in md
    lines = small_n_warnings(scores)
    assert any("read-out" in w and "3 swapped-image control trials" in w for w in lines)
    assert "read-out rests on few trials" in md and "3 swapped-image control trials" in render_terminal(scores)


def test_no_flag_with_enough_control_trials():
    scores = score(_cells(30, 20))
    assert scores["m"].readout.verdict == "invalid" and not scores["m"].readout.small_n
    assert f"invalid {SMALL_N_MARK}" not in render_markdown(scores)


def test_footnote_names_the_readout_mark_only_when_used():
    from geoagent.report.geoverify import readout_text, small_n_note

    flagged, plain = score(_cells(3, 2)), score(_cells(30, 20))
    assert "after the read-out" in small_n_note(flagged) and "after the read-out" not in small_n_note(plain)
    assert readout_text(flagged["m"]) == f"invalid {SMALL_N_MARK}" and readout_text(plain["m"]) == "invalid"
