"""Degrees-minutes-seconds in a GeoHint answer field are its point, as decimal coordinates are (session 17,
geocoding rules version 3).

Before: ``48°51'30"N 2°17'40"E`` in ``building`` was not read as coordinates (session 16 read only decimal
degrees) and went to Wikidata's search and Nominatim as a place name; nothing matched, so the answer fell back to
its city (no hit, censored) although it pointed 150 m from the site. After: degrees + minutes / 60 + seconds / 3600,
the sign or hemisphere letter of the whole, used without a lookup (``geocode_source`` ``answer-coordinates``).
Text that is not plainly DMS stays a name query: minutes without a degree sign, minutes after fractional degrees,
minutes or seconds of 60 or more, seconds after fractional minutes.

End to end through :class:`GeocodeStage` against the local Wikidata and Nominatim fakes (``geoagent/sandbox``),
reusing the session-16 harness (``_trial``) of the decimal case.
"""

from __future__ import annotations

import pytest
from _geocode_env import km
from test_geocode_answer_coordinates_s16 import SITE, _asked_about_numbers, _trial

from geoagent.geohint.geocode import ANSWER_COORDINATES, GEOCODER_RULES_VERSION
from geoagent.geohint.placenames import plain_coordinates

# 48°51'30"N 2°17'40"E, computed by hand: 48 + 51/60 + 30/3600 = 48.858333..., 2 + 17/60 + 40/3600 = 2.294444...
EIFFEL_DMS = (48 + 51 / 60 + 30 / 3600, 2 + 17 / 60 + 40 / 3600)


@pytest.mark.parametrize(
    "text, point",
    [("48°51'30\"N 2°17'40\"E", EIFFEL_DMS),
     ("48°51′30″N, 2°17′40″E", EIFFEL_DMS),                     # primes
     ("48° 51' 30\" N, 2° 17' 40\" E", EIFFEL_DMS),              # spaces
     ("48°51’30”N 2°17’40”E", EIFFEL_DMS),                       # curly quotes (word processors)
     ("lat 48°51'30'' N, lon 2°17'40'' E", EIFFEL_DMS),          # two apostrophes for seconds, labels
     ("2°17'40\"E 48°51'30\"N", EIFFEL_DMS),                     # letters swap the order
     ("N 48°51'30\", E 2°17'40\"", EIFFEL_DMS),                  # letters before
     ("48°51.5'N 2°17.7'E", (48 + 51.5 / 60, 2 + 17.7 / 60)),    # degrees and decimal minutes
     ("33°51'24\"S, 151°12'55\"E", (-(33 + 51 / 60 + 24 / 3600), 151 + 12 / 60 + 55 / 3600)),
     ("-33°51'24\", 151°12'55\"", (-(33 + 51 / 60 + 24 / 3600), 151 + 12 / 60 + 55 / 3600)),
     ("40°41'21\"N 74°2'40\"W", (40 + 41 / 60 + 21 / 3600, -(74 + 2 / 60 + 40 / 3600))),
     ("-0°30', 0°30'", (-0.5, 0.5)),                             # the sign of "-0" is kept
     ("48°N, 2°17'40\"E", (48.0, 2 + 17 / 60 + 40 / 3600))],     # one part decimal, one DMS
)
def test_dms_read(text, point):
    got = plain_coordinates(text)
    assert got is not None, text
    assert got == pytest.approx(point, abs=1e-12)


@pytest.mark.parametrize(
    "text",
    ["48 51' 30 N, 2 17' 40 E",        # minutes without a degree sign
     "48.5°30'N, 2°E",                 # minutes after fractional degrees
     "48°60'N, 2°E", "48°75'N, 2°E",   # minutes of 60 or more
     "48°51'60\"N, 2°E",               # seconds of 60 or more
     "48°51.5'30\"N, 2°E",             # seconds after fractional minutes
     "-48°51'30\" S, 2°E",             # a sign and a letter
     "90°30'N, 2°E",                   # beyond the pole
     "48°51'30\"N",                    # one part only
     "Tour Eiffel 48°51'30\"N 2°17'40\"E"],
)
def test_not_dms(text):
    assert plain_coordinates(text) is None


def test_building_dms_is_the_point_without_a_lookup():
    text = "48°51'30\"N 2°17'40\"E"
    located, trial, queries = _trial({"city": "Paris", "area": "Champ de Mars", "building": text})
    assert _asked_about_numbers(queries) == [], queries  # before: searched for as a name (then city level, no hit)
    assert located["resolved_level"] == "building" and located["geocode_source"] == ANSWER_COORDINATES
    assert (located["lat"], located["lon"]) == pytest.approx(EIFFEL_DMS, abs=1e-12)
    assert located["resolved_label"] == text  # the model's text is kept as written
    assert trial.error_km == pytest.approx(km(*EIFFEL_DMS, *SITE), abs=1e-9) and trial.error_km < 1
    assert trial.hit is True and trial.extra["geocode_source"] == ANSWER_COORDINATES


def test_the_rules_version_records_the_change():
    assert GEOCODER_RULES_VERSION >= 3  # 3 brought degrees-minutes-seconds; later versions keep it (4: session 19)
