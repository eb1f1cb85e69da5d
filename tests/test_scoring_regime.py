"""Regime split and split-half correction (Table 3 mechanics, issue 4 point 5)."""

from __future__ import annotations

import numpy as np
import pytest

from geoagent.scoring.regime import (
    ILLEGIBLE,
    LEGIBLE,
    assign_regimes,
    draw_half_masks,
    regime_of,
    split_half_correction,
)


def test_regime_threshold():
    assert regime_of(0.5) == LEGIBLE and regime_of(0.4999) == ILLEGIBLE
    assert assign_regimes({"a": (3, 5), "b": (2, 5), "c": (0, 0)}) == {"a": LEGIBLE, "b": ILLEGIBLE}


def test_half_masks_are_stratified_halves():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(7), [1, 2, 3, 4, 5, 10, 11])
    rng.shuffle(groups)
    for _ in range(20):
        m = draw_half_masks(groups, rng)
        for g in range(7):
            size = np.count_nonzero(groups == g)
            assert np.count_nonzero(m[groups == g]) in {size // 2, size // 2 + size % 2}


def test_homogeneous_sites_need_no_correction():
    # Every site's baseline is all hits or all misses, so any half has the site's full rate: corrected
    # equals uncorrected exactly, with zero spread.
    sites, models, hits, ns, nm, nh = [], [], [], [], [], []
    rng = np.random.default_rng(2)
    for s in range(10):
        val = s % 2
        for m in ("m1", "m2"):
            sites += [s] * 4
            models += [m] * 4
            hits += [val] * 4
            ns += [s] * 6
            nm += [m] * 6
            nh += list(rng.random(6) < 0.5)
    res = split_half_correction(sites, models, hits, ns, nm, nh, n_splits=30, seed=1)
    assert res.mean_sites_switching == 0
    for row in res.rows:
        assert row.corrected == pytest.approx(row.uncorrected, abs=1e-12)
        assert row.corrected_sd == pytest.approx(0, abs=1e-12)
        # independent computation of the uncorrected difference
        legible_sites = {s for s in range(10) if s % 2 == 1}
        sel = [i for i, (s, m) in enumerate(zip(ns, nm)) if m == row.model and ((s in legible_sites) == (row.regime == LEGIBLE))]
        near = np.mean([nh[i] for i in sel])
        nocontext = 1.0 if row.regime == LEGIBLE else 0.0
        assert row.uncorrected == pytest.approx(100 * (near - nocontext), abs=1e-9)


def test_correction_removes_selection_bias_under_the_null():
    # Every site has the same true hit rate with and without context, so the true difference is 0.
    # Assigning the regime from the same noisy baseline biases the legible no-context rate upward
    # (uncorrected < 0 at legible sites) and the illegible one downward; the split-half correction
    # removes most of it.
    rng = np.random.default_rng(5)
    sites, models, hits, ns, nm, nh = [], [], [], [], [], []
    for s in range(120):
        p = rng.uniform(0.3, 0.7)
        for m in ("a", "b"):
            sites += [s] * 6
            models += [m] * 6
            hits += list(rng.random(6) < p)
            ns += [s] * 30
            nm += [m] * 30
            nh += list(rng.random(30) < p)
    res = split_half_correction(sites, models, hits, ns, nm, nh, n_splits=100, seed=3)
    by = {(r.regime, r.model): r for r in res.rows}
    for m in ("a", "b"):
        assert by[(LEGIBLE, m)].uncorrected < -2
        assert by[(ILLEGIBLE, m)].uncorrected > 2
        assert abs(by[(LEGIBLE, m)].corrected) < abs(by[(LEGIBLE, m)].uncorrected) / 2
        assert abs(by[(ILLEGIBLE, m)].corrected) < abs(by[(ILLEGIBLE, m)].uncorrected) / 2
        assert by[(LEGIBLE, m)].shift > 0
    assert res.mean_sites_switching > 0
    again = split_half_correction(sites, models, hits, ns, nm, nh, n_splits=100, seed=3)
    assert again.rows == res.rows
