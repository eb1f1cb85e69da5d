"""GeoHint per-response metrics: hit, error/hint-distance ratio, geometric means, binomial intervals.

Seed 000: Sec. 4.2 (hit = error < 1 km *and* resolution finer than city; city-level resolution is
censored), Sec. 6.2.2 (Table 5: geometric means of d_ref and err, median of err/d_ref, on answers that
resolved finer than city level with a positive error), Fig. 2 (the paper's error bars are "95 % binomial
intervals"; :func:`wilson_interval` is that interval for one pooled count, Wilson score being a choice, as the paper
says only "binomial"). The report's Fig. 2 does not draw it: it draws site-bootstrap percentile intervals
(:func:`geoagent.report.geohint.hit_by_band_points`), because a binomial interval treats every response as
independent and Sec. 6 makes the site the unit of resampling.

Resolution levels use the geocoder's names ``building``, ``area``, ``city``, ``none``; the release's
``place`` (and an empty field) map to ``building`` (and ``none``) via :func:`normalize_level`.
"""

from __future__ import annotations

import math

import numpy as np

from geoagent.constants import HIT_THRESHOLD_KM

LEVELS = ("building", "area", "city", "none")
FINE_LEVELS = frozenset({"building", "area"})
_LEVEL_ALIASES = {
    "building": "building",
    "place": "building",
    "area": "area",
    "city": "city",
    "none": "none",
    "": "none",
    "failed": "none",
    "unresolved": "none",
}


def normalize_level(level: str | None) -> str:
    """Map a resolution level (ours or the release's) to one of :data:`LEVELS`.

    None, an empty string and a float NaN (a missing cell read by pandas) map to ``none``.

    Raises
    ------
    ValueError
        An unknown level name.
    """
    if level is None or (isinstance(level, float) and math.isnan(level)):
        return "none"  # a missing level (None, or NaN from a pandas/CSV reader) resolved nothing
    if not isinstance(level, str):
        raise ValueError(f"unknown resolution level {level!r}; expected one of {LEVELS} or 'place'")
    key = level.strip().lower()
    try:
        return _LEVEL_ALIASES[key]
    except KeyError:
        raise ValueError(f"unknown resolution level {level!r}; expected one of {LEVELS} or 'place'") from None


def is_fine(level: str | None) -> bool:
    """True when the answer resolved finer than city level (building or area)."""
    return normalize_level(level) in FINE_LEVELS


def is_hit(error_km: float | None, resolved_level: str | None, *, threshold_km: float = HIT_THRESHOLD_KM) -> bool:
    """Hit (Sec. 4.2): ``error_km < threshold_km`` and resolution finer than city.

    A missing or non-finite error, and any city-level or failed resolution, is not a hit (censored).

    Raises
    ------
    ValueError
        A negative error (a distance never is; ``-0.5 < 1`` would otherwise score an impossible value as a
        hit).
    """
    if error_km is None:
        return False
    try:
        e = float(error_km)
    except (TypeError, ValueError):
        return False
    if e < 0:
        raise ValueError(f"error_km is negative ({e!r} km): not a distance")
    return math.isfinite(e) and e < threshold_km and is_fine(resolved_level)


def hits(error_km: np.ndarray, resolved_level: np.ndarray, *, threshold_km: float = HIT_THRESHOLD_KM) -> np.ndarray:
    """Vectorised :func:`is_hit`: arrays of shape (n,) -> bool array of shape (n,). NaN error = no hit.

    Raises
    ------
    ValueError
        A negative error (as :func:`is_hit`).
    """
    e = np.asarray(error_km, dtype=float)
    with np.errstate(invalid="ignore"):
        if np.any(e < 0):
            raise ValueError(f"error_km is negative at index {int(np.flatnonzero(e < 0)[0])}: not a distance")
    fine = np.array([is_fine(lv) for lv in np.asarray(resolved_level, dtype=object)], dtype=bool)
    with np.errstate(invalid="ignore"):
        return fine & np.isfinite(e) & (e < threshold_km)


def error_ratio(error_km: np.ndarray, d_ref_km: np.ndarray) -> np.ndarray:
    """Per-response ratio ``err_km / d_ref_km`` (Table 5): arrays of shape (n,), km -> ratios of shape (n,); 1 means
    the answer is as far as the hint. A NaN error (no geocoded answer) gives NaN.

    Raises
    ------
    ValueError
        A hint distance that is not a positive finite number, or a negative error (as :func:`is_hit`), naming the
        first index.
    """
    e = np.asarray(error_km, dtype=float)
    d = np.asarray(d_ref_km, dtype=float)
    bad_d = ~(np.isfinite(d) & (d > 0))
    if np.any(bad_d):
        i = int(np.flatnonzero(bad_d)[0])
        raise ValueError(f"hint distance d_ref_km must be a positive finite number, got {float(d.flat[i])!r} at index {i}")
    with np.errstate(invalid="ignore"):
        neg = e < 0
    if np.any(neg):
        i = int(np.flatnonzero(neg)[0])
        raise ValueError(f"error_km is negative at index {i}: not a distance")
    return e / d


def geometric_mean(x_km: np.ndarray, *, floor_km: float | None = None) -> float:
    """Geometric mean ``exp(mean(log(x)))`` of the positive, finite distances in ``x_km`` (km).

    Non-positive and non-finite values are left out (the logarithm is undefined; Table 5 is computed on
    answers with ``err_km > 0``, as in the release's ``analysis/two_regimes.py``). NaN when nothing is
    left. ``floor_km`` (optional, not the paper's definition) floors values instead of dropping them.
    """
    x = np.asarray(x_km, dtype=float)
    x = x[np.isfinite(x)]
    if floor_km is not None:
        x = np.maximum(x, floor_km)
    x = x[x > 0]
    if x.size == 0:
        return float("nan")
    return float(np.exp(np.mean(np.log(x))))


def wilson_interval(k: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``k / n`` (the paper's Fig. 2 "binomial" bars; the report
    draws site-bootstrap intervals there instead, module docstring).

    Returns ``(nan, nan)`` when ``n == 0``. The bounds at the ends are exact: at ``k == n`` the upper bound is 1
    and at ``k == 0`` the lower bound is 0 (``centre +- half`` is exactly 1 or 0 there; the floating-point sum
    gave ``0.9999999999999999`` or ``5.6e-17``). Matches statsmodels ``proportion_confint(k, n,
    method="wilson")`` to rounding elsewhere.
    """
    if n <= 0:
        return (float("nan"), float("nan"))
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    # scipy.stats is imported here, not at module level: at module level it cost every CLI process (status,
    # export, a killed run) 1-2.5 s of start-up on a loaded 2-core machine, and most compute no statistic
    from scipy import stats

    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)
