"""Comparisons that pool models leave out a model whose hit rate is undetermined (stats43 #1).

stats42 #1 left a model whose no-context answers never geocoded (every one parsed: Table 1's em dash) out of the
regime assignment. The comparisons that pool models without a per-model row, the strictly paired Tables 8 and 10,
the image-paired ``building_vs_nocontext`` and Fig. 2's points, still counted its answers as misses (and as not
building level): on stats42's synthetic release-format campaign with such a model added beside three others,
Table 8's "all sites" forced hit rate read 46.2 %, 61.6 % without it. Now they pool the other models' answers only, and name the model.

Synthetic campaign: :func:`tests._geohint_synth.synth_results` (models m-a, m-b, m-c) plus ``z``, a copy of m-c's
answers that all parsed and none geocoded (level ``none``, no error). Each pooled figure is checked against the same
campaign without ``z`` (the report's own code) and against an independent pandas computation over the rows.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from geoagent.geohint.aggregate import BANDS, GeoHintAggregator
from geoagent.report import geohint as GH
from tests._geohint_synth import synth_results

N_FLIPS = 50


def _never_geocoded(rows, model: str = "z", source: str = "m-c", *, conditions: tuple[str, ...] | None = None):
    """``source``'s answers as ``model``'s (in ``conditions``, None = all), each parsed (a place named) but not
    geocoded: level ``none``, no error, no hit; the answers' other fields (echo, band, image) kept."""
    out = []
    for r in rows:
        if r.model != source or (conditions is not None and r.condition not in conditions):
            continue
        out.append(dataclasses.replace(r, key=r.key.replace(f"|{source}|", f"|{model}|"), model=model,
                                       resolved_level="none", error_km=None, hit=False, parse_ok=True,
                                       city="Somewhere"))
    return out


def _agg(rows) -> GeoHintAggregator:
    agg = GeoHintAggregator()
    agg.add_many(rows)
    return agg


def _nan_as_none(rows):
    """Rows with NaN cells as None, so two tables compare cell by cell (NaN != NaN)."""
    return [[None if isinstance(v, float) and math.isnan(v) else v for v in r] for r in rows]


@pytest.fixture(scope="module")
def campaign():
    rows = synth_results(seed=3, n_sites=14)
    return rows, _agg(rows + _never_geocoded(rows)), _agg(rows)


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame([{"site": r.site, "image": r.image_id, "model": r.model, "condition": r.condition,
                          "qid": r.ref_qid, "band": r.band, "hit": bool(r.hit),
                          "building": r.resolved_level == "building"} for r in rows])


def test_the_model_is_undetermined_in_every_condition_and_only_it(campaign):
    _rows, agg, alone = campaign
    for cond in ("baseline", "forced", "forced_warn"):
        assert math.isnan(agg.select(model="z", condition=cond).geocoded_hit_rate)  # Table 1's em dash
    assert agg.undetermined_models("forced", "forced_warn") == ["z"]
    assert agg.undetermined_models("forced", "baseline") == ["z"]
    assert alone.undetermined_models("forced", "forced_warn", "baseline") == []
    assert agg.undetermined_models() == []  # no condition: no model


def test_table8_pools_the_other_models_only(campaign):
    rows, agg, alone = campaign
    t8 = GH.table_paired(agg, "forced_warn", "forced", name="table8", n_flips=N_FLIPS)
    t8_alone = GH.table_paired(alone, "forced_warn", "forced", name="table8", n_flips=N_FLIPS)
    # every column, p-values included (same pairs, same test labels), equals the campaign without z
    assert _nan_as_none(t8.rows) == _nan_as_none(t8_alone.rows)
    # independently (pandas): items answered under both conditions by m-a, m-b, m-c; hits / answers per condition
    df = _frame(rows)
    df = df[df.condition.isin(["forced", "forced_warn"])]
    both = df.groupby(["site", "image", "model", "qid"]).condition.nunique().eq(2)
    paired = df.set_index(["site", "image", "model", "qid"]).loc[both[both].index].reset_index()
    rates = paired.groupby("condition").hit.mean()
    all_sites = {r[1]: r for r in t8.rows if r[0] == "all sites"}
    assert all_sites["forced"][2] == len(paired) // 2
    assert all_sites["forced"][6] == pytest.approx(rates["forced"])
    assert all_sites["forced_warn"][6] == pytest.approx(rates["forced_warn"])
    for cond in ("forced", "forced_warn"):  # per band too
        for i, b in enumerate(BANDS):
            sel = paired[(paired.condition == cond) & (paired.band == b)]
            assert all_sites[cond][3 + i] == pytest.approx(sel.hit.mean())
        assert all_sites[cond][10] == pytest.approx(paired[paired.condition == cond].building.mean())
    # the rule before stats43 #1 (z's answers as misses) read lower: z's share of the items at 0 %
    with_z = _frame(rows + _never_geocoded(rows))
    with_z = with_z[(with_z.condition == "forced") & with_z.qid.notna()]
    assert all_sites["forced"][6] > with_z.hit.mean() + 0.05
    assert "Left out: every answer of z, whose hit rates in forced_warn and forced are undetermined" in t8.notes
    assert "Left out" not in t8_alone.notes


