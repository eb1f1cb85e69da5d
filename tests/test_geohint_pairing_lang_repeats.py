"""Strictly paired items (Tables 8-10) are keyed by language and average their repeats (session 12 review).

Seed 000 Sec. 6.3.1 pairs "same site, same image, same model, same language, same reference point" (8215 pairs),
and the release's analysis scripts (``mitigation_results.py``, ``chain_results.py``, ``cluster_inference.py``)
key ``[site, path, model, lang, context]`` and take ``pivot_table(...).mean`` per key, which averages an item's
repeats before the paired difference. Before this change our key left ``lang`` out and held ``repeat`` in it,
pairing repeat r with repeat r.
"""

from __future__ import annotations

import numpy as np
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report.geohint import table_paired
from geoagent.scoring.geohint import is_hit

pd = pytest.importorskip("pandas")


def _r(key: str, condition: str, hit: bool, *, lang: str | None = "en", repeat: int = 0, site: str = "s1",
       image: str = "11", model: str = "m", qid: str = "Q1", building: bool = False) -> GeoHintResult:
    err = 0.4 if hit else 2.5
    level = "building" if building else "area"
    extra = {} if lang is None else {"lang": lang}
    return GeoHintResult(key=key, site=site, image_id=image, model=model, condition=condition, schema="forced",
                         repeat=repeat, ref_qid=qid, ref_name="Point", band="0.5-1.5km", tier="high", dist_km=1.0,
                         resolved_level=level, error_km=err, hit=is_hit(err, level), echo=False, extra=extra)


def _all_sites_treatment_row(agg: GeoHintAggregator) -> list:
    t8 = table_paired(agg, "forced_warn", "forced", n_flips=100, seed=0)
    return [row for row in t8.rows if row[0] == "all sites"][1]


def test_answers_in_different_languages_do_not_pair():
    """Before: the English forced answer (hit) paired with the Chinese forced_warn answer (miss) of the same image,
    model and reference point: 1 pair, delta -100 points. After: no pair (n 0, no delta)."""
    agg = GeoHintAggregator()
    agg.add_many([_r("a", "forced", True, lang="en"), _r("b", "forced_warn", False, lang="zh")])
    assert agg.paired("forced_warn", "forced") == []
    assert agg.n_pair_conflicts == 0


def test_two_languages_of_one_item_are_two_pairs():
    """Before: the zh forced answer met the en one in a single slot (a 'conflict', one of them dropped) and one pair
    was left. After: two pairs, one per language; delta = mean of (+1, 0) = +50 points."""
    agg = GeoHintAggregator()
    agg.add_many([_r("a1", "forced", False, lang="en"), _r("a2", "forced_warn", True, lang="en"),
                  _r("b1", "forced", True, lang="zh"), _r("b2", "forced_warn", True, lang="zh")])
    assert len(agg.paired("forced_warn", "forced")) == 2
    assert agg.n_pair_conflicts == 0
    row = _all_sites_treatment_row(agg)
    assert row[2] == 2 and row[7] == pytest.approx(50.0)


def test_a_missing_language_is_english():
    """A campaign answer carries no ``lang``: every campaign prompt is English, so it pairs with a release row
    whose ``lang`` is ``en`` (and takes the same slot for the same repeat). The spelling is the release's, as
    written ("EN " is another language: tests/test_lang_spelling_one_rule.py)."""
    agg = GeoHintAggregator()
    agg.add_many([_r("a", "forced", True, lang=None), _r("b", "forced_warn", False, lang="en")])
    assert len(agg.paired("forced_warn", "forced")) == 1


def test_repeats_are_averaged_per_item_before_the_paired_difference():
    """Hand case: forced repeats 0 and 1 (hit, miss), forced_warn repeat 0 (hit). Release: forced mean 0.5, warn
    mean 1.0, one pair, delta +50 points. Before: repeat 0 paired with repeat 0 only (1 vs 1), delta 0."""
    agg = GeoHintAggregator()
    agg.add_many([_r("f0", "forced", True, repeat=0), _r("f1", "forced", False, repeat=1),
                  _r("w0", "forced_warn", True, repeat=0)])
    pairs = agg.paired("forced_warn", "forced")
    assert len(pairs) == 1
    assert pairs[0][1].hit == 1.0 and pairs[0][2].hit == 0.5
    row = _all_sites_treatment_row(agg)
    assert row[2] == 1 and row[7] == pytest.approx(50.0)
    # rate columns pool every response of the paired items (the release's raw-count rows): forced 1 hit of 2
    control = [r for r in table_paired(agg, "forced_warn", "forced", n_flips=100).rows if r[0] == "all sites"][0]
    assert control[6] == pytest.approx(0.5) and row[6] == pytest.approx(1.0)


