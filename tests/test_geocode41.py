"""GeoHint geocoder (session 41, fixgeo41: geocode38's leftover findings), against the local Wikidata and Nominatim
fakes with real geocoder calls.

Before:

* #11 a ``geo:`` URI ("geo:35.6595,139.7005", RFC 5870) and coordinates in full-width digits ("３５.６５９５,
  １３９.７００５", as a Japanese input method writes them) were not read as coordinates: both went to Wikidata and
  Nominatim as place names, found nothing, and the answer fell to the city (censored);
"""

from __future__ import annotations

import asyncio

import pytest
from _geocode_env import geocode_env, km
from _geocode_gaz import gazetteer_with

from geoagent.geohint.geocode import ANSWER_COORDINATES, ParsedAnswer
from geoagent.geohint.placenames import plain_coordinates

SHIBUYA = (35.6595, 139.7005)  # the fixture gazetteer's Shibuya (Q99000001)
TRUTH_SHIBUYA = (35.6628, 139.6990)


def _locate(answer: ParsedAnswer, truth: tuple[float, float], *entries: dict):
    """Geocode ``answer`` against the fixture gazetteer plus ``entries``; the located answer and every query the fakes
    saw (Wikidata search texts, Nominatim ``q``)."""
    async def go():
        async with geocode_env(gazetteer_with(*entries) if entries else None) as env:
            loc = await env.geocoder.locate(answer, true_lat=truth[0], true_lon=truth[1])
            queries = [r["params"].get("search") for r in env.wd_state.requests if r["action"] == "wbsearchentities"]
            queries += [r["q"] for r in env.nm_state.requests]
            return loc, [q for q in queries if q]

    return asyncio.run(go())


# ---- #11: geo: URIs and full-width digits are coordinates ----

@pytest.mark.parametrize("text", ["geo:35.6595,139.7005", "GEO:35.6595,139.7005", "geo:35.6595,139.7005;u=30",
                                  "geo:35.6595,139.7005,40", "geo:35.6595,139.7005;crs=wgs84;u=12",
                                  "３５.６５９５, １３９.７００５", "３５．６５９５，１３９．７００５", "35.6595° N, 139.7005° E"])
def test_a_geo_uri_or_full_width_digits_are_the_buildings_point_without_a_lookup(text):
    loc, queries = _locate(ParsedAnswer(city="Tokyo", area="Harajuku", building=text), TRUTH_SHIBUYA)
    assert [q for q in queries if any(ch.isdigit() for ch in q)] == [], queries  # before: searched for as a name
    assert loc.resolved_level == "building" and loc.source == ANSWER_COORDINATES, loc.trace
    assert (loc.lat, loc.lon) == pytest.approx(SHIBUYA, abs=1e-9) and loc.label == text and loc.qid is None
    assert loc.error_km == pytest.approx(km(*SHIBUYA, *TRUTH_SHIBUYA), abs=1e-9) and loc.hit


@pytest.mark.parametrize("text, point", [
    ("geo:48.8584,2.2945", (48.8584, 2.2945)), ("geo: 48.8584, 2.2945", (48.8584, 2.2945)),
    ("geo:-33.8568,151.2153;u=35", (-33.8568, 151.2153)), ("geo:48,2", (48.0, 2.0)),
    ("geo:48.8584,2.2945,35.5;CRS=WGS84", (48.8584, 2.2945)), ("<geo:48.8584,2.2945>", (48.8584, 2.2945)),
    ("４８°５１′３０″Ｎ ２°１７′４０″Ｅ", (48 + 51 / 60 + 30 / 3600, 2 + 17 / 60 + 40 / 3600)),
    ("ｌａｔ ４８.８５８４ ｌｏｎ ２.２９４５", (48.8584, 2.2945)), ("−３３.８５６８，　１５１.２１５３", (-33.8568, 151.2153)),
])
def test_plain_coordinates_read_geo_uris_and_full_width_forms(text, point):
    assert plain_coordinates(text) == pytest.approx(point, abs=1e-12)


@pytest.mark.parametrize("text", [
    "geo:48.8584", "geo:48.8584,2.2945;crs=EPSG:3857", "geo:148.8584,2.2945", "geo:48.8584,192.0", "geo:0,0",
    "geo:48.8584,2.2945,1,2", "geo:Paris", "geo:48.8584,2.2945?z=19", "geography: 48.8584, 2.2945",
    "４８, ２", "４８．８５８４", "東京 ３５.６５９５, １３９.７００５",
])
def test_what_is_still_no_plain_coordinates(text):
    """A geo: URI of another reference system, altitude-and-more, a bare integer pair written in full-width digits
    (ambiguous as its ASCII form is), and coordinates inside other text stay names."""
    assert plain_coordinates(text) is None
