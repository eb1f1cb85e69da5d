"""Exact sums of floats: a statistic summed as rows arrive that does not depend on the order they arrive in.

A float sum rounds at every addition, so the same values added in another order can end in other last digits. The
live GeoHint report (rows added as they arrive) and a recompute of the same rows (``python -m
geoagent.geohint.judged``, the final report: rows in file order) wrote Tables 5-7 whose floats differed there
(aggr42 #5): Table 5's geometric means sum logarithms, Tables 6-7 sum ``X'X``, ``X'y`` and ``y'y`` per site.

Every finite float is a dyadic rational ``m * 2**e`` (integer ``m``), and sums, differences and products of dyadic
rationals are dyadic rationals. :class:`ExactSum` holds one exactly, as a Python int and an exponent, and rounds it
once, correctly (round half to even, as :func:`math.fsum`), when read (:meth:`ExactSum.__float__`): the value read
is the rounded exact sum, the same whichever order the terms came in, and at least as close to it as any float
summation. A term costs a few integer operations on ints of about (the terms' range in bits + 106) bits.

Non-finite terms (an overflowed value from elsewhere) are not held exactly: they are summed as floats apart, and
the value read is theirs (``inf``, ``-inf`` or ``nan``) as a float sum would give it. A numpy scalar is taken as the
number it is (``np.float32`` exactly, ``np.int64`` as an int), its non-finite values as a float's (review43d #3).

An :class:`ExactSum` pickles (every protocol) and copies with :mod:`copy`.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["ExactSum", "exact_parts"]


def exact_parts(x: "ExactSum | float | int") -> tuple[int, int]:
    """``(m, e)`` with ``x == m * 2**e`` exactly, for a finite float, an int or a finite :class:`ExactSum` (also a
    numpy scalar: ``float()`` of a numpy float is exact, an integral one is read as an int).

    Raises
    ------
    ValueError, OverflowError
        ``x`` is ``nan`` or infinite (as :meth:`float.as_integer_ratio`).
    """
    if isinstance(x, float):  # the common case first (np.float64 is a float)
        m, d = x.as_integer_ratio()  # d is a power of two
        return m, 1 - d.bit_length()
    if isinstance(x, ExactSum):
        return x.num, x.exp
    if isinstance(x, numbers.Integral):  # int, bool, numpy's integers: exactly, not through a float
        return int(x), 0
    m, d = float(x).as_integer_ratio()
    return m, 1 - d.bit_length()


def _special(x: "ExactSum | float | int") -> bool:
    """Whether ``x`` is (or holds) a non-finite value: any number ``float()`` reads as one, not only a Python float
    (review43d #3: ``np.float32('inf')`` went on to :func:`exact_parts`, which raised OverflowError)."""
    if isinstance(x, float):  # the common case first
        return not math.isfinite(x)
    if isinstance(x, ExactSum):
        return bool(x.special)
    if isinstance(x, numbers.Integral):
        return False
    return not math.isfinite(float(x))


class ExactSum:
    """An exact dyadic rational: the sum of the floats (and products of two floats) added to it, kept exactly.

    Parameters
    ----------
    value : float or int, optional
        Initial value (default 0).

    Examples
    --------
    >>> s = ExactSum()
    >>> for v in (1e16, 1.0, -1e16):
    ...     s.add(v)
    >>> float(s)  # a float sum in this order gives 0.0
    1.0
    """

    __slots__ = ("num", "exp", "special")

    def __init__(self, value: float | int = 0) -> None:
        self.num = 0  # the value is num * 2**exp
        self.exp = 0
        self.special = 0.0  # float sum of the non-finite terms (0.0 while there are none)
        if value:
            self.add(value)

    # --- updating (in place) ----------------------------------------------------------------
    def add_parts(self, m: int, e: int) -> None:
        """Add ``m * 2**e`` exactly (ints; :func:`exact_parts` gives them for a float)."""
        if not m:
            return
        if e >= self.exp:
            self.num += m << (e - self.exp)
        else:  # a finer term: rescale what is held (exact), then add
            self.num = (self.num << (self.exp - e)) + m
            self.exp = e

    def add(self, x: float | int) -> None:
        """Add ``x`` (a float or an int, or a numpy scalar) exactly; a non-finite one is summed apart, as a float."""
        if _special(x):
            self.special += float(x)
            return
        self.add_parts(*exact_parts(x))

    def add_product(self, a: "ExactSum | float | int", b: "ExactSum | float | int", times: int = 1) -> None:
        """Add ``a * b * times`` exactly (no rounding of the product; ``times`` an int)."""
        if _special(a) or _special(b):
            self.special += float(a) * float(b) * times
            return
        ma, ea = exact_parts(a)
        mb, eb = exact_parts(b)
        self.add_parts(ma * mb * int(times), ea + eb)

    def add_exact(self, other: "ExactSum") -> None:
        """Add the exact value of ``other``."""
        self.special += other.special
        self.add_parts(other.num, other.exp)

    # --- arithmetic (new values) -------------------------------------------------------------
    @staticmethod
    def of(x: "ExactSum | float | int") -> "ExactSum":
        """``x`` itself when it is an :class:`ExactSum`, else a new one holding ``x``."""
        return x if isinstance(x, ExactSum) else ExactSum(x)

    # --- pickling: slots need these for protocols 0 and 1 (review43d #3) -------------------------
    def __getstate__(self) -> tuple[int, int, float]:
        return self.num, self.exp, self.special

    def __setstate__(self, state: tuple[int, int, float]) -> None:
        self.num, self.exp, self.special = state

    def copy(self) -> "ExactSum":
        out = ExactSum()
        out.num, out.exp, out.special = self.num, self.exp, self.special
        return out

    def __add__(self, other: "ExactSum | float | int") -> "ExactSum":
        out = self.copy()
        out.add_exact(ExactSum.of(other))
        return out

    __radd__ = __add__

    def __neg__(self) -> "ExactSum":
        out = ExactSum()
        out.num, out.exp, out.special = -self.num, self.exp, -self.special
        return out

    def __sub__(self, other: "ExactSum | float | int") -> "ExactSum":
        return self + (-ExactSum.of(other))

    def __rsub__(self, other: "ExactSum | float | int") -> "ExactSum":
        return ExactSum.of(other) - self

    def __mul__(self, other: "ExactSum | float | int") -> "ExactSum":
        o = ExactSum.of(other)
        out = ExactSum()
        if self.special or o.special:  # a non-finite factor: as floats (inf * 0 is nan, as there)
            out.special = float(self) * float(o)
            return out
        out.num, out.exp = self.num * o.num, self.exp + o.exp
        return out

    __rmul__ = __mul__

    # --- reading ----------------------------------------------------------------------------
    def __float__(self) -> float:
        """The value rounded once to the nearest float (ties to even); ``inf`` with its sign beyond the float range;
        the float sum of the non-finite terms when there are any."""
        if self.special:
            return self.special
        try:
            if self.exp >= 0:
                return float(self.num << self.exp)
            return self.num / (1 << -self.exp)  # int / int: correctly rounded
        except OverflowError:
            return math.inf if self.num > 0 else -math.inf

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (ExactSum, float, int)):
            return NotImplemented
        o = ExactSum.of(other)
        if self.special or o.special:
            return float(self) == float(o)
        return (self - o).num == 0

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"ExactSum({float(self)!r})"
