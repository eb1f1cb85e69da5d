"""Adversarial review of session 17's degrees-minutes-seconds (``placenames.plain_coordinates``, geocoder point 7).

One DMS coordinate whose seconds lost their mark ("48° 51' 30.5 N": a VLM's latitude alone, the ``"`` dropped; or
"48° 51' 30.5", what :func:`parse_answer`'s pattern fallback keeps of a field whose ``"`` was written unescaped in
the model's JSON) is no pair of coordinates. Before the fix the pattern read it as two: ``48° 51'`` (DMS, no letter)
and ``30.5 N`` (decimal with a letter), the letter made the second one the latitude, so the answer became the point
(30.5, 48.85), about 4,400 km from the Eiffel Tower, scored at building level without a lookup. The same holds for a
DMS part paired with a bare decimal ("48°51' 30.5", "lat 48°51' 30.5"). Rule after the fix: when either part is
written in degrees-minutes, the other must carry a degree sign too (a DMS partner, or "48°"), else the text is
ambiguous and is looked up as a name, as any ambiguous text is (session 16).
"""

from __future__ import annotations

import pytest
from test_geocode_answer_coordinates_s16 import _trial

from geoagent.geohint.geocode import ANSWER_COORDINATES
from geoagent.geohint.parse import parse_answer
from geoagent.geohint.placenames import plain_coordinates


@pytest.mark.parametrize("text", ["48° 51' 30.5 N",     # before: (30.5, 48.85): the seconds read as a latitude
                                  "48°51' 30.5",        # before: (48.85, 30.5)
                                  "lat 48°51' 30.5",    # before: (48.85, 30.5)
                                  "48°51'30\" 2.5",     # before: (48.858..., 2.5): a DMS part and a bare number
                                  "48°51'30\"N 2.2945 E"])  # before: (48.858..., 2.2945)
def test_a_dms_part_with_a_bare_number_is_no_pair(text):
    assert plain_coordinates(text) is None


@pytest.mark.parametrize("text, point", [("48°N, 2°17'40\"E", (48.0, 2 + 17 / 60 + 40 / 3600)),
                                         ("48°51'30\"N 2.2945°E", (48 + 51 / 60 + 30 / 3600, 2.2945)),
                                         ("48°51' N 2°17' E", (48.85, 2 + 17 / 60))])
def test_a_dms_part_with_a_degree_partner_still_reads(text, point):
    assert plain_coordinates(text) == pytest.approx(point, abs=1e-12)


def test_an_unescaped_seconds_mark_cut_by_the_parser_gives_no_point():
    """How such text arises: a model writes the seconds mark ``"`` unescaped inside its JSON string; the JSON is
    invalid, the pattern fallback of :func:`parse_answer` ends the field at that quote, leaving "48° 51' 30.5".
    Before: the point (48.85, 30.5), about 2,000 km east of Paris, scored at building level."""
    raw = '{"city": "Paris", "area": "unknown", "building": "48° 51\' 30.5" N, 2° 17\' 40.2" E"}'
    building = parse_answer(raw).building
    assert building == "48° 51' 30.5"  # the parser's cut (raw text kept in ParsedAnswer.raw)
    assert plain_coordinates(building) is None


def test_one_latitude_with_unmarked_seconds_is_looked_up_as_a_name():
    text = "48° 51' 30.5 N"
    located, trial, queries = _trial({"city": "Paris", "area": "unknown", "building": text})
    assert located["geocode_source"] != ANSWER_COORDINATES  # before: answer-coordinates at (30.5, 48.85)
    assert located["resolved_level"] == "city" and trial.hit is False
