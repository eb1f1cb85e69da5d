"""Adversarial review of session 16's verdict sentences (``geoverify.parse``, rule ``verdict_sentence``).

A verdict that offers both words as a question ("Yes, or no?", "No, or yes?") states both; it was read as the
leading word, a confident verdict, because the opposite word was counted only when it stood alone before the
end of the text or one of ``.!,;:)``, and a question mark was none of them. Since session 16 this also reached
JSON verdict values ({"verdict": "Yes, or no?"}), which were a failure before; the same sentence as bare text was
already read. "Yes, or no, hard to tell" (a comma after the opposite word) was a failure already. A question mark
after the opposite word now counts as that word standing alone, in both places; the leading word still needs
one of the old delimiters ("Yes? Not sure" stays a failure).
"""

from __future__ import annotations

import json

import pytest

from geoagent.geoverify.parse import parse_verdict


@pytest.mark.parametrize("value", ["Yes, or no?", "No, or yes?", "Yes... or no?", "Yes, or maybe no?",
                                   "Yes, not sure: maybe no?"])
def test_a_question_offering_both_words_is_no_verdict(value):
    for text in (json.dumps({"verdict": value, "confidence": 0.7}), value):
        res = parse_verdict(text)
        assert not res.ok and res.verdict is None, (text, res.verdict, res.rules)
        assert res.raw == text


@pytest.mark.parametrize("value, word", [("Yes, the photo matches", "yes"), ("No, is this the place? No.", "no"),
                                         ("Yes. Is it the same facade? Yes!", "yes"), ("No, not sure", "no")])
def test_questions_with_the_same_word_are_still_read(value, word):
    for text in (json.dumps({"verdict": value, "confidence": 0.7}), value):
        res = parse_verdict(text)
        assert res.ok and res.verdict == word, (text, res.reason)
