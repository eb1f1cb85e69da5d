"""Session 12 adversarial review of the crawl pipeline (seed 000 Sec. 3) and its API clients: malformed but
plausible API answers (identifiers that become file names, WKT variants, elements without coordinates,
a server that ignores OFFSET) against the local fakes of geoagent/sandbox."""

from __future__ import annotations

import asyncio
import math
import os

import pytest

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.fetcher import fetch_site_images
from geoagent.crawl.settings import FetcherSettings
from geoagent.paths import safe_image_id, safe_name
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as mly_fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 48.85, 2.35


def _offset(dx_m: float, dy_m: float) -> tuple[float, float]:
    return LAT + dy_m / 111195.0, LON + dx_m / (111195.0 * math.cos(math.radians(LAT)))


# --- identifiers that become file names ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["123\n", "site_a\n"])
def test_a_trailing_newline_is_not_a_safe_file_name(bad):
    """``$`` in a ``re.match`` pattern also matches before a final newline: ``"123\\n"`` passed as an image id and
    ``"site_a\\n"`` as a site id, and became file names with a newline in them."""
    with pytest.raises(ValueError):
        safe_name(bad, what="site id")
    if bad[:-1].isdigit():
        with pytest.raises(ValueError):
            safe_image_id(bad)


def test_an_image_id_with_a_trailing_newline_is_not_an_image_id(tmp_path):
    """A search answer whose ``id`` is digits plus a newline (``"90001\\n"``) was taken as an image id: the fetcher
    asked the Graph API for ``/90001%0A`` and recorded it in the site's selection under that id (a file name
    ``90001\\n.jpg`` had the API answered). It is not a Mapillary id (digits only): left out like any other
    unusable search row, never requested."""
    a_lat, a_lon = _offset(0, 0)
    b_lat, b_lon = _offset(80, 0)
    imgs = [mly_fake.FakeImage(image_id="90000", lat=a_lat, lon=a_lon, brightness=150),
            mly_fake.FakeImage(image_id="90001\n", lat=b_lat, lon=b_lon, brightness=150)]
    app = mly_fake.make_app(imgs)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = MapillaryClient(http, base, "MLY|1|x", UA)
            return await fetch_site_images({"site": "paris_test", "lat": LAT, "lon": LON}, c, FetcherSettings(),
                                           tmp_path)

    res = asyncio.run(go())
    names = sorted(os.listdir(tmp_path / "paris_test"))
    assert not [n for n in names if "\n" in n], names
    assert [k["image_id"] for k in res.kept] == ["90000"]
    assert [r["image_id"] for r in res.rejected] == []
    assert app[mly_fake.MAPILLARY_STATE].image_requests == ["90000"]
