"""Site-flip permutation test: exact enumeration, scipy cross-check, reproducibility (issue 4 point 5)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from geoagent.scoring.permutation import paired_site_permutation_test, site_sums


def _pairs(seed=1, n_sites=9, effect=0.15):
    rng = np.random.default_rng(seed)
    sites, t, c = [], [], []
    for s in range(n_sites):
        m = int(rng.integers(5, 30))
        p = rng.uniform(0.2, 0.7)
        c += list(rng.random(m) < p)
        t += list(rng.random(m) < p + effect)
        sites += [f"s{s}"] * m
    return sites, np.array(t, float), np.array(c, float)


def _exact_by_hand(sites, t, c):
    labels = sorted(set(sites))
    D = np.array([sum(ti - ci for si, ti, ci in zip(sites, t, c) if si == s) for s in labels])
    obs = abs(D.sum())
    hits = sum(1 for eps in itertools.product([-1, 1], repeat=len(D)) if abs(np.dot(eps, D)) >= obs - 1e-9)
    return hits / 2 ** len(D)


def test_exact_mode_equals_hand_enumeration_and_scipy():
    sites, t, c = _pairs()
    res = paired_site_permutation_test(sites, t, c, exact=True)
    assert res.delta == pytest.approx(np.mean(t - c))
    assert res.p_value == pytest.approx(_exact_by_hand(sites, t, c), abs=1e-12)
    _, D, counts = site_sums(sites, t - c)
    ref = stats.permutation_test(
        (D,), lambda x: np.sum(x) / counts.sum(), permutation_type="samples", n_resamples=np.inf,
        alternative="two-sided",
    )
    assert res.p_value == pytest.approx(ref.pvalue, abs=1e-12)


def test_random_flips_are_reproducible_and_close_to_exact():
    sites, t, c = _pairs(seed=4, n_sites=12, effect=0.08)
    exact = paired_site_permutation_test(sites, t, c, exact=True).p_value
    a = paired_site_permutation_test(sites, t, c, n_flips=10_000, seed=7, exact=False)
    b = paired_site_permutation_test(sites, t, c, n_flips=10_000, seed=7, exact=False)
    other = paired_site_permutation_test(sites, t, c, n_flips=10_000, seed=8, exact=False)
    assert a.p_value == b.p_value
    assert a.n_flips == 10_000 and a.seed == 7 and not a.exact
    se = np.sqrt(exact * (1 - exact) / 10_000)
    assert abs(a.p_value - exact) < 5 * se + 2e-4
    assert abs(other.p_value - exact) < 5 * se + 2e-4


def test_default_enumerates_when_there_are_fewer_sign_vectors_than_flips():
    # 12 sites: 4,096 sign vectors < 10,000 flips, so the default test is the exact one (hand enumeration)
    sites, t, c = _pairs(seed=4, n_sites=12, effect=0.08)
    auto = paired_site_permutation_test(sites, t, c, n_flips=10_000, seed=7)
    assert auto.exact and auto.n_flips == 2**12 and auto.seed is None
    assert auto.p_value == pytest.approx(_exact_by_hand(sites, t, c), abs=1e-12)
    # 5 sites all pointing one way: the exact p is the smallest attainable, 2 / 2**5 (never below it)
    few = paired_site_permutation_test([s for s in "abcde" for _ in range(3)], [1] * 15, [0] * 15)
    assert few.exact and few.p_value == pytest.approx(2 / 32, abs=1e-15)
    # more sites than log2(n_flips): random flips with the seed, as the paper's 10,000
    many, tm, cm = _pairs(seed=5, n_sites=14, effect=0.08)
    mc = paired_site_permutation_test(many, tm, cm, n_flips=10_000, seed=3)
    assert not mc.exact and mc.n_flips == 10_000 and mc.seed == 3
    # a smaller flip budget moves the switch: 2**12 > 1,000, so 12 sites are sampled
    assert not paired_site_permutation_test(sites, t, c, n_flips=1_000, seed=1).exact


def test_no_difference_gives_p_one_and_flipping_is_by_site():
    sites = ["a"] * 4 + ["b"] * 4
    t = [1, 1, 0, 0, 1, 0, 1, 0]
    res = paired_site_permutation_test(sites, t, t, n_flips=500, seed=0)
    assert res.delta == 0 and res.p_value == 1.0
    # All pairs from one site: flipping that one site is the only move, so |T*| = |T| always.
    one = paired_site_permutation_test(["x"] * 30, [1] * 30, [0] * 30, n_flips=200, seed=0)
    assert one.p_value == 1.0 and one.n_sites == 1


def test_bad_input():
    with pytest.raises(ValueError, match="shape"):
        paired_site_permutation_test(["a"], [1, 0], [1])
    with pytest.raises(ValueError, match="at least one pair"):
        paired_site_permutation_test([], [], [])


def test_paired_tables_say_where_the_test_is_exact():
    from geoagent.report.geohint import flip_method_note

    note = flip_method_note(10_000, 0)
    # 2**13 = 8,192 <= 10,000 < 2**14: groups of up to 13 sites are enumerated
    assert "G <= 13" in note and "10000 random flips (seed 0)" in note
    assert "G <= 10" in flip_method_note(1024, 5)


def test_paired_tables_say_which_test_gave_their_p():
    """A walkthrough could not tell from a table of 8-site groups whether its p came from random flips or from
    enumeration (the caption gave both, with a floor that cannot apply). With the table's site counts the note names
    the one used: every group enumerated (exact p, the smallest 2/2^G), none (random flips and their floor), or both
    (the rule). Checked against the test's own ``exact`` flag."""
    from geoagent.report.geohint import flip_method_note

    exact = flip_method_note(10_000, 1, [8, 4, 0, 8])
    assert "every test of this table enumerated all 2^G sign vectors" in exact and "(G = 4, 8;" in exact
    assert "random flips (seed" not in exact and "floor" not in exact, exact
    for g in (4, 8):
        sites, t, c = _pairs(seed=g, n_sites=g, effect=0.1)
        assert paired_site_permutation_test(sites, t, c, n_flips=10_000, seed=1).exact
    sampled = flip_method_note(10_000, 1, [14, 30])
    assert "10000 random flips (seed 1)" in sampled and "every test here has G > 13 sites" in sampled
    assert "exact enumeration" not in sampled and "is the floor 1/(10000 + 1)" in sampled, sampled
    sites, t, c = _pairs(seed=3, n_sites=14, effect=0.1)
    assert not paired_site_permutation_test(sites, t, c, n_flips=10_000, seed=1).exact
    both = flip_method_note(10_000, 1, [8, 30])
    assert both == flip_method_note(10_000, 1) and "G <= 13" in both and "random flips" in both


