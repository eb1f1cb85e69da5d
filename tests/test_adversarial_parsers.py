"""Adversarial model output: every parser of untrusted text returns (never raises), never executes it, and
never turns a non-finite or out-of-range number into a confidence, a quality or an index.

Parsers: GeoVerify :func:`parse_verdict`, GeoHint :func:`parse_answer`, the crawl auditors'
:func:`extract_json` / :func:`parse_image_audit` / :func:`parse_ref_batch`.
"""

from __future__ import annotations

import math

import pytest

from geoagent.crawl.image_audit import parse_image_audit
from geoagent.crawl.llmjson import as_int_in, extract_json
from geoagent.crawl.referenceability import parse_ref_batch
from geoagent.geohint.parse import parse_answer
from geoagent.geoverify.parse import parse_verdict

BIG_INT = "9" * 5000  # beyond Python's 4300-digit int/str conversion limit
HUGE_INT = "1" + "0" * 400  # parses as an int, overflows float()

ADVERSARIAL = {
    "deep_object": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "deep_list": "[" * 100_000 + "]" * 100_000,
    "deep_unclosed": '{"verdict": "yes", "x": ' + "[" * 100_000,
    "nan": '{"verdict": "yes", "confidence": NaN, "city": "Paris", "confidence_area": NaN}',
    "infinity": '{"verdict": "no", "confidence": Infinity, "city": "Paris", "confidence_building": -Infinity}',
    "1e308": '{"verdict": "no", "confidence": 1e308, "city": "Paris", "confidence_area": 1e308}',
    "1e400": '{"verdict": "no", "confidence": 1e400, "city": "Paris", "confidence_area": 1e400}',
    "big_int": '{"verdict": "yes", "confidence": ' + BIG_INT + ', "quality": ' + BIG_INT + "}",
    "huge_int": '{"verdict": "yes", "confidence": ' + HUGE_INT + ', "quality": ' + HUGE_INT + "}",
    "verdict_list": '{"verdict": ["yes", "no"], "confidence": 0.9}',
    "code": "__import__('os').system('touch {marker}')",
    "code_in_json": "{{'verdict': __import__('os').system('touch {marker}'), 'confidence': 0.5}}",
    "backslashes": '{"verdict": "' + "\\" * 100_001,
    "quotes": "'" * 100_000,
    "nul": '{"verdict": "yes\x00", "confidence": 0.5}',
    "lone_surrogate": '{"verdict": "yes", "confidence": 0.5, "evidence": ["\\ud800"]}',
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_parsers_never_raise_never_execute(name, tmp_path):
    marker = tmp_path / "executed"
    text = ADVERSARIAL[name].replace("{marker}", str(marker)) if "code" in name else ADVERSARIAL[name]
    v = parse_verdict(text)
    a = parse_answer(text)
    extract_json(text, dict)
    extract_json(text, list)
    audit = parse_image_audit(text)
    parse_ref_batch(text, 3)
    assert not marker.exists()
    assert v.raw == text and a.raw == text and audit.raw == text  # raw text kept
    for c in (v.confidence, a.confidence_area, a.confidence_building):
        assert c is None or (math.isfinite(c) and 0.0 <= c <= 1.0)
    assert audit.quality is None or 0 <= audit.quality <= 5
    if name == "verdict_list":
        assert not v.ok and v.verdict is None  # an ambiguous verdict is a parse failure, never a guess


def test_extract_json_with_a_5000_digit_integer_returns_none_or_a_value_not_an_exception():
    # json's int conversion raises ValueError past 4300 digits; the decoder must treat it as no JSON here
    assert extract_json('{"quality": ' + BIG_INT + "}", dict) is None
    assert extract_json('noise {"quality": ' + BIG_INT + '} then {"quality": 3}', dict) == {"quality": 3}


def test_as_int_in_with_an_int_too_large_for_a_float_is_none():
    assert as_int_in(int(HUGE_INT), 0, 5) is None
    assert as_int_in(HUGE_INT, 0, 5) is None
    assert as_int_in(float("nan"), 0, 5) is None
    assert as_int_in("inf", 0, 5) is None
    assert as_int_in(3, 0, 5) == 3 and as_int_in("4.0", 0, 5) == 4


def test_image_audit_with_absurd_quality_is_unparsed_not_a_crash():
    a = parse_image_audit('{"answer_overlay": false, "scene_type": "street", "quality": ' + HUGE_INT + "}")
    assert not a.parsed and "quality" in a.reason


def test_ref_batch_with_absurd_index_sets_the_answer_aside_without_a_crash():
    # crawl40 #2: an idx outside 0..n-1 is a numbering the answer got wrong; none of its ratings is used
    text = '[{"idx": ' + HUGE_INT + ', "ok": true, "familiarity": 3}, {"idx": 1, "ok": true, "familiarity": 4}]'
    why: list[str] = []
    assert parse_ref_batch(text, 3, problems=why) == {}
    assert why and "digits" in why[0] and len(why[0]) < 300  # the 401-digit idx is shortened in the reason


@pytest.mark.parametrize(
    "text",
    [
        '{"verdict": "yes", "confidence": 0.8} Wait, looking again: {"verdict": "no", "confidence": 0.6}',
        '```json\n{"verdict": "no"}\n```\nOn reflection:\n```json\n{"verdict": "yes"}\n```',
        "verdict: yes/no",
        "Verdict: yes or no, hard to tell",
    ],
)
def test_ambiguous_verdicts_are_parse_failures_not_the_first_guess(text):
    # before the fix the first object (or the first word after "verdict:") was scored: a self-correcting
    # model's retracted verdict, or a template echo, counted as its answer
    v = parse_verdict(text)
    assert not v.ok and v.verdict is None and v.raw == text


def test_repeated_identical_verdicts_are_fine():
    v = parse_verdict('{"verdict": "no", "confidence": 0.7}\nFinal answer: {"verdict": "no", "confidence": 0.7}')
    assert v.ok and v.verdict == "no" and v.confidence == 0.7


def test_release_sample_still_parses_completely(release_dir):
    import orjson

    rows = [orjson.loads(line) for line in (release_dir / "verify_raw_sample.jsonl").read_bytes().splitlines() if line]
    parsed = [parse_verdict(r["raw"]) for r in rows if r.get("raw")]
    assert len(parsed) == 336 and all(p.ok for p in parsed)


@pytest.mark.parametrize("text", ['{"confidence": 0.9}', '{"clues": ["red brick", "tram"]}',
                                  '{"verdict": "yes", "confidence": 0.9}', "confidence: 0.8"])
def test_geohint_answer_without_any_place_is_a_parse_failure(text):
    # before the fix these were ok=True answers with nothing to geocode: counted as parsed, never as failures
    a = parse_answer(text)
    assert not a.ok and a.raw == text and a.error


def test_geohint_place_given_as_an_object_or_list_is_no_place_never_its_repr():
    # session 12: a place field must be a JSON string; an object or a list (several guesses) is absent, where it
    # used to read as the object's "name" or the list's items joined (tests/test_parse_nonstring_places.py)
    a = parse_answer('{"city": {"name": "Paris", "country": "FR"}, "area": ["Le Marais", {"x": 1}], "building": {"id": 3}}')
    assert not a.ok and (a.city, a.area, a.building) == (None, None, None) and a.error
    a = parse_answer('{"city": {"name": "Paris"}, "area": "Le Marais"}')
    assert a.ok and a.city is None and a.area == "Le Marais"
