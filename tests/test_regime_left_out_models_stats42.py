"""A model whose no-context hit rate is undetermined assigns no site a regime (stats42 #1).

A model whose answers never geocode (parsed, no level, no error: the geocoder located nothing) has its hit rate
declared undetermined (Table 1's em dash: 0 % would measure the geocoder, not the model), yet its no-context answers
counted as misses when every site's regime was assigned by the pooled no-context hit rate, so it pulled every site
toward illegible and moved the split for every other model (a synthetic campaign's 27 legible / 12 illegible sites
became 14 / 25 with such a model added). The regime assignment, and the split-half correction's halves, now leave out
the no-context answers of any model whose no-context rate is undetermined by Table 1's rule
(:attr:`geoagent.geohint.aggregate.Cell.geocoded_hit_rate`).

Hand-made rows, threshold 50 %: model ``a`` geocodes every answer (area level), model ``z`` none (city named, level
``none``). No-context hits of ``a``: s1 3 of 4, s2 2 of 4, s3 1 of 4, s4 none asked; ``z`` 4 unresolved answers at
each of s1-s4. Pooled with ``z`` (before): s1 3/8, s2 2/8, s3 1/8, all illegible; s4 has no geocoded answer,
undetermined. Without ``z``: s1 75 % and s2 50 % legible, s3 25 % illegible, s4 undetermined (answered by ``z``
only, none geocoded).
"""

from __future__ import annotations

import math

from geoagent.geohint.aggregate import BANDS, GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH
from geoagent.scoring.geohint import is_hit

A_BASELINE = {"s1": [1, 1, 1, 0], "s2": [1, 1, 0, 0], "s3": [1, 0, 0, 0]}
A_NEAR = {"s1": [1, 1, 1, 1], "s2": [1, 1, 1, 0], "s3": [1, 1, 0, 0]}
SITES = ("s1", "s2", "s3", "s4")


def _answer(model: str, site: str, i: int, *, context: bool, hit: int | None, parse_ok: bool = True) -> GeoHintResult:
    """One answer of ``model`` at ``site``; ``hit`` None: parsed (a city named) but not geocoded (level ``none``);
    0/1: area level, 5 km / 0.2 km off (no context) or 4 km / 0.3 km (context, d_ref 1 km)."""
    kind = "c" if context else "b"
    ctx = dict(condition="forced", ref_qid=f"Q{site[1:]}{i}", ref_name=f"P{i}", band=BANDS[0], tier="high",
               dist_km=1.0) if context else dict(condition="baseline")
    if hit is None:
        geo = dict(city="Somewhere" if parse_ok else None, resolved_level="none", error_km=None, hit=False,
                   parse_ok=parse_ok)
    else:
        err = (0.3 if hit else 4.0) if context else (0.2 if hit else 5.0)
        geo = dict(area="Somewhere", resolved_level="area", error_km=err, hit=is_hit(err, "area"))
    return GeoHintResult(key=f"{kind}|{model}|{site}|{i}", site=site, image_id=f"{site}-img", model=model,
                         schema="forced", repeat=i if not context else 0, echo=False if context else None, **ctx, **geo)


def _a_rows() -> list[GeoHintResult]:
    return ([_answer("a", s, i, context=False, hit=h) for s, hs in A_BASELINE.items() for i, h in enumerate(hs)]
            + [_answer("a", s, i, context=True, hit=h) for s, hs in A_NEAR.items() for i, h in enumerate(hs)])


def _z_rows(*, unparsed_at_s1: bool = False) -> list[GeoHintResult]:
    """``z``: 4 unresolved no-context answers per site and 4 unresolved near-band answers at s1-s3; with
    ``unparsed_at_s1`` its first no-context answer at s1 named nothing (a miss of its own making: decided)."""
    out = [_answer("z", s, i, context=False, hit=None, parse_ok=not (unparsed_at_s1 and s == "s1" and i == 0))
           for s in SITES for i in range(4)]
    return out + [_answer("z", s, i, context=True, hit=None) for s in A_NEAR for i in range(4)]


def _nan_as_none(rows: list[list]) -> list[list]:
    """Rows with NaN cells as None, so two tables compare cell by cell (NaN != NaN)."""
    return [[None if isinstance(v, float) and math.isnan(v) else v for v in r] for r in rows]


def _agg(*batches: list[GeoHintResult]) -> GeoHintAggregator:
    agg = GeoHintAggregator()
    for rows in batches:
        agg.add_many(rows)
    return agg


def test_a_never_geocoded_model_assigns_no_site_a_regime():
    agg = _agg(_a_rows(), _z_rows())
    # hand-computed from a's no-context answers alone (module doc); before: s1, s2, s3 all illegible (3/8, 2/8, 1/8)
    assert agg.regimes() == {"s1": "legible", "s2": "legible", "s3": "illegible"}
    assert agg.undetermined_sites() == ["s4"]  # answered by z only, none geocoded: undetermined, as before
    # Table 1's rule decides which models are left out: z's no-context rate is its em dash, a's is not
    assert math.isnan(agg.select(model="z", condition="baseline").geocoded_hit_rate)
    assert agg.regime_left_out_models() == ["z"]
    assert [r[0] for r in GH.table2(agg).rows] == ["illegible (1 site)"] * 2 + ["legible (2 sites)"] * 2


