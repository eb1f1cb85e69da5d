"""Geodesy helpers for the crawl: pairwise haversine distances (pure functions).

Distances use the haversine formula on a sphere of radius :data:`geoagent.constants.EARTH_RADIUS_KM`
(6371.0088 km, the IUGG mean radius, which matches the release's ``d_km`` to 1e-4 km).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoagent import constants as C
from geoagent.geo import haversine_km  # noqa: F401  (re-exported for crawl modules)


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
