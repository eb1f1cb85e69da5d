"""Paired permutation tests that flip the sign of a whole site at a time.

Seed 000, Sec. 6 ("paired tests flip the sign of a whole site at a time rather than of one item at a
time") and Sec. 6.3 (Tables 8-10: 10,000 sign flips, two-sided).

For strictly paired items ``i`` (same site, image, model, reference point) with difference
``d_i = x_i(treatment) - x_i(control)`` (e.g. hit under forced_warn minus hit under forced), the statistic
is the mean paired difference ``T = sum_i d_i / N``. Under the null the sign of each site's total
``D_s = sum_{i in s} d_i`` is exchangeable, so a flip draws ``eps_s`` in {-1, +1} per site and computes
``T* = sum_s eps_s D_s / N``. The two-sided p-value is ``(1 + #{|T*| >= |T|}) / (1 + n_flips)``
(the observed assignment counted once, so p is never 0 and equals 1 when T = 0).

With few sites there are fewer distinct sign vectors (``2**S``) than the paper's 10,000 random flips, and
sampling would only estimate what enumeration gives exactly (and could fall below the smallest attainable
p, ``2 / 2**S``, by chance). By default (``exact=None``) the test therefore enumerates every sign vector
when ``2**S <= n_flips`` (S <= 13 for 10,000 flips) and samples ``n_flips`` random vectors otherwise; the
result says which (``exact``, ``n_flips``, ``seed`` None when exact).

Random streams. A report runs many sampled tests (Tables 8-10, the image-paired comparisons) under one seed (the
campaign's). Drawn from one shared stream (``default_rng(seed)`` for every test, as before session 19), each p was
valid but the tests of a table reused the same sign vectors, so their Monte-Carlo errors were correlated: all
too low or all too high together. A test given a ``label`` draws its flips from its own stream,
``numpy.random.SeedSequence(seed, spawn_key=label_key(label))`` (:func:`flip_seed_sequence`): the key is the
label's BLAKE2b digest (16 bytes read as four unsigned 32-bit words), a stable hash that Python's ``hash()``
(salted per process) is not, so the p of a labelled test is the same in every run, on every machine, for the same
seed, label and data, and two tests with different labels draw independent streams (numpy derives child streams
by ``spawn_key`` for exactly this, see ``SeedSequence.spawn``). Without a label the stream is
``default_rng(seed)``, as before. The report labels each test by what it tests (:func:`geoagent.report.geohint`,
``_flip_label``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_N_FLIPS = 10_000
_CHUNK = 2_000
_EXACT_BLOCK = 1 << 14  # sign vectors per block of the exact enumeration
#: most sites the exact test enumerates (2**20 sign vectors)
EXACT_MAX_SITES = 20


def exact_max_sites(n_flips: int) -> int:
    """Largest site count S the default test (``exact=None``) enumerates for ``n_flips`` random flips: the
    largest S with ``2**S <= n_flips``, at most :data:`EXACT_MAX_SITES` (0 when ``n_flips < 2``)."""
    return min(EXACT_MAX_SITES, max(0, int(n_flips).bit_length() - 1))



def label_key(label: str) -> tuple[int, ...]:
    """The ``spawn_key`` of a test's label (module doc): the label's UTF-8 bytes hashed with BLAKE2b (16-byte
    digest), read as four little-endian unsigned 32-bit words. Stable across processes, runs and machines (unlike
    Python's salted ``hash()``)."""
    digest = hashlib.blake2b(label.encode("utf-8"), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))


