"""GeoHint answer parser (session 41, fixgeo41): Australian state and territory codes.

Before: "Sydney, NSW" then "Sydney, New South Wales" in one answer (a fenced answer and its summary) were two places,
"conflicting answers", a miss; only US and Canadian codes were read (geohint39 #2). Now NSW, VIC, QLD, TAS and ACT
are read too. WA, SA and NT stay unread as Australian: WA is Washington, NT the Northwest Territories, and SA would
read "Adelaide, SA" as South Australia where "San Antonio, SA" or "Pretoria, SA" mean otherwise.
"""

from __future__ import annotations

import pytest

from geoagent.geohint.parse import ANSWER_PARSER_VERSION, parse_answer, same_place_text
from geoagent.geohint.placenames import REGION_ABBREVIATIONS


@pytest.mark.parametrize("a, b, same", [
    ("Sydney, NSW", "Sydney, New South Wales", True), ("Melbourne, VIC", "Melbourne, Victoria", True),
    ("Brisbane, QLD, Australia", "Brisbane, Queensland, Australia", True), ("Hobart, Tas", "Hobart, Tasmania", True),
    ("Canberra, ACT", "Canberra, Australian Capital Territory", True),
    ("Newcastle, NSW", "Newcastle, Victoria", False),
    # the colliding codes keep their North American reading
    ("Perth, WA", "Perth, Western Australia", False), ("Perth, WA", "Perth, Washington", True),
    ("Darwin, NT", "Darwin, Northern Territory", False), ("Adelaide, SA", "Adelaide, South Australia", False),
])
def test_australian_codes(a, b, same):
    assert same_place_text(a, b) is same and same_place_text(b, a) is same


def test_an_answer_written_with_a_code_and_the_name_is_one_answer():
    text = ('```json\n{"city": "Sydney, NSW", "area": "The Rocks", "building": "Museum of Contemporary Art"}\n```\n'
            'Summary: {"city": "Sydney, New South Wales", "area": "The Rocks"}')
    a = parse_answer(text)
    assert (a.ok, a.city, a.area) == (True, "Sydney, NSW", "The Rocks"), a


def test_no_australian_code_collides_with_another_reading():
    assert {k: REGION_ABBREVIATIONS[k] for k in ("wa", "nt", "sa") if k in REGION_ABBREVIATIONS} == {
        "wa": "washington", "nt": "northwest territories"}


def test_the_parser_version_names_the_change():
    assert ANSWER_PARSER_VERSION >= 6  # 6 brought the codes; later versions keep them (7: sec42 #3)
