"""A place field (city, area, building/place, country) that is not a JSON string names no place.

Before (session 12): the lenient reader (:mod:`geoagent.llmjson`) read the bare words ``NaN`` and ``Infinity``
as the strings ``"NaN"`` / ``"Infinity"``, and the GeoHint parser turned any value into text, so
``{"city": NaN}`` parsed as the city "NaN", ``{"city": 12}`` as "12", ``1e999`` as "inf", a list as its items
joined with commas and ``{"name": ...}`` as that name; ``-Infinity`` made the whole object unreadable. The
referenceability auditor's ``en``/``zh`` names had the same hole for ``NaN``. Model output is untrusted text: a
non-string place field is absent (no answer for that level), the raw text is kept, and a quoted ``"Nan"``
(a Thai city) is still a place.
"""

from __future__ import annotations

import json
import math

import pytest

from geoagent.crawl.image_audit import parse_image_audit
from geoagent.crawl.referenceability import parse_ref_batch
from geoagent.geohint.parse import parse_answer
from geoagent.geoverify.parse import parse_verdict
from geoagent.llmjson import read_at

NON_STRINGS = ["NaN", "Infinity", "-Infinity", "+Infinity", "nan", "inf", "-inf", "1e999", "12", "-3.5", "null",
               "true", '["Le Marais", "Bastille"]', '["Le Marais"]', '{"name": "Paris"}', "[]", "{}"]
FIELDS = ["city", "area", "building", "place", "country"]


@pytest.mark.parametrize("value", NON_STRINGS)
@pytest.mark.parametrize("field", FIELDS)
def test_a_non_string_place_field_is_absent(field, value):
    other = "area" if field != "area" else "city"
    text = '{"%s": %s, "%s": "Montmartre", "confidence_area": 0.5}' % (field, value, other)
    a = parse_answer(text)
    got = {"city": a.city, "area": a.area, "building": a.building, "place": a.building, "country": a.country}
    assert got[field] is None, (text, got)
    assert a.ok and got[other] == "Montmartre" and a.raw == text  # the other field still answers; raw kept


@pytest.mark.parametrize("value", NON_STRINGS)
def test_an_answer_whose_only_place_is_not_a_string_is_a_parse_failure(value):
    text = '{"city": %s, "confidence_area": 0.9}' % value
    a = parse_answer(text)
    assert not a.ok and a.city is None and a.error and a.raw == text


@pytest.mark.parametrize("value", ["NaN", "12", '["a", "b"]'])
def test_the_pattern_fallback_reads_only_quoted_places(value):
    # unbalanced quotes: no JSON object, the fields are read with the pattern
    text = 'city: %s, "area": "Soho", "building": "Apple Store' % value
    a = parse_answer(text)
    assert a.city is None and a.area == "Soho" and a.raw == text


def test_a_quoted_nan_is_a_place_name():
    a = parse_answer('{"city": "Nan", "area": "Nai Wiang"}')  # Nan, a city of northern Thailand
    assert a.ok and a.city == "Nan" and a.area == "Nai Wiang"


def test_minus_infinity_no_longer_hides_the_whole_object():
    a = parse_answer('{"city": "Paris", "area": "Le Marais", "confidence_area": -Infinity}')
    assert a.ok and a.method == "repaired" and (a.city, a.area, a.confidence_area) == ("Paris", "Le Marais", None)


def test_a_non_string_place_never_clashes_with_a_string_one():
    a = parse_answer('{"city": "Paris", "City": NaN, "area": "Le Marais"}')
    assert a.ok and a.city == "Paris"


def test_clues_and_evidence_keep_only_text():
    a = parse_answer('{"city": "Paris", "clues": ["tram", NaN, 3, {"x": 1}], '
                     '"evidence": {"infrastructure": NaN, "vegetation": "not visible"}}')
    assert a.clues == ["tram"]
    assert a.evidence == {"infrastructure": "", "vegetation": "not visible"}


@pytest.mark.parametrize("word,check", [("NaN", math.isnan), ("Infinity", lambda x: x == math.inf),
                                        ("-Infinity", lambda x: x == -math.inf), ("+Infinity", lambda x: x == math.inf),
                                        ("nan", math.isnan), ("inf", lambda x: x == math.inf),
                                        ("-inf", lambda x: x == -math.inf)])
def test_the_reader_reads_non_finite_words_as_numbers_never_as_text(word, check):
    c = read_at('{"x": %s, "y": [%s]}' % (word, word), 0)
    assert c.ok and not isinstance(c.value["x"], str) and check(c.value["x"]) and check(c.value["y"][0])
    assert not c.strict  # a repair, never standard JSON


def test_geoverify_never_takes_a_non_finite_word_as_a_verdict_confidence_or_evidence():
    v = parse_verdict('{"verdict": NaN, "confidence": NaN, "evidence": [NaN, "a tram"]}')
    assert v.verdict is None and v.confidence is None
    v = parse_verdict('{"verdict": "yes", "confidence": Infinity, "evidence": [Infinity, "a tram"]}')
    assert v.verdict == "yes" and v.confidence is None and v.evidence == ("a tram",)


def test_referenceability_names_are_strings_only():
    arr = json.dumps([{"idx": 0, "ok": True, "familiarity": 4, "zh": None, "en": "X"}]).replace('"X"', "NaN")
    got = parse_ref_batch(arr, 1)
    assert got[0]["name_en"] is None and got[0]["ok"] is True


def test_image_audit_overlay_text_is_text_only():
    a = parse_image_audit('{"answer_overlay": false, "overlay_text": NaN, "scene_type": "street", "quality": 4}')
    assert a.parsed and a.overlay_text == ""
