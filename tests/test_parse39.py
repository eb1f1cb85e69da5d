"""Answer parsers (session 39, geohint39 #2).

Before: one place in two spellings was "conflicting answers" (a GeoHint miss): a fenced answer naming "Marais" then a
summary naming "Le Marais", or "Paris" then "paris, France"; and a ``<think>`` draft naming Lyon before the final
Paris answer, as Qwen3-style models behind an OpenAI-compatible server write it, made the answer conflicting too
(GeoVerify read a draft's "No" the same way). Now the answer is read outside the reasoning spans (raw kept as it
came) and spellings of one place agree.
"""

from __future__ import annotations

import pytest

from geoagent.geohint.parse import ANSWER_PARSER_VERSION, parse_answer, same_place_text
from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, parse_verdict
from geoagent.llmjson import without_reasoning


@pytest.mark.parametrize("a, b, same", [
    ("marais", "le marais", True), ("paris", "paris, france", True), ("são paulo", "sao paulo", True),
    ("shibuya crossing", "Shibuya Crossing", True), ("paris, france", "paris, texas", False),
    ("paris", "lyon", False), ("paris, texas", "texas", False), ("st mary's", "saint marys", True),
    ("marais", "marais, paris", True), ("", "x", False),
])
def test_same_place_text(a, b, same):
    assert same_place_text(a, b) is same and same_place_text(b, a) is same


@pytest.mark.parametrize("text, city, area", [
    ('```json\n{"city": "Paris", "area": "Marais", "building": "unknown"}\n```\n'
     'Summary: {"city": "Paris", "area": "Le Marais"}', "Paris", "Marais"),
    ('{"city": "Paris", "area": "Marais"} and again {"city": "paris, France", "area": "Marais"}', "Paris", "Marais"),
    ('<think>Maybe {"city": "Lyon", "area": "Presqu\'île"}? No.</think>\n{"city": "Paris", "area": "Marais"}',
     "Paris", "Marais"),
    ('The tower style suggests Lyon {"city": "Lyon"} ... </think>\n{"city": "Paris", "area": "Marais"}', "Paris", "Marais"),
    ('<THINKING>{"city": "Lyon"}</THINKING> {"city": "Paris", "area": "Marais"}', "Paris", "Marais"),
])
def test_spellings_of_one_place_and_reasoning_drafts_are_no_conflict(text, city, area):
    a = parse_answer(text)
    assert (a.ok, a.city, a.area) == (True, city, area), a
    assert a.raw == text  # the text as it came is kept


@pytest.mark.parametrize("text", [
    '{"city": "Paris", "evidence": "a </think> appears"}',
    'I will not use <thinking> here. {"city": "Paris"}',
    '{"city": "Paris", "evidence": "no <think> tags used"}',
])
def test_tags_mentioned_in_prose_or_json_strings_are_text(text):
    """review39b #1: a tag inside a JSON string or in prose cut the answer off (no answer, or a truncated one)."""
    a = parse_answer(text)
    assert (a.ok, a.city, a.truncated) == (True, "Paris", False), a
    assert without_reasoning(text) is text


def test_reasoning_is_removed_in_linear_time():
    """review39b #2: 60,000 unclosed openers took 116 s (a regex rescanning from each)."""
    import time

    t0 = time.perf_counter()
    for text in ("<think>" * 60000, "<think>x" * 30000 + '{"city": "Paris"}', "</think>" * 60000, "a<think>" * 60000):
        without_reasoning(text)
    assert time.perf_counter() - t0 < 5.0


@pytest.mark.parametrize("text, why", [
    ('{"city": "Paris, France"} then {"city": "Paris, Texas"}', "conflicting answers"),
    ('{"city": "Paris"} or rather {"city": "Lyon"}', "conflicting answers"),
    # a reasoning tag after the answer is text: the draft it opens is read, and conflicts
    ('{"city": "Paris", "area": "Marais"}\n<think>or was it {"city": "Lyon"}', "conflicting answers"),
    # one value agreeing with each of two that disagree hides nothing (review39b #3)
    ('{"city": "Springfield"} then {"city": "Springfield, Illinois"} or {"city": "Springfield, Missouri"}',
     "conflicting answers"),
    ('{"city": "Paris", "City": "Lyon"}', "conflicting answers"),
    ('<think>{"city": "Lyon", "area": "x"} and on and on', "no answer after the model's reasoning"),
])
def test_real_conflicts_and_reasoning_only_answers_are_still_no_answer(text, why):
    a = parse_answer(text)
    assert not a.ok and why in (a.error or ""), a
    assert a.raw == text


