"""Signal-detection scoring of GeoVerify (seed 000 Sec. 5.3-5.4, Eq. 2-4; Table 12).

Inputs are sufficient statistics, never raw rows: a *cell table* with one row per
(model, site, arm, band, truth) and the counts ``n_yes``, ``n_no`` (parsed answers) and ``n_fail`` (parse
failures, excluded from every rate), and optionally a *confidence table* with one row per
(model, arm, band, verdict, conf) and a count ``n``. The incremental aggregator
(:mod:`geoagent.geoverify.aggregate`) maintains both.

Formulas (per model and pooled over models):

* hit rate ``H = yes / n`` over main-arm signal trials; false-alarm rate ``F(band)`` likewise per decoy band;
* log-linear correction (Hautus 1995): ``rate' = (yes + 0.5) / (n + 1)`` before taking ``z``;
* ``d' = z(H') - z(F')`` and ``c = -(z(H') + z(F')) / 2`` with ``z = scipy.stats.norm.ppf`` (Eq. 3);
* discrimination radius ``delta_1``: the first decoy band (nearest first) with ``d' >= 1`` (Eq. 4), else None
  ("none"), or ``"undefined"`` when no band reaches 1 and some band's d' is undefined (no trials);
* control arms: raw ``F`` of ``ctrl_mismatch`` and ``ctrl_noimage`` over their noise (truth no) trials;
* confidence of false acceptances (main arm, noise, verdict yes): median and share ``>= 0.8``;
* pre-registered read-out (Sec. 5.4): ``invalid`` if mismatched-image F > 20 % or blank-image F within
  5 points of the main arm's F; else ``uninformative`` if nearest-band d' > 2; else ``informative`` if
  nearest-band d' < 0.5 and farthest-band d' > 1.5; else ``no data`` when neither the nearest- nor the
  farthest-band d' is defined (its reason tells no main-arm answer yet from answers none of which parsed, and
  those from a missing signal or decoy side); else
  ``inconclusive``;
* bootstrap confidence intervals resample *sites* with replacement (seeded), recomputing every statistic;
* small-n flag (reporting only, never changes a statistic): a band's d' is flagged when its decoy trials or
  the signal trials behind H number fewer than :data:`SMALL_N_TRIALS` (20), and ``delta_1`` is flagged when
  the band it names is, or when it is "none" and any band is ("none" rests on every band's d')
  (:func:`small_n_bands`, :func:`delta_1_small_n`); the read-out is flagged (``Readout.small_n``) when a
  control-arm check that made it ``invalid`` rests on fewer than 20 control trials (F of 1 trial moves in steps
  of 100 points). Why 20: the delta-method standard
  error of d' from n trials at a rate near 0.5 is about ``sqrt(0.25 / (n * phi(0)^2))`` = ``1.25 / sqrt(n)``
  per side, so below 20 trials one side alone contributes more than 0.28 to the SE, over a quarter of the
  d' = 1 criterion that defines ``delta_1``, and F moves in steps of 1/(n+1) > 5 points; one answer more or
  less can then move ``delta_1`` by a band (a nearest band with 5 decoys gives F in steps of 17 points). The
  paper's bands hold about 50 trials each.

Raw rates H and F are reported uncorrected (as in Table 12); the correction enters only d' and c.

Choices where the paper leaves room (each checked against the release's ``analysis/verify_results.py``):

* pooled column: d' and c from the *summed* counts of all models (H and F of the pooled trials), not the
  mean of per-model d' (Sec. 6.4 "Pooled d'" and the release script's pooled block);
* "blank-image F comes within 5 points of the main arm" (Sec. 5.4) is inclusive: ``|F_blank - F_main| <=
  0.05`` with a 1e-9 tolerance, so a gap of exactly 5 points (e.g. 35 % vs 40 %) is within;
  "mismatched-image F > 20 %" is strict;
* bootstrap (Sec. 6: "every p-value below treats the site as the unit of resampling"): one matrix of
  site draws ``numpy.random.default_rng(seed).integers(0, S, (n_boot, S))`` over the sorted union of the
  S sites in the cell table, shared by every column (each model and the pooled column see the same
  resampled sites; a site where a model has no trials contributes zero counts to that model). The
  interval is the percentile interval (``numpy.quantile``, linear interpolation) of the replicates
  where the statistic is defined (replicates with no trials for a rate, NaN, are dropped; the count of
  kept replicates is ``ModelScores.ci_n``). A statistic whose trials come from fewer than
  :data:`CI_MIN_SITES` (5, :data:`BOOT_MIN_SITES`, as GeoHint's) sites gets no interval (absent from ``ci``):
  every resample of one site is that site again (a zero-width "interval"), and a bootstrap over 2 to 4 sites has
  only 3 to 35 distinct resamples and too few clusters, so its interval is too narrow (Cameron and Miller 2015).
  d' and c need 5 sites for H and for the band's F; ``delta_1``'s range needs them for H and every band
  with trials. ``ModelScores.ci_sites`` gives each statistic's site count; an interval from 5 to
  :data:`BOOT_FEW_SITES` - 1 sites is flagged few-cluster by the report (:func:`boot_site_flag`).
* a rate at the boundary (k = 0 or k = n answers yes over the pooled trials, e.g. a gray-field F of 0/52) has
  a zero-width percentile interval, since every site resample gives 0 (or 1) again. Such a rate (H, F, F per
  band, control F) gets instead the Clopper-Pearson exact interval of its pooled count
  (``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``; binomial, so it ignores the clustering by
  site, but it is never narrower than nominal and is defined at 0 and 1, where the Wald and percentile
  intervals collapse); its key is listed in ``ModelScores.ci_exact``. Same site rule as above (at least
  :data:`CI_MIN_SITES`, 5, sites).
* interval of ``delta_1`` (ordinal): from the same replicates, each replicate's ``delta_1`` as a band index
  (0 = nearest band, ..., ``len(bands)`` = "none", beyond the farthest band; replicates where it is
  ``"undefined"`` are dropped); the range is the 2.5th and 97.5th percentiles of that index with
  ``numpy.quantile(..., method="inverted_cdf")`` (an observed index, never an interpolated one), given as
  band labels or "none" (``ModelScores.delta_1_ci``; kept replicates ``ModelScores.delta_1_ci_n``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from geoagent import constants as C
from geoagent.data.model import ARM_BLANK, ARM_MAIN, ARM_MISMATCH, BAND_SIGNAL, band_edges, decoy_band_labels
from geoagent.data.model import DECOY_BAND_LABELS  # also read as sdt.DECOY_BAND_LABELS: the paper's bands
from geoagent.textfmt import count_text, fixed_text

POOLED = "pooled"
CONF_HIGH = 0.8
MISMATCH_F_MAX = 0.20
BLANK_F_MIN_GAP = 0.05
UNINFORMATIVE_NEAR_DPRIME = 2.0
INFORMATIVE_NEAR_DPRIME = 0.5
INFORMATIVE_FAR_DPRIME = 1.5
DPRIME_USABLE = 1.0
#: fewest sites (clusters) behind a GeoHint site-bootstrap interval (Table 1, Fig. 2): below this the interval is
#: withheld, with the reason. A bootstrap over G sites has only C(2G - 1, G) distinct resamples (3 for G = 2, 10
#: for G = 3, 35 for G = 4), so its percentile interval is coarse and, with so few clusters, too narrow: the
#: release's judged answers gave an interval from 2 sites narrower than the plain binomial one. Cluster-bootstrap
#: guidance (Cameron and Miller 2015, J. Human Resources 50(2), Sec. VI; Cameron, Gelbach and Miller 2008) is that
#: with few clusters the pairs cluster bootstrap under-covers; 5 is where we stop printing one at all.
BOOT_MIN_SITES = 5
#: from :data:`BOOT_MIN_SITES` up to this many sites minus one (5-9) a site-bootstrap interval is given but
#: flagged few-cluster (likely too narrow); the same 10 clusters below which the GeoHint report prints no
#: normal-reference p-value (:data:`geoagent.report.geohint.MIN_CLUSTERS_NORMAL_P`, Cameron and Miller 2015)
BOOT_FEW_SITES = 10
#: fewest sites a statistic's trials must come from for a GeoVerify bootstrap interval (module doc): the GeoHint
#: rule, :data:`BOOT_MIN_SITES`
CI_MIN_SITES = BOOT_MIN_SITES


def boot_site_flag(n_sites: int) -> str:
    """The flag of a site-bootstrap interval resting on ``n_sites`` sites (sites with answers):
    ``"withheld: 3 sites (< 5)"`` below :data:`BOOT_MIN_SITES` (no interval), ``"few sites: 7 (< 10)"`` from
    :data:`BOOT_MIN_SITES` to :data:`BOOT_FEW_SITES` - 1 (an interval, likely too narrow), else ``""``."""
    if n_sites < BOOT_MIN_SITES:
        return f"withheld: {n_sites} site{'' if n_sites == 1 else 's'} (< {BOOT_MIN_SITES})"
    if n_sites < BOOT_FEW_SITES:
        return f"few sites: {n_sites} (< {BOOT_FEW_SITES})"
    return ""


#: the sentence explaining :func:`boot_site_flag` (report notes and legends)
BOOT_SITES_RULE = (
    f"a site-bootstrap interval from fewer than {BOOT_MIN_SITES} sites is withheld (a bootstrap over 2 sites has 3 "
    f"distinct resamples; with so few clusters the interval is too narrow, even narrower than a binomial one), and "
    f"one from {BOOT_MIN_SITES} to {BOOT_FEW_SITES - 1} sites is flagged few-cluster (likely too narrow); "
    "Cameron and Miller 2015")
#: ``delta_1`` when it cannot be decided (no band reaches d' = 1 and some band's d' is undefined)
DELTA_UNDEFINED = "undefined"
#: read-out verdict when the d' it rests on cannot be computed (no, or too few, parsed answers)
READOUT_NO_DATA = "no data"
#: fewest signal trials, and decoy trials in a band, behind a d' that the report shows without a small-n
#: flag (module doc: below this one side's SE of d' exceeds a quarter of the d' = 1 criterion)
SMALL_N_TRIALS = 20

CELL_COLUMNS = ("model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail")
CONF_COLUMNS = ("model", "arm", "band", "verdict", "conf", "n")


def loglinear_rate(n_yes: Any, n: Any) -> Any:
    """Log-linear corrected rate ``(n_yes + 0.5) / (n + 1)`` (Hautus 1995); scalars or arrays."""
    return (np.asarray(n_yes, dtype=float) + 0.5) / (np.asarray(n, dtype=float) + 1.0)


def dprime_c(h_yes: Any, h_n: Any, f_yes: Any, f_n: Any) -> tuple[Any, Any]:
    """Sensitivity d' and criterion c from raw counts with the log-linear correction (Eq. 3).

    Parameters
    ----------
    h_yes, h_n : int or array of shape (k,)
        "yes" answers and total answers on signal trials.
    f_yes, f_n : int or array of shape (k,)
        "yes" answers and total answers on noise trials of one band.

    Returns
    -------
    (d_prime, c) : floats or arrays of shape (k,)
        NaN where ``h_n == 0`` or ``f_n == 0`` (no trials: undefined, never silently 0).
    """
    from scipy.stats import norm  # here, not at module level: see geoagent.scoring.geohint

    h_n_a, f_n_a = np.asarray(h_n, dtype=float), np.asarray(f_n, dtype=float)
    zh = norm.ppf(loglinear_rate(h_yes, h_n_a))
    zf = norm.ppf(loglinear_rate(f_yes, f_n_a))
    undefined = (h_n_a <= 0) | (f_n_a <= 0)
    d = np.where(undefined, np.nan, zh - zf)
    c = np.where(undefined, np.nan, -0.5 * (zh + zf))
    if np.ndim(d) == 0:
        return float(d), float(c)
    return d, c


def rate(n_yes: float, n: float) -> float:
    """Raw rate ``n_yes / n``; NaN when ``n == 0``."""
    return float(n_yes) / float(n) if n > 0 else math.nan


def discrimination_radius(bands: list[str], dprimes: list[float], threshold: float = DPRIME_USABLE) -> str | None:
    """``delta_1`` (Eq. 4): label of the first band (nearest first) with ``d' >= threshold``.

    Eq. 4 takes the minimum over the measured curve, so an unmeasured band (d' NaN: no signal trials, or
    a band without noise trials) leaves it unidentified wherever that band could be the minimum: the
    result is :data:`DELTA_UNDEFINED` when an undefined band lies nearer than the first band reaching the
    threshold (it might reach it too; the farther band is only an upper bound), and when no band reaches
    it while some band is undefined. None ("none": no band reaches d' = 1) needs every band defined.
    """
    any_undefined = False
    for b, d in zip(bands, dprimes):
        if d is None or math.isnan(d):
            any_undefined = True
            continue
        if d >= threshold:
            return DELTA_UNDEFINED if any_undefined else b
    return DELTA_UNDEFINED if any_undefined or not bands else None


#: ``delta_1`` label of the index ``len(bands)`` ("none": no band reaches d' = 1) in the bootstrap range
DELTA_NONE = "none"


def discrimination_radius_index(dprimes: Any, threshold: float = DPRIME_USABLE) -> np.ndarray:
    """``delta_1`` as a band index per row of d' values (vectorised :func:`discrimination_radius`).

    Parameters
    ----------
    dprimes : array of shape (n, k)
        d' per replicate (rows) and decoy band (columns, nearest first); NaN = undefined.

    Returns
    -------
    numpy.ndarray of shape (n,), float
        Index of the first band with ``d' >= threshold``; ``k`` ("none") when no band reaches it and every
        band is defined; NaN ("undefined") when a band nearer than the first one reaching it is undefined,
        when no band reaches it and some band is undefined, or when k == 0.
    """
    d = np.asarray(dprimes, dtype=float)
    if d.ndim != 2:
        raise ValueError(f"dprimes must have shape (n, k), got {d.shape}")
    n, k = d.shape
    if k == 0:
        return np.full(n, np.nan)
    reach = np.nan_to_num(d, nan=-np.inf) >= threshold
    first = np.where(reach.any(1), reach.argmax(1), k).astype(float)
    # an undefined band at or before the first reaching one (or anywhere, for "none") leaves delta_1 unidentified
    undefined_before = (np.cumsum(np.isnan(d), axis=1) > 0)[np.arange(n), np.minimum(first, k - 1).astype(int)]
    first[undefined_before | ((first == k) & np.isnan(d).any(1))] = np.nan
    return first


def ordinal_interval(index: Any, ci_level: float = 0.95) -> tuple[tuple[int, int] | None, int]:
    """Percentile range of an ordinal bootstrap statistic (e.g. the band index of ``delta_1``).

    ``numpy.quantile(..., method="inverted_cdf")`` at ``(1 - ci_level) / 2`` and ``1 - (1 - ci_level) / 2``
    over the finite replicates, so both ends are observed values. Returns ``((lo, hi) or None, n_defined)``.
    """
    v = np.asarray(index, dtype=float)
    ok = v[np.isfinite(v)]
    if ok.size == 0:
        return None, 0
    alpha = (1.0 - ci_level) / 2.0
    lo = np.quantile(ok, alpha, method="inverted_cdf")
    hi = np.quantile(ok, 1.0 - alpha, method="inverted_cdf")
    return (int(lo), int(hi)), int(ok.size)


def median_from_counts(values: Any, counts: Any) -> float:
    """Median of a sample given as distinct values with multiplicities (numpy.median convention).

    Returns NaN for an empty sample.
    """
    v = np.asarray(values, dtype=float)
    k = np.asarray(counts, dtype=np.int64)
    keep = k > 0
    v, k = v[keep], k[keep]
    total = int(k.sum())
    if total == 0:
        return math.nan
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(k[order])
    lo = v[np.searchsorted(cum, (total - 1) // 2 + 1)]
    hi = v[np.searchsorted(cum, total // 2 + 1)]
    return float((lo + hi) / 2.0)


@dataclass(frozen=True, slots=True)
class BandScore:
    """One decoy band: raw false-alarm rate F, corrected d' and c (main arm)."""

    band: str
    n: int
    n_yes: int
    f: float
    d_prime: float
    c: float


@dataclass(frozen=True, slots=True)
class Readout:
    """Pre-registered read-out (Sec. 5.4): ``invalid``, ``uninformative``, ``informative``, ``inconclusive``, or
    ``no data`` (:data:`READOUT_NO_DATA`: neither the nearest- nor the farthest-band d' is defined)."""

    verdict: str
    reasons: tuple[str, ...] = ()
    #: True when a control-arm check that made the verdict ``invalid`` rests on fewer than
    #: :data:`SMALL_N_TRIALS` control trials (reporting only; the verdict is unchanged)
    small_n: bool = False
    #: True when neither control arm has a false-alarm rate (not run, or none of its answers parsed), so an
    #: ``informative`` / ``uninformative`` / ``inconclusive`` verdict rests on the main arm alone: Sec. 5.4 reads the
    #: controls first (stats40 #3; :data:`UNCHECKED_MARK` in the tables). The verdict is unchanged
    unchecked: bool = False


#: what the tables and the console add to a read-out whose validity no control arm checked (:attr:`Readout.unchecked`)
UNCHECKED_MARK = "(validity unchecked: no control arm)"


@dataclass
class ModelScores:
    """All Table 12 statistics for one model (or ``pooled``). Rates in [0, 1]; NaN when undefined."""

    model: str
    n_signal: int
    n_hits: int
    h: float
    n_noise: int
    n_false_acceptances: int
    f: float
    bands: list[BandScore]
    controls: dict[str, tuple[int, int, float]]  # arm -> (n, n_yes, F)
    delta_1: str | None
    fa_conf_median: float
    fa_conf_share_high: float
    hit_conf_median: float
    n_parse_failures: int
    readout: Readout
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: bootstrap replicates with a defined value, per statistic name (same keys as ``ci``)
    ci_n: dict[str, int] = field(default_factory=dict)
    #: sites the trials of each statistic come from (every statistic of a bootstrap run, with an interval or
    #: withheld: fewer than :data:`CI_MIN_SITES`; the report flags 5-9 as few-cluster, :func:`boot_site_flag`)
    ci_sites: dict[str, int] = field(default_factory=dict)
    #: sites whose parsed answers enter each statistic (keys as ``ci_sites``: ``"H"``, ``"F"``, ``"F[<band>]"``, ...),
    #: with or without a bootstrap: the table's "sites" rows (walk27b #3: the number of sites behind each column was
    #: nowhere but in the interval notes)
    sites: dict[str, int] = field(default_factory=dict)
    #: bootstrap settings that produced ``ci`` (n_boot 0 = no intervals)
    n_boot: int = 0
    boot_seed: int | None = None
    ci_level: float = 0.95
    #: bootstrap range of ``delta_1`` as (nearest, farthest) band labels, "none" = beyond the farthest band
    #: (module doc); None without a bootstrap or when no replicate defines it
    delta_1_ci: tuple[str, str] | None = None
    #: keys of ``ci`` holding the Clopper-Pearson exact interval of a rate at 0 or 1 instead of the percentile
    #: interval (module doc)
    ci_exact: set[str] = field(default_factory=set)
    #: bootstrap replicates where ``delta_1`` is defined (not "undefined")
    delta_1_ci_n: int = 0
    #: answers cut off at the output-token limit, per arm (``geoagent.scoring.truncation.TruncationCount``; set
    #: by the aggregator from the answers' finish reasons; empty when none were counted)
    truncation: dict[str, Any] = field(default_factory=dict)
    #: false acceptances with a confidence (a finite number): the median and the share >= 0.8 are over these;
    #: ``n_false_acceptances - fa_conf_n`` answered yes without one and are left out of both (none when -1: not
    #: counted, a ``ModelScores`` made elsewhere)
    fa_conf_n: int = -1
    #: the claim tolerance tau (km) the trials were labelled with, which the report names (:func:`score`)
    tau_km: float = C.GEOVERIFY_TAU_KM
    #: decoy bands whose main-arm trials all carry a label starting above the band's lower edge, band -> where the
    #: nearest of those labels starts (km): the band holds no decoy between its edge and there (:func:`band_gaps`;
    #: a table built at 150 m scored at a tau below it, fixverify43 #2); the same for every column of one scoring
    band_gaps: dict[str, float] = field(default_factory=dict)

    @property
    def fa_conf_missing(self) -> int:
        """False acceptances left out of the confidence median and share for want of a confidence (0 when not
        counted)."""
        return max(0, self.n_false_acceptances - self.fa_conf_n) if self.fa_conf_n >= 0 else 0

    def band(self, label: str) -> BandScore:
        return next(b for b in self.bands if b.band == label)


def small_n_bands(s: ModelScores, min_trials: int = SMALL_N_TRIALS) -> list[str]:
    """Decoy bands whose d' rests on few trials: ``0 < n decoy trials in the band < min_trials``, or (for
    every band with trials) ``0 < n signal trials < min_trials``. Bands without trials (d' undefined) are
    not listed. Reporting only: the d' values are unchanged (module doc, "small-n flag").

    Parameters
    ----------
    s : ModelScores
    min_trials : int
        Threshold in trials (default :data:`SMALL_N_TRIALS`).

    Returns
    -------
    list of str
        Band labels, nearest first.
    """
    few_signal = 0 < s.n_signal < min_trials
    return [b.band for b in s.bands if b.n > 0 and s.n_signal > 0 and (b.n < min_trials or few_signal)]


def delta_1_small_n(s: ModelScores, min_trials: int = SMALL_N_TRIALS) -> bool:
    """Whether ``delta_1`` rests on a band whose d' is flagged by :func:`small_n_bands`: the band it names or any
    nearer band (Eq. 4's minimum is decided by every band up to it: one answer in a small nearer band with
    d' < 1 can move delta_1 there), or, for None ("none": no band reaches d' = 1, a statement about every
    band), any band."""
    flagged = set(small_n_bands(s, min_trials))
    if s.delta_1 is None:
        return bool(flagged)
    for b in s.bands:
        if b.band in flagged:
            return True
        if b.band == s.delta_1:
            return False
    return s.delta_1 in flagged


def empty_cells() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"model": pl.Utf8, "site": pl.Utf8, "arm": pl.Utf8, "band": pl.Utf8, "truth": pl.Utf8,
                "n_yes": pl.Int64, "n_no": pl.Int64, "n_fail": pl.Int64}
    )


