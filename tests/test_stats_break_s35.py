"""Statistics break of session 35 (stats35 #1, #2), each checked against a hand count.

1. GeoHint: a cell whose answers the model finished but that did not parse read as undetermined (an em dash),
   and a site whose no-context answers all failed to parse had no regime: the undetermined rule ("no answer
   geocoded, so 0 % would measure the geocoder") took an unparsed answer for a geocoder failure. An unparsed answer
   is a miss of the model's own making (seed 000 Sec. 4.1, "we do not post-hoc filter"; the release's judged answers
   keep such rows with ``hit`` False), so such a cell reads 0 % and such a site is illegible. Only answers that
   parsed and failed to geocode leave a rate undetermined.
2. GeoVerify: a main-arm decoy recorded with an empty band left F (no band column holds it) but stayed in the
   false-acceptance confidence figures.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report.geohint import table1


def _result(i: int, site: str, condition: str, *, parse_ok: bool, level: str = "none", hit: bool = False,
            model: str = "m") -> GeoHintResult:
    context = condition != "baseline"
    return GeoHintResult(key=f"{site}-{condition}-{i}", site=site, image_id=f"{site}-img", model=model,
                         condition=condition, schema="forced", repeat=i, ref_qid="Q1" if context else None,
                         band="0.5-1.5km" if context else None, tier="high" if context else None,
                         dist_km=1.0 if context else None, parse_ok=parse_ok, resolved_level=level,
                         hit=hit, echo=False if context else None, extra={"finish_reason": "stop"})


def test_unparsed_answers_are_misses_not_an_undetermined_rate_nor_a_site_without_regime():
    agg = GeoHintAggregator()
    # site a: four no-context answers, none parsed; four forced answers, none parsed
    for i in range(4):
        agg.add(_result(i, "a", "baseline", parse_ok=False))
        agg.add(_result(i, "a", "forced", parse_ok=False))
    # site b: one parsed answer the geocoder could not resolve + three unparsed
    agg.add(_result(0, "b", "baseline", parse_ok=True))
    for i in range(1, 4):
        agg.add(_result(i, "b", "baseline", parse_ok=False))
    # site c: every no-context answer parsed and none geocoded: the geocoder alone decided, undetermined
    for i in range(4):
        agg.add(_result(i, "c", "baseline", parse_ok=True))
    assert agg.undetermined_sites() == ["c"]
    assert agg.regimes() == {"a": "illegible", "b": "illegible"}  # 0 of 4 hits each, below 0.5
    row = next(r for r in table1(agg, "forced", n_boot=0).rows if r[0] == "m")
    assert row[1] == 4 and row[2] == 0.0, row  # before: nan (an em dash) beside an echo rate of 0.0
    # and the cell of site c alone stays undetermined
    only_c = agg.select(sites=["c"], model="m", condition="baseline")
    assert math.isnan(only_c.geocoded_hit_rate) and only_c.n == 4


def test_a_decoy_without_band_is_in_f_as_in_the_false_acceptance_figures():
    from geoagent.scoring.sdt import cells_from_rows, conf_from_rows, score

    rows = pl.DataFrame(dict(model=["m"] * 6, site=["s"] * 6, arm=["main"] * 6,
                             band=["signal", "signal", "0.15-0.3km", "0.15-0.3km", "", ""],
                             truth=["yes", "yes", "no", "no", "no", "no"], verdict=["yes", "no", "no", "no", "yes", "yes"],
                             conf=[0.9] * 6))
    s = score(cells_from_rows(rows), conf_from_rows(rows))["m"]
    # F is over every main-arm decoy (truth "no"), as the release's verify_results.py and the false-acceptance
    # figures count them: 2 yes of 4 (before: 0 of 2, while the confidence figures held 2 false acceptances)
    assert (s.n_noise, s.n_false_acceptances, s.f) == (4, 2, pytest.approx(0.5)), s
    assert s.fa_conf_n == s.n_false_acceptances == 2
    # the band's own F and d' keep its two decoys alone; H is the signal trials'
    band = s.bands[0]
    assert (band.band, band.n, band.n_yes) == ("0.15-0.3km", 2, 0) and sum(b.n for b in s.bands) == 2, s.bands
    assert s.h == pytest.approx(0.5)

