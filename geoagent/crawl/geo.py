"""Geodesy helpers for the crawl: pairwise haversine distances (pure functions).

Distances come from :func:`geoagent.geo.haversine_km_array` (the haversine formula on a sphere of radius
:data:`geoagent.constants.EARTH_RADIUS_KM`, 6371.0088 km, which matches the release's ``d_km`` to 1e-4 km).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoagent.geo import haversine_km_array


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
    lat = np.asarray(lat_deg, dtype=float)
    lon = np.asarray(lon_deg, dtype=float)
    return haversine_km_array(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
