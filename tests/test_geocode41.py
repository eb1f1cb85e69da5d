"""GeoHint geocoder (session 41, fixgeo41: geocode38's leftover findings), against the local Wikidata and Nominatim
fakes with real geocoder calls.

Before:

* #11 a ``geo:`` URI ("geo:35.6595,139.7005", RFC 5870) and coordinates in full-width digits ("３５.６５９５,
  １３９.７００５", as a Japanese input method writes them) were not read as coordinates: both went to Wikidata and
  Nominatim as place names, found nothing, and the answer fell to the city (censored);
* #5 a city field with a state code and no comma ("Cambridge MA") located nothing, so the anchor was missing and the
  finer fields were never tried (level ``none``); with the comma ("Cambridge, MA") the code located nothing either
  and the search's first Cambridge (England) anchored, so "Harvard Square" was out of anchor (city level, 5,259 km).
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


# ---- #5: a city field with a state code, with or without a comma ----

CAMBRIDGE_UK = {"qid": "Q350", "labels": {"en": "Cambridge"}, "lat": 52.205, "lon": 0.119, "kind": "city",
                "city": "Cambridge", "description": "city in Cambridgeshire, England", "sitelinks": 200,
                "country": ["Q145"]}
CAMBRIDGE_MA = {"qid": "Q49111", "labels": {"en": "Cambridge"}, "lat": 42.3736, "lon": -71.1097, "kind": "city",
                "city": "Cambridge", "description": "city in Massachusetts, United States", "sitelinks": 150,
                "classes": ["Q1093829"], "located_in": ["Q771"], "country": ["Q30"]}
MASSACHUSETTS = {"qid": "Q771", "labels": {"en": "Massachusetts"}, "lat": 42.3, "lon": -71.8, "kind": "area",
                 "city": "Boston", "description": "state of the United States of America", "sitelinks": 250,
                 "classes": ["Q35657"], "country": ["Q30"]}
HARVARD_SQUARE = {"qid": "Q99041001", "labels": {"en": "Harvard Square"}, "lat": 42.3732, "lon": -71.1189,
                  "kind": "area", "city": "Cambridge", "description": "square in Cambridge, Massachusetts",
                  "sitelinks": 30}
TRUTH_HARVARD = (42.3730, -71.1180)
CAMBRIDGES = (CAMBRIDGE_UK, CAMBRIDGE_MA, MASSACHUSETTS, HARVARD_SQUARE)


@pytest.mark.parametrize("city", ["Cambridge MA", "Cambridge, MA", "Cambridge MA, USA"])
def test_a_state_code_in_the_city_field_anchors_on_the_city_in_that_state(city):
    loc, queries = _locate(ParsedAnswer(city=city, area="Harvard Square", building="unknown"), TRUTH_HARVARD,
                           *CAMBRIDGES)
    assert loc.anchor_qid == "Q49111", loc.trace  # before: none ("Cambridge MA"), Cambridge, England (with a comma)
    assert loc.resolved_level == "area" and loc.qid == "Q99041001" and loc.hit, loc.trace
    assert "Massachusetts" in queries  # the code was looked up by the state's name
    assert any(t.level == "city" and t.outcome == "contains-city" and t.qid == "Q771" for t in loc.trace), loc.trace


def test_a_city_field_without_a_code_is_read_as_before():
    """A bare "Cambridge" keeps the search's first city item (module doc, point 1; no finer field moves it, and the
    truth never does): Harvard Square lies out of that anchor, city level, censored (geocode38 #9, judged right)."""
    loc, queries = _locate(ParsedAnswer(city="Cambridge", area="Harvard Square", building="unknown"), TRUTH_HARVARD,
                           *CAMBRIDGES)
    assert loc.anchor_qid == "Q350" and loc.resolved_level == "city" and not loc.hit
    assert "Massachusetts" not in queries


def test_an_unknown_city_still_leaves_the_finer_names_unlooked_for():
    """geocode38 #5, judged right: with no city there is no anchor from the model's own answered city (Sec. 4.2),
    and a lookup without one is the global fallback fault 3 removed; the truth is never an anchor."""
    loc, queries = _locate(ParsedAnswer(city="unknown", area="Shibuya", building="Shibuya Station"), TRUTH_SHIBUYA)
    assert loc.resolved_level == "none" and loc.anchor_qid is None and queries == []
    assert [t.outcome for t in loc.trace] == ["null", "no-anchor", "no-anchor"]


@pytest.mark.parametrize("text, expected", [
    ("Cambridge MA", "Cambridge, Massachusetts"), ("Cambridge, MA", "Cambridge, Massachusetts"),
    ("Cambridge MA, USA", "Cambridge, Massachusetts, USA"), ("Portland OR", "Portland, Oregon"),
    ("Kingston ON", "Kingston, Ontario"), ("Seattle WA, USA", "Seattle, Washington, USA"),
    ("St. John's NL, Canada", "St. John's, Newfoundland and Labrador, Canada"), ("San Diego CA", "San Diego, California"),
    ("Sydney NSW, Australia", "Sydney, New South Wales, Australia"), ("Boston, MA, U.S.", "Boston, Massachusetts, U.S."),
    # review41a #4: a code that also names another region or a country is written out only with its country after it
    ("Perth WA", "Perth WA"), ("Darwin NT", "Darwin NT"), ("Seattle WA", "Seattle WA"), ("Berlin DE", "Berlin DE"),
    ("Mumbai IN", "Mumbai IN"), ("Buenos Aires AR", "Buenos Aires AR"), ("Bogota CO", "Bogota CO"),
    ("Lima, PE", "Lima, PE"), ("Amsterdam NL", "Amsterdam NL"), ("Springfield IL", "Springfield IL"),
    ("Springfield IL, USA", "Springfield, Illinois, USA"), ("Yellowknife NT, Canada", "Yellowknife, Northwest Territories, Canada"),
    # ... and no code is when a segment after it names another country, or something else
    ("Perth WA, Australia", "Perth WA, Australia"), ("Berlin DE, Germany", "Berlin DE, Germany"),
    ("Cambridge MA, UK", "Cambridge MA, UK"), ("Kingston ON, USA", "Kingston ON, USA"),
    ("Darwin NT, Australia", "Darwin NT, Australia"), ("Austin TX, Travis County", "Austin TX, Travis County"),
    # not a code as written: lower case, a lone code, a code first, DC (part of the city's own name), a country code
    ("Cambridge ma", "Cambridge ma"), ("MA", "MA"), ("MA Cambridge", "MA Cambridge"), ("Washington DC", "Washington DC"),
    ("Hollywood, LA", "Hollywood, LA"), ("London UK", "London UK"), ("Paris", "Paris"),
    ("", ""),
    # review41c #2: the segment that named a code's country is never read as a code itself (CA is also California)
    ("Toronto ON, CA", "Toronto, Ontario, CA"), ("Vancouver, BC, CA", "Vancouver, British Columbia, CA"),
    ("Los Angeles, CA, US", "Los Angeles, California, US"),
])
def test_with_region_name(text, expected):
    from geoagent.geohint.placenames import with_region_name

    assert with_region_name(text) == expected


# ---- #6 and #8, judged right: no change ----

JAPAN = {"qid": "Q17", "labels": {"en": "Japan"}, "lat": 36.0, "lon": 138.0, "kind": "area", "city": "Japan",
         "description": "country in East Asia", "sitelinks": 400, "classes": ["Q6256", "Q3624078"]}


def test_a_country_in_the_city_field_is_city_level_and_censored():
    """geocode38 #6: "Japan" is no finer than a city, which is all a censored city level states (Sec. 4.3, fault 4);
    the release's code scores it the same way (its levels are place, area, city), and a country named at a finer
    level is city level here too (``COARSE_CLASSES``). Its error_km is kept for reference, never a hit."""
    loc, _ = _locate(ParsedAnswer(city="Japan", area="unknown", building="unknown"), TRUTH_SHIBUYA, JAPAN)
    assert (loc.resolved_level, loc.qid, loc.anchor_qid, loc.hit) == ("city", "Q17", "Q17", False)
    assert loc.as_release_row()["resolved_level"] == "city"


def test_a_place_named_as_both_city_and_area_is_city_level():
    """geocode38 #8: the area repeats the city field's own item, so it adds nothing finer than the city field; which
    items are finer than a city Wikidata's classes do not say reliably (many cities carry only a national class such
    as "city of Japan"), and reading the anchor's own item as an area would score those cities' centres as area hits
    (fault 4)."""
    loc, _ = _locate(ParsedAnswer(city="Shibuya", area="Shibuya", building="unknown"), TRUTH_SHIBUYA)
    assert (loc.resolved_level, loc.qid, loc.hit) == ("city", "Q99000001", False)
    assert any(t.level == "area" and t.outcome == "same-as-city" for t in loc.trace), loc.trace