def empty_conf() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"model": pl.Utf8, "arm": pl.Utf8, "band": pl.Utf8, "verdict": pl.Utf8,
                "conf": pl.Float64, "n": pl.Int64}
    )


#: the verdicts a scored row may carry (None, a null, is a parse failure)
VERDICTS = ("yes", "no")


def check_verdicts(rows: pl.DataFrame) -> None:
    """Raise ValueError naming the first row (trial id and model where present) whose ``verdict`` is neither
    "yes", "no" nor null: such a row would be counted as neither a yes, a no nor a parse failure and so vanish
    from every rate without a word."""
    bad = rows.filter(pl.col("verdict").is_not_null() & ~pl.col("verdict").is_in(list(VERDICTS)))
    if bad.height:
        r = bad.row(0, named=True)
        raise ValueError(
            f"scored row trial_id={r.get('trial_id')!r} model={r.get('model')!r}: verdict {r['verdict']!r} is not "
            f"'yes', 'no' or None (parse failure); {bad.height} such row(s) in this batch"
        )


def _blank(col: str) -> pl.Expr:
    return pl.col(col).is_null() | (pl.col(col).cast(pl.Utf8) == "")


def placed_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (scored rows) with every trial placed in the cell its ground truth puts it in (seed 000 Sec. 5.2,
    Eq. 1: a claim is signal exactly when the photo lies within tau of it):

    * without a ``truth`` column, truth is "yes" exactly for main-arm rows of band ``signal``;
    * a control-arm row with no truth (null or "") is a noise trial, "no" (its photo or claim does not match the
      other; as :func:`_unparsed` counts it), so it enters its arm's F (stats31 F1: it fell out of F, and the
      read-out said the control was not run);
    * a main-arm row with truth "yes" and no band (null or "": the band column is optional) is a signal trial and
      enters H (stats31 F3: it fell out of H). A main-arm noise trial with no band enters F (every main-arm trial
      with truth "no", as the release's analysis and the false-acceptance confidence figures count them; stats35
      #2: it was in those figures but not in F) and no band's F, d' or c, as the importer documents
      (:func:`geoagent.data.importer._check_arm_band`).
    """
    if "truth" not in rows.columns:
        return rows.with_columns(
            pl.when((pl.col("arm") == ARM_MAIN) & (pl.col("band") == BAND_SIGNAL))
            .then(pl.lit("yes")).otherwise(pl.lit("no")).alias("truth")
        )
    main = pl.col("arm") == ARM_MAIN
    rows = rows.with_columns(
        pl.when(~main & _blank("truth")).then(pl.lit("no")).otherwise(pl.col("truth").cast(pl.Utf8)).alias("truth"))
    return rows.with_columns(
        pl.when(main & _blank("band") & (pl.col("truth") == "yes")).then(pl.lit(BAND_SIGNAL))
        .otherwise(pl.col("band").cast(pl.Utf8)).alias("band"))


def cells_from_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """From-scratch cell table from scored rows (columns model, site, arm, band, truth, verdict; verdict
    None = parse failure; without ``truth`` it is "yes" exactly for main-arm signal rows). Used by tests and as the reference the incremental aggregator must equal.

    Raises
    ------
    ValueError
        A verdict other than "yes", "no" or None (:func:`check_verdicts`).
    """
    if rows.height == 0:
        return empty_cells()
    check_verdicts(rows)
    rows = placed_rows(rows)
    return (
        rows.group_by(["model", "site", "arm", "band", "truth"])
        .agg(
            (pl.col("verdict") == "yes").sum().cast(pl.Int64).alias("n_yes"),
            (pl.col("verdict") == "no").sum().cast(pl.Int64).alias("n_no"),
            pl.col("verdict").is_null().sum().cast(pl.Int64).alias("n_fail"),
        )
        .sort(["model", "site", "arm", "band", "truth"])
    )


def conf_from_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """From-scratch confidence table (counts per model, arm, band, verdict, conf) from scored rows."""
    rows = placed_rows(rows)
    conf = pl.col("conf").cast(pl.Float64)
    # a NaN confidence is a missing one (polars keeps NaN apart from null: it would enter the counts,
    # sort above 1.0 in the median and count as "below 0.8" in the share)
    sub = rows.filter(pl.col("verdict").is_not_null() & conf.is_not_null() & conf.is_finite()).with_columns(conf)
    if sub.height == 0:
        return empty_conf()
    return (
        sub.group_by(["model", "arm", "band", "verdict", "conf"])
        .agg(pl.len().cast(pl.Int64).alias("n"))
        .sort(["model", "arm", "band", "verdict", "conf"])
    )


# --- core computation on a (sites x cells) count matrix ------------------------------------------------


def _noise(a: np.ndarray, k: int) -> np.ndarray:
    """The main arm's noise columns of a count array of :func:`_matrix`'s layout: the ``k`` decoy bands and the
    decoys recorded without a band (last column): every main-arm trial whose truth is "no", as F counts them."""
    return np.concatenate([a[..., 1 : 1 + k], a[..., -1:]], axis=-1)


def _stat_vector(yes: np.ndarray, n: np.ndarray, bands: list[str]) -> dict[str, np.ndarray]:
    """Statistics from count arrays of shape (..., 1 + len(bands) + 3): [signal, bands..., mismatch, blank,
    decoys without band] (:func:`_matrix`). F is over every main-arm noise trial, the decoys without a band
    included (as the release's ``verify_results.py``: F over the main arm's trials with truth "no"); each band's F,
    d' and c over that band's decoys."""
    k = len(bands)
    hy, hn = yes[..., 0], n[..., 0]
    out: dict[str, np.ndarray] = {"H": np.where(hn > 0, hy / np.maximum(hn, 1), np.nan)}
    fy, fn = _noise(yes, k).sum(-1), _noise(n, k).sum(-1)
    out["F"] = np.where(fn > 0, fy / np.maximum(fn, 1), np.nan)
    for j, b in enumerate(bands):
        d, c = dprime_c(hy, hn, yes[..., 1 + j], n[..., 1 + j])
        out[f"F[{b}]"] = np.where(n[..., 1 + j] > 0, yes[..., 1 + j] / np.maximum(n[..., 1 + j], 1), np.nan)
        out[f"d'[{b}]"] = np.asarray(d)
        out[f"c[{b}]"] = np.asarray(c)
    for j, arm in enumerate((ARM_MISMATCH, ARM_BLANK)):
        cy, cn = yes[..., 1 + k + j], n[..., 1 + k + j]
        out[f"F[{arm}]"] = np.where(cn > 0, cy / np.maximum(cn, 1), np.nan)
    return out


def _matrix(
    cells: pl.DataFrame, bands: list[str], sites: list[str] | None = None
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per-site count matrices (n_sites, 1 + len(bands) + 3) of yes and of parsed answers: columns signal, each
    decoy band, the two control arms, and the main arm's decoys recorded without a band (an optional column of a
    trial table: in F, in no band's F, d' or c; :func:`placed_rows`).

    ``sites`` fixes the row order (e.g. the union of all models' sites, so bootstrap draws can be shared);
    a site absent from ``cells`` gets a row of zeros. Default: the sorted sites of ``cells``.
    """
    cols = ([(ARM_MAIN, BAND_SIGNAL)] + [(ARM_MAIN, b) for b in bands] + [(ARM_MISMATCH, None), (ARM_BLANK, None)]
            + [(ARM_MAIN, None)])
    if sites is None:
        sites = sorted(cells["site"].unique().to_list()) if cells.height else []
    idx = {s: i for i, s in enumerate(sites)}
    yes = np.zeros((len(sites), len(cols)))
    n = np.zeros((len(sites), len(cols)))
    col_of = {c: j for j, c in enumerate(cols)}
    for r in cells.iter_rows(named=True):
        arm = r["arm"]
        if arm != ARM_MAIN and (r.get("truth") or "no") != "no":
            continue  # control-arm F counts noise trials only (as the release's analysis does)
        key = (arm, r["band"] or None) if arm == ARM_MAIN else (arm, None)
        j = col_of.get(key)
        if j is None:
            continue
        i = idx[r["site"]]
        yes[i, j] += r["n_yes"]
        n[i, j] += r["n_yes"] + r["n_no"]
    return sites, yes, n


def _sites_per_statistic(n: np.ndarray, bands: list[str]) -> dict[str, int]:
    """Number of sites whose parsed answers enter each statistic of :func:`_stat_vector` (same keys), from the
    per-site count matrix ``n`` of shape (n_sites, 1 + len(bands) + 3); d' and c count the sites of the
    scarcer of their two rates (H and the band's F)."""
    has = n > 0
    k = len(bands)
    out = {"H": int(has[:, 0].sum()), "F": int(_noise(has, k).any(1).sum())}
    for j, b in enumerate(bands):
        out[f"F[{b}]"] = int(has[:, 1 + j].sum())
        out[f"d'[{b}]"] = out[f"c[{b}]"] = min(out["H"], out[f"F[{b}]"])
    for j, arm in enumerate((ARM_MISMATCH, ARM_BLANK)):
        out[f"F[{arm}]"] = int(has[:, 1 + k + j].sum())
    return out


def readout(
    near_dprime: float, far_dprime: float, f_main: float, f_mismatch: float | None, f_blank: float | None,
    *, n_mismatch: int | None = None, n_blank: int | None = None,
    unparsed_mismatch: int = 0, unparsed_blank: int = 0,
    n_main: int | None = None, n_signal: int | None = None, unparsed_main: int = 0,
) -> Readout:
    """Pre-registered read-out of Sec. 5.4 (thresholds as module constants). Control F None (or NaN): no parsed
    answer of that arm, read as "not run" unless ``unparsed_mismatch`` / ``unparsed_blank`` (answers of the arm
    that did not parse) is positive: then the note says the arm ran and its F is undefined, with that count.
    ``no data`` (not ``inconclusive``) when both d' are NaN: nothing to read the outcome from. A reason naming a
    d' that is NaN (one band unmeasured) says ``undefined (no parsed answers)``, never ``nan``.

    ``n_main`` (parsed main-arm answers), ``n_signal`` (parsed signal answers) and ``unparsed_main`` (main-arm
    answers that did not parse) say why a ``no data`` has nothing to read (fixverify42 #3): no main-arm answer at
    all (none answered yet, or every call failed: missing work, not an answer), answers that all failed to parse
    (trials answered, no verdict among them), no parsed signal answer, or no parsed decoy answer in the nearest
    and the farthest band. None (not given): the reason names the possibilities.

    Numbers in a reason are printed with enough decimals to show the side of the threshold they are on (two for
    d', one for a percentage, more when that rounds onto the threshold: "d' 2.004 > 2", not "2.00 > 2"), and
    never as ``-0.00``.

    ``n_mismatch`` / ``n_blank``: parsed control trials behind ``f_mismatch`` / ``f_blank`` (None = not
    known). A control check that makes the verdict ``invalid`` from fewer than :data:`SMALL_N_TRIALS` trials
    (the d' small-n convention) says so in its reason and sets ``Readout.small_n``; the verdict is unchanged."""
    reasons: list[str] = []
    small = False

    def few(n: int | None, what: str) -> str:
        nonlocal small
        if n is None or n >= SMALL_N_TRIALS:
            return ""
        small = True
        return (f" (from {n} {what} control trial{'s' if n != 1 else ''}, fewer than {SMALL_N_TRIALS}: "
                "the read-out rests on few trials)")

    if f_mismatch is not None and not math.isnan(f_mismatch) and f_mismatch > MISMATCH_F_MAX:
        reasons.append(f"swapped-image control F {_beside(f_mismatch, MISMATCH_F_MAX, 1, percent=True)} > "
                       f"{MISMATCH_F_MAX:.0%}"
                       + few(n_mismatch, "swapped-image"))
    if (
        f_blank is not None
        and not math.isnan(f_blank)
        and not math.isnan(f_main)
        and abs(f_blank - f_main) <= BLANK_F_MIN_GAP + 1e-9
    ):
        reasons.append(f"gray-field control F {fixed_text(100 * f_blank, 1)}% within 5 points of main-arm F "
                       f"{fixed_text(100 * f_main, 1)}%"
                       + few(n_blank, "gray-field"))
    if reasons:
        return Readout("invalid", tuple(reasons), small_n=small)
    notes = []
    for f, unparsed, what in ((f_mismatch, unparsed_mismatch, "swapped-image"), (f_blank, unparsed_blank, "gray-field")):
        if f is None or (isinstance(f, float) and math.isnan(f)):
            notes.append(f"{what} control F undefined: none of its {count_text(unparsed, 'answer')} parsed"
                         if unparsed else f"{what} control not run")
    unchecked = len(notes) == 2  # no control arm has an F: the verdict rests on the main arm alone (stats40 #3)
    if not math.isnan(near_dprime) and near_dprime > UNINFORMATIVE_NEAR_DPRIME:
        return Readout("uninformative", (f"nearest-band d' {_beside(near_dprime, UNINFORMATIVE_NEAR_DPRIME, 2)} > 2",
                                         *notes), unchecked=unchecked)
    if (
        not math.isnan(near_dprime)
        and not math.isnan(far_dprime)
        and near_dprime < INFORMATIVE_NEAR_DPRIME
        and far_dprime > INFORMATIVE_FAR_DPRIME
    ):
        return Readout("informative", (f"nearest-band d' {_beside(near_dprime, INFORMATIVE_NEAR_DPRIME, 2)} < 0.5, "
                                       f"farthest {_beside(far_dprime, INFORMATIVE_FAR_DPRIME, 2)} > 1.5", *notes),
                       unchecked=unchecked)
    if math.isnan(near_dprime) and math.isnan(far_dprime):
        return Readout(READOUT_NO_DATA, (_no_data_reason(n_main, n_signal, unparsed_main), *notes))
    return Readout("inconclusive", (f"nearest-band d' {_dprime_text(near_dprime)}, farthest-band d' "
                                    f"{_dprime_text(far_dprime)}", *notes), unchecked=unchecked)


def _no_data_reason(n_main: int | None, n_signal: int | None, unparsed_main: int) -> str:
    """Why neither the nearest- nor the farthest-band d' is defined (:func:`readout`'s ``no data``): trials with
    no answer at all are another case than trials answered without a parsed verdict (fixverify42 #3)."""
    undefined = "nearest- and farthest-band d' undefined"
    if n_main == 0 and unparsed_main:
        return (f"{undefined}: the main arm's trials were answered ({count_text(unparsed_main, 'answer')}) but "
                "none parsed: every answer is a parse failure (no verdict), so there is no H or F")
    if n_main == 0:
        return (f"{undefined}: no main-arm trial has an answer yet (none answered, or every call failed: missing "
                "work, not an answer)")
    if n_signal == 0:
        return (f"{undefined}: no parsed answer of a signal trial (no H)"
                + (f"; {count_text(unparsed_main, 'main-arm answer')} did not parse" if unparsed_main else ""))
    if n_main is not None:
        return f"{undefined}: no parsed answer of a decoy trial in the nearest or the farthest band"
    return f"{undefined}: no (or too few) parsed answers (signal and decoy trials) in the main arm"


def mean_model_dprime(scores: Mapping[str, ModelScores], band_index: int) -> tuple[float, int]:
    """``(d', models)``: the mean of the models' own d' in band ``band_index`` of ``scores`` (0: the nearest, -1:
    the farthest), weighted by each model's main-arm trials behind it (its signal trials + that band's decoys), and
    how many models it averages. The :data:`POOLED` column is left out, and so are models whose d' there is NaN;
    ``(nan, 0)`` when none has one.

    The pooled column sums the models' counts (as the release's script does, Sec. 5.3); when the models' criteria c
    differ, the summed H and F lie on no one model's ROC curve and their d' falls below every model's own
    (Macmillan & Creelman 2005, on collapsing data over observers): stats40 #1, the release's Table 12 pools 0.33 /
    1.20 where its models' own average 0.41 / 1.39. This mean is the figure to set beside it."""
    num = den = 0.0
    used = 0
    for name, sc in scores.items():
        if name == POOLED or not sc.bands:
            continue
        band = sc.bands[band_index]
        n = sc.n_signal + band.n
        if n <= 0 or math.isnan(band.d_prime):
            continue
        num += n * band.d_prime
        den += n
        used += 1
    return (num / den, used) if den else (math.nan, 0)


def _beside(x: float, threshold: float, decimals: int, *, percent: bool = False) -> str:
    """``x`` for a reason that compares it with ``threshold``: ``decimals`` decimals (of a percentage when
    ``percent``, without the sign), more (up to 4 more) while it would print as the threshold itself, so the
    printed number is on the side the reason states; never ``-0.00`` (:func:`geoagent.textfmt.fixed_text`)."""
    scale = 100.0 if percent else 1.0
    for d in range(decimals, decimals + 5):
        text = fixed_text(x * scale, d)
        if text != fixed_text(threshold * scale, d):
            break
    return text + ("%" if percent else "")


def _dprime_text(d: float) -> str:
    """A d' in a read-out reason: two decimals, or ``undefined (no parsed answers)`` for NaN (no signal or no decoy
    answers in that band), never a bare ``nan``; a d' that rounds to zero is ``0.00``, never ``-0.00``."""
    return "undefined (no parsed answers)" if math.isnan(d) else fixed_text(d, 2)


def bootstrap_site_indices(n_sites: int, n_boot: int, seed: int) -> np.ndarray:
    """Site indices drawn with replacement, shape (n_boot, n_sites), from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_sites, size=(n_boot, n_sites))


def percentile_interval(values: Any, ci_level: float = 0.95) -> tuple[tuple[float, float] | None, int]:
    """Percentile interval of bootstrap replicates, non-finite values (NaN, inf) dropped.

    Parameters
    ----------
    values : array of shape (n_boot,)
    ci_level : float
        Central mass (0.95 -> 2.5th and 97.5th percentiles, ``numpy.quantile`` linear interpolation).

    Returns
    -------
    ((lo, hi) or None, n_defined)
        None when no replicate is defined.
    """
    v = np.asarray(values, dtype=float)
    ok = v[np.isfinite(v)]
    if ok.size == 0:
        return None, 0
    alpha = (1.0 - ci_level) / 2.0
    return (float(np.quantile(ok, alpha)), float(np.quantile(ok, 1.0 - alpha))), int(ok.size)


def clopper_pearson(k: int, n: int, ci_level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson exact interval of a binomial proportion k/n (fractions in [0, 1]); used for a rate at 0
    or 1, where the site bootstrap's percentile interval has zero width (module doc).

    Source: Clopper and Pearson (1934); ``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``.
    Raises ValueError when n < 1 or k outside [0, n] (scipy)."""
    from scipy.stats import binomtest

    iv = binomtest(int(k), int(n)).proportion_ci(confidence_level=ci_level, method="exact")
    return float(iv.low), float(iv.high)


def _rate_counts(name: str, yes: np.ndarray, n: np.ndarray, bands: list[str]) -> tuple[int, int] | None:
    """(k, n) behind a rate key of :func:`_stat_vector` (``H``, ``F``, ``F[band]``, ``F[arm]``) from the pooled
    count vectors; None for a key that is not a rate (d', c)."""
    k = len(bands)
    if name == "H":
        return int(yes[0]), int(n[0])
    if name == "F":
        return int(_noise(yes, k).sum()), int(_noise(n, k).sum())
    cols = {f"F[{b}]": 1 + j for j, b in enumerate(bands)}
    cols.update({f"F[{arm}]": 1 + k + j for j, arm in enumerate((ARM_MISMATCH, ARM_BLANK))})
    j = cols.get(name)
    return None if j is None else (int(yes[j]), int(n[j]))


def _unparsed(cells: pl.DataFrame, arm: str) -> int:
    """Answers of control arm ``arm`` in ``cells`` that did not parse (``n_fail``), of noise trials only, as its F
    counts (:func:`_matrix`)."""
    if not cells.height:
        return 0
    rows = cells.filter(pl.col("arm") == arm)
    if "truth" in rows.columns:
        rows = rows.filter(pl.col("truth").fill_null("no") == "no")
    return int(rows["n_fail"].sum())


def _score_one(
    model: str,
    cells: pl.DataFrame,
    conf: pl.DataFrame,
    bands: list[str],
    boot_idx: np.ndarray | None,
    ci_level: float,
    sites: list[str] | None = None,
    seed: int | None = None,
) -> ModelScores:
    sites, yes, n = _matrix(cells, bands, sites)
    tot_y, tot_n = yes.sum(0), n.sum(0)
    st = _stat_vector(tot_y, tot_n, bands)
    k = len(bands)
    band_scores = [
        BandScore(b, int(tot_n[1 + j]), int(tot_y[1 + j]), float(st[f"F[{b}]"]), float(st[f"d'[{b}]"]), float(st[f"c[{b}]"]))
        for j, b in enumerate(bands)
    ]
    controls = {
        arm: (int(tot_n[1 + k + j]), int(tot_y[1 + k + j]), float(st[f"F[{arm}]"]))
        for j, arm in enumerate((ARM_MISMATCH, ARM_BLANK))
    }
    fa = conf.filter(
        # every main-arm noise trial F counts (_matrix): one of the scored bands or one without a band (null or
        # ""); a band outside ``bands`` is in no column of F, so in no false acceptance either (stats38 #2)
        (pl.col("arm") == ARM_MAIN) & pl.col("band").fill_null("").is_in([*bands, ""]) & (pl.col("verdict") == "yes")
    )
    fa_vals, fa_n = fa["conf"].to_numpy(), fa["n"].to_numpy()
    fa_total = int(fa_n.sum()) if fa.height else 0
    hit = conf.filter((pl.col("arm") == ARM_MAIN) & (pl.col("band") == BAND_SIGNAL) & (pl.col("verdict") == "yes"))
    near = band_scores[0].d_prime if band_scores else math.nan
    far = band_scores[-1].d_prime if band_scores else math.nan
    ro = readout(
        near,
        far,
        float(st["F"]),
        controls[ARM_MISMATCH][2] if controls[ARM_MISMATCH][0] else None,
        controls[ARM_BLANK][2] if controls[ARM_BLANK][0] else None,
        n_mismatch=controls[ARM_MISMATCH][0],
        n_blank=controls[ARM_BLANK][0],
        unparsed_mismatch=_unparsed(cells, ARM_MISMATCH),
        unparsed_blank=_unparsed(cells, ARM_BLANK),
        n_main=int(tot_n[0]) + int(_noise(tot_n, k).sum()),
        n_signal=int(tot_n[0]),
        unparsed_main=int(cells.filter(pl.col("arm") == ARM_MAIN)["n_fail"].sum()) if cells.height else 0,
    )
    ci: dict[str, tuple[float, float]] = {}
    ci_n: dict[str, int] = {}
    ci_sites: dict[str, int] = {}
    n_boot = 0 if boot_idx is None else int(boot_idx.shape[0])
    delta_ci: tuple[str, str] | None = None
    delta_ci_n = 0
    ci_exact: set[str] = set()
    site_cols = _sites_per_statistic(n, bands) if len(sites) else {}
    if n_boot > 0 and len(sites) > 0:
        by = yes[boot_idx].sum(1)  # (n_boot, cols)
        bn = n[boot_idx].sum(1)
        bs = _stat_vector(by, bn, bands)
        for name, vals in bs.items():
            ci_sites[name] = int(site_cols[name])
            if site_cols[name] < CI_MIN_SITES:
                continue  # too few sites: too few distinct resamples, an interval far too narrow (module doc)
            interval, kept = percentile_interval(vals, ci_level)
            if interval is not None:
                ci[name], ci_n[name] = interval, kept
            k_n = _rate_counts(name, tot_y, tot_n, bands)
            if k_n is not None and k_n[1] > 0 and k_n[0] in (0, k_n[1]):  # 0 or 1: zero-width percentile
                ci[name] = clopper_pearson(k_n[0], k_n[1], ci_level)
                ci_exact.add(name)
        # delta_1 rests on H and every measured band's d'
        delta_ok = site_cols["H"] >= CI_MIN_SITES and all(
            site_cols[f"F[{b}]"] >= CI_MIN_SITES for b in bands if site_cols[f"F[{b}]"] > 0)
        if bands and delta_ok:
            idx = discrimination_radius_index(np.stack([bs[f"d'[{b}]"] for b in bands], axis=-1))
            labels = [*bands, DELTA_NONE]
            irange, delta_ci_n = ordinal_interval(idx, ci_level)
            if irange is not None:
                delta_ci = (labels[irange[0]], labels[irange[1]])
    n_fail = int(cells["n_fail"].sum()) if cells.height else 0
    return ModelScores(
        model=model,
        n_signal=int(tot_n[0]),
        n_hits=int(tot_y[0]),
        h=float(st["H"]),
        n_noise=int(_noise(tot_n, k).sum()),
        n_false_acceptances=int(_noise(tot_y, k).sum()),
        f=float(st["F"]),
        bands=band_scores,
        controls=controls,
        delta_1=discrimination_radius(bands, [b.d_prime for b in band_scores]),
        fa_conf_median=median_from_counts(fa_vals, fa_n),
        fa_conf_share_high=float(fa_n[fa_vals >= CONF_HIGH - 1e-12].sum() / fa_total) if fa_total else math.nan,
        hit_conf_median=median_from_counts(hit["conf"].to_numpy(), hit["n"].to_numpy()),
        n_parse_failures=n_fail,
        fa_conf_n=fa_total,
        readout=ro,
        ci=ci,
        ci_n=ci_n,
        ci_sites=ci_sites,
        sites=site_cols,
        n_boot=n_boot,
        boot_seed=seed if n_boot else None,
        ci_level=ci_level,
        delta_1_ci=delta_ci,
        delta_1_ci_n=delta_ci_n,
        ci_exact=ci_exact,
    )


def band_folds(labels: Iterable[str | None], bands: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Which of ``labels`` (band labels of stored trials) :func:`fold_bands` counts in which of ``bands`` (decoy
    band labels, nearest first): ``{label: band}`` for each label not in ``bands`` that

    * lies inside one of them by its edges (:func:`geoagent.data.model.band_edges`): a campaign at a tau below 150 m
      planned before the nearest band started at tau (trial builder 3) stored its nearest decoys as ``0.15-0.3km``,
      inside the band ``<tau>-0.3km`` scored now (fixverify42 #1); or
    * is the paper's nearest band ``0.15-0.3km`` while the nearest of ``bands`` has its upper edge and starts above
      150 m (``0.2-0.3km``, tau = 200 m): before fixverify43 #1 every tau from 150 m up labelled its nearest band
      ``0.15-0.3km``, its decoys lying from tau on (a nearer candidate is signal, Eq. 1), so they are that band's.
      (A release table labelled at 150 m holding decoys between 150 m and tau is refused at plan time:
      :func:`geoagent.geoverify.plan.check_tolerance`, :func:`geoagent.geoverify.plan.check_bands`.)

    A label inside none of ``bands`` (or ``signal``, empty, None) is not in the result."""
    spans = [(b, band_edges(b)) for b in bands]
    near = spans[0][1] if spans else None
    paper = band_edges(DECOY_BAND_LABELS[0])
    out: dict[str, str] = {}
    for label in set(labels):
        edges = band_edges(label)
        if label in bands or edges is None:
            continue
        into = next((b for b, e in spans if e is not None and e[0] <= edges[0] and edges[1] <= e[1]), None)
        if into is None and label == DECOY_BAND_LABELS[0] and near is not None and near[1] == paper[1] \
                and near[0] > paper[0]:
            into = spans[0][0]
        if into is not None:
            out[label] = into
    return out


def fold_bands(df: pl.DataFrame, bands: tuple[str, ...] | list[str]) -> pl.DataFrame:
    """``df`` (a cell or confidence table) with each ``band`` label that is not one of ``bands`` but belongs to one
    of them (:func:`band_folds`: inside it by its edges, or the paper's ``0.15-0.3km`` of a tau above 150 m)
    relabelled to that band, so its trials count in that band's F instead of in no band's. A label :func:`band_folds`
    places in no band (or ``signal``, empty, null) stays as it is."""
    if df.height == 0 or "band" not in df.columns:
        return df
    mapping = band_folds(df["band"].drop_nulls().unique().to_list(), bands)
    if not mapping:
        return df
    return df.with_columns(pl.col("band").replace(mapping))


def band_gaps(cells: pl.DataFrame, bands: tuple[str, ...] | list[str]) -> dict[str, float]:
    """Decoy bands of ``bands`` that the main-arm decoy trials of ``cells`` (a cell table, before
    :func:`fold_bands`) cover only from above their lower edge: ``{band: lo_km}``, ``lo_km`` the lowest lower edge
    (km) among the labels counted in that band (:func:`band_folds`; the band's own label counts with its own edge).

    fixverify43 #2: a trial table built at the paper's 150 m (the release's) scored at a tau below it has its
    nearest decoys labelled ``0.15-0.3km``; they count in the band ``<tau>-0.3km`` (fixverify42 #1), which then holds
    no decoy between tau and 150 m: its F, d' and delta_1 describe decoys from 150 m on, and the report says so
    (:func:`geoagent.report.geoverify.band_gap_lines`). {} when every band with trials has one labelled from its
    own edge, or when ``cells`` has no main-arm decoy rows."""
    if cells.height == 0 or "band" not in cells.columns:
        return {}
    rows = cells.filter(pl.col("arm") == ARM_MAIN) if "arm" in cells.columns else cells
    labels = [b for b in rows["band"].drop_nulls().unique().to_list() if b and b != BAND_SIGNAL]
    folds = band_folds(labels, bands)
    gaps: dict[str, float] = {}
    for band in bands:
        own = band_edges(band)
        members = [band_edges(lab) for lab in labels if lab == band or folds.get(lab) == band]
        starts = [e[0] for e in members if e is not None]
        if own is not None and starts and min(starts) > own[0] + 1e-9:
            gaps[band] = min(starts)
    return gaps


def score(
    cells: pl.DataFrame,
    conf: pl.DataFrame | None = None,
    *,
    bands: tuple[str, ...] | None = None,
    tau_km: float = C.GEOVERIFY_TAU_KM,
    n_boot: int = 0,
    seed: int = 0,
    ci_level: float = 0.95,
    pooled: bool = True,
    models: Iterable[str] = (),
) -> dict[str, ModelScores]:
    """Score every model in a cell table, plus ``pooled`` over models (Table 12 columns).

    Parameters
    ----------
    cells : polars.DataFrame
        Columns ``model, site, arm, band, truth, n_yes, n_no, n_fail`` (see module doc). Control-arm rows may
        carry any band; they are pooled per arm.
    conf : polars.DataFrame, optional
        Columns ``model, arm, band, verdict, conf, n``: counts of stated confidences.
    bands : tuple of str, optional
        Decoy band labels, nearest first; default :func:`geoagent.data.model.decoy_band_labels` of ``tau_km``
        (the paper's for 0.15; for another tau the nearest band starts at tau). A cell whose band belongs to
        one of them is counted in it (:func:`fold_bands`); a band its cells cover only from above its lower edge
        is kept in ``ModelScores.band_gaps`` (:func:`band_gaps`).
    tau_km : float
        The claim tolerance tau in km the trials were labelled with (Eq. 1; the paper's 0.15): it sets the default
        ``bands`` and is kept in ``ModelScores.tau_km`` for the report's terms.
    n_boot : int
        Bootstrap replicates resampling sites (0 = no CIs). The same seed gives the same CIs.
    seed : int
        Seed of ``numpy.random.default_rng`` for the bootstrap: one draw matrix of shape (n_boot, S) over
        the sorted union of the S sites, shared by every column (see module doc).
    ci_level : float
        Central interval mass (0.95 = percentile 2.5-97.5).
    models : iterable of str
        Models that get a column even without a row in ``cells`` (every count 0, every statistic undetermined):
        a campaign's models before their first answer (newuser39 #5: a one-model campaign without answers showed
        only a "pooled" column).

    Returns
    -------
    dict of model name -> ModelScores
        Models in sorted order, then ``"pooled"`` (sums of all models' counts; a site's trials across
        models resample together).

    Raises
    ------
    ValueError
        ``n_boot`` < 0, ``ci_level`` outside (0, 1), or (with ``pooled``) a model named :data:`POOLED`, whose
        column the pooled one would replace.
    """
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    if not 0.0 < ci_level < 1.0:
        raise ValueError(f"ci_level must lie in (0, 1), got {ci_level}")
    conf = conf if conf is not None else empty_conf()
    bands = tuple(bands) if bands is not None else decoy_band_labels(tau_km)
    gaps = band_gaps(cells, bands)  # before folding: the labels the trials were stored with (fixverify43 #2)
    cells, conf = fold_bands(cells, bands), fold_bands(conf, bands)
    out: dict[str, ModelScores] = {}
    models = sorted(set(cells["model"].unique().to_list() if cells.height else []) | set(models))
    if pooled and POOLED in models:
        raise ValueError(f"a model is named {POOLED!r}, the name of the pooled column: its scores and the pooled "
                         "ones would share one key (the model's column replaced by the pool's); rename the model")
    sites = sorted(cells["site"].unique().to_list()) if cells.height else []
    boot_idx = bootstrap_site_indices(len(sites), n_boot, seed) if n_boot > 0 and sites else None
    for m in models:
        out[m] = _score_one(
            m, cells.filter(pl.col("model") == m), conf.filter(pl.col("model") == m), list(bands), boot_idx,
            ci_level, sites, seed,
        )
    if pooled:
        out[POOLED] = _score_one(POOLED, cells, conf, list(bands), boot_idx, ci_level, sites, seed)
    for sc in out.values():
        sc.tau_km = float(tau_km)
        sc.band_gaps = dict(gaps)
    return out
