"""Trial builder (Sec. 5.2/5.4) and claim prompt."""

from __future__ import annotations

import math

import pytest

from geoagent.data.importer import import_release
from geoagent.data.model import DECOY_BAND_LABELS, Image, ReferencePoint, tier_of
from geoagent.geo import haversine_km
from geoagent.geoverify.prompt import TemplateError, load_template, render_claim
from geoagent.geoverify.trials import build_trials, label_trial, pools_from_trials


def test_release_labels_and_bands_from_coordinates(release_dir):
    rel = import_release(release_dir)
    for t in rel.trials:
        d, band, truth = label_trial(t.img_lat, t.img_lon, t.cand_lat, t.cand_lon)
        assert band == t.band and truth == t.truth, t
        assert d == pytest.approx(t.d_km, abs=1.01e-4)


def test_builder_reproduces_release_sample(release_dir):
    rel = import_release(release_dir)
    pools = pools_from_trials(rel.trials)
    built, rep = build_trials(list(rel.images.values()), pools, seed=7, n_per_band=None, n_control=0)
    got = {(t.image_id, t.cand): (t.band, t.truth) for t in built}
    want = {(t.image_id, t.cand): (t.band, t.truth) for t in rel.trials}
    assert got == want
    # counts per band equal the release table's
    from collections import Counter

    release_counts = Counter(t.band for t in rel.trials)
    assert rep.per_band() == {b: release_counts.get(b, 0) for b in rep.per_band()}
    assert {t.trial_id for t in built} == {t.trial_id for t in rel.trials}


def _offset(lat, lon, d_km, bearing_deg=90.0):
    """Point d_km from (lat, lon) along a bearing (spherical destination formula)."""
    R = 6371.0088
    p1, l1, b = math.radians(lat), math.radians(lon), math.radians(bearing_deg)
    p2 = math.asin(math.sin(p1) * math.cos(d_km / R) + math.cos(p1) * math.sin(d_km / R) * math.cos(b))
    l2 = l1 + math.atan2(math.sin(b) * math.sin(d_km / R) * math.cos(p1), math.cos(d_km / R) - math.sin(p1) * math.sin(p2))
    return math.degrees(p2), math.degrees(l2)


def _pool(site, lat, lon, spec):
    pts = []
    for name, d, ref in spec:
        la, lo = _offset(lat, lon, d, bearing_deg=(sum(map(ord, name)) * 37) % 360)
        pts.append(ReferencePoint(qid=None, name_en=name, lat=la, lon=lo, referenceability=ref, tier=tier_of(ref), site_id=site))
    return pts


@pytest.fixture
def synthetic():
    img_a = Image("101", "site_a", 48.0, 2.0, continent="EU")
    img_b = Image("202", "site_b", -12.0, -77.0, continent="SA")
    spec_a = [("A sig high", 0.05, 5), ("A sig2 mid", 0.12, 3)]
    # nearest band: 2 high, 1 mid, 3 low; 3-6 km band: only low (unmatched for a high signal)
    spec_a += [("A n1 high", 0.2, 4), ("A n2 high", 0.25, 5), ("A n3 mid", 0.2, 2)]
    spec_a += [(f"A n low {i}", 0.22, 0) for i in range(3)]
    spec_a += [(f"A far low {i}", 4.0, 1) for i in range(3)]
    spec_a += [("A mid band", 1.0, 3), ("A out of range", 7.0, 5), ("A unusable", 0.05, 5)]
    pool_a = _pool("site_a", 48.0, 2.0, spec_a)
    pool_a[-1] = ReferencePoint(**{**pool_a[-1].to_dict(), "usable": False})
    pool_b = _pool("site_b", -12.0, -77.0, [("B sig", 0.1, 2), ("B near", 0.5, 2), ("B far", 2.0, 3)])
    return [img_a, img_b], {"site_a": pool_a, "site_b": pool_b}


def test_builder_matches_tiers_and_counts(synthetic):
    images, pools = synthetic
    trials, rep = build_trials(images, pools, seed=3, n_per_band=2, n_control=2)
    a_main = [t for t in trials if t.image_id == "101" and t.arm == "main"]
    for t in a_main:  # labels follow the haversine distance
        d = haversine_km(t.img_lat, t.img_lon, t.cand_lat, t.cand_lon)
        assert (t.truth == "yes") == (d < 0.15)
    assert sorted(t.cand for t in a_main if t.band == "signal") == ["A sig high", "A sig2 mid"]
    assert "A unusable" not in {t.cand for t in trials} and "A out of range" not in {t.cand for t in trials}
    near = [t for t in a_main if t.band == DECOY_BAND_LABELS[0]]
    # targets alternate high (signal 1) and mid (signal 2): one high decoy, one mid decoy, never low
    assert sorted(tier_of(t.referenceability) for t in near) == ["high", "mid"]
    far = [t for t in a_main if t.band == DECOY_BAND_LABELS[-1]]
    assert len(far) == 2 and all(tier_of(t.referenceability) == "low" for t in far)
    assert rep.unmatched_decoys >= 1  # the high target could only get a low decoy in 3-6 km
    # per-band counts are exact counts of the trial list
    for (arm, band), n in rep.counts.items():
        assert n == sum(1 for t in trials if t.arm == arm and t.band == band)
    assert rep.short_cells > 0  # e.g. the 0.3-0.7 km band of site_a is empty


def test_controls(synthetic):
    images, pools = synthetic
    trials, _ = build_trials(images, pools, seed=3, n_control=2)
    by_id = {im.image_id: im for im in images}
    mism = [t for t in trials if t.arm == "ctrl_mismatch"]
    blank = [t for t in trials if t.arm == "ctrl_noimage"]
    assert len(mism) == len(blank) == 4
    for t in mism:
        assert t.truth == "no" and by_id[t.image_ref].continent != by_id[t.image_id].continent
        assert any(m.cand == t.cand and m.image_id == t.image_id and m.arm == "main" for m in trials)
    assert all(t.image_ref == "blank:gray" and t.truth == "no" for t in blank)


def test_builder_deterministic(synthetic):
    images, pools = synthetic
    a, _ = build_trials(images, pools, seed=5)
    b, _ = build_trials(list(reversed(images)), pools, seed=5)
    assert sorted(a, key=lambda t: t.trial_id) == sorted(b, key=lambda t: t.trial_id)
    seeds = {tuple(sorted(t.trial_id for t in build_trials(images, pools, seed=s)[0])) for s in range(20)}
    assert len(seeds) > 1  # the seed matters


def test_claim_prompt(tmp_path):
    text = render_claim("Schreierstoren")
    assert '"Schreierstoren"' in text and "150 metres" in text
    assert "{candidate}" not in text and "{tau_m}" not in text
    for word in ("verdict", "confidence", "evidence", '"yes"', '"no"'):
        assert word in text
    assert "Amsterdam" not in text and "52." not in text  # name only: no city, no coordinates
    assert render_claim("X", tau_km=0.3).count("300 metres") == 1
    own = tmp_path / "mine.txt"
    own.write_text("Is this near {candidate}? {tau_m} m. JSON please: {\"verdict\": ...}", encoding="utf-8")
    tpl = load_template(str(own))
    assert render_claim("Big Ben", tpl) == 'Is this near Big Ben? 150 m. JSON please: {"verdict": ...}'
    assert load_template(None) == load_template()
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder", encoding="utf-8")
    with pytest.raises(TemplateError):
        load_template(bad)
    with pytest.raises(ValueError):
        render_claim("  ")
