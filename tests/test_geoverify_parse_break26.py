"""Verdicts the parser took from ambiguous answers (break26 #1-#3), now parse failures or the verdict stated.

#1: a quoted or bold ``verdict: "yes" or "no"`` (the prompt's own schema line, repeated by the model) read as a
labelled "yes": every "yes" answer after it parsed and every "no" failed as conflicting, so H and F both rose.
#2: two nested objects with opposite verdicts gave the first. #3: a standalone "No." opening the answer was ignored
when a JSON or labelled "yes" followed. Parser version 3 (:data:`geoagent.geoverify.parse.VERDICT_PARSER_VERSION`).
"""

from __future__ import annotations

import pytest

from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, parse_verdict

CONFLICT = "conflicting verdicts in one answer (yes and no)"
SCHEMA = '{"verdict": "yes" or "no", "confidence": a number from 0.0 to 1.0, "evidence": ["..."]}'


@pytest.mark.parametrize("text", [
    'Verdict: "yes" or "no"? Looking at the photo, the answer is no.',
    "My verdict: **Yes** or **No** - honestly No.\nConfidence: 0.7",
    "Verdict: 'yes'/'no' is hard to say here.",
])
def test_the_question_repeated_is_no_verdict(text):
    got = parse_verdict(text)
    assert not got.ok and got.verdict is None, got


@pytest.mark.parametrize("word", ["yes", "no"])
def test_a_repeated_schema_line_does_not_bias_the_verdict(word):
    """Both verdicts parse alike after the prompt's schema line (before: yes parsed, no failed)."""
    got = parse_verdict(f'You asked for {SCHEMA}\n{{"verdict": "{word}", "confidence": 0.7}}')
    assert (got.ok, got.verdict, got.confidence) == (True, word, 0.7)


@pytest.mark.parametrize("text", [
    '{"analysis": {"verdict": "no"}, "final": {"verdict": "yes"}}',
    '{"claims": [{"verdict": "yes"}, {"verdict": "no"}]}',
    '{"result": {"steps": [{"verdict": "yes"}]}, "final": {"verdict": "no"}}',
    'No.\n{"verdict": "yes", "confidence": 0.8}',
    'Yes.\n```json\n{"verdict": "no"}\n```',
    "No\n\nVerdict: yes",
])
def test_opposite_verdicts_anywhere_are_a_conflict(text):
    got = parse_verdict(text)
    assert (got.ok, got.reason) == (False, CONFLICT), got


@pytest.mark.parametrize("text,verdict", [
    ('{"analysis": {"verdict": "no"}, "final": {"verdict": "no"}}', "no"),
    ('No.\n{"verdict": "no", "confidence": 0.8}', "no"),
    ("Yes\nVerdict: yes", "yes"),
    ('No doubt about it.\n{"verdict": "yes"}', "yes"),  # "No doubt" opens a phrase, not a verdict
    ('{"verdict": "yes", "evidence": ["No. 5 bus stop sign", "no parking"]}', "yes"),  # evidence is not read
    # rev26: what the first version of these rules refused wrongly
    ('{"verdict": "yes", "confidence": 0.8, "checks": [{"feature": "snow", "answer": "no"}, '
     '{"feature": "mountains", "answer": "yes"}]}', "yes"),  # an answer's sub-checks are not verdicts
    ('{"verdict": "no", "reasoning": [{"step": "Is the landmark visible?", "answer": "Yes"}]}', "no"),
    ('Yes, I can help with that.\n```json\n{"verdict": "no", "confidence": 0.6}\n```', "no"),  # a manner of speaking
    ('Yes! Here is my analysis:\n{"verdict": "no"}', "no"),
    ('No, I cannot be certain. {"verdict": "yes"}', "yes"),
    ("**Verdict:** **No** / **Confidence:** 0.7", "no"),  # "/" before another label is no "yes/no"
    ("Verdict: 'no' / Confidence: 70%", "no"),
    ('Verdict: "Yes"\nOr, more precisely, it matches.', "yes"),  # "or" on the next line is no "yes or no"
])
def test_agreeing_or_non_verdict_words_still_parse(text, verdict):
    got = parse_verdict(text)
    assert (got.ok, got.verdict) == (True, verdict), got


def test_these_rules_came_with_parser_version_3():
    assert VERDICT_PARSER_VERSION >= 3  # 4 since stats31 (tests/test_stats31_audit.py)