def test_building_vs_nocontext_pools_the_other_models_only(campaign):
    rows, agg, alone = campaign
    t = GH.table_building_vs_nocontext(agg, n_flips=N_FLIPS)
    assert _nan_as_none(t.rows) == _nan_as_none(GH.table_building_vs_nocontext(alone, n_flips=N_FLIPS).rows)
    # independently (pandas, the release's computation): per image, building share with context in the band minus
    # without, models pooled (z left out), mean over the images answered both ways
    df = _frame(rows)
    base = df[df.condition == "baseline"].groupby(["site", "image"]).building.mean()
    for row, b in zip(t.rows, BANDS):
        ctx = df[(df.condition == "forced") & (df.band == b)].groupby(["site", "image"]).building.mean()
        joined = pd.concat([ctx.rename("ctx"), base.rename("base")], axis=1, join="inner")
        assert row[1] == len(joined)
        assert row[3] == pytest.approx(joined.base.mean()) and row[4] == pytest.approx(joined.ctx.mean())
        assert row[5] == pytest.approx(100 * (joined.ctx - joined.base).mean())
    assert "Left out: every answer of z, whose hit rates in forced and baseline are undetermined" in t.notes


def test_fig2_points_and_caption(campaign, tmp_path):
    _rows, agg, alone = campaign
    assert agg.regimes() == alone.regimes()  # stats42 #1: z assigns no site
    pts = GH.hit_by_band_points(agg, n_boot=50)
    assert pts == GH.hit_by_band_points(alone, n_boot=50)
    assert GH.fig2_models(agg) == ["m-a", "m-b", "m-c"]
    GH.write_report(agg, tmp_path, n_flips=N_FLIPS, n_splits=10, n_boot=50, figures=True)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    caption = next(line for line in md.splitlines() if line.startswith("Hit rate by band per regime"))
    assert caption.startswith("Hit rate by band per regime, 3 models pooled;")
    assert "Left out: every answer of z, whose hit rate in forced is undetermined" in caption
    # Tables 8 and 10 and building_vs_nocontext say it under themselves (Table 10: forced_chain vs forced, z's
    # forced_chain answers are m-c's none: z is undetermined in forced alone, and the note names forced alone,
    # rev43b #4); Table 1 still gives z's row (em dashes)
    assert md.count("Left out: every answer of z") == 4
    assert "forced_chain or forced" not in md and "in forced_chain and forced" not in md
    assert md.count("Left out: every answer of z, whose hit rate in forced is undetermined") == 2  # Fig. 2, Table 10


def test_a_model_undetermined_in_one_condition_only_is_left_out_where_it_is():
    """z's forced_warn answers never geocoded, its forced and no-context answers are m-c's (geocoded): Table 8
    (forced_warn vs forced) leaves z out; building_vs_nocontext (forced vs baseline) keeps it."""
    rows = synth_results(seed=4, n_sites=8)
    z_ok = [dataclasses.replace(r, key=r.key.replace("|m-c|", "|z|"), model="z") for r in rows
            if r.model == "m-c" and r.condition != "forced_warn"]
    agg = _agg(rows + z_ok + _never_geocoded(rows, conditions=("forced_warn",)))
    assert agg.undetermined_models("forced_warn", "forced") == ["z"]
    assert agg.undetermined_models("forced", "baseline") == []
    alone = _agg(rows)
    assert (_nan_as_none(GH.table_paired(agg, "forced_warn", "forced", n_flips=N_FLIPS).rows)
            == _nan_as_none(GH.table_paired(alone, "forced_warn", "forced", n_flips=N_FLIPS).rows))
    t = GH.table_building_vs_nocontext(agg, n_flips=N_FLIPS)
    assert "Left out" not in t.notes
    assert [r[1] for r in t.rows] == [r[1] for r in GH.table_building_vs_nocontext(alone, n_flips=N_FLIPS).rows]
    assert agg.image_paired_models("forced", "baseline", band=BANDS[0]) == ["m-a", "m-b", "m-c", "z"]


def test_a_model_with_one_unparsed_answer_is_kept():
    """An unparsed answer is a miss of the model's own making (seed 000 Sec. 4.1): with one in each condition, z's
    rates are decided, 0 % (not an em dash), and its answers stay in the pooled rates as misses, as in the regime
    assignment (the release's rule; stats43 #3)."""
    rows = synth_results(seed=5, n_sites=8)
    z = _never_geocoded(rows)
    for cond in ("baseline", "forced", "forced_warn"):
        first = next(i for i, r in enumerate(z) if r.condition == cond)
        z[first] = dataclasses.replace(z[first], parse_ok=False, city=None)
    agg = _agg(rows + z)
    assert agg.select(model="z", condition="forced").geocoded_hit_rate == 0.0
    assert agg.undetermined_models("forced", "forced_warn", "baseline") == []
    assert GH.fig2_models(agg) == ["m-a", "m-b", "m-c", "z"]
    t8 = GH.table_paired(agg, "forced_warn", "forced", n_flips=N_FLIPS)
    assert "Left out" not in t8.notes
    assert t8.rows[-1][2] > GH.table_paired(_agg(rows), "forced_warn", "forced", n_flips=N_FLIPS).rows[-1][2]


