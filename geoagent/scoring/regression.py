"""OLS with standard errors clustered by site, from per-cluster sufficient statistics.

Seed 000, Sec. 6 and 6.2.3 (Tables 6-7): ``log10(err_km) ~ d_ref_km`` within the context conditions, with
cluster-robust standard errors grouped by site ("responses within a site are correlated").

The estimator is kept as per-cluster sums so that it can be updated incrementally as answers arrive
(issue 4 point 6) and re-pooled over any subset of clusters (e.g. the sites of one regime) without
revisiting the rows. For cluster ``g`` with rows ``X_g`` (shape ``(n_g, k)``) and ``y_g`` (shape ``(n_g,)``)
we keep ``A_g = X_g'X_g``, ``b_g = X_g'y_g``, ``c_g = y_g'y_g`` and ``n_g``. Then

* ``beta = (sum_g A_g)^-1 (sum_g b_g)``,
* the score sum of cluster ``g`` is ``s_g = X_g'(y_g - X_g beta) = b_g - A_g beta`` (exact),
* ``V = q (X'X)^-1 (sum_g s_g s_g') (X'X)^-1`` with the small-sample factor
  ``q = G/(G-1) * (N-1)/(N-k)``, which is what statsmodels' ``OLS.fit(cov_type="cluster")`` uses
  (``use_correction=True``, ``df_correction=True``).

p-values use the normal distribution by default (statsmodels' default for robust covariances) or
Student's t with ``G - 1`` degrees of freedom when ``use_t=True`` (statsmodels ``use_t=True``).

Exact fit. When every residual is zero (every error equal, or ``log10 err`` exactly linear in ``d_ref``), the
scores ``s_g`` and the residual sum of squares are zero in exact arithmetic, so both SEs are 0 and the Wald
statistic is ``beta / 0``: undefined (0/0) for a zero slope and degenerate otherwise; there is no residual
variation from which to estimate how the slope would vary. In floating point the same sums leave rounding
noise (SE ~1e-17) whose size is arbitrary, and read as an SE it gave arbitrary p-values, e.g. p = 0.007 for a
slope of 7e-17 fitted to errors that were all equal. statsmodels (0.15, ``OLS.fit(cov_type="cluster")``) has
no guard and returns the same kind of noise (SE 7e-18, p = 0.011 on such data); R's ``summary.lm`` warns
"essentially perfect fit: summary may be unreliable" when the residual variance is below 1e-30 of the fitted
values' second moment. Here a fit whose residual sum of squares is at most :data:`EXACT_FIT_RTOL` times
``y'y`` is an exact fit, where ``y`` is the response less its mean (below): ``y'y`` is the centred total sum of
squares, so the bound is relative to the response's spread (residual RMS below 1e-5 of its standard deviation),
not to its distance from zero (R's bound is tighter because it computes residuals directly, while
``y'y - beta'X'y`` from summed statistics loses about ``N * eps`` of ``y'y`` to cancellation): :attr:`ClusterOLSResult.exact_fit` is True and the covariance, both SEs, the t-values and the
p-values are NaN (undefined), while the coefficients are kept. A real log10-error regression never comes near
that bound.

Reference value. Each cluster's statistics are summed about a reference value of the response, the first ``y``
it saw (``ClusterStats.ref``), and the fit re-expresses them about one common reference, the pooled mean of the
response (the same whichever row came first; review rev20: about the first row's value, ``y'y`` could be up to
``N`` times the centred one, so one early outlying answer made a real fit "exact"); the intercept column
absorbs the shift (``y - r = X (beta - r e_0) + residual`` when column 0 is all ones), so slope, residuals, SEs
and p-values are unchanged and the intercept gets ``r`` back. Summed uncentred, errors of 10,850 ± 1 km (log10
4.035, spread 4e-5) left a residual sum of squares of 3e-11 of ``y'y``: the session-19 bound called that real
fit exact and dropped its SE (review rev19, finding 3), and the sums kept few digits of the spread. A
:class:`ClusterOLS` therefore needs the intercept column (``intercept=0``, the default, as :func:`design_slope`
builds it); ``intercept=None`` sums about zero, for a design without one.

Order of the rows. The sums are held exactly (:class:`geoagent.scoring.exact.ExactSum`: every product of two
floats and every sum of them is a dyadic rational), moved to the common reference exactly, pooled over the
clusters exactly and rounded once to floats; the score products ``s_g s_g'`` are summed with :func:`math.fsum`.
A fit therefore depends only on which rows each cluster holds, not on the order they were added in nor on the
order of the clusters: the live report, which adds answers as they arrive, writes Tables 6-7 to the same last
digit as a recompute of the same rows in file order (aggr42 #5; with float sums they differed in the last one or
two digits). The statistics are those of float sums up to those digits (the exact sums are closer to the true
ones). Cost: every row is summed in Python, row by row (also by :meth:`ClusterOLS.add` with a batch): ``k (k + 3) / 2
+ 1`` products of Python ints (6 for ``k = 2``), each added to its sum with a shift, on ints of about the values'
range in bits plus 106 bits; about 6-10 µs a row for ``k = 2`` (session 43, one core). That made the batch path 4-5
times slower than the float matrix products it replaced (:func:`fit_slope` of 1,000,000 rows: about 6-7 s, was 1.4
s), and :meth:`ClusterOLS.add_row` about a fifth slower (its checks cost more than the sums). The report fits the
release's ~109 sites, a few thousand rows: well under a second (review43d #4).

Rows enter the slope regression only with a finite, positive error (``log10`` is undefined at 0 km) and a
finite hint distance; this is what the release's ``analysis/cluster_inference.py`` does (``error_km > 0``)
and what gives the paper's n (Sec. 6.2.3, n = 8274; Table 6). An earlier version floored errors at 1 m,
which turned an exact answer (the geocoded landmark is the site itself, error 0 km) into ``log10 = -3``,
a high-leverage outlier.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import numpy as np

from geoagent.scoring.exact import ExactSum, exact_parts

#: a fit whose residual sum of squares is at most this share of ``y'y`` is an exact fit (module doc): its SEs,
#: t-values and p-values are NaN. ``y'y - beta'X'y`` from summed statistics carries rounding of about
#: ``N * eps * y'y`` (1e-12 for N = 10,000 rows), well below this bound.
EXACT_FIT_RTOL = 1e-10


class ClusterStats:
    """Sufficient statistics of one cluster: ``X'X`` (k, k), ``X'(y - ref)`` (k,), ``|y - ref|^2`` and ``n`` rows,
    the response taken less ``ref`` (module doc, "Reference value").

    The sums are held exactly (:class:`~geoagent.scoring.exact.ExactSum`: ``sxx``, ``sxy``, ``syy``; module doc,
    "Order of the rows", aggr42 #5); ``xtx``, ``xty`` and ``yty`` read them rounded to floats. Built from float
    arrays (``ClusterStats(xtx, xty, yty, n, ref)``), it holds their values exactly."""

    __slots__ = ("sxx", "sxy", "syy", "n", "ref")

    def __init__(self, xtx: np.ndarray, xty: np.ndarray, yty: float, n: int, ref: float = 0.0) -> None:
        xtx = np.asarray(xtx, dtype=float)
        xty = np.asarray(xty, dtype=float).reshape(-1)
        k = xty.shape[0]
        if xtx.shape != (k, k):
            raise ValueError(f"xtx of shape {xtx.shape} does not fit xty of length {k}")
        self.sxx = [[ExactSum(float(xtx[i, j])) for j in range(k)] for i in range(k)]
        self.sxy = [ExactSum(float(v)) for v in xty]
        self.syy = ExactSum(float(yty))
        self.n = int(n)
        self.ref = float(ref)

    @property
    def xtx(self) -> np.ndarray:
        """``X'X``, shape (k, k), rounded from the exact sums."""
        return np.array([[float(v) for v in row] for row in self.sxx])

    @property
    def xty(self) -> np.ndarray:
        """``X'(y - ref)``, shape (k,), rounded from the exact sums."""
        return np.array([float(v) for v in self.sxy])

    @property
    def yty(self) -> float:
        """``|y - ref|^2``, rounded from the exact sum."""
        return float(self.syy)

    # --- what the dataclass it was gave (review43d #3): pickling by every protocol, equality, a readable repr ------
    def __getstate__(self) -> tuple[list[list[ExactSum]], list[ExactSum], ExactSum, int, float]:
        return self.sxx, self.sxy, self.syy, self.n, self.ref

    def __setstate__(self, state: tuple[list[list[ExactSum]], list[ExactSum], ExactSum, int, float]) -> None:
        self.sxx, self.sxy, self.syy, self.n, self.ref = state

    def __eq__(self, other: object) -> bool:
        """The same exact sums, row count and reference (statistics of the same rows summed about another reference
        are not equal, as the dataclass's fields were not)."""
        if not isinstance(other, ClusterStats):
            return NotImplemented
        return (self.n == other.n and self.ref == other.ref and self.syy == other.syy and self.sxy == other.sxy
                and self.sxx == other.sxx)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (f"ClusterStats(xtx={self.xtx!r}, xty={self.xty!r}, yty={self.yty!r}, n={self.n!r}, "
                f"ref={self.ref!r})")

    def copy(self) -> "ClusterStats":
        out = ClusterStats.__new__(ClusterStats)
        out.sxx = [[v.copy() for v in row] for row in self.sxx]
        out.sxy = [v.copy() for v in self.sxy]
        out.syy, out.n, out.ref = self.syy.copy(), self.n, self.ref
        return out

    def add_row(self, xs: list[float], y: float) -> None:
        """Add one row ``xs`` (length k) with response ``y``, exactly (the caller checked them)."""
        yc = ExactSum(y)
        yc.add(-self.ref)  # y - ref, exact
        my, ey = yc.num, yc.exp
        parts = [exact_parts(v) for v in xs]  # v == m * 2**e: each product below is one int product
        for i, (mi, ei) in enumerate(parts):
            for j in range(i, len(parts)):
                m, e = mi * parts[j][0], ei + parts[j][1]
                self.sxx[i][j].add_parts(m, e)
                if j != i:
                    self.sxx[j][i].add_parts(m, e)
            self.sxy[i].add_parts(mi * my, ei + ey)
        self.syy.add_parts(my * my, 2 * ey)
        self.n += 1

    def exact_about(self, ref: float, intercept: int | None) -> tuple[list[ExactSum], ExactSum]:
        """``(X'(y - ref), |y - ref|^2)`` from these statistics, exactly (``intercept``: the all-ones column, whose
        ``X'X`` column is ``X'1``; None: only ``ref == self.ref`` can be asked)."""
        if self.ref == float(ref):
            return self.sxy, self.syy
        if intercept is None:
            raise ValueError("statistics summed about another reference need the intercept column to be moved")
        delta = ExactSum(self.ref)
        delta.add(-float(ref))  # exact
        xty = [v + delta * row[intercept] for v, row in zip(self.sxy, self.sxx)]
        yty = self.syy + 2 * delta * self.sxy[intercept] + delta * delta * self.n
        return xty, yty

    def about(self, ref: float, intercept: int | None) -> tuple[np.ndarray, float]:
        """:meth:`exact_about` rounded to floats: ``(X'(y - ref)`` of shape (k,), ``|y - ref|^2)``."""
        xty, yty = self.exact_about(ref, intercept)
        return np.array([float(v) for v in xty]), float(yty)

    def add_stats(self, other: "ClusterStats", intercept: int | None) -> None:
        """Add ``other``'s rows (its statistics moved to this reference, exactly)."""
        xty, yty = other.exact_about(self.ref, intercept)
        for row, orow in zip(self.sxx, other.sxx):
            for v, o in zip(row, orow):
                v.add_exact(o)
        for v, o in zip(self.sxy, xty):
            v.add_exact(o)
        self.syy.add_exact(yty)
        self.n += other.n


@dataclass(frozen=True, slots=True)
class ClusterOLSResult:
    """A fitted cluster-robust OLS.

    Attributes
    ----------
    params : ndarray of shape (k,)
        Coefficients (for :func:`fit_slope`: ``[intercept, slope]``).
    bse : ndarray of shape (k,)
        Cluster-robust standard errors.
    tvalues, pvalues : ndarray of shape (k,)
        ``params / bse`` and two-sided p-values (normal, or t with ``G - 1`` df when ``use_t``).
    cov : ndarray of shape (k, k)
        Cluster-robust covariance matrix of ``params``.
    bse_nonrobust : ndarray of shape (k,)
        Classical (iid) standard errors, for the clustered/unclustered ratio the paper quotes (Sec. 6).
    nobs : int
        Number of rows N.
    n_clusters : int
        Number of clusters G with at least one row.
    exact_fit : bool
        Every residual is zero up to rounding (module doc, :data:`EXACT_FIT_RTOL`): ``cov``, ``bse``,
        ``bse_nonrobust``, ``tvalues`` and ``pvalues`` are NaN (undefined), ``params`` are kept.
    """

    params: np.ndarray
    bse: np.ndarray
    tvalues: np.ndarray
    pvalues: np.ndarray
    cov: np.ndarray
    bse_nonrobust: np.ndarray
    nobs: int
    n_clusters: int
    exact_fit: bool = False

    @property
    def slope(self) -> float:
        """The last coefficient (the slope in :func:`fit_slope`)."""
        return float(self.params[-1])

    @property
    def slope_se(self) -> float:
        return float(self.bse[-1])

    @property
    def slope_p(self) -> float:
        return float(self.pvalues[-1])


class ClusterOLS:
    """Incrementally updatable OLS with cluster-robust covariance.

    Parameters
    ----------
    k : int
        Number of regressors (columns of X), including the intercept column.
    intercept : int or None
        Index of the intercept column (every value 1; default 0, as :func:`design_slope` builds it): rows are
        summed about a reference value of the response, which this column absorbs (module doc, "Reference
        value"); a row whose value there is not 1 raises ``ValueError``. None: no intercept column, rows summed
        about zero (an exact-fit test relative to the uncentred ``y'y``).

    Examples
    --------
    >>> ols = ClusterOLS(k=2)
    >>> ols.add("site_a", np.array([[1.0, 0.5], [1.0, 2.0]]), np.array([0.1, 0.3]))
    """

    def __init__(self, k: int = 2, *, intercept: int | None = 0) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if intercept is not None and not 0 <= intercept < k:
            raise ValueError(f"intercept must be a column index below k={k} or None, got {intercept!r}")
        self.k = int(k)
        self.intercept = intercept
        self.clusters: dict[Hashable, ClusterStats] = {}

    # --- updating ---------------------------------------------------------------------------
    def add(self, cluster: Hashable, X: np.ndarray, y: np.ndarray) -> None:
        """Add rows ``X`` (shape ``(n, k)``) and ``y`` (shape ``(n,)``) to ``cluster``.

        Raises
        ------
        ValueError
            Wrong shapes, non-finite values, or values so large that ``X'X`` or ``X'y`` overflows (e.g. a corrupt
            hint distance of 1e200 km); the message names ``cluster`` and the first such row, and nothing is added.
        """
        X = np.asarray(X, dtype=float)
        y = np.asarray(y, dtype=float)
        if X.ndim == 1:
            X = X.reshape(1, -1)
        if X.shape[1] != self.k or y.shape != (X.shape[0],):
            raise ValueError(f"shapes X {X.shape}, y {y.shape} do not fit k={self.k}")
        if not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError("X and y must be finite")
        if X.shape[0] == 0:
            return
        j = self.intercept
        if j is not None and not (X[:, j] == 1.0).all():
            raise ValueError(f"cluster {cluster!r}: column {j} of X must be the intercept (every value 1), got "
                             f"{X[:, j][X[:, j] != 1.0][0]!r}; ClusterOLS(intercept=None) for a design without one")
        st = self.clusters.get(cluster)
        ref = st.ref if st is not None else (float(y[0]) if j is not None else 0.0)
        yc = y - ref if ref else y
        with np.errstate(over="ignore", invalid="ignore"):  # only to refuse rows whose sums overflow
            xtx, xty, yty = X.T @ X, X.T @ yc, float(yc @ yc)
        if not (np.isfinite(xtx).all() and np.isfinite(xty).all() and np.isfinite(yty)):
            for xi, yi in zip(X, y):
                _check_row(cluster, [float(v) for v in xi], float(yi))
            raise ValueError(f"cluster {cluster!r}: the rows' sums of squares overflow (values too large to regress)")
        if st is None:
            st = self.clusters[cluster] = ClusterStats(np.zeros((self.k, self.k)), np.zeros(self.k), 0.0, 0, ref)
        for xi, yi in zip(X.tolist(), y.tolist()):  # summed exactly, row by row (module doc, "Order of the rows")
            st.add_row(xi, yi)

    def add_row(self, cluster: Hashable, x: tuple[float, ...] | list[float], y: float) -> None:
        """Add one row ``x`` (length k) with response ``y`` (fast path for streaming updates).

        Raises
        ------
        ValueError
            Wrong length, non-finite values, or a value whose square overflows (e.g. a corrupt hint distance of
            1e200 km: before, it made ``X'X`` infinite and the fit said "X'X is singular"); the message names
            ``cluster`` and the row, and nothing is added.
        """
        k = self.k
        if len(x) != k:
            raise ValueError(f"row of length {len(x)} does not fit k={k}")
        xs = [float(v) for v in x]
        y = float(y)
        if not all(np.isfinite(xs)) or not np.isfinite(y):
            raise ValueError(f"cluster {cluster!r}: row x={xs}, y={y}: X and y must be finite")
        _check_row(cluster, xs, y)
        j = self.intercept
        if j is not None and xs[j] != 1.0:
            raise ValueError(f"cluster {cluster!r}: row x={xs}: value {j} must be the intercept's 1; "
                             "ClusterOLS(intercept=None) for a design without one")
        st = self.clusters.get(cluster)
        if st is None:
            st = self.clusters[cluster] = ClusterStats(np.zeros((k, k)), np.zeros(k), 0.0, 0, y if j is not None else 0.0)
        st.add_row(xs, y)

    def add_stats(self, cluster: Hashable, other: ClusterStats) -> None:
        """Add already-summed statistics to ``cluster`` (merging aggregators)."""
        if self.intercept is None and other.ref != 0.0:
            raise ValueError(f"cluster {cluster!r}: statistics summed about a reference value ({other.ref!r}) need "
                             "the intercept column to absorb it; this ClusterOLS has none (intercept=None)")
        st = self.clusters.get(cluster)
        if st is None:
            self.clusters[cluster] = other.copy()
        else:
            st.add_stats(other, self.intercept)  # about this cluster's reference, exactly

    def merge(self, other: "ClusterOLS") -> None:
        """Add every cluster of ``other`` into this one."""
        if other.k != self.k or other.intercept != self.intercept:
            raise ValueError("cannot merge regressions with different k or intercept column")
        for g, st in other.clusters.items():
            self.add_stats(g, st)

    @property
    def nobs(self) -> int:
        return sum(st.n for st in self.clusters.values())

    def _chosen(self, clusters: Iterable[Hashable] | None) -> list:
        """The non-empty cluster statistics a fit on ``clusters`` (None = all) uses; a label given twice counts once."""
        if clusters is None:
            return [st for st in self.clusters.values() if st.n > 0]
        return [self.clusters[g] for g in dict.fromkeys(clusters) if g in self.clusters and self.clusters[g].n > 0]

    def rows(self, clusters: Iterable[Hashable] | None = None) -> int:
        """Rows (observations) a :meth:`fit` on ``clusters`` (None = all) uses, whether or not that fit succeeds:
        the ``n`` that :meth:`fit`'s "need more than k rows to fit, have n" names, and the fit's ``nobs`` when it
        is made."""
        return sum(st.n for st in self._chosen(clusters))

    # --- fitting ----------------------------------------------------------------------------
    def fit(self, clusters: Iterable[Hashable] | None = None, *, use_t: bool = False,
            warn_few_clusters: bool = True) -> ClusterOLSResult:
        """Fit on all clusters, or only on ``clusters`` (e.g. the sites of one regime).

        A label listed twice in ``clusters`` counts once.
        With fewer than 2 clusters the cluster-robust SEs (and p-values) are NaN; a ``RuntimeWarning``
        says so unless ``warn_few_clusters=False`` (callers that show NaN as "no SE", e.g. the report,
        which runs in a worker thread where ``warnings.catch_warnings`` is not safe).
        An exact fit (every residual zero up to rounding, e.g. every error equal; module doc) returns the
        coefficients with NaN covariance, SEs, t-values and p-values and ``exact_fit=True``, without a warning
        (the report says so under its tables).

        Raises
        ------
        ValueError
            Fewer rows than regressors, or a ``X'X`` that is singular up to rounding (e.g. every hint
            distance equal: the slope is not identified).
        """
        chosen = self._chosen(clusters)  # a label given twice is one cluster, counted once
        k = self.k
        n = sum(st.n for st in chosen)
        G = len(chosen)
        if n <= k:
            raise ValueError(f"need more than {k} rows to fit, have {n}")
        # every cluster's statistics about one reference, the pooled mean of y (module doc, "Reference value"):
        # y'y is then the centred total sum of squares. Summed exactly and rounded once, so the fit does not depend
        # on the order of the rows or of the clusters (module doc, "Order of the rows"; aggr42 #5)
        ref = 0.0
        if self.intercept is not None:  # sum(y) over every row, exactly, then / n
            total = ExactSum()
            for st in chosen:
                total.add_exact(st.sxy[self.intercept])
                total.add_product(st.ref, st.n)
            ref = float(total) / n
        exact = [st.exact_about(ref, self.intercept) for st in chosen]
        xtx = np.array([[float(_exact_total(st.sxx[i][j] for st in chosen)) for j in range(k)] for i in range(k)])
        xty = np.array([float(_exact_total(e[0][i] for e in exact)) for i in range(k)])
        yty = float(_exact_total(e[1] for e in exact))
        about = [(np.array([float(v) for v in xty_g]), float(yty_g)) for xty_g, yty_g in exact]
        if not (np.isfinite(xtx).all() and np.isfinite(xty).all()):
            bad = [g for g, st in self.clusters.items() if st.n > 0 and any(st is c for c in chosen)
                   and not (np.isfinite(st.xtx).all() and np.isfinite(st.xty).all())]
            raise ValueError(f"X'X or X'y is not finite (overflow from a value too large to regress, e.g. a corrupt "
                             f"hint distance) in cluster(s) {bad[:5]!r}" if bad else
                             "X'X or X'y is not finite (the clusters' sums overflow together: values too large to regress)")
        if _rank_deficient(xtx):
            raise ValueError("X'X is singular (e.g. all hint distances equal)")
        try:
            beta = np.linalg.solve(xtx, xty)
            bread = np.linalg.inv(xtx)
        except np.linalg.LinAlgError as exc:
            raise ValueError("X'X is singular (e.g. all hint distances equal)") from exc
        rss_raw = yty - float(beta @ xty)
        exact_fit = bool(rss_raw <= EXACT_FIT_RTOL * yty)
        scores = [xty_g - st.xtx @ beta for st, (xty_g, _) in zip(chosen, about)]
        # each entry of sum_g s_g s_g' by math.fsum: correctly rounded, whatever the clusters' order (aggr42 #5)
        meat = np.array([[math.fsum(float(s[i] * s[j]) for s in scores) for j in range(k)] for i in range(k)])
        if G < 2:
            if warn_few_clusters:
                warnings.warn("cluster-robust SE needs at least 2 clusters; returning NaN", RuntimeWarning, stacklevel=2)
            cov = np.full((k, k), np.nan)
        elif exact_fit:  # SE 0 in exact arithmetic, rounding noise here: undefined, never a tiny SE (module doc)
            cov = np.full((k, k), np.nan)
        else:
            q = G / (G - 1) * (n - 1) / (n - k)
            cov = q * bread @ meat @ bread
        bse = np.sqrt(np.diag(cov))
        if ref and self.intercept is not None:  # the coefficients of y itself: the intercept takes it back
            beta = beta.copy()
            beta[self.intercept] += ref
        with np.errstate(divide="ignore", invalid="ignore"):
            tvalues = beta / bse
        from scipy import stats  # here, not at module level: see geoagent.scoring.geohint

        if use_t and G >= 2:
            pvalues = 2 * stats.t.sf(np.abs(tvalues), df=G - 1)
        else:
            pvalues = 2 * stats.norm.sf(np.abs(tvalues))
        sigma2 = float("nan") if exact_fit else max(rss_raw, 0.0) / (n - k)
        bse_nonrobust = np.sqrt(np.diag(bread) * sigma2)
        return ClusterOLSResult(beta, bse, tvalues, pvalues, cov, bse_nonrobust, n, G, exact_fit)


def _exact_total(values: Iterable[ExactSum]) -> ExactSum:
    """The exact sum of ``values`` (a new :class:`ExactSum`)."""
    out = ExactSum()
    for v in values:
        out.add_exact(v)
    return out


def _check_row(cluster: Hashable, xs: list[float], y: float) -> None:
    """Raise ValueError naming ``cluster`` and the row when one of the row's products in ``X'X``/``X'y``/``y'y``
    is not finite (finite values whose product overflows, e.g. a hint distance of 1e200 km squared)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.isfinite(np.outer(xs, xs)).all() and np.isfinite(np.multiply(xs, y)).all() and np.isfinite(y * y)
    if not ok:
        raise ValueError(f"cluster {cluster!r}: row x={xs}, y={y} overflows X'X (a value too large to regress; "
                         "a corrupt hint distance?)")


def _rank_deficient(xtx: np.ndarray, *, rtol: float = 1e-10) -> bool:
    """True when ``X'X`` (shape (k, k)) is singular up to rounding.

    ``numpy.linalg.solve`` raises only on an *exactly* singular matrix; summed floating-point rows (e.g. a
    constant hint distance of 0.7 km next to the intercept) leave a matrix that is singular in exact
    arithmetic but not in floating point, and solving it returns arbitrary coefficients. The test scales
    ``X'X`` to unit diagonal (a correlation-like matrix, invariant to the units of each regressor) and
    calls it singular when its smallest eigenvalue is below ``rtol``.
    """
    d = np.sqrt(np.diag(xtx))
    if not np.all(np.isfinite(d)) or np.any(d <= 0):
        return True
    scaled = xtx / np.outer(d, d)
    return bool(np.linalg.eigvalsh((scaled + scaled.T) / 2).min() < rtol)


def design_slope(d_ref_km: np.ndarray) -> np.ndarray:
    """Design matrix ``[1, d_ref_km]`` of shape ``(n, 2)`` for the distance-slope regression."""
    d = np.asarray(d_ref_km, dtype=float).reshape(-1)
    return np.column_stack([np.ones_like(d), d])


def log10_error(err_km: np.ndarray, *, floor_km: float | None = None) -> np.ndarray:
    """``log10(err_km)``: the response of the slope regression (Sec. 6.2.3), shape preserved.

    Non-positive or missing errors give NaN (rows :func:`fit_slope` drops). ``floor_km`` (optional, not
    the paper's definition) floors the error instead, for sensitivity checks.
    """
    e = np.asarray(err_km, dtype=float)
    if floor_km is not None:
        return np.log10(np.maximum(e, floor_km))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(e > 0, np.log10(np.where(e > 0, e, 1.0)), np.nan)


def usable_for_slope(err_km: float | None, d_ref_km: float | None) -> bool:
    """True when a response enters the slope regression: finite positive error and finite hint distance."""
    try:
        e, d = float(err_km), float(d_ref_km)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(e) and e > 0 and np.isfinite(d))


def fit_slope(
    clusters: Iterable[Hashable],
    d_ref_km: np.ndarray,
    err_km: np.ndarray,
    *,
    floor_km: float | None = None,
    use_t: bool = False,
) -> ClusterOLSResult:
    """Fit ``log10(err_km) ~ 1 + d_ref_km`` with SEs clustered by ``clusters`` (one label per row).

    Parameters
    ----------
    clusters : sequence of hashable, length n
        Cluster label (site id) per row.
    d_ref_km : array-like of shape (n,)
        Distance from the site to the reference point given as the hint, km.
    err_km : array-like of shape (n,)
        Distance from the site to the geocoded answer, km. Rows with a non-positive or missing error (or
        a missing hint distance) are dropped (see module doc); ``result.nobs`` counts the rows used.
    floor_km : float, optional
        Floor errors at this value instead of dropping non-positive ones (not the paper's definition).

    Returns
    -------
    ClusterOLSResult
        ``params = [intercept, slope]``; slope in log10 units per km.

    Raises
    ------
    ValueError
        Inputs of different lengths, or too few usable rows.
    """
    labels = list(clusters)
    X = design_slope(d_ref_km)
    y = log10_error(err_km, floor_km=floor_km)
    if len(labels) != X.shape[0] or y.shape[0] != X.shape[0]:
        raise ValueError("clusters, d_ref_km and err_km must have the same length")
    keep = np.isfinite(y) & np.isfinite(X).all(axis=1)
    ols = ClusterOLS(k=2)
    order: dict[Hashable, list[int]] = {}
    for i, g in enumerate(labels):
        if keep[i]:
            order.setdefault(g, []).append(i)
    for g, idx in order.items():
        ols.add(g, X[idx], y[idx])
    return ols.fit(use_t=use_t)
