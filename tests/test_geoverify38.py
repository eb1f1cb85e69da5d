"""GeoVerify (session 38, geoverify38).

Before:

* #1 of two candidates sharing a name the trial builder kept the first in pool order, not the nearest: with "St
  Mary's Church" 0.1 km and 2.0 km from the camera, pool order [far, near] made a 1.5-3 km decoy with truth "no" of
  a claim that is true (the model sees the name alone), and shuffling the pool changed the trial table;
* #2 "No, I can't determine that from this image." was read as the verdict "no" (a refusal scored as a correct
  rejection of a decoy or a miss of a signal); a hedge ("No, I cannot be certain") stays a verdict (review38 #3);
* #3 "**Confidence:** 85%" lost its confidence (the verdict was read).
"""

from __future__ import annotations

import math
import random

import pytest

from geoagent.data.model import BAND_SIGNAL, TRUTH_YES, Image, ReferencePoint, tier_of
from geoagent.geo import haversine_km
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.trials import build_trials


def _at(lat: float, lon: float, d_km: float, bearing_deg: float) -> tuple[float, float]:
    """The point ``d_km`` from (lat, lon) along a bearing (spherical destination formula)."""
    r = 6371.0088
    p1, l1, b = math.radians(lat), math.radians(lon), math.radians(bearing_deg)
    p2 = math.asin(math.sin(p1) * math.cos(d_km / r) + math.cos(p1) * math.sin(d_km / r) * math.cos(b))
    l2 = l1 + math.atan2(math.sin(b) * math.sin(d_km / r) * math.cos(p1), math.cos(d_km / r) - math.sin(p1) * math.sin(p2))
    return math.degrees(p2), math.degrees(l2)


def _point(qid: str, name: str, d_km: float, bearing: float, ref: int = 3) -> ReferencePoint:
    lat, lon = _at(48.0, 2.0, d_km, bearing)
    return ReferencePoint(qid=qid, name_en=name, lat=lat, lon=lon, referenceability=ref, tier=tier_of(ref), site_id="s")


@pytest.mark.parametrize("near_first", [True, False])
def test_of_candidates_sharing_a_name_the_nearest_is_the_claims_place(near_first):
    near, far = _point("Q2", "St Mary's Church", 0.10, 30.0), _point("Q1", "St Mary's Church", 2.0, 200.0)
    others = [_point(f"Q{10 + i}", f"Place {i}", d, 45.0 * i) for i, d in enumerate((0.4, 0.9, 1.8, 4.0, 8.0, 20.0))]
    pool = [near, far] if near_first else [far, near]
    image = Image("101", "s", 48.0, 2.0, continent="EU")
    trials, _ = build_trials([image], {"s": pool + others}, seed=7, n_per_band=None, n_control=0)
    named = [t for t in trials if t.cand == "St Mary's Church"]
    assert len(named) == 1, named
    (t,) = named
    assert (t.band, t.truth, t.cand_qid) == (BAND_SIGNAL, TRUTH_YES, "Q2")
    assert t.d_km == pytest.approx(haversine_km(48.0, 2.0, near.lat, near.lon), abs=1e-4)


def test_the_trial_table_does_not_depend_on_the_pools_order():
    # same-named places in several bands, equal distances tied by QID text
    pool = [_point(f"Q{i}", f"Name {i % 5}", 0.05 + 0.37 * i, (53.0 * i) % 360) for i in range(40)]
    pool += [_point("Q900", "Name 1", 0.05 + 0.37, 90.0), _point("Q0900", "Name 1", 0.05 + 0.37, 270.0)]
    images = [Image(str(100 + k), "s", *_at(48.0, 2.0, 0.2 * k, 10.0 * k), continent="EU") for k in range(4)]

    def table(p):
        trials, _ = build_trials(images, {"s": p}, seed=3, n_per_band=2, n_control=0)
        return sorted((t.image_id, t.cand, t.cand_qid, t.band, t.truth, t.d_km) for t in trials)

    want = table(pool)
    for k in range(5):
        shuffled = pool[:]
        random.Random(k).shuffle(shuffled)
        assert table(shuffled) == want


@pytest.mark.parametrize("text", [
    "No, I can't determine that from this image.",
    "No, I can\u2019t determine that from this image.",  # a curly apostrophe (review38 #2)
    "No, I really can't tell.",
    "No. I am unable to verify where this photo was taken.",
    "No, I'm unable to verify where this was taken.",  # review38b #1
    "No, I\u2019m not able to determine that from this image.",
    "Yes, it is impossible to tell from the image alone.",
    "No, I don't know.",
    "No, I don\u2019t know.",
    '{"verdict": "No, I cannot determine this"}',
])
def test_a_leading_word_before_a_statement_that_it_cannot_be_told_is_no_verdict(text):
    got = parse_verdict(text)
    assert not got.ok and got.verdict is None, got


@pytest.mark.parametrize("text, verdict", [
    ("No, I can't see a church here, so the claim is false.", "no"),  # evidence, not a refusal
    # a hedge is a verdict: the prompt asks for one and puts doubt in the confidence (review38 #3)
    ("No, I cannot be certain.", "no"),
    ("Yes, hard to say.", "yes"),
    ("No, it's difficult to say for sure, but it is not here.", "no"),
    ("No, this is not the place.", "no"),
    ("Yes. The tower on the left is the church's.", "yes"),
])
def test_a_leading_word_with_reasons_is_still_a_verdict(text, verdict):
    got = parse_verdict(text)
    assert got.ok and got.verdict == verdict, got


@pytest.mark.parametrize("text", ["**Verdict:** Yes\n**Confidence:** 85%", "**Verdict**: Yes\n**Confidence**: 85%",
                                  "__Verdict__: yes\n__Confidence__: 0.85", "Verdict: yes\nConfidence: 85%"])
def test_a_label_in_bold_keeps_its_confidence(text):
    got = parse_verdict(text)
    assert (got.ok, got.verdict, got.confidence) == (True, "yes", pytest.approx(0.85)), got