def test_report_md_says_a_never_parsing_model_stays_in_the_regime_split_as_misses(tmp_path):
    """stats43 #3: a model whose answers never parse is kept in the regime assignment (unparsed is its own miss, the
    release's rule, unchanged) and moves the split; report.md's header says so and names it. A model whose answers
    parsed but never geocoded gets the stats42 #1 note instead, not this one."""
    rows = synth_results(seed=6, n_sites=10)
    never_parsed = [dataclasses.replace(r, parse_ok=False, city=None, area=None, building=None)
                    for r in _never_geocoded(rows, model="u")]
    agg = _agg(rows + never_parsed)
    assert agg.regime_left_out_models() == [] and agg.undetermined_models("forced", "baseline") == []
    # the rule is unchanged: u's misses count, so the split differs from the one without u
    assert agg.regimes() != _agg(rows).regimes()
    GH.write_report(agg, tmp_path, n_flips=N_FLIPS, n_splits=10, n_boot=0, figures=False)
    header = (tmp_path / "report.md").read_text(encoding="utf-8").split("### ")[0]
    n = sum(1 for r in never_parsed if r.condition == "baseline")
    assert (f"Kept in the regime assignment as misses: the no-context answers (condition 'baseline') of u ({n} of {n} "
            "unparsed).") in header
    assert "Left out of the regime assignment" not in header
    # the parsed-but-never-geocoded model: left out (stats42 #1), and this note stays silent
    z_agg = _agg(rows + _never_geocoded(rows))
    assert GH.regime_unparsed_note(z_agg, "baseline") == ""
    assert GH.regime_left_out_note(z_agg, "baseline").startswith("Left out of the regime assignment")


def test_each_left_out_model_is_named_with_its_own_undetermined_conditions():
    """Rev43b #4: the note named every compared condition ("z, whose hit rate in forced_warn or forced"), as if
    each left-out model's rate were undetermined in all of them. Now each model comes with the conditions where its
    own rate is: y (never geocoded in forced_warn and forced) and z (in forced only)."""
    rows = synth_results(seed=4, n_sites=8)
    z = ([dataclasses.replace(r, key=r.key.replace("|m-c|", "|z|"), model="z") for r in rows
          if r.model == "m-c" and r.condition != "forced"] + _never_geocoded(rows, conditions=("forced",)))
    y = ([dataclasses.replace(r, key=r.key.replace("|m-b|", "|y|"), model="y") for r in rows
          if r.model == "m-b" and r.condition not in ("forced", "forced_warn")]
         + _never_geocoded(rows, model="y", source="m-b", conditions=("forced", "forced_warn")))
    agg = _agg(rows + y + z)
    # the rates behind the note (Table 1's rule), read directly
    assert [m for m in ("y", "z") if math.isnan(agg.select(model=m, condition="forced_warn").geocoded_hit_rate)] == ["y"]
    assert all(math.isnan(agg.select(model=m, condition="forced").geocoded_hit_rate) for m in ("y", "z"))
    note = GH.pooled_left_out_note(agg, "forced_warn", "forced")
    assert note.startswith("Left out: every answer of y and z, whose hit rates are undetermined (y's in forced_warn "
                           "and forced, z's in forced; " + GH.DASH + ": none of their answers there geocoded, "
                           "every one parsed)."), note
    t8 = GH.table_paired(agg, "forced_warn", "forced", n_flips=N_FLIPS)
    assert note in t8.notes
    # one model: its own condition, not both compared
    only_z = GH.pooled_left_out_note(_agg(rows + z), "forced_warn", "forced")
    assert only_z.startswith("Left out: every answer of z, whose hit rate in forced is undetermined (" + GH.DASH
                             + ": none of its answers there geocoded, every one parsed)."), only_z


def test_fig2_terms_line_names_the_one_model_it_pools(tmp_path):
    """Rev43b #3: with m-a and z (z's forced answers never geocoded), Fig. 2 pools m-a alone; its title and caption
    said "model m-a" but the Terms line still said "models pooled" (it was given every model of the report)."""
    rows = synth_results(seed=5, n_sites=12, models=("m-a",))
    z = ([dataclasses.replace(r, key=r.key.replace("|m-a|", "|z|"), model="z") for r in rows if r.condition != "forced"]
         + _never_geocoded(rows, source="m-a", conditions=("forced",)))
    agg = _agg(rows + z)
    assert GH.fig2_models(agg) == ["m-a"] and agg.models == ["m-a", "z"]
    GH.write_report(agg, tmp_path, n_flips=N_FLIPS, n_splits=10, n_boot=50, figures=True)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    terms = next(line for line in md.splitlines() if line.startswith("- Figure fig_hit_by_band.png:"))
    assert "(sites of the regime resampled, model m-a;" in terms and "models pooled" not in terms, terms
    caption = next(line for line in md.splitlines() if line.startswith("Hit rate by band per regime"))
    assert caption.startswith("Hit rate by band per regime, model m-a;"), caption
