"""Regime split (legible / illegible sites) and its split-half correction.

Seed 000, Sec. 6.1.2-6.1.3 and Table 3. Sites are assigned to a regime by a threshold (paper: 50 %; ``[geohint] regime_threshold``) on
their *no-context* hit rate, pooled over models. The per-model "No context" column of Table 2 is read
off the same baseline responses that assigned the regime, which biases the no-context-vs-context
comparison (a site lands in the legible half partly because its baseline draw came out high). The
correction: split each site's baseline responses at random into two halves, assign the regime from
half A and read the no-context column from half B; average the near-band-minus-no-context difference
over many splits (paper: 200), reporting mean +- standard deviation.

The split is of each *site's* baseline responses (all models together), as the paper says ("splitting each
site's baseline responses at random, assigning the regime from one half and reading the no-context column
off the other", Sec. 6.1.3). Choices where the paper is silent, taken from the release's
``analysis/regime_split_half.py``:

* half A (assigns the regime) is the first ``m // 2`` of a random permutation of the site's ``m`` baseline
  responses, half B (the no-context column) the remaining ``m - m // 2``, so an odd site gives B the extra
  response;
* the corrected value is the mean over splits of (near-band hit rate - half-B no-context hit rate) per
  (regime, model), pooled over the regime's sites; the "+-" of Table 3 is the standard deviation over
  the splits (``numpy.std``, ddof = 0);
* a site whose half A is empty (a single baseline response) is left out of both regimes in that split
  (the release script would put it in the legible group because ``NaN < 50`` is false; we do not).

The near-band term uses every context response of the regime's sites (context responses never enter the
assignment), so only the assignment and the no-context column change between splits.

Undetermined regime (where the paper is silent: its release geocoded nearly every answer): an answer that
did not geocode counts as a miss, so a site none of whose no-context answers geocoded would read a 0 % hit
rate that measures the geocoder, not the image. Such a site has no regime (:data:`UNDETERMINED`;
:func:`assign_regimes` with ``geocoded``): it is in neither regime, as a site without no-context answers is.
A site with at least one geocoded no-context answer is assigned as before (its unresolved answers still
count as misses), so results where the geocoder resolved something at every site do not change. The split-half
correction applies the same rule to each split's half A (:func:`split_half_correction` with
``baseline_geocoded``): a site whose half A holds no geocoded answer has no regime in that split. A rate is
undetermined by the same rule: a (regime, model) none of whose near-band answers (``near_geocoded``) or none of
whose no-context answers (all, or a split's half B) geocoded has no difference (NaN), not 0 % minus 0 %.
Here an answer that did not parse counts as geocoded (decided): the model's own answer named nothing, a miss
whatever the geocoder does (seed 000 Sec. 4.1: no post-hoc filtering; the release's judged answers keep such rows
with ``hit`` False), so only answers that parsed and failed to geocode leave a rate undetermined
(:func:`geoagent.geohint.aggregate.hit_decided` feeds ``geocoded`` and the flags).

Undetermined model (stats42 #1): the pooled counts, and the responses split, leave out the no-context answers of a
model whose no-context hit rate over all sites is undetermined by the same rule (Table 1's em dash, every answer
parsed and none geocoded): counted as misses they would pull every site toward illegible and move the split for every
other model. The caller leaves them out (:meth:`geoagent.geohint.aggregate.GeoHintAggregator.regime_left_out_models`,
where Table 1's rule lives), so the functions here see the other models' answers only: :func:`assign_regimes`' pooled
counts, and both halves of :func:`split_half_correction` (half A assigns by the others alone; the model's own
no-context rate would be undetermined in every half B anyway). A site answered by such models only is undetermined.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

LEGIBLE = "legible"
ILLEGIBLE = "illegible"
REGIMES = (ILLEGIBLE, LEGIBLE)
#: a site none of whose no-context answers geocoded: no hit rate to assign it by (module docstring)
UNDETERMINED = "undetermined"
DEFAULT_THRESHOLD = 0.5
DEFAULT_N_SPLITS = 200


def check_threshold(threshold: float) -> float:
    """``threshold`` as a float if it is a fraction strictly between 0 and 1 (``[geohint] regime_threshold``);
    raises ValueError naming the value otherwise (NaN included)."""
    try:
        t = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"regime threshold must be a number in (0, 1), got {threshold!r}") from None
    if not 0 < t < 1:
        raise ValueError(f"regime threshold must be a fraction in (0, 1) (no-context hit rate), got {threshold!r}")
    return t


def threshold_text(threshold: float) -> str:
    """The threshold as a percentage for report text, e.g. ``0.5 -> "50 %"``, ``0.375 -> "37.5 %"``."""
    return f"{100 * float(threshold):.4g} %"


def regime_of(rate: float, *, threshold: float = DEFAULT_THRESHOLD) -> str:
    """``legible`` when the no-context hit rate is at least ``threshold``, else ``illegible``.

    Raises
    ------
    ValueError
        ``rate`` is NaN (a site without baseline responses has no regime; ``NaN >= threshold`` is False
        and would silently make it illegible), or ``threshold`` is not a fraction in (0, 1)
        (:func:`check_threshold`: a percentage such as the release scripts' ``50.0`` would make every site
        illegible).
    """
    threshold = check_threshold(threshold)
    if rate != rate:  # NaN
        raise ValueError("no-context hit rate is NaN: a site without baseline responses has no regime")
    return LEGIBLE if rate >= threshold else ILLEGIBLE


def assign_regimes(
    baseline_hits: dict[Hashable, tuple[int, int]], *, threshold: float = DEFAULT_THRESHOLD,
    geocoded: dict[Hashable, int] | None = None,
) -> dict[Hashable, str]:
    """Assign each site a regime from its pooled no-context ``(hits, n)``; sites with n = 0 are left out.

    ``baseline_hits`` pools the models whose no-context hit rate is determined: the caller leaves out those of
    :meth:`geoagent.geohint.aggregate.GeoHintAggregator.regime_left_out_models` (module docstring, stats42 #1).

    ``geocoded``: per site, how many of those n answers geocoded (resolved level other than ``none``); a
    site with none (absent counts as 0) is :data:`UNDETERMINED` instead of being assigned by a hit rate of
    unresolved answers (module docstring). None: every site is assigned by its hit rate.

    Raises ValueError for a ``threshold`` that is not a fraction in (0, 1) (:func:`check_threshold`)."""
    threshold = check_threshold(threshold)
    out: dict[Hashable, str] = {}
    for s, (k, n) in baseline_hits.items():
        if n <= 0:
            continue
        out[s] = UNDETERMINED if geocoded is not None and not geocoded.get(s, 0) else regime_of(k / n, threshold=threshold)
    return out


@dataclass(frozen=True, slots=True)
class CorrectionRow:
    """One row of Table 3 (values are percentage points).

    ``uncorrected`` = near-band hit rate - no-context hit rate with the full-baseline assignment;
    ``corrected`` / ``corrected_sd`` = mean / SD (ddof 0) over splits of the same difference with the regime from
    half A and the no-context rate from half B; ``shift = corrected - uncorrected``; ``n_splits_used``
    counts splits where both terms were defined for this (regime, model).
    """

    regime: str
    model: str
    uncorrected: float
    corrected: float
    corrected_sd: float
    shift: float
    n_splits_used: int


@dataclass(frozen=True, slots=True)
class CorrectionResult:
    rows: list[CorrectionRow]
    mean_sites_switching: float
    n_splits: int
    seed: int


def _codes(values: Sequence[Hashable], index: dict[Hashable, int]) -> np.ndarray:
    return np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64)


def draw_half_masks(groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random half split within groups (one group per site).

    Parameters
    ----------
    groups : ndarray of shape (n,), int
        Group code of each response (the site).
    rng : numpy Generator

    Returns
    -------
    ndarray of shape (n,), bool
        True for half A: exactly ``m // 2`` responses of each group of size m, chosen uniformly at random
        (the remaining ``m - m // 2`` form half B).
    """
    n = groups.shape[0]
    u = rng.random(n)
    order = np.lexsort((u, groups))
    g_sorted = groups[order]
    starts = np.r_[0, np.flatnonzero(np.diff(g_sorted)) + 1] if n else np.zeros(0, dtype=np.int64)
    sizes = np.diff(np.r_[starts, n])
    rank = np.arange(n) - np.repeat(starts, sizes)
    in_a_sorted = rank < np.repeat(sizes // 2, sizes)
    mask = np.empty(n, dtype=bool)
    mask[order] = in_a_sorted
    return mask


def _label_ranks(index: dict[Hashable, int]) -> np.ndarray:
    """(len(index),) int: each code's rank among the labels sorted as text (``str``), for an order of the
    responses that does not depend on the order the labels were first seen in."""
    labels = sorted(index, key=index.get)
    order = sorted(range(len(labels)), key=lambda i: (str(labels[i]), type(labels[i]).__name__))
    ranks = np.empty(len(labels), dtype=np.int64)
    ranks[order] = np.arange(len(labels))
    return ranks


def _hits(hits: Sequence[bool], sites: Sequence[Hashable], name: str) -> np.ndarray:
    """``hits`` as floats 0/1; raises ValueError naming the first other value (NaN included) and its site."""
    h = np.asarray(hits, dtype=float)
    bad = np.flatnonzero((h != 0) & (h != 1))
    if bad.size:
        i = int(bad[0])
        site = sites[i] if i < len(sites) else "?"
        raise ValueError(f"{name}[{i}] (site {site!r}) is {hits[i]!r}: a hit is 0 or 1 (a missing answer is left "
                         "out, not passed as NaN)")
    return h


def split_half_correction(
    baseline_sites: Sequence[Hashable],
    baseline_models: Sequence[str],
    baseline_hits: Sequence[bool],
    near_sites: Sequence[Hashable],
    near_models: Sequence[str],
    near_hits: Sequence[bool],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    n_splits: int = DEFAULT_N_SPLITS,
    seed: int = 0,
    baseline_geocoded: Sequence[bool] | None = None,
    near_geocoded: Sequence[bool] | None = None,
) -> CorrectionResult:
    """Table 3: near-band minus no-context hit rate per (regime, model), uncorrected and split-half corrected.

    Parameters
    ----------
    baseline_sites, baseline_models, baseline_hits : sequences of length n_b
        The no-context (baseline) responses: site, model, hit (0/1); without those of a model whose no-context hit
        rate is undetermined (module docstring: they would enter half A's assignment; the report's caller passes
        :meth:`geoagent.geohint.aggregate.GeoHintAggregator.baseline_arrays`, which leaves them out).
    near_sites, near_models, near_hits : sequences of length n_c
        Context-condition responses in the nearest band (0.5-1.5 km).
    threshold : float
        Regime threshold on the pooled no-context hit rate, a fraction in (0, 1) (0.5; not a percentage).
    n_splits : int
        Random splits (paper: 200), at least 1.
    seed : int
        Seed of ``numpy.random.default_rng``.
    baseline_geocoded : sequence of bool of length n_b, optional
        Whether each no-context response geocoded (a hit always did). Given: a site is assigned a regime, on
        all its responses or in a split's half A, only when at least one of those responses geocoded (the
        undetermined rule of the module docstring, applied to each split as to the full data); None: every
        site with responses is assigned. Given, it also decides which no-context rates exist: a (regime, model)
        whose no-context responses in the regime's sites (all of them, or a split's half B) include none that
        geocoded has no no-context hit rate (undetermined, not 0: an answer that did not geocode counts as a
        miss, so 0 % would measure the geocoder), and its difference is NaN.
    near_geocoded : sequence of bool of length n_c, optional
        Whether each near-band response geocoded; given, a (regime, model) none of whose near-band responses in
        the regime's sites geocoded has a NaN difference (the same rule). None: every rate counts.

    Raises
    ------
    ValueError
        ``baseline_geocoded`` (``near_geocoded``) of another length than the baseline (near-band) responses, a ``threshold`` that is not a
        fraction in (0, 1) (:func:`check_threshold`), ``n_splits`` below 1 (no split: nothing to correct with), or
        a hit that is not 0 or 1 (NaN included; names the response and its site): a missing answer is left out of
        the arrays, never passed as NaN, which would empty its site's cells without a word (the report's caller,
        :func:`geoagent.report.geohint.table3`, passes 0/1 only).
    """
    threshold = check_threshold(threshold)
    if isinstance(n_splits, bool) or int(n_splits) != n_splits or n_splits < 1:
        raise ValueError(f"n_splits must be an integer >= 1 (random splits of the baseline), got {n_splits!r}")
    site_index: dict[Hashable, int] = {}
    model_index: dict[str, int] = {}
    bs = _codes(baseline_sites, site_index)
    bm = _codes(baseline_models, model_index)
    ns = _codes(near_sites, site_index)
    nm = _codes(near_models, model_index)
    bh = _hits(baseline_hits, baseline_sites, "baseline_hits")
    nh = _hits(near_hits, near_sites, "near_hits")
    S, M = len(site_index), len(model_index)
    models = sorted(model_index, key=model_index.get)

    def site_model(sites: np.ndarray, mods: np.ndarray, vals: np.ndarray, w: np.ndarray | None = None):
        flat = sites * M + mods
        weights = np.ones_like(vals) if w is None else w
        k = np.bincount(flat, weights=vals * weights, minlength=S * M).reshape(S, M)
        n = np.bincount(flat, weights=weights, minlength=S * M).reshape(S, M)
        return k, n

    near_k, near_n = site_model(ns, nm, nh)
    if near_geocoded is not None and len(near_geocoded) != len(ns):
        raise ValueError(f"near_geocoded has {len(near_geocoded)} flags for {len(ns)} near-band responses")
    near_g = None if near_geocoded is None else site_model(ns, nm, np.asarray(near_geocoded, dtype=float))[0]

    def diff_table(assign: np.ndarray, nc_k: np.ndarray, nc_n: np.ndarray, nc_g: np.ndarray | None = None) -> np.ndarray:
        """assign: (S,) in {-1 unassigned, 0 illegible, 1 legible} -> (2, M) near - no-context, pp; ``nc_g``: the
        no-context responses that geocoded per (site, model), NaN where a side has none (undetermined)."""
        out = np.full((2, M), np.nan)
        for r in (0, 1):
            sel = assign == r
            k1, n1 = near_k[sel].sum(0), near_n[sel].sum(0)
            k0, n0 = nc_k[sel].sum(0), nc_n[sel].sum(0)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[r] = 100 * (k1 / n1 - k0 / n0)
            if near_g is not None:
                out[r][near_g[sel].sum(0) == 0] = np.nan
            if nc_g is not None:
                out[r][nc_g[sel].sum(0) == 0] = np.nan
        return out

    if baseline_geocoded is not None and len(baseline_geocoded) != len(bs):
        raise ValueError(f"baseline_geocoded has {len(baseline_geocoded)} flags for {len(bs)} baseline responses")
    bg = None if baseline_geocoded is None else np.asarray(baseline_geocoded, dtype=float)

    def assign_from(k: np.ndarray, n: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        """Regime codes from (S, M) counts; ``w``: the responses' weights (half A's mask), for the geocoded rule."""
        ks, nsum = k.sum(1), n.sum(1)
        a = np.full(S, -1)
        has = nsum > 0
        if bg is not None:  # undetermined: none of the site's responses counted here geocoded
            has &= np.bincount(bs, weights=bg if w is None else bg * w, minlength=S) > 0
        a[has] = (ks[has] / nsum[has] >= threshold).astype(int)
        return a

    full_k, full_n = site_model(bs, bm, bh)
    full_assign = assign_from(full_k, full_n)
    # the splits draw on the baseline responses in one canonical order (site, model, hit, geocoded by label), not
    # the order they were passed in: responses alike in all four are interchangeable, so the draws, and Table 3,
    # depend on the data and the seed alone (audit 24: rows in export order gave other corrected values)
    site_rank = _label_ranks(site_index)
    model_rank = _label_ranks(model_index)
    canon = np.lexsort(tuple(k for k in ((None if bg is None else bg), bh, model_rank[bm], site_rank[bs])
                             if k is not None))
    bs, bm, bh = bs[canon], bm[canon], bh[canon]
    if bg is not None:
        bg = bg[canon]
    uncorrected = diff_table(full_assign, full_k, full_n, None if bg is None else site_model(bs, bm, bg)[0])

    rng = np.random.default_rng(seed)
    groups = bs  # split each site's baseline responses (all models together), Sec. 6.1.3
    draws = np.full((n_splits, 2, M), np.nan)
    switching = np.zeros(n_splits)
    for i in range(n_splits):
        mask_a = draw_half_masks(groups, rng)
        ka, na = site_model(bs, bm, bh, mask_a.astype(float))
        kb, nb = site_model(bs, bm, bh, (~mask_a).astype(float))
        a = assign_from(ka, na, mask_a.astype(float))
        draws[i] = diff_table(a, kb, nb, None if bg is None else site_model(bs, bm, bg, (~mask_a).astype(float))[0])
        both = (a >= 0) & (full_assign >= 0)
        switching[i] = np.count_nonzero(a[both] != full_assign[both])
    rows = []
    for r, regime in enumerate(REGIMES):
        for j, model in enumerate(models):
            col = draws[:, r, j]
            ok = np.isfinite(col)
            mean = float(col[ok].mean()) if ok.any() else float("nan")
            sd = float(col[ok].std(ddof=0)) if ok.any() else float("nan")
            unc = float(uncorrected[r, j])
            rows.append(CorrectionRow(regime, model, unc, mean, sd, mean - unc, int(ok.sum())))
    return CorrectionResult(rows, float(switching.mean()), n_splits, seed)
