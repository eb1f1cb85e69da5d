"""A labelled verdict that opens a phrase is no verdict (adversarial review 25, item 2).

``Verdict: No way to tell from this photo.`` parsed as the verdict "no" (rule ``regex_fallback``): the labelled
``verdict: yes|no`` regex asked only for a word boundary after the word, so an abstention scored as a rejection
(every decoy ``correct``, parse failures 0). The bare-text rule and a JSON verdict value already refused such
phrases ("No idea", "No doubt"); the labelled form now refuses a word that opens a phrase too, while a label or
punctuation after the verdict word still reads."""

from __future__ import annotations

import pytest

from geoagent.geoverify.parse import parse_verdict


@pytest.mark.parametrize("text", [
    "Verdict: No way to tell from this photo.",
    "Verdict: no idea",
    "**Verdict:** No clue, the image is too dark",
    "Verdict: noted",
    "Verdict: yes and no",
    "Verdict: No information to decide",
])
def test_a_labelled_word_opening_a_phrase_is_no_verdict(text):
    got = parse_verdict(text)
    assert not got.ok and got.verdict is None, (text, got)
    assert got.raw == text  # the raw text is kept for the record


@pytest.mark.parametrize("text, verdict", [
    ("Verdict: yes", "yes"),
    ("Verdict: No.", "no"),
    ("**Verdict:** No\nConfidence: 0.7", "no"),
    ("Verdict: yes confidence: 0.8", "yes"),
    ("Verdict: No Confidence: 0.3", "no"),
    ("Verdict: Yes Evidence: a street sign", "yes"),
    ("verdict: yes, confidence 0.9", "yes"),
    ("Verdict: yes (0.9)", "yes"),
    ("Verdict: No - the skyline differs", "no"),
    ('verdict: "no"', "no"),
    # rev25: any other word after the verdict still reads (a list of allowed followers refused these)
    ("Verdict: No because the skyline differs", "no"),
    ("Verdict: Yes it matches the street view", "yes"),
    ("Verdict: Yes Reasoning: the tram line", "yes"),
    ("Verdict: yes Conf: 0.8", "yes"),
    ("Verdict: yes\u00a0it matches", "yes"),
    ("verdict: yes \u662f", "yes"),
])
def test_a_labelled_verdict_followed_by_a_label_or_punctuation_still_reads(text, verdict):
    got = parse_verdict(text)
    assert got.ok and got.verdict == verdict, (text, got)


def test_a_json_object_with_a_phrase_value_is_no_verdict_either():
    got = parse_verdict('{"verdict": "No way to tell", "confidence": 0.2}')
    assert not got.ok and got.verdict is None, got


@pytest.mark.parametrize("text", [
    '{"verdict": "yes", "confidence": 0.8}\nOn reflection, verdict: no because the skyline differs.',
    "Verdict: yes\nLater: actually verdict: no it is not",
])
def test_a_later_labelled_verdict_with_words_after_it_is_still_a_conflict(text):
    """rev25 (1): the first version of the phrase rule hid "verdict: no because ..." from the conflict check."""
    got = parse_verdict(text)
    assert not got.ok and "conflicting verdicts" in (got.reason or ""), got