def test_the_split_is_the_one_without_the_model_whatever_the_order_results_arrive_in():
    """The live aggregation recomputes regimes from its per-site sums at every query: z alone assigns nothing (its
    sites undetermined), and a's answers added before or after z's give the split of a alone."""
    only_z = _agg(_z_rows())
    assert only_z.regimes() == {} and only_z.undetermined_sites() == list(SITES)
    assert only_z.regime_left_out_models() == ["z"]
    alone = _agg(_a_rows()).regimes()
    assert alone == {"s1": "legible", "s2": "legible", "s3": "illegible"}
    assert _agg(_z_rows(), _a_rows()).regimes() == _agg(_a_rows(), _z_rows()).regimes() == alone


def test_a_model_with_an_unparsed_no_context_answer_is_kept():
    """An unparsed answer is a miss of the model's own making (seed 000 Sec. 4.1, no post-hoc filtering): z's rate
    is then decided, 0 % (Table 1 prints 0.0, not an em dash), and z's answers count as misses in the pooled rate:
    s1 3/8, s2 2/8, s3 1/8, all illegible (below 50 %)."""
    agg = _agg(_a_rows(), _z_rows(unparsed_at_s1=True))
    assert agg.select(model="z", condition="baseline").geocoded_hit_rate == 0.0
    assert agg.regime_left_out_models() == []
    assert agg.regimes() == {"s1": "illegible", "s2": "illegible", "s3": "illegible"}
    assert agg.undetermined_sites() == ["s4"]
    assert GH.regime_left_out_note(agg, "baseline") == "" and GH.regime_left_out_ref(agg, "baseline") == ""


def test_tables_2_and_3_give_the_other_model_the_values_of_a_campaign_without_the_model():
    """The split-half correction splits a's no-context answers alone (z's in neither half), so a's Table 3 rows,
    corrected values included, are those of a campaign without z; z's rows are undetermined; the notes name z."""
    both, alone = _agg(_a_rows(), _z_rows()), _agg(_a_rows())
    bs, bm, _bh = both.baseline_arrays("baseline")
    assert set(bm) == {"a"} and len(bs) == len(both.baseline_geocoded_flags("baseline")) == 12
    for name in ("table2", "table3"):
        t_both = getattr(GH, name)(both)
        t_alone = getattr(GH, name)(alone)
        a_rows = [r for r in t_both.rows if r[1] == "a"]
        assert _nan_as_none(a_rows) == _nan_as_none(t_alone.rows), name
        z_rows = [r for r in t_both.rows if r[1] == "z"]
        assert z_rows and all(math.isnan(v) for r in z_rows for v in r[2:6] if isinstance(v, float)), name
        assert "Regimes assigned without the no-context answers of z" in t_both.notes, name
        assert "Regimes assigned without" not in t_alone.notes, name
    t3 = GH.table3(both)
    assert {r[0] for r in t3.rows} == {"illegible", "legible"}
    # s1: a near 4/4, no context 3/4 -> legible sites s1+s2: near 7/8, no context 5/8 = +25 points uncorrected
    legible_a = next(r for r in t3.rows if r[:2] == ["legible", "a"])
    assert math.isclose(legible_a[2], 25.0)
    note = GH.regime_left_out_note(both, "baseline")
    assert note.startswith("Left out of the regime assignment: the no-context answers (condition 'baseline') of z.")
    assert GH.regime_left_out_note(alone, "baseline") == ""


def test_the_campaign_console_summary_gives_the_split_and_names_the_model():
    """The live campaign's summary reads the same aggregator: the split of a alone, and a line naming z."""
    from geoagent.geohint.campaign import GeoHintCampaign

    camp = GeoHintCampaign()
    camp._agg = _agg(_a_rows(), _z_rows())
    text = "\n".join(camp.summary_lines(None, None, None))
    assert "regimes: 2 legible, 1 illegible, 1 undetermined (no no-context answer geocoded)" in text, text
    assert "regimes assigned without the no-context answers of z (none geocoded: hit rate undetermined, not 0)" in text
    camp._agg = _agg(_a_rows())
    assert "regimes assigned without" not in "\n".join(camp.summary_lines(None, None, None))


def test_report_md_says_once_in_full_which_model_assigns_no_site_and_why(tmp_path):
    agg = _agg(_a_rows(), _z_rows())
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=20, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "no-context hit rate (models pooled but z: see below) is at least 50 %" in md
    assert md.count("Left out of the regime assignment: the no-context answers (condition 'baseline') of z.") == 1
    assert md.count("Regimes assigned without the no-context answers of z") == 2  # Tables 2 and 3
