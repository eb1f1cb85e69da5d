"""Small geodesy helpers for the crawl: haversine distances and bounding boxes (pure functions).

Distances use the haversine formula on a sphere of radius :data:`geoagent.constants.EARTH_RADIUS_KM`
(6371.0088 km, the IUGG mean radius, which matches the release's ``d_km`` to 1e-4 km).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from geoagent import constants as C


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in km between two points given in decimal degrees (haversine formula)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2.0 * C.EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))


def haversine_matrix_km(lat_deg: Sequence[float], lon_deg: Sequence[float]) -> np.ndarray:
    """Pairwise haversine distances.

    Parameters
    ----------
    lat_deg, lon_deg : array-like of shape (n,)
        Latitudes and longitudes in decimal degrees.

    Returns
    -------
    ndarray of shape (n, n)
        Distances in km; the diagonal is 0.
    """
    lat = np.radians(np.asarray(lat_deg, dtype=float))
    lon = np.radians(np.asarray(lon_deg, dtype=float))
    dlat = lat[:, None] - lat[None, :]
    dlon = lon[:, None] - lon[None, :]
    a = np.sin(dlat / 2) ** 2 + np.cos(lat)[:, None] * np.cos(lat)[None, :] * np.sin(dlon / 2) ** 2
    return 2.0 * C.EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def bbox_around(lat: float, lon: float, radius_m: float) -> tuple[float, float, float, float]:
    """Bounding box ``(min_lon, min_lat, max_lon, max_lat)`` in degrees enclosing a circle of ``radius_m``.

    The box is the circle's latitude extent and the widest longitude extent (at the pole-ward edge), so
    every point within ``radius_m`` of the centre lies inside it. Used for Mapillary ``bbox`` searches,
    which take ``west,south,east,north`` (longitude first).
    """
    dlat = math.degrees(radius_m / 1000.0 / C.EARTH_RADIUS_KM)
    far_lat = min(89.9, abs(lat) + dlat)
    dlon = dlat / max(1e-6, math.cos(math.radians(far_lat)))
    return (lon - dlon, lat - dlat, lon + dlon, lat + dlat)
