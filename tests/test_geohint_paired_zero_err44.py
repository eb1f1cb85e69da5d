"""Tables 8 and 10 say how many finer-than-city answers sit at err = 0 km and what the median ratios read with them
counted as ratio 0 (review44c #1): the columns keep the release's ``error_km > 0`` (its ``chain_results.py``), which
in a crawl of one's own, where a correctly named site geocodes onto its own coordinate, leaves out the best answers
and turned a legible regime's 0.00 into 1.00 ("the answer is the hint") without a word."""

from __future__ import annotations

import numpy as np
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH
from geoagent.scoring.geohint import is_hit

D_REF = 2.0
# per condition, per item: the answer's error (km); three of forced_warn's four answers are exact (err = 0)
ERRORS = {"forced": [0.0, 2.0, 2.0, 4.0], "forced_warn": [0.0, 0.0, 0.0, 2.0]}


def _agg(errors: dict[str, list[float]]) -> GeoHintAggregator:
    rows = []
    for cond, errs in errors.items():
        for i, err in enumerate(errs):
            site = f"s{i % 2}"
            rows.append(GeoHintResult(key=f"{cond}|{i}", site=site, image_id=f"{site}-i{i}", model="m", condition=cond,
                                      schema="forced", ref_qid=f"Q{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high",
                                      dist_km=D_REF, area="Somewhere", resolved_level="building", error_km=err,
                                      hit=is_hit(err, "building"), echo=False))
    agg = GeoHintAggregator()
    agg.add_many(rows)
    return agg


def test_table8_note_counts_zero_errors_and_gives_the_medians_with_them():
    t8 = GH.table_paired(_agg(ERRORS), "forced_warn", "forced", name="table8", n_flips=10)
    ratio_col = t8.columns.index("Median ratio Near")
    by_cond = {r[1]: r for r in t8.rows if r[0] == "all sites"}
    for cond, errs in ERRORS.items():
        positive = [e / D_REF for e in errs if e > 0]
        # the column: the release's rule (error_km > 0), unchanged
        assert by_cond[cond][ratio_col] == pytest.approx(float(np.median(positive)))
        # the note: every answer counted, an exact one as ratio 0, with its counts
        with_zeros = float(np.median([e / D_REF for e in errs]))
        zeros = sum(e == 0 for e in errs)
        assert (f"all sites {cond} {with_zeros:.2f} / \u2014 / \u2014 ({zeros} / 0 / 0 of n {len(errs)} / 0 / 0 "
                "at err = 0)") in t8.notes, t8.notes
    # forced_warn: the column reads 1.00 ("the answer is the hint"), the answers themselves mostly exact
    assert by_cond["forced_warn"][ratio_col] == pytest.approx(1.0)
    assert "forced_warn 0.00 / " in t8.notes


def test_no_zero_errors_no_note():
    t8 = GH.table_paired(_agg({"forced": [1.0, 2.0, 3.0, 4.0], "forced_warn": [0.5, 2.0, 2.5, 4.0]}),
                         "forced_warn", "forced", name="table8", n_flips=10)
    assert "err = 0" not in t8.notes


def test_table10_carries_the_same_note():
    errors = {"forced": ERRORS["forced"], "forced_chain": ERRORS["forced_warn"]}
    t10 = GH.table_paired(_agg(errors), "forced_chain", "forced", name="table10", n_flips=10)
    assert "all sites forced_chain 0.00 / \u2014 / \u2014 (3 / 0 / 0 of n 4 / 0 / 0 at err = 0)" in t10.notes, t10.notes


def test_the_header_warns_when_many_finer_than_city_answers_are_at_zero_error(tmp_path):
    """Above 10 % of the finer-than-city context answers at err = 0 km, report.md's header says the median ratio
    columns leave them out and where the medians with them are; not at or below it."""
    agg = _agg(ERRORS)  # 4 of 8 answers at err = 0
    assert GH.zero_err_warnings(agg) == [
        "Warning: 4 of 8 finer-than-city context answers (50.0 %) are at err = 0 km (located on the site's own "
        "coordinate). The median ratio columns of Tables 5, 8 and 10 leave them out, as the release's analysis does "
        "(error_km > 0), so they describe only the answers that missed; the notes under those tables give the "
        "medians with them counted as ratio 0."]
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=5, figures=False)
    assert GH.zero_err_warnings(agg)[0] in (tmp_path / "report.md").read_text(encoding="utf-8")
    # one of ten at err = 0: 10 %, not above it
    few = _agg({"forced": [0.0, *[1.0] * 4], "forced_warn": [1.0] * 5})
    assert GH.zero_err_warnings(few) == []
