"""The one-line-per-model GeoVerify console summary shows the trials behind H and F (``(k/n)``) and the
site-bootstrap range of delta_1, in the report table's wording and with its numbers: checked against hand
counts and a scipy recomputation of d' on a hand-made case, and against hand counts of the release rows and
the report's own Markdown cells on the release sample."""

from __future__ import annotations

import polars as pl
from scipy.stats import norm

from geoagent.data.importer import import_release
from geoagent.data.model import BAND_SIGNAL
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.campaign import GeoVerifyCampaign
from geoagent.geoverify.score import scored_rows_from_release
from geoagent.report import geoverify as R
from geoagent.scoring import sdt

B0, B1 = "0.15-0.3km", "0.3-0.7km"


def _summary(scores) -> list[str]:
    camp = GeoVerifyCampaign()
    camp._scores = scores  # what report() leaves behind for the summary
    return camp.summary_lines(None, None, None)


def _line(lines: list[str], model: str) -> str:
    return next(ln for ln in lines if ln.strip().startswith(f"{model}:"))


def _cells(rows):
    return pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")


def test_hand_made_counts_and_constant_delta_range():
    # five identical sites (the fewest with an interval): every bootstrap resample has the same shares, so the
    # delta_1 range is one band
    rows = []
    for site in ("s1", "s2", "s3", "s4", "s5"):
        rows += [("m", site, "main", BAND_SIGNAL, "yes", 3, 1, 0),
                 ("m", site, "main", B0, "no", 2, 2, 1),
                 ("m", site, "main", B1, "no", 0, 4, 0)]
    scores = sdt.score(_cells(rows), bands=(B0, B1), n_boot=200, seed=1, pooled=False)
    line = _line(_summary(scores), "m")
    # by hand: H = 15 yes of 20 signal trials; F = 10 yes of 40 decoy trials (the 5 failures are not trials)
    assert "H 75.0% (15/20)" in line and "F 25.0% (10/40)" in line and "n 60 " in line
    # delta_1 by scipy with the log-linear correction: d'(B0) < 1 <= d'(B1), so delta_1 is B1
    z_h = norm.ppf((15 + 0.5) / (20 + 1))
    d0, d1 = z_h - norm.ppf((10 + 0.5) / (20 + 1)), z_h - norm.ppf((0 + 0.5) / (20 + 1))
    assert d0 < 1.0 <= d1
    assert "delta_1 0.3–0.7 km [0.3–0.7 km, 0.3–0.7 km]" in line
    assert f"d'(nearest) {d0:.2f}" in line
    legend = next(ln for ln in _summary(scores) if "(k/n) after H and F" in ln)
    assert "delta_1 [lo, hi]" in legend and "site-bootstrap" in legend


def test_no_bootstrap_no_range_and_no_counts_without_trials():
    scores = sdt.score(_cells([("m", "s1", "main", BAND_SIGNAL, "yes", 1, 1, 0), ("m", "s1", "main", B0, "no", 0, 2, 0)]),
                       bands=(B0, B1), pooled=False)
    lines = _summary(scores)
    line = _line(lines, "m")
    assert "H 50.0% (1/2)" in line and "F 0.0% (0/2)" in line
    assert "[" not in line.split("delta_1 ", 1)[1].split("  ")[0]  # no bootstrap: the value alone
    assert not any("delta_1 [lo, hi]" in ln for ln in lines)
    # no decoy trials: F stays n/a, without a "(0/0)"
    only_signal = sdt.score(_cells([("m", "s1", "main", BAND_SIGNAL, "yes", 2, 1, 0)]), bands=(B0, B1), pooled=False)
    line = _line(_summary(only_signal), "m")
    assert "H 66.7% (2/3)" in line and "F n/a  " in line and "(0/0)" not in line


def _md_cell(md: str, label: str, col: int) -> str:
    row = next(ln for ln in md.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in row.strip("|").split("|")][col + 1]


