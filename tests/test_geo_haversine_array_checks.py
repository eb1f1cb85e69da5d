"""``haversine_km_array`` checks its coordinates as the scalar ``haversine_km`` does.

Before (session 15 review): the scalar function raised ``ValueError`` for a non-finite coordinate or a latitude
outside [-90, 90], while the vectorised one computed on: an infinite input gave NaN plus a numpy
``RuntimeWarning`` ("invalid value encountered in sin"), a latitude of 120 a plausible-looking distance. Now both
raise the same clear ``ValueError``; valid input is still computed in one vectorised pass.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from geoagent.geo import haversine_km, haversine_km_array


@pytest.mark.parametrize("args, message", [
    ((math.inf, 0.0, 0.0, 0.0), "coordinate must be finite, got inf"),
    (([0.0, 10.0], [0.0, -math.inf], 0.0, 0.0), "coordinate must be finite, got -inf"),
    ((0.0, 0.0, [1.0, math.nan], 0.0), "coordinate must be finite, got nan"),
    (([0.0, 120.0], 0.0, 0.0, 0.0), "latitude out of range: 120.0"),
    ((0.0, 0.0, np.array([[-90.5]]), 0.0), "latitude out of range: -90.5"),
])
def test_bad_coordinates_raise_the_scalar_functions_error(args, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: RuntimeWarning and NaN (or a number) instead of an error
        with pytest.raises(ValueError, match=message.replace(".", r"\.")):
            haversine_km_array(*args)
    scalar = tuple(float(np.ravel(np.asarray(a, dtype=float))[-1]) for a in args)
    with pytest.raises(ValueError):
        haversine_km(*scalar)  # the same inputs, one at a time: the same kind of error


def test_valid_input_is_still_vectorised_and_agrees_with_the_scalar_function():
    rng = np.random.default_rng(0)
    lat1, lat2 = rng.uniform(-90, 90, 10_000), rng.uniform(-90, 90, 10_000)
    lon1, lon2 = rng.uniform(-180, 180, 10_000), rng.uniform(-540, 540, 10_000)  # any finite longitude
    got = haversine_km_array(lat1, lon1, lat2, lon2)
    assert got.shape == (10_000,)
    want = [haversine_km(*v) for v in zip(lat1[:200], lon1[:200], lat2[:200], lon2[:200])]
    np.testing.assert_allclose(got[:200], want, rtol=1e-12, atol=1e-9)
    assert haversine_km_array(90, 0, -90, 0) == pytest.approx(math.pi * 6371.0088)  # the bounds are allowed
    assert haversine_km_array([], [], [], []).shape == (0,)
