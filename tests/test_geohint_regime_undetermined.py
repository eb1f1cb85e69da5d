"""A site none of whose no-context answers geocoded has an undetermined regime, not an illegible one.

Walkthrough: GeoHint over a crawl whose answers the geocoder resolved none of (100 % unresolved) reported
"regimes: 0 legible, 6 illegible": an answer that did not geocode counts as a miss, so a 0 % no-context hit
rate that measures the geocoder, not the image, put every site below the threshold (seed 000 Sec. 6.1.2
assigns the regime by the no-context hit rate; with nothing geocoded there is no such rate to read).

Hand-made rows (one model): s1 and s2 as in ``tests/test_geohint_regime_threshold.py`` (all answers at area
level); s3's four no-context answers all unresolved; s4 has one of four geocoded (a miss) and three
unresolved, so it keeps the rule as before (unresolved answers count as misses: illegible, 0 of 4).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import anyio
from _geohint_synth import hand_rows

from geoagent import engine
from geoagent.config import config_from_dict
from geoagent.geohint.aggregate import BANDS, GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve
from geoagent.scoring.geohint import is_hit

BASELINE = {"s1": [1, 1, 1, 0], "s2": [1, 1, 0, 0]}
NEAR = {"s1": [1, 1, 1, 1], "s2": [1, 1, 1, 0], "s3": [1, 0, 0, 0], "s4": [0, 0, 0, 0]}


def _unresolved(site: str, n: int, start: int = 0) -> list[GeoHintResult]:
    return [GeoHintResult(key=f"b|{site}|{r}", site=site, image_id=f"{site}-img", model="m", condition="baseline",
                          schema="forced", repeat=r, resolved_level="none", error_km=None, hit=False)
            for r in range(start, start + n)]


def _agg() -> GeoHintAggregator:
    agg = GeoHintAggregator()
    agg.add_many(hand_rows(BASELINE, NEAR))
    agg.add_many(_unresolved("s3", 4))
    agg.add(GeoHintResult(key="b|s4|0", site="s4", image_id="s4-img", model="m", condition="baseline",
                          schema="forced", repeat=0, resolved_level="area", error_km=5.0, hit=is_hit(5.0, "area")))
    agg.add_many(_unresolved("s4", 3, start=1))
    return agg


def test_a_site_with_no_geocoded_no_context_answer_is_undetermined():
    agg = _agg()
    assert agg.regimes() == {"s1": "legible", "s2": "legible", "s4": "illegible"}
    assert agg.undetermined_sites() == ["s3"]
    t2 = {r[0]: r for r in GH.table2(agg).rows}
    assert set(t2) == {"illegible (1 site)", "legible (2 sites)"}  # s3 in no regime row
    assert "1 site whose no-context answers none geocoded has an undetermined regime" in GH.no_regime_note(agg, "baseline")
    # Table 3's split-half assignment never puts s3 in a regime either: its no-context answers are left out
    bs, _bm, _bh = agg.baseline_arrays("baseline")
    assert "s3" not in bs and bs.count("s4") == 4


def test_nothing_geocoded_no_regime_split_and_the_note_says_why():
    agg = GeoHintAggregator()
    agg.add_many(hand_rows({}, {"s5": [0, 0]}))
    agg.add_many(_unresolved("s5", 3))
    assert agg.regimes() == {} and agg.undetermined_sites() == ["s5"]
    note = GH.regime_note(agg, "baseline")
    assert note.startswith("No regime split:") and "none of their no-context answers geocoded" in note
    assert "no no-context answers" not in note


def test_campaign_whose_answers_none_geocode_reports_regimes_undetermined(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    fast = {"rate": 2000.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 3, "timeout_s": 10.0}

    async def main():
        empty = Gazetteer()  # endpoints that answer but know no place: every answer unresolved
        async with serve(wd_fake.make_app(empty)) as wd, serve(nm_fake.make_app(empty, min_interval_s=0.0)) as nm:
            doc = {
                "campaign": {"name": "gh-undet", "kind": "geohint", "seed": 1, "contact": "ops@example.org"},
                "budget": {"cap_usd": 0.0},
                "models": [{"name": "sim-a", "provider": "simulated", "model": "sim-a"}],
                "hosts": {urlsplit(wd).netloc: fast, urlsplit(nm).netloc: fast},
                "geohint": {"sites": ["paris_marais", "tokyo_shibuya"], "conditions": ["baseline", "forced"],
                            "images": "synthetic", "baseline_repeats": 2, "n_flips": 20, "n_splits": 5,
                            "geocoder": {"wikidata_url": wd + "/w/api.php", "nominatim_url": nm,
                                         "nominatim_max_requests": 100_000}},
            }
            return await engine.run_campaign(config_from_dict(doc), live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    assert out.status == "complete", out.summary()
    text = out.summary()
    assert "regimes: 0 legible, 0 illegible, 2 undetermined (no no-context answer geocoded)" in text
    md = (tmp_path / "state" / "gh-undet" / "report" / "report.md").read_text(encoding="utf-8")
    assert "none of their no-context answers geocoded" in md


def test_the_split_half_correction_applies_the_undetermined_rule_to_each_half_a():
    """Seed 000 Sec. 6.1.3's split assigns the regime from half A. s4 (one geocoded miss, three unresolved) has a
    regime on its full data, but in a split whose half A (2 of its 4 answers) holds only unresolved answers the
    half's 0 % measures the geocoder: s4 has no regime in that split. Counted by replaying the splits' masks."""
    import numpy as np

    from geoagent.scoring.regime import draw_half_masks, split_half_correction

    agg = _agg()
    bs, bm, bh = agg.baseline_arrays("baseline")
    flags = agg.baseline_geocoded_flags("baseline")
    assert len(flags) == len(bs)
    # aligned with baseline_arrays: every hit geocoded; s4's four answers: one geocoded (its miss), three not
    assert all(f for f, h in zip(flags, bh) if h)
    assert [f for f, s in zip(flags, bs) if s == "s4"].count(True) == 1
    ns, nm, nh = agg.context_arrays("forced", BANDS[0])
    n_splits, seed = 60, 7
    new = split_half_correction(bs, bm, bh, ns, nm, nh, n_splits=n_splits, seed=seed, baseline_geocoded=flags)
    old = split_half_correction(bs, bm, bh, ns, nm, nh, n_splits=n_splits, seed=seed)

    # replay the masks: on the baseline responses in the scorer's canonical order (site, model, hit, geocoded;
    # audit 24), site codes in order of first appearance (baseline first), as split_half_correction codes them
    canon = sorted(range(len(bs)), key=lambda i: (str(bs[i]), str(bm[i]), bh[i], flags[i]))
    codes = {s: i for i, s in enumerate(dict.fromkeys(list(bs) + list(ns)))}
    bs, bh, flags = [bs[i] for i in canon], [bh[i] for i in canon], [flags[i] for i in canon]
    groups = np.array([codes[s] for s in bs])
    rng = np.random.default_rng(seed)
    s2, s4 = (np.array([s == site for s in bs]) for site in ("s2", "s4"))
    hit, geo = np.array(bh, dtype=bool), np.array(flags)
    s4_assigned = s2_illegible = either = 0
    for _ in range(n_splits):
        a = draw_half_masks(groups, rng)
        s4_in = bool((a & s4 & geo).any())  # s4's geocoded answer (a miss) in half A: s4 illegible (0 of 2)
        s2_in = not (a & s2 & hit).any()  # s2's half A holds its two misses: s2 illegible too
        s4_assigned += s4_in
        s2_illegible += s2_in
        either += s4_in or s2_in
    assert 0 < s4_assigned < n_splits and s2_illegible < n_splits  # every kind of split occurs with this seed
    ill_new = {r.model: r for r in new.rows if r.regime == "illegible"}["m"]
    ill_old = {r.model: r for r in old.rows if r.regime == "illegible"}["m"]
    # the illegible row is defined in the splits where some site is illegible: s4 only when its half A has its
    # geocoded answer (before: in every split, by a 0 % of unresolved answers), s2 when its half A has no hit;
    # and where the illegible sites' no-context half B holds a geocoded answer: s4 alone has none there (its
    # geocoded answer is in half A, its half B unresolved: a 0 % that measures the geocoder), so only the
    # splits with s2 illegible (all its answers geocoded) count
    assert ill_new.n_splits_used == s2_illegible < either < ill_old.n_splits_used == n_splits
    # the uncorrected column (full data, where s4 has a geocoded answer) is the same either way
    assert ill_new.uncorrected == ill_old.uncorrected
