"""Nested GeoVerify designs: lowering ``n_per_band`` or ``n_control`` keeps a subset of the trials, raising it a
superset, for a fixed seed (seed 000 Sec. 5.2 draws per band, Sec. 5.4 control arms).

Walkthrough: ``[geoverify] trials = "build"`` over a crawl folder, ``n_per_band`` 3 -> 2 between runs: 516 of
the 1035 tasks of the lowered plan were new, 38 of 52 gray-field controls were set aside although
``n_control`` did not change, and 192 of 293 paid answers were no longer scored. One random stream per image ran
through every band and then the controls, so one draw fewer in a band moved every later draw. Each band cell now
draws from a stream of its own, and the controls from one that no decoy count reaches.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pytest

from _model_harness import geoverify_over_crawl_toml
from geoagent.data.model import DECOY_BAND_LABELS, Image, ReferencePoint, tier_of
from geoagent.geoverify.trials import build_trials

CONTROL_ARMS = ("ctrl_mismatch", "ctrl_noimage")


def _offset(lat, lon, d_km, bearing_deg):
    R = 6371.0088
    p1, l1, b = math.radians(lat), math.radians(lon), math.radians(bearing_deg)
    p2 = math.asin(math.sin(p1) * math.cos(d_km / R) + math.cos(p1) * math.sin(d_km / R) * math.cos(b))
    l2 = l1 + math.atan2(math.sin(b) * math.sin(d_km / R) * math.cos(p1), math.cos(d_km / R) - math.sin(p1) * math.sin(p2))
    return math.degrees(p2), math.degrees(l2)


#: (lower, upper) km of the signal band and the five decoy bands
_BANDS = [(0.01, 0.14), (0.16, 0.29), (0.31, 0.69), (0.71, 1.49), (1.51, 2.99), (3.01, 5.99)]


def _world():
    """Three sites on two continents, two images each; every band cell holds 7 candidates of mixed tiers."""
    sites = {"paris": (48.85, 2.35, "EU"), "rome": (41.9, 12.5, "EU"), "lima": (-12.05, -77.04, "SA")}
    images, pools = [], {}
    for s, (lat, lon, cont) in sites.items():
        pts = []
        for bi, (lo, hi) in enumerate(_BANDS):
            for j in range(7 if bi else 3):
                d = lo + (hi - lo) * (j + 0.5) / 7
                la, ln = _offset(lat, lon, d, (bi * 61 + j * 47) % 360)
                ref = (j * 2 + bi) % 6
                pts.append(ReferencePoint(qid=None, name_en=f"{s} b{bi} c{j}", lat=la, lon=ln, referenceability=ref,
                                          tier=tier_of(ref), site_id=s))
        pools[s] = pts
        images += [Image(f"{s}-{k}", s, lat + k * 2e-5, lon, continent=cont) for k in range(2)]
    return images, pools


def _cells(trials):
    """Main-arm draws per (image, band) in draw order."""
    out = defaultdict(list)
    for t in trials:
        if t.arm == "main":
            out[(t.image_id, t.band)].append(t.cand)
    return out


def _ids(trials, arms):
    return {t.trial_id for t in trials if t.arm in arms}


@pytest.mark.parametrize("seed", range(8))
def test_lowering_n_per_band_keeps_a_prefix_and_the_controls(seed):
    images, pools = _world()
    big, _ = build_trials(images, pools, seed=seed, n_per_band=3, n_control=2)
    small, _ = build_trials(images, pools, seed=seed, n_per_band=2, n_control=2)
    one, _ = build_trials(images, pools, seed=seed, n_per_band=1, n_control=2)
    every, _ = build_trials(images, pools, seed=seed, n_per_band=None, n_control=2)
    cb, cs, c1 = _cells(big), _cells(small), _cells(one)
    for key, drawn in cb.items():
        if key[1] in DECOY_BAND_LABELS:
            assert len(drawn) == 3
            assert cs[key] == drawn[:2] and c1[key] == drawn[:1], key  # per cell: a prefix
        else:
            assert cs[key] == drawn == c1[key]  # signal: every candidate within tau
    assert _ids(small, ("main",)) < _ids(big, ("main",)) < _ids(every, ("main",))
    # the control arms do not depend on the decoy count
    assert _ids(small, CONTROL_ARMS) == _ids(big, CONTROL_ARMS) == _ids(one, CONTROL_ARMS) == _ids(every, CONTROL_ARMS)
    assert len(_ids(big, ("ctrl_noimage",))) == 2 * len(images)


@pytest.mark.parametrize("seed", range(8))
def test_changing_n_control_keeps_the_main_arm_and_nests_the_controls(seed):
    images, pools = _world()
    arms = {}
    for k in (0, 1, 2, 3):
        arms[k], _ = build_trials(images, pools, seed=seed, n_per_band=2, n_control=k)
    mains = {k: _ids(t, ("main",)) for k, t in arms.items()}
    assert mains[0] == mains[1] == mains[2] == mains[3]
    for arm in CONTROL_ARMS:
        c = {k: _ids(t, (arm,)) for k, t in arms.items()}
        assert c[0] == set() and c[1] < c[2] < c[3], arm
    # a control sits on a main-arm candidate of its image and keeps its band
    main = {(t.image_id, t.cand): t.band for t in arms[3] if t.arm == "main"}
    for t in arms[3]:
        if t.arm in CONTROL_ARMS:
            assert main[(t.image_id, t.cand)] == t.band and t.truth == "no"


def test_balance_is_kept(seed=4):
    images, pools = _world()
    trials, rep = build_trials(images, pools, seed=seed, n_per_band=2, n_control=2)
    for im in images:
        mine = [t for t in trials if t.image_id == im.image_id and t.arm == "main"]
        signal = [t for t in mine if t.band == "signal"]
        assert len(signal) == 3 and all(t.truth == "yes" for t in signal)
        targets = [tier_of(int(t.referenceability)) for t in sorted(signal, key=lambda t: (t.d_km, t.cand))]
        for band in DECOY_BAND_LABELS:
            decoys = [t for t in mine if t.band == band]
            assert len(decoys) == 2 and all(t.truth == "no" for t in decoys)
            # every cell has all tiers: the j-th decoy has the j-th signal target's tier
            assert [tier_of(int(t.referenceability)) for t in decoys] == targets[:2]
    assert rep.unmatched_decoys == 0 and rep.mismatch_dropped == 0


# --- over the sandbox crawl (local fakes), as [geoverify] trials = "build" plans it -----------------------


@pytest.fixture(scope="module")
def sandbox_crawl(tmp_path_factory):
    """(state root, crawl folder, images folder) of one sandbox crawl, shared by this module's tests (the session's
    one crawl of the shipped config, restored for this module: tests/_crawl_once.py)."""
    from tests._crawl_once import sandbox_crawl_for_module

    tmp, _ = sandbox_crawl_for_module(tmp_path_factory)
    return tmp, tmp / "state" / "crawl-sandbox", tmp / "state" / "images"


def _build(crawl_dir: Path, **kw):
    from geoagent.data.importer import import_release
    from geoagent.geoverify.trials import pools_from_trials

    rel = import_release(crawl_dir)
    continents = {sid: s.continent for sid, s in rel.sites.items()}
    return build_trials(list(rel.images.values()), pools_from_trials(rel.trials), seed=7, continents=continents,
                        **kw)[0]


def test_sandbox_crawl_designs_nest(sandbox_crawl):
    _, crawl_dir, _ = sandbox_crawl
    d = {(n, k): _build(crawl_dir, n_per_band=n, n_control=k) for n, k in ((3, 2), (2, 2), (2, 1), (2, 3))}
    arms = ("main", *CONTROL_ARMS)
    # n_per_band 3 -> 2 (walkthrough: 516 of 1035 tasks new, 38 of 52 gray-field controls set aside)
    assert _ids(d[2, 2], ("main",)) < _ids(d[3, 2], ("main",))
    for arm in CONTROL_ARMS:
        assert _ids(d[2, 2], (arm,)) == _ids(d[3, 2], (arm,)), arm
        assert len(_ids(d[2, 2], (arm,))) > 20
    # n_control 1 < 2 < 3: the main arm as it was, each control arm a superset
    for arm in arms:
        a, b, c = (_ids(d[2, k], (arm,)) for k in (1, 2, 3))
        assert (a == b == c) if arm == "main" else (a < b < c), arm


def _gv(tmp: Path, crawl_dir: Path, images: Path, n_per_band: int) -> Path:
    return geoverify_over_crawl_toml(tmp, name="gv-nested", crawl_dir=crawl_dir, images=images, n_per_band=n_per_band)


def test_lowered_plan_sends_nothing_new_and_a_new_builder_is_named(sandbox_crawl, monkeypatch, capsys):
    import orjson

    from geoagent.cli import main
    from geoagent.config import load_config
    from geoagent.geoverify.trials import trial_builder_version

    # the version recorded at the paper's tau: 4 changed only designs with tau below 150 m (fixverify42 #1)
    TRIAL_BUILDER_VERSION = trial_builder_version(0.15)

    tmp, crawl_dir, images = sandbox_crawl
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp / "state"))
    assert main(["run", str(_gv(tmp, crawl_dir, images, 3)), "--no-live"]) == 0
    capsys.readouterr()
    manifest = load_config(_gv(tmp, crawl_dir, images, 3)).state_dir() / "manifest.json"
    assert orjson.loads(manifest.read_bytes())["designs"] == {"geoverify.trial_builder": TRIAL_BUILDER_VERSION}
    assert main(["run", str(_gv(tmp, crawl_dir, images, 2)), "--no-live"]) == 0
    err = capsys.readouterr().err
    # every trial of the lowered design was answered under n_per_band = 3: nothing new, nothing set aside
    assert "geoverify.n_per_band: 3 -> 2" in err and "no new task was planned" in err
    assert "set aside" not in err and "trial builder" not in err
    # a manifest written before designs were recorded: planned by trial builder 1, and the run says so
    data = orjson.loads(manifest.read_bytes())
    del data["designs"]
    manifest.write_bytes(orjson.dumps(data))
    assert main(["run", str(_gv(tmp, crawl_dir, images, 2)), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert f"the trial builder changed since its last run (geoverify.trial_builder: 1 -> {TRIAL_BUILDER_VERSION}: " in err
    assert "this changes which tasks are planned" in err and "would mix" not in err
    assert orjson.loads(manifest.read_bytes())["designs"] == {"geoverify.trial_builder": TRIAL_BUILDER_VERSION}


def test_superseded_reason_names_the_trial_builder():
    from geoagent.engine import superseded_reason
    from geoagent.runtime.drift import DriftDecision

    only = DriftDecision(record={"changed": {"geoverify.trial_builder": [1, 2]}})
    assert superseded_reason(only).endswith("(trial builder changed: geoverify.trial_builder: 1 -> 2)")
    both = DriftDecision(record={"changed": {"geoverify.n_per_band": [3, 2], "geoverify.trial_builder": [1, 2]}})
    assert superseded_reason(both).endswith(
        "(config changed: geoverify.n_per_band: 3 -> 2; trial builder changed: geoverify.trial_builder: 1 -> 2)")