def test_geoverify_reads_the_verdict_after_the_reasoning():
    text = '<think>The sign says no... verdict: no</think>\n{"verdict": "yes", "confidence": 0.8}'
    v = parse_verdict(text)
    assert (v.ok, v.verdict, v.confidence, v.raw) == (True, "yes", 0.8, text)
    v = parse_verdict("I think the answer is no.</think>\nYes")
    assert (v.ok, v.verdict) == (True, "yes")
    v = parse_verdict("<think>No, wait")
    assert not v.ok and "reasoning" in v.reason and v.raw == "<think>No, wait"


def test_text_without_tags_is_left_alone_and_versions_name_the_change():
    for t in ("{\"city\": \"Paris\"}", "a < b and c > d", ""):
        assert without_reasoning(t) is t or without_reasoning(t) == t
    assert without_reasoning("<think>y</think>z") == "z"
    # a closed block after a short preamble is cut since session 40 (walk39 #4a: tests/test_parse40.py); after JSON
    # it is text
    assert without_reasoning("x<think>y</think>z") == "xz"
    text = '{"a": 1} x<think>y</think>z'
    assert without_reasoning(text) is text
    v = parse_verdict('{"verdict": "yes", "evidence": ["a <think> tag"]}')
    assert (v.ok, v.verdict) == (True, "yes") and "truncated" not in v.rules
    assert ANSWER_PARSER_VERSION >= 4 and VERDICT_PARSER_VERSION >= 9


def test_the_echo_rule_note_points_to_the_papers_rule_when_another_is_used():
    """newuser39 #2: the judged release re-scored with the default rule gave 28.0 % echo, the paper's tables
    39.6 %, and the report never said which rule the paper's figures come from."""
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.report.geohint import echo_rule_note

    note = echo_rule_note(GeoHintAggregator(echo_rule="name"))
    assert "Tables 1, 2 and 4" in note and 'echo_rule = "release_first_word"' in note, note
    assert "--echo-rule release_first_word" in note
    assert "The paper's echo figures" not in echo_rule_note(GeoHintAggregator(echo_rule="release_first_word"))


def test_a_draft_object_before_the_templates_closer_is_reasoning_whatever_follows():
    """walk39 #4: 'Draft {"verdict": "yes", ...} </think> No.' was read as a confident yes (a false acceptance); the
    GeoHint equivalent named the draft's city."""
    v = parse_verdict('Draft {"verdict": "yes", "confidence": 0.9}\n</think>\nNo.')
    assert (v.ok, v.verdict) == (True, "no")
    a = parse_answer('Maybe {"city": "Lyon"}\n</think>\nThe photo is in Paris, I cannot say more.')
    assert a.city != "Lyon"
    # a closer inside the answer's own object (a string mentioning it) is still text
    assert parse_answer('{"city": "Paris", "evidence": "a </think> appears"}').city == "Paris"


@pytest.mark.parametrize("text, verdict", [
    ('Draft {"verdict": "yes", "confidence": 0.9 ... actually the sign is wrong\n</think>\nNo.', "no"),
    ('Let me draft: {"verdict": "yes", hmm no wait.\n</think>\n{"verdict": "no", "confidence": 0.7}', "no"),
])
def test_an_unfinished_draft_before_the_templates_closer_is_reasoning(text, verdict):
    """review39c #1: a draft object never closed left a brace open, so its closer of the reasoning was read as text
    and the draft's "yes" won (or clashed with the final "no")."""
    v = parse_verdict(text)
    assert (v.ok, v.verdict) == (True, verdict), v


def test_a_closer_inside_a_single_quoted_string_of_the_answer_is_text():
    assert parse_answer("{'city': 'Paris', 'evidence': 'a } and </think> here'}").city == "Paris"