def flip_seed_sequence(seed: int, label: str | None = None) -> np.random.SeedSequence:
    """The seed sequence a sampled test draws its sign flips from: ``SeedSequence(seed)`` without a label (the
    stream of ``numpy.random.default_rng(seed)``), ``SeedSequence(seed, spawn_key=label_key(label))`` with one: a
    stream of its own per label, reproducible from ``seed`` and ``label`` (module doc).

    Raises
    ------
    ValueError
        ``seed`` negative (as ``numpy.random.default_rng``); TypeError when it is not an integer.
    """
    if isinstance(seed, bool) or int(seed) != seed:
        raise TypeError(f"seed must be an integer, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.SeedSequence(int(seed), spawn_key=label_key(label) if label else ())


@dataclass(frozen=True, slots=True)
class PermutationResult:
    """Outcome of a site-flip permutation test.

    Attributes
    ----------
    delta : float
        Mean paired difference ``T`` (same units as the inputs; x100 for percentage points of a rate).
    p_value : float
        Two-sided p-value.
    n_pairs : int
        Number of pairs N.
    n_sites : int
        Number of sites (clusters) flipped.
    n_flips : int
        Number of random flips (``2**n_sites`` when ``exact``).
    seed : int or None
        Seed of the random generator (None for the exact test).
    label : str or None
        The test's label, which with ``seed`` gives its own stream of flips (:func:`flip_seed_sequence`); None
        without one (the stream of ``default_rng(seed)``) and for the exact test.
    """

    delta: float
    p_value: float
    n_pairs: int
    n_sites: int
    n_flips: int
    seed: int | None
    label: str | None = None

    @property
    def exact(self) -> bool:
        """Whether every sign vector was enumerated (no random flips; ``seed`` is None)."""
        return self.seed is None

    @property
    def p_floor(self) -> float | None:
        """Smallest p the sampled test can give, ``1 / (1 + n_flips)`` (no flip reached the observed statistic);
        None for the exact test, whose p is exact (at least ``2 / 2**n_sites``), not a bound."""
        return None if self.exact else 1.0 / (1 + self.n_flips)

    @property
    def at_floor(self) -> bool:
        """Whether the sampled p is its floor (:attr:`p_floor`): no flip reached the statistic. Shown as a bound
        (``p < 1.0e-04`` for 10,000 flips, the floor 9.999e-05; the paper's "p<10^-4"), not as a value. The floor is a
        valid p-value (P(p <= a) <= a under the null) but not a proof that the true p lies below it: a true p of
        2e-04 leaves no flip of 10,000 at or beyond the statistic about 13.5 % of the time (review s18)."""
        floor = self.p_floor
        return floor is not None and self.p_value <= floor * (1 + 1e-9)


def site_sums(sites: Sequence[Hashable], diffs: Sequence[float]) -> tuple[list[Hashable], np.ndarray, np.ndarray]:
    """Group paired differences by site.

    Returns
    -------
    labels : list, length S
        Site labels in first-seen order.
    sums : ndarray of shape (S,)
        ``D_s``, the sum of the differences at each site.
    counts : ndarray of shape (S,)
        Number of pairs at each site.
    """
    d = np.asarray(diffs, dtype=float)
    if len(sites) != d.shape[0]:
        raise ValueError(f"sites ({len(sites)}) and diffs ({d.shape[0]}) differ in length")
    index: dict[Hashable, int] = {}
    codes = np.empty(d.shape[0], dtype=np.int64)
    for i, s in enumerate(sites):
        codes[i] = index.setdefault(s, len(index))
    sums = np.bincount(codes, weights=d, minlength=len(index)) if d.size else np.zeros(0)
    counts = np.bincount(codes, minlength=len(index)) if d.size else np.zeros(0, dtype=np.int64)
    return list(index), sums, counts


def site_flip_test_from_sums(
    sums: np.ndarray,
    n_pairs: int,
    *,
    n_flips: int = DEFAULT_N_FLIPS,
    seed: int = 0,
    exact: bool | None = None,
    label: str | None = None,
) -> PermutationResult:
    """Sign-flip test from per-site sums ``D_s`` (shape ``(S,)``) and the total pair count N.

    ``exact=True`` enumerates all ``2**S`` sign vectors (only for S <= 20); ``exact=False`` samples
    ``n_flips`` random ones; ``exact=None`` (default) enumerates when ``2**S <= n_flips`` and samples
    otherwise (module docstring). Random flips use ``numpy.random.default_rng(flip_seed_sequence(seed, label))``:
    without ``label`` the stream of ``default_rng(seed)``; with one a stream of the test's own, independent of
    other labels' under the same seed (module doc, "Random streams"), so several tests of one report do not
    share their Monte-Carlo error. The p-value is reproducible under a seed and label.

    Raises
    ------
    ValueError
        No pairs, a non-finite site sum, ``exact`` with more than 20 sites, or fewer than one random flip
        (``n_flips < 1``) where the test samples: ``(1 + count) / (1 + n_flips)`` would be 1 for any data with 0
        flips and negative with fewer (a flip count is only unused by ``exact=True``).
        A negative seed where the test samples (:func:`flip_seed_sequence`).
    """
    D = np.asarray(sums, dtype=float).reshape(-1)
    if n_pairs <= 0 or D.size == 0:
        raise ValueError("permutation test needs at least one pair")
    if not np.all(np.isfinite(D)):
        # a NaN sum compares False with everything: no flip would count and p would come out as
        # 1 / (1 + n_flips), the smallest possible value, for an undefined statistic
        raise ValueError("paired differences must be finite (a NaN or inf difference has no sign to flip)")
    S = D.size
    t_obs = float(D.sum()) / n_pairs
    tol = 1e-12 * max(1.0, float(np.abs(D).sum()))
    thresh = abs(float(D.sum())) - tol
    if exact is None:
        exact = S <= exact_max_sites(n_flips)
    if not exact and (isinstance(n_flips, bool) or int(n_flips) != n_flips or n_flips < 1):
        raise ValueError(f"n_flips must be an integer >= 1 for a sampled permutation test, got {n_flips!r}")
    if exact:
        if S > EXACT_MAX_SITES:
            raise ValueError(f"exact test over 2**{S} sign vectors is too large")
        # every sign vector, in blocks of _EXACT_BLOCK rows (2**20 x 20 at once would take ~170 MB as int64)
        bits = np.arange(S)
        count = 0
        for lo in range(0, 2**S, _EXACT_BLOCK):
            rows = np.arange(lo, min(lo + _EXACT_BLOCK, 2**S), dtype=np.int64)
            signs = ((rows[:, None] >> bits) & 1) * 2 - 1
            count += int(np.count_nonzero(np.abs(signs @ D) >= thresh))
        p = count / 2**S
        return PermutationResult(t_obs, p, int(n_pairs), S, 2**S, None)
    rng = np.random.default_rng(flip_seed_sequence(seed, label))
    count = 0
    done = 0
    while done < n_flips:
        m = min(_CHUNK, n_flips - done)
        signs = rng.integers(0, 2, size=(m, S), dtype=np.int8) * 2 - 1
        count += int(np.count_nonzero(np.abs(signs @ D) >= thresh))
        done += m
    p = (1 + count) / (1 + n_flips)
    return PermutationResult(t_obs, float(p), int(n_pairs), S, int(n_flips), int(seed), label or None)


def paired_site_permutation_test(
    sites: Sequence[Hashable],
    treatment: Sequence[float],
    control: Sequence[float],
    *,
    n_flips: int = DEFAULT_N_FLIPS,
    seed: int = 0,
    exact: bool | None = None,
    label: str | None = None,
) -> PermutationResult:
    """Two-sided paired test of ``mean(treatment - control)`` flipping whole sites.

    Parameters
    ----------
    sites : sequence of hashable, length N
        Site of each pair (the unit of resampling).
    treatment, control : array-like of shape (N,)
        Paired outcomes (e.g. 0/1 hits under forced_warn and forced on the same item).
    n_flips : int
        Number of random sign flips (paper: 10,000).
    seed : int
        Seed of the generator (>= 0; a report passes its campaign's seed to every test).
    exact : bool or None
        True: enumerate every sign vector (S <= 20); False: sample ``n_flips``; None (default): enumerate
        when ``2**S <= n_flips``, else sample (module docstring).
    label : str or None
        What the test tests, a stable text: with ``seed`` it selects the test's own stream of flips
        (:func:`flip_seed_sequence`), so tests of one report with different labels have independent Monte-Carlo
        errors; None: the stream of ``default_rng(seed)``.

    Raises
    ------
    ValueError
        Different lengths, no pairs, a NaN / infinite outcome (drop undefined pairs first), or ``n_flips < 1``
        where the test samples (:func:`site_flip_test_from_sums`).
    """
    t = np.asarray(treatment, dtype=float)
    c = np.asarray(control, dtype=float)
    if t.shape != c.shape:
        raise ValueError(f"treatment {t.shape} and control {c.shape} differ in shape")
    _, sums, counts = site_sums(sites, t - c)
    return site_flip_test_from_sums(sums, int(counts.sum()), n_flips=n_flips, seed=seed, exact=exact, label=label)