def test_exact_p_values_are_never_shown_below_their_value_by_a_tie():
    """2/16 = 0.125 (the smallest p of a 4-site group, which the table's note states) printed as 0.12 under
    round-half-even; ties now round up. Other values as before."""
    from geoagent.report.geohint import _fmt, p_text

    assert p_text(0.125) == "0.13" and _fmt(0.125, "permp") == "0.13"
    assert p_text(2 / 32) == "0.063" and p_text(2 / 256) == "0.0078" and p_text(0.8125) == "0.81"
    assert p_text(0.0421) == "0.042" and p_text(1.0) == "1" and p_text(0.5) == "0.5"
    assert p_text(0.00015) == "1.5e-04" and p_text(0.995) == "0.99"  # 0.995 is below the tie in binary
    with pytest.raises(ValueError):
        p_text(float("nan"))


def test_note_and_test_agree_above_the_enumeration_cap():
    """The enumeration is capped at 20 sites whatever ``n_flips`` is (2**20 sign vectors); with
    ``n_flips >= 2**21`` (allowed: ``[geohint] n_flips`` has no upper bound) the note must not claim exact
    enumeration for groups the test samples. Checked against the test's own ``exact`` flag."""
    from geoagent.report.geohint import flip_method_note

    n_flips = 2**21
    note = flip_method_note(n_flips, 0)
    sites, t, c = _pairs(seed=6, n_sites=21, effect=0.1)
    res = paired_site_permutation_test(sites, t, c, n_flips=n_flips, seed=0)
    assert res.n_sites == 21 and not res.exact  # 21 sites are sampled even though 2**21 <= n_flips
    assert "G <= 20 sites" in note, note


def _exact_p_by_subset_sums(D):
    """Exact two-sided p for integer site sums by counting signed sums (dynamic programming over sums)."""
    counts = {0: 1}
    for d in D:
        nxt: dict[int, int] = {}
        for s, k in counts.items():
            nxt[s + d] = nxt.get(s + d, 0) + k
            nxt[s - d] = nxt.get(s - d, 0) + k
        counts = nxt
    obs = abs(sum(D))
    return sum(k for s, k in counts.items() if abs(s) >= obs) / 2 ** len(D)


def test_enumeration_of_20_sites_is_exact_and_memory_bounded():
    """``n_flips = 2**20`` makes the default test enumerate 20 sites (2**20 sign vectors). The p is the exact
    one (checked by counting signed sums), and the enumeration runs in blocks: its peak memory stays far
    below the 2**20 x 20 sign matrix (168 MB as int64) that building it at once needs."""
    import tracemalloc

    from geoagent.scoring.permutation import site_flip_test_from_sums

    D = [3, -1, 2, 0, 4, -2, 1, 1, -3, 2, 5, -1, 0, 2, -4, 3, 1, -1, 2, 1]
    tracemalloc.start()
    try:
        res = site_flip_test_from_sums(np.array(D, float), 60, n_flips=2**20)
        peak_mb = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    assert res.exact and res.n_flips == 2**20
    assert res.p_value == pytest.approx(_exact_p_by_subset_sums(D), abs=1e-15)
    assert peak_mb < 64, peak_mb


def test_the_few_sites_bound_and_the_smallest_p_agree():
    """Review rev22b: the few-sites note printed 2/2^6 = 0.03125 as "p >= 0.0312" (below the bound, the error
    p_text fixes for the cells), while the smallest p's cell read 0.031. The bound is printed exactly; a cell
    rounds to 2 digits and may read below it only by that rounding, never by a tie."""
    import re

    from geoagent.report.geohint import _fmt, few_sites_note, perm_p

    for g in range(1, 7):
        sites = [f"s{i}" for i in range(g)]
        res = paired_site_permutation_test(sites, [1.0] * g, [0.0] * g, n_flips=10_000, seed=0)
        assert res.exact and res.p_value == pytest.approx(2 / 2**g)
        bound = re.search(r"p >= ([0-9]+(?:\.[0-9]+)?)", few_sites_note([("all sites", g)], 10_000)).group(1)
        assert float(bound) == 2 / 2**g, bound  # exact
        cell = float(_fmt(perm_p(res), "permp"))
        assert abs(cell - 2 / 2**g) <= 0.5 * 10 ** (math.floor(math.log10(2 / 2**g)) - 1) + 1e-15