def test_release_summary_matches_hand_counts_and_report_cells(release_dir):
    rows = list(scored_rows_from_release(import_release(release_dir)))
    agg = GeoVerifyAggregator()
    agg.update(rows)
    scores = agg.scores(n_boot=200, seed=5)
    lines = _summary(scores)
    md = R.render_markdown(scores)
    cols = R._columns(scores)
    hand: dict[tuple[str, str], list[int]] = {}
    for r in rows:  # main-arm parsed answers, counted directly
        if r["arm"] != "main" or r["verdict"] is None:
            continue
        what = "H" if r["band"] == BAND_SIGNAL else "F"
        for who in (r["model"], sdt.POOLED):
            k = hand.setdefault((who, what), [0, 0])
            k[0] += r["verdict"] == "yes"
            k[1] += 1
    assert set(cols) == {m for m, _ in hand}
    spread = 0
    for i, m in enumerate(cols):
        line = _line(lines, m)
        for what in ("H", "F"):
            y, n = hand[(m, what)]
            assert f" {what} {100 * y / n:.1f}% ({y}/{n})" in line, (m, what, line)
        cell = _md_cell(md, "delta_1", i)
        assert f"delta_1 {cell}  " in line  # the report's own delta_1 cell, bootstrap range included
        # the report's H row ends with the same (k/n)
        assert _md_cell(md, "H (signal accepted)", i).endswith(f"({hand[(m, 'H')][0]}/{hand[(m, 'H')][1]})")
        if scores[m].ci_sites["H"] < sdt.CI_MIN_SITES:  # per model: signal trials from 3-4 sites, no range
            assert "[" not in cell and scores[m].delta_1_ci is None and m != sdt.POOLED
            continue
        assert "[" in cell and scores[m].delta_1_ci is not None
        spread += scores[m].delta_1_ci[0] != scores[m].delta_1_ci[1]
    assert spread  # the release sample has a model whose range spans more than one band


def test_summary_labels_what_each_count_counts():
    """The line's ``n`` counted the main arm only while its parse failures counted every arm; each number now
    says what it counts. Hand-made answers: main arm 6 signal (1 unparsed) + 8 decoy (2 unparsed), swapped
    image 5 (1 unparsed), gray field 4: main arm n = 5 + 6 = 11, controls n 4 and 4, parse failures 4 of
    every arm, split 3 main / 1 swapped image. H, F and the read-out are unchanged by the labels."""
    from geoagent.geoverify.parse import parse_verdict
    from geoagent.geoverify.score import scored_row

    yes, no, bad = '{"verdict": "yes", "confidence": 0.8}', '{"verdict": "no", "confidence": 0.8}', "no json at all"
    rows = []

    def add(i, arm, band, truth, text):
        trial = {"trial_id": f"{i}|{arm}|c{i}", "site": f"s{i % 3}", "arm": arm, "band": band, "truth": truth}
        rows.append(scored_row(trial, "m", parse_verdict(text), finish_reason="stop"))

    for i, text in enumerate([yes, yes, yes, no, no, bad]):
        add(i, "main", BAND_SIGNAL, "yes", text)
    for i, text in enumerate([yes, no, no, no, no, no, bad, bad]):
        add(100 + i, "main", B0, "no", text)
    for i, text in enumerate([yes, no, no, no, bad]):
        add(200 + i, "ctrl_mismatch", B0, "no", text)
    for i, text in enumerate([no, no, no, no]):
        add(300 + i, "ctrl_noimage", B0, "no", text)
    agg = GeoVerifyAggregator()
    agg.update(rows)
    scores = agg.scores()
    lines = _summary(scores)
    line = _line(lines, "m")
    assert "main arm n 11  H 60.0% (3/5)  F 16.7% (1/6)" in line
    assert "controls n swapped image 4, gray field 4" in line
    assert "all arms: parse failures 4 (main 3, swapped image 1)" in line
    assert scores["m"].controls["ctrl_mismatch"][:2] == (4, 1) and scores["m"].n_parse_failures == 4
    legend = next(ln for ln in lines if "(k/n) after H and F" in ln)
    assert "main arm n: parsed main-arm answers" in legend and "all arms: parse failures" in legend
