"""GeoVerify/GeoHint conflict detection reads the answer's structure, not words inside its string values (s13).

Before: ``parse_verdict`` searched the whole answer text for ``verdict: yes|no``, inside the JSON object's own
string values too, so one clean object whose evidence said "The verdict: no obvious mismatch" was dropped as
"conflicting verdicts" (an unparseable answer, lost from the yes/no counts). A real conflict (two objects that
disagree, a labelled reversal in prose outside the object, two verdict keys of one object) stays a failure.
"""

from __future__ import annotations

import pytest

from geoagent.geohint.parse import parse_answer
from geoagent.geoverify.parse import parse_verdict


@pytest.mark.parametrize(
    "text, verdict",
    [
        ('{"verdict": "yes", "confidence": 0.8, "evidence": ["The verdict: no obvious mismatch"]}', "yes"),
        ('{"verdict": "no", "confidence": 0.6, "evidence": "Verdict = yes would need a tram on the street"}', "no"),
        ('```json\n{"verdict": "yes", "evidence": ["sign: \'verdict: no entry\'"]}\n```', "yes"),
        # truncated inside the evidence string: the text that was read is still a string value
        ('{"verdict": "yes", "confidence": 0.7, "evidence": ["verdict: no tram lines but', "yes"),
    ],
)
def test_verdict_words_inside_a_string_value_are_no_conflict(text, verdict):
    res = parse_verdict(text)
    assert res.ok and res.verdict == verdict, res
    assert res.raw == text


@pytest.mark.parametrize(
    "text",
    [
        '{"verdict": "yes", "verdict": "no", "confidence": 0.9}',  # one key given twice (the reader keeps the last)
        '{"verdict": "no", "evidence": ["verdict: yes"]}\nOn reflection, verdict: yes',  # prose reversal outside
        '{"verdict": "yes", "evidence": ["fine"]} then {"verdict": "no"}',  # two objects
    ],
)
def test_structural_conflicts_stay_failures(text):
    res = parse_verdict(text)
    assert not res.ok and res.verdict is None and "conflicting" in (res.reason or ""), res


def test_geohint_pattern_fallback_ignores_a_key_inside_a_string_item():
    # an answer the lenient reader cannot read (",,"), so fields come from the "key": "value" pattern; before,
    # "city: 'Lyon'" inside a clue string was taken as the city and the real "city": "Paris" after it ignored
    text = '{"clues": ["the sign says city: \'Lyon\'"], "city": "Paris", "area": "Marais" ,, ]]'
    ans = parse_answer(text)
    assert ans.ok and ans.method == "regex" and (ans.city, ans.area) == ("Paris", "Marais"), ans
    # prose keys (no JSON) are still read, also after a stray quote mark in the prose
    prose = parse_answer('The pole is 5" tall.\ncity: "Porto"\narea: "Ribeira"')
    assert prose.ok and (prose.city, prose.area) == ("Porto", "Ribeira"), prose


def test_geohint_one_key_given_twice_with_different_places_is_a_conflict():
    # before: the reader kept the last "city" and the answer was geocoded as Lyon without a word
    ans = parse_answer('{"city": "Paris", "area": "Marais", "city": "Lyon"}')
    assert not ans.ok and ans.city is None and "conflicting" in (ans.error or ""), ans
    same = parse_answer('{"city": "Paris", "area": "Marais", "city": "paris"}')
    assert same.ok and same.city.casefold() == "paris", same
    # a place field whose text holds "city:" is one value, read as it stands
    inner = parse_answer('{"city": "Lyon", "area": "the old city: Vieux Lyon", "building": "unknown"}')
    assert inner.ok and (inner.city, inner.area) == ("Lyon", "the old city: Vieux Lyon"), inner
