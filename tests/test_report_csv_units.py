"""Report CSVs are machine-consistent: every GeoHint rate (and rate difference) is a fraction in a column named
``... (fraction)`` - table1/table2 used fractions while table3 held points - and band labels use the data's ASCII
spelling ``0.5-1.5km`` in every CSV (the pretty ``0.5–1.5 km`` only in Markdown and the terminal)."""

from __future__ import annotations

import csv

import pytest
from _geohint_synth import hand_rows, synth_results

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH
from geoagent.scoring.geohint import is_hit

# one model, two sites, four no-context and four near-band answers each (hits as 1)
BASELINE = {"s1": [1, 1, 1, 0], "s2": [0, 0, 0, 1]}
NEAR = {"s1": [1, 1, 1, 1], "s2": [1, 1, 0, 0]}


def _hand_agg() -> GeoHintAggregator:
    agg = GeoHintAggregator()
    agg.add_many(hand_rows(BASELINE, NEAR))
    return agg


def _read(path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_geohint_csvs_hold_fractions_against_hand_counts(tmp_path):
    GH.write_report(_hand_agg(), tmp_path, n_flips=10, n_splits=20, figures=False)
    t1 = _read(tmp_path / "table1.csv")[0]
    assert float(t1["Hit rate (fraction)"]) == pytest.approx(6 / 8)
    assert float(t1["0.5-1.5km (fraction)"]) == pytest.approx(6 / 8)
    t2 = {r["Regime"]: r for r in _read(tmp_path / "table2.csv")}
    # s1 legible (3 of 4 no-context hits), s2 illegible (1 of 4)
    assert float(t2["legible (1 site)"]["No context (fraction)"]) == pytest.approx(3 / 4)
    assert float(t2["illegible (1 site)"]["With context (fraction)"]) == pytest.approx(2 / 4)
    t3 = {r["Regime"]: r for r in _read(tmp_path / "table3.csv")}
    # near minus no-context: legible 4/4 - 3/4, illegible 2/4 - 1/4: fractions, as in tables 1 and 2
    assert float(t3["legible"]["Uncorrected (fraction)"]) == pytest.approx(0.25)
    assert float(t3["illegible"]["Uncorrected (fraction)"]) == pytest.approx(0.25)
    for r in t3.values():
        assert abs(float(r["Corrected (fraction)"])) <= 1 and 0 <= float(r["SD (fraction)"]) <= 1
        assert float(r["Shift (fraction)"]) == pytest.approx(float(r["Corrected (fraction)"]) - float(r["Uncorrected (fraction)"]))
    # Markdown keeps points for table 3 and percent for table 1
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| legible | m | +25.00 |" in md and "| m | 8 | 75.0 |" in md


def test_every_geohint_csv_names_its_rate_units_and_uses_ascii_bands(tmp_path):
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=3, n_sites=8))
    tables = GH.write_report(agg, tmp_path, n_flips=20, n_splits=5, figures=False)
    assert {t.name for t in tables} >= {"table3", "table8", "table9", "cutoff"}
    for t in tables:
        text = (tmp_path / f"{t.name}.csv").read_text(encoding="utf-8")
        header = next(csv.reader([text.splitlines()[0]]))
        assert not any(h.endswith(("(%)", "(pp)")) for h in header), (t.name, header)
        # ASCII bands in the data columns; the last column "Band label" (session 12) repeats the Markdown's label so
        # rows can be matched across formats, and is the one place the en dash and " km" appear
        labels_at = header.index("Band label") if "Band label" in header else None
        data_text = "\n".join(",".join(c for i, c in enumerate(r) if i != labels_at) for r in csv.reader(text.splitlines()))
        assert "–" not in data_text and " km" not in data_text, t.name
        fmts = [x for f in t.formats for x in (("pct", "pct") if f == "pctci" else (f,))]  # an interval: lo, hi
        # (session 15) each permutation p column adds a Boolean "<name>_is_floor" at the end: not a rate
        flags = [h for h in header if h.endswith("_is_floor")]
        assert flags == [f"{c}_is_floor" for c, f in zip(t.columns, t.formats) if f == "permp"], (t.name, header)
        for name, f in zip([h for i, h in enumerate(header) if i != labels_at and h not in flags], fmts, strict=True):
            assert name.endswith("(fraction)") == (f in GH.CSV_FRACTION_SCALE), (t.name, name)
        for row in csv.DictReader(text.splitlines()):
            for name in header:
                if name.endswith("(fraction)") and row[name]:
                    assert -1 <= float(row[name]) <= 1, (t.name, name, row[name])
    cut = _read(tmp_path / "cutoff.csv")
    assert "Share cut off (fraction)" in cut[0]


def test_table8_median_ratio_is_one_numeric_column_per_band(tmp_path):
    """Table 8's median err/d_ref ratio per band is a number per band column (it was one "a / b / c" text
    cell), equal to the hand-computed median of the paired answers' error / hint distance."""
    rows = []
    errors = {"forced": [0.3, 4.0, 1.0, 2.0], "forced_warn": [0.5, 0.7, 3.0, 6.0]}
    for cond, errs in errors.items():
        for i, err in enumerate(errs):
            site = f"s{i % 2}"
            rows.append(GeoHintResult(key=f"{cond}|{i}", site=site, image_id=f"{site}-i{i}", model="m", condition=cond,
                                      schema="forced", ref_qid=f"Q{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high",
                                      dist_km=2.0, area="Somewhere", resolved_level="area", error_km=err,
                                      hit=is_hit(err, "area"), echo=False))
    agg = GeoHintAggregator()
    agg.add_many(rows)
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=5, figures=False)
    t8 = [r for r in _read(tmp_path / "table8.csv") if r["Regime"] == "all sites"]
    by_cond = {r["Condition"]: r for r in t8}
    for cond, errs in errors.items():
        # median of err / d_ref with d_ref = 2 km: forced (0.3, 1.0, 2.0, 4.0)/2 -> 0.75; forced_warn -> 0.925
        expected = sorted(e / 2.0 for e in errs)
        assert float(by_cond[cond]["Median ratio Near"]) == pytest.approx((expected[1] + expected[2]) / 2)
        assert by_cond[cond]["Median ratio Mid"] == by_cond[cond]["Median ratio Far"] == ""
