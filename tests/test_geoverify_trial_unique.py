"""Every built GeoVerify trial is its own model request (seed 000 Sec. 5.4: k controls per image).

Two images of one site share their candidate pool, so both can put a control arm on the same
candidate; their mismatched-image draws from the other continent could then pick the same image,
making two trials one model request (same image, same claim): one answer scored twice, and a dry run
counting one more call than the run makes. The builder redraws such a draw (seeded, deterministic)
among the other continent's images not yet shown with that claim, and drops it only when none is left.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from geoagent.data.model import Image, ReferencePoint, tier_of
from geoagent.geoverify.trials import build_trials


def _east(lat: float, lon: float, d_km: float) -> tuple[float, float]:
    """A point d_km due east along the parallel (small distances: within 1e-6 km of the great circle)."""
    return lat, lon + math.degrees(d_km / (6371.0088 * math.cos(math.radians(lat))))


def _pt(site: str, name: str, lat: float, lon: float, d_km: float, ref: int = 3) -> ReferencePoint:
    la, lo = _east(lat, lon, d_km)
    return ReferencePoint(qid=None, name_en=name, lat=la, lon=lo, referenceability=ref, tier=tier_of(ref), site_id=site)


def _world(n_other: int, shared_name: bool = False):
    """Site ``eu`` with two images and one candidate (signal for both); site ``sa`` on another continent
    with ``n_other`` images and one candidate of its own (named like eu's when ``shared_name``)."""
    eu = [Image(f"eu{i}", "eu", 48.0, 2.0 + i * 1e-5, continent="EU") for i in range(2)]
    sa = [Image(f"sa{i}", "sa", -12.0, -77.0 + i * 1e-5, continent="SA") for i in range(n_other)]
    pools = {"eu": [_pt("eu", "Tiger Station", 48.0, 2.0, 0.05)],
             "sa": [_pt("sa", "Tiger Station" if shared_name else "Plaza", -12.0, -77.0, 0.05)]}
    return eu + sa, pools


def _requests(trials):
    """(image shown, claim) of each non-blank trial (a blank trial shows the gray field of its own image)."""
    return [(t.image_ref, t.cand) for t in trials if t.arm != "ctrl_noimage"]


@pytest.mark.parametrize("seed", range(24))
def test_mismatch_draws_are_unique_requests(seed):
    images, pools = _world(n_other=2)
    trials, rep = build_trials(images, pools, seed=seed, n_control=2)
    mism = [t for t in trials if t.arm == "ctrl_mismatch" and t.site_id == "eu"]
    # one control per eu image (one candidate each), each shown a different sa image: both sa images used
    assert sorted(t.image_id for t in mism) == ["eu0", "eu1"]
    assert sorted(t.image_ref for t in mism) == ["sa0", "sa1"]
    assert all(n == 1 for n in Counter(_requests(trials)).values())
    assert rep.mismatch_dropped == 0
    assert rep.counts[("ctrl_mismatch", "signal")] == sum(t.arm == "ctrl_mismatch" for t in trials)


def test_redraw_happens_and_is_order_independent():
    # per seed the first draws of eu0 and eu1 collide with chance 1/2, and so do those of sa0 and sa1
    # (one redraw per collision): over 24 seeds some redraws ran, at most 2 per seed
    redrawn = 0
    for seed in range(24):
        images, pools = _world(n_other=2)
        a, rep = build_trials(images, pools, seed=seed)
        b, _ = build_trials(list(reversed(images)), pools, seed=seed)
        assert sorted(a, key=lambda t: t.trial_id) == sorted(b, key=lambda t: t.trial_id)
        redrawn += rep.mismatch_redrawn
    assert 0 < redrawn <= 48


def test_no_image_left_drops_the_duplicate():
    images, pools = _world(n_other=1)
    trials, rep = build_trials(images, pools, seed=0)
    mism = [t for t in trials if t.arm == "ctrl_mismatch" and t.site_id == "eu"]
    assert [t.image_ref for t in mism] == ["sa0"]  # only one eu image can be shown sa0 with this claim
    assert rep.mismatch_dropped == 1
    assert all(n == 1 for n in Counter(_requests(trials)).values())
    # each image still has its blank control
    assert sorted(t.image_id for t in trials if t.arm == "ctrl_noimage" and t.site_id == "eu") == ["eu0", "eu1"]


def test_mismatch_never_repeats_a_main_trial_request():
    # sa's own candidate has eu's name: "sa0 with claim Tiger Station" is sa0's main trial already
    images, pools = _world(n_other=2, shared_name=True)
    for seed in range(12):
        trials, rep = build_trials(images, pools, seed=seed)
        assert all(n == 1 for n in Counter(_requests(trials)).values()), seed
        # every image of the other continent shows "Tiger Station" in its main arm: no mismatch is left
        assert not [t for t in trials if t.arm == "ctrl_mismatch"] and rep.mismatch_dropped == 4

