"""An answer field that is plain decimal coordinates is the predicted point itself, not a place-name query
(session 16).

Before: "48.8584, 2.2945" in ``building`` (or ``area``, ``city``) reached Wikidata's search and Nominatim as a
name (and its comma-split segments "48.8584" and "2.2945" too); none matched, so the answer fell back to the
city or resolved nothing. After: it is read as latitude, longitude in degrees, used as the point without a
lookup, recorded with ``geocode_source`` = ``answer-coordinates``, and the trial's ``error_km`` is the haversine
from it to the site. Anything not plainly coordinates (one number, out-of-range numbers, DMS, bare integers,
coordinates inside prose) is still looked up as a name.

End to end: model text -> :func:`parse_answer` -> :class:`GeocodeStage` (local Wikidata and Nominatim fakes,
``geoagent/sandbox``) -> :func:`score_located`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from _geocode_env import geocode_env, km

from geoagent.geohint.geocode import ANSWER_COORDINATES
from geoagent.geohint.geocode_stage import GeocodeStage
from geoagent.geohint.parse import parse_answer
from geoagent.geohint.placenames import plain_coordinates
from geoagent.geohint.stages import score_located
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext

SITE = (48.8570, 2.2950)  # a site by the Champ de Mars (test data)
EIFFEL = (48.8584, 2.2945)
PARIS = (48.856667, 2.352222)  # the fixture gazetteer's Paris (Q90)


def _trial(fields: dict) -> tuple[dict, object, list[str]]:
    """Run one answer (the JSON object ``fields`` as model text) through parser, geocoder stage and scorer; return
    the located payload, the scored trial and every query the fakes saw (Wikidata search texts, Nominatim q)."""
    raw = "```json\n" + json.dumps({**fields, "confidence_area": 0.6, "confidence_building": 0.4,
                                     "clues": ["wrought-iron lattice tower"]}, ensure_ascii=False) + "\n```"
    parsed = parse_answer(raw)
    meta = {"task": "geohint", "site": "paris_test", "condition": "forced", "ref_name": "Trocadéro",
            "ref_names": ["Trocadéro"], "site_lat": SITE[0], "site_lon": SITE[1]}
    payload = {"model": "sim", "request_key": "rk", "image_id": "1", "meta": meta, "parsed": parsed.to_json()}

    async def go():
        async with geocode_env() as env:
            stage = GeocodeStage(env.geocoder)
            [(key, located)] = await stage.handle(Task("k", payload, 0, "lease"), StageContext("camp", {}))
            queries = [r["params"].get("search") for r in env.wd_state.requests if r["action"] == "wbsearchentities"]
            queries += [r["q"] for r in env.nm_state.requests]
            return located, queries

    located, queries = asyncio.run(go())
    return located, score_located("k", located), [q for q in queries if q]


def _asked_about_numbers(queries: list[str]) -> list[str]:
    return [q for q in queries if any(ch.isdigit() for ch in q)]


@pytest.mark.parametrize("text", ["48.8584, 2.2945", "48.8584° N, 2.2945° E", "lat 48.8584 lon 2.2945",
                                  "(48.8584, 2.2945)", "Latitude: 48.8584, Longitude: 2.2945", "2.2945 E, 48.8584 N"])
def test_building_coordinates_are_the_point_without_a_lookup(text):
    located, trial, queries = _trial({"city": "Paris", "area": "Champ de Mars", "building": text})
    assert _asked_about_numbers(queries) == [], queries  # before: the coordinates were searched for as a name
    assert located["resolved_level"] == "building" and located["geocode_source"] == ANSWER_COORDINATES
    assert (located["lat"], located["lon"]) == EIFFEL and located["qid"] is None
    assert located["resolved_label"] == text and trial.building == text  # the model's text is kept as written
    assert located["anchor_qid"] == "Q90"  # the city is still resolved first (anchor), as for any answer
    step = located["geocode_trace"][-1]
    assert (step["level"], step["query"], step["source"], step["outcome"]) == ("building", text, ANSWER_COORDINATES, "resolved")
    assert trial.error_km == pytest.approx(km(*EIFFEL, *SITE), abs=1e-9) and trial.error_km < 1
    assert trial.resolved_level == "building" and trial.hit is True  # the hit rule is unchanged: fine level, < 1 km
    assert trial.echo is False  # coordinates name no reference point (echo rule unchanged)
    # the scored trial (and the geohint_scored export) says how its point was found (review question 3)
    assert trial.extra["geocode_source"] == ANSWER_COORDINATES


def test_area_coordinates_score_at_area_level():
    located, trial, queries = _trial({"city": "Paris", "area": "48.8584° N, 2.2945° E", "building": "unknown"})
    assert _asked_about_numbers(queries) == []
    assert located["resolved_level"] == "area" and located["geocode_source"] == ANSWER_COORDINATES
    assert trial.error_km == pytest.approx(km(*EIFFEL, *SITE), abs=1e-9) and trial.hit is True


def test_coordinates_need_no_resolved_city():
    """The anchor disambiguates names; coordinates need none, so an unresolvable city does not drop them."""
    located, trial, queries = _trial({"city": "Atlantis", "area": "Lost Quarter", "building": "48.8584, 2.2945"})
    assert "Atlantis" in queries and _asked_about_numbers(queries) == []
    assert located["resolved_level"] == "building" and located["anchor_qid"] is None
    assert trial.error_km == pytest.approx(km(*EIFFEL, *SITE), abs=1e-9)


def test_city_coordinates_are_the_anchor_and_stay_censored():
    located, trial, queries = _trial({"city": "48.8566, 2.3522", "area": "Lost Quarter", "building": "unknown"})
    assert _asked_about_numbers(queries) == [] and "Lost Quarter" in queries  # finer names still looked up
    assert located["resolved_level"] == "city" and located["geocode_source"] == ANSWER_COORDINATES
    assert located["anchor_label"] == "48.8566, 2.3522"
    assert trial.error_km == pytest.approx(km(48.8566, 2.3522, *SITE), abs=1e-9)
    assert trial.hit is False  # city level is censored (Sec. 4.2), coordinates or not


@pytest.mark.parametrize("text", ["48.8584", "148.8584, 2.2945", "48.8584, 192.2945", "48 51' 30 N, 2 17' 40 E",
                                  "48, 2", "Eiffel Tower 48.8584, 2.2945", "-48.8584 S, 2.2945 E", "48.8584 N, 2.2945 N"])
def test_anything_else_is_still_looked_up_as_a_name(text):
    located, trial, queries = _trial({"city": "Paris", "area": "unknown", "building": text})
    assert text in queries  # present behaviour: the geocoder is asked
    assert located["geocode_source"] != ANSWER_COORDINATES
    assert located["resolved_level"] == "city" and trial.hit is False


@pytest.mark.parametrize(
    "text, point",
    [("48.8584, 2.2945", EIFFEL), ("48.8584,2.2945", EIFFEL), ("48.8584 2.2945", EIFFEL), ("48.8584; 2.2945", EIFFEL),
     ("48.8584°N 2.2945°E", EIFFEL), ("N 48.8584, E 2.2945", EIFFEL), ("48.8584 n, 2.2945 e", EIFFEL),
     ("lat=48.8584, lng=2.2945", EIFFEL), ("lon: 2.2945, lat: 48.8584", EIFFEL), ("[48.8584, 2.2945]", EIFFEL),
     ("33.8568° S, 151.2153° E", (-33.8568, 151.2153)), ("-33.8568, 151.2153", (-33.8568, 151.2153)),
     ("40.6892° N, 74.0445° W", (40.6892, -74.0445)), ("−22.9519, −43.2105", (-22.9519, -43.2105)),
     ("48° N, 2° E", (48.0, 2.0)), ("90.0, -180.0", (90.0, -180.0))],
)
def test_plain_coordinates_read(text, point):
    assert plain_coordinates(text) == point


@pytest.mark.parametrize(
    "text",
    [None, "", "Paris", "48.8584", "48.8584, 2.2945, 35.0", "90.5, 2.0", "48.0, 180.5", "48, 2", "10 20",
     "48 51' 30 N, 2 17' 40 E", "48 51 30 N, 2 17 40 E", "48,8584, 2,2945", "-48.8584 S, 2.2945 E", "48.8584 N, 2.2945 S",
     "lat 48.8584 lat 2.2945", "lat 48.8584 N, lon 2.2945 N", "N 48.8584 N, 2.2945 E", "Eiffel Tower (48.8584, 2.2945)",
     "221B Baker Street", "1e3, 2.0", "48.8584.1, 2.2945", "nan, nan", "Route 66.5, 2.0"],
)
def test_not_plain_coordinates(text):
    assert plain_coordinates(text) is None


def test_long_text_is_rejected_in_linear_time():
    """A looping answer: 50,000 spaces between a label and a letter took 77 s to reject before the whitespace was
    collapsed and the length capped (two adjacent optional space runs in the pattern)."""
    import time

    start = time.perf_counter()
    for text in ("lat" + " " * 50_000 + "x", "48.8 " + " " * 50_000 + "x", "48.8584, 2.2945" * 5_000):
        assert plain_coordinates(text) is None
    assert time.perf_counter() - start < 1.0
    assert plain_coordinates("lat   48.8584 \t lon\n2.2945") == EIFFEL  # runs of spaces read as one
