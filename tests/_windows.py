"""Counting arrivals in sliding time windows (the rate-limit tests' server-side check)."""

from __future__ import annotations

import numpy as np


def max_in_window(times_s: np.ndarray, window_s: float) -> int:
    """Largest number of arrivals in any CLOSED window [t, t + window_s] (the max is attained at an arrival).

    ``times_s``: arrival times in seconds (any order); ``window_s``: window length in seconds.
    """
    t = np.sort(np.asarray(times_s, dtype=float))
    if t.size == 0:
        return 0
    ends = np.searchsorted(t, t + window_s, side="right")
    return int((ends - np.arange(t.size)).max())
