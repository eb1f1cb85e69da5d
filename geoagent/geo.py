"""Great-circle geometry: haversine distance in km (imports only constants).

Source: seed 000, Sec. 5.2 Eq. 1 (``d`` is the haversine distance); Earth radius
``constants.EARTH_RADIUS_KM`` (mean radius, 6371.0088 km), which reproduces the release's ``d_km``
to within 1e-4 km.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from geoagent import constants as C


def haversine_km(lat1_deg: float, lon1_deg: float, lat2_deg: float, lon2_deg: float) -> float:
    """Great-circle distance in km between two points given in decimal degrees.

    Parameters
    ----------
    lat1_deg, lon1_deg, lat2_deg, lon2_deg : float
        WGS84 latitude/longitude in degrees.

    Returns
    -------
    float
        Haversine distance in km on a sphere of radius ``constants.EARTH_RADIUS_KM``.

    Raises
    ------
    ValueError
        If a coordinate is not finite or a latitude lies outside [-90, 90].
    """
    for v in (lat1_deg, lon1_deg, lat2_deg, lon2_deg):
        if not math.isfinite(v):
            raise ValueError(f"coordinate must be finite, got {v!r}")
    if abs(lat1_deg) > 90 or abs(lat2_deg) > 90:
        raise ValueError(f"latitude out of range: {lat1_deg!r}, {lat2_deg!r}")
    p1, p2 = math.radians(lat1_deg), math.radians(lat2_deg)
    dp = p2 - p1
    dl = math.radians(lon2_deg - lon1_deg)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2.0 * C.EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))


def haversine_km_array(lat1_deg: Any, lon1_deg: Any, lat2_deg: Any, lon2_deg: Any) -> np.ndarray:
    """Vectorised :func:`haversine_km` over broadcastable arrays (degrees in, km out).

    Parameters
    ----------
    lat1_deg, lon1_deg, lat2_deg, lon2_deg : array-like, broadcastable to a common shape ``(n,)``
        WGS84 coordinates in degrees (any broadcastable shapes, e.g. ``(n, 1)`` against ``(1, n)``).

    Returns
    -------
    ndarray of the broadcast shape
        Haversine distances in km on a sphere of radius ``constants.EARTH_RADIUS_KM``.

    Raises
    ------
    ValueError
        As :func:`haversine_km`: a coordinate is not finite (NaN, +-inf), or a latitude lies outside
        [-90, 90]; the message names the first such value. Checked in one vectorised pass before computing.
    """
    lat1, lon1, lat2, lon2 = (np.asarray(v, dtype=float) for v in (lat1_deg, lon1_deg, lat2_deg, lon2_deg))
    for arr in (lat1, lon1, lat2, lon2):
        bad = ~np.isfinite(arr)
        if bad.any():
            raise ValueError(f"coordinate must be finite, got {float(arr[bad].flat[0])!r}")
    for arr in (lat1, lat2):
        bad = np.abs(arr) > 90
        if bad.any():
            raise ValueError(f"latitude out of range: {float(arr[bad].flat[0])!r}")
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dl = np.radians(lon2 - lon1)
    a = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2.0 * C.EARTH_RADIUS_KM * np.arcsin(np.minimum(1.0, np.sqrt(a)))


def continent_code(value: str | None) -> str:
    """The release's continent code for ``value``: case and surrounding spaces ignored, ``NA`` read as ``AN``.

    Parameters
    ----------
    value : str or None
        A continent as written in a config (``[[crawl.cities]] continent``) or a table (``continent``,
        ``cont``). None or an empty string means "not given".

    Returns
    -------
    str
        One of :data:`geoagent.constants.CONTINENT_CODES` (upper case), or ``""`` when not given.

    Raises
    ------
    ValueError
        For anything else (a name such as ``"Europe"``, a blank, an unknown code); the message lists the
        accepted codes. Source: the codes of the release's ``city_pool.csv`` (AN = North America there).
    """
    if value is None or value == "":
        return ""
    code = str(value).strip().upper()
    code = C.CONTINENT_ALIASES.get(code, code)
    if code in C.CONTINENT_CODES:
        return code
    listed = ", ".join(C.CONTINENT_CODES)
    names = ", ".join(f"{k} {v}" for k, v in C.CONTINENT_CODES.items())
    raise ValueError(f"{value!r} is not a continent code; use one of {listed} ({names}, as in the release's "
                     f"city_pool.csv; NA is read as AN; case does not matter)")