def test_items_whose_repeat_indices_do_not_overlap_still_pair():
    """forced answered only as repeat 1, forced_warn only as repeat 0: the same item (release key has no repeat).
    Before: no pair. After: one pair, delta +100 points (warn hit, forced miss)."""
    agg = GeoHintAggregator()
    agg.add_many([_r("f1", "forced", False, repeat=1), _r("w0", "forced_warn", True, repeat=0)])
    row = _all_sites_treatment_row(agg)
    assert row[2] == 1 and row[7] == pytest.approx(100.0)


def test_same_repeat_twice_is_still_one_slot_whatever_the_order():
    """The order-independence rule stays: two results for the same item, language, repeat and condition under
    different result keys are one slot, the smallest key held."""
    res = [_r("k1", "forced", False), _r("k2", "forced", True), _r("k3", "forced_warn", True)]
    seen = set()
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        agg = GeoHintAggregator()
        agg.add_many(res[i] for i in order)
        (p,) = agg.paired("forced_warn", "forced")
        seen.add((p[1].hit, p[2].hit, p[2].n))
        assert agg.n_pair_conflicts == 1
    assert seen == {(1.0, 0.0, 1)}


def _random_rows(seed: int) -> list[GeoHintResult]:
    rng = np.random.default_rng(seed)
    out = []
    for s in range(7):
        for img in range(2):
            for model in ("m-a", "m-b"):
                for lang in ("en", "zh"):
                    for q in range(3):
                        for cond in ("forced", "forced_warn"):
                            for rep in range(int(rng.integers(0, 4))):  # 0-3 repeats, unbalanced on purpose
                                out.append(_r(f"{s}|{img}|{model}|{lang}|{q}|{cond}|{rep}", cond, bool(rng.random() < 0.4 + 0.1 * (cond == "forced_warn")),
                                              lang=lang, repeat=rep, site=f"s{s}", image=str(100 + img), model=model,
                                              qid=f"Q{q}", building=bool(rng.random() < 0.3)))
    return out


def test_paired_delta_equals_an_independent_pandas_recomputation_of_the_release_rule():
    """Independent re-computation from the paper's / release's definition: pandas ``pivot_table`` (mean) over the key
    (site, image, model, lang, reference point), ``dropna()``, delta = mean(warn - forced) in points, n = keys."""
    rows = _random_rows(3)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    df = pd.DataFrame([dict(site=r.site, path=r.image_id, model=r.model, lang=r.extra["lang"], context=r.ref_qid,
                            schema=r.condition, hit=float(r.hit), building=float(r.resolved_level == "building"))
                       for r in rows])
    key = ["site", "path", "model", "lang", "context"]
    piv = df.pivot_table(index=key, columns="schema", values="hit").dropna()
    pivb = df.pivot_table(index=key, columns="schema", values="building").dropna()
    row = _all_sites_treatment_row(agg)
    assert row[2] == len(piv)
    assert row[7] == pytest.approx(100 * (piv["forced_warn"] - piv["forced"]).mean())
    assert row[11] == pytest.approx(100 * (pivb["forced_warn"] - pivb["forced"]).mean())
    # and it differs from pairing repeat with repeat (the old rule) on these unbalanced repeats
    old = df.assign(rep=[r.repeat for r in rows]).pivot_table(index=key + ["rep"], columns="schema", values="hit").dropna()
    assert len(old) != len(piv)
    # incremental in any order equals the batch
    shuffled = GeoHintAggregator()
    for i in np.random.default_rng(0).permutation(len(rows)):
        shuffled.add(rows[int(i)])
    assert _all_sites_treatment_row(shuffled)[7] == pytest.approx(row[7])


def test_pooled_rate_columns_and_the_paired_delta_can_disagree_in_sign_and_the_table_says_why():
    """stats40 #2: three items answered once (forced hit, forced_warn miss) and one answered ten times in each
    condition (forced all misses, forced_warn all hits). Pooled over answers, forced_warn is far ahead (10/13 vs
    3/13); averaged over items, it is behind: (3 x -1 + 1) / 4 = -50 points."""
    from geoagent.report.geohint import PAIRED_RATES_NOTE

    rows = []
    for i in range(3):
        rows += [_r(f"f{i}", "forced", True, image=f"1{i}"), _r(f"w{i}", "forced_warn", False, image=f"1{i}")]
    for k in range(10):
        rows += [_r(f"F{k}", "forced", False, image="99", repeat=k), _r(f"W{k}", "forced_warn", True, image="99", repeat=k)]
    agg = GeoHintAggregator()
    agg.add_many(rows)
    t8 = table_paired(agg, "forced_warn", "forced", n_flips=100, seed=0)
    control, treated = [r for r in t8.rows if r[0] == "all sites"]
    assert control[6] == pytest.approx(3 / 13) and treated[6] == pytest.approx(10 / 13)
    assert treated[7] == pytest.approx(-50.0)
    assert PAIRED_RATES_NOTE in t8.notes
