"""Adversarial review (session 3) of the GeoVerify answer parser's last-resort fallback.

A bare leading ``Yes``/``No`` is read as the verdict only when the word stands alone (end of text or a
clause delimiter after it) and the text does not also state the opposite word the same way; otherwise the
answer is a parse failure (raw kept), never a guessed verdict. Expected values are read by hand.
"""

from __future__ import annotations

import pytest

from geoagent.geohint.parse import parse_answer
from geoagent.geoverify.parse import RULE_REGEX_FALLBACK, parse_verdict


@pytest.mark.parametrize(
    "text",
    [
        "No doubt about it, this is Lisbon: yes.",  # 'No' opens a phrase, the verdict is 'yes'
        "No idea, but probably yes",
        "no-entry sign visible so yes",  # 'no' is part of a compound word
        "Yes and no",  # both
        "No, but on reflection: yes.",  # both, each standing alone
        "Yes I think it is not there. No.",
    ],
)
def test_bare_leading_word_that_is_not_a_standalone_verdict_is_a_failure(text):
    res = parse_verdict(text)
    assert not res.ok and res.verdict is None
    assert res.raw == text


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("Yes", "yes"),
        ("No.", "no"),
        ("YES!!!", "yes"),
        ("Yes, the tram livery matches Lisbon.", "yes"),
        ("No. There is no sign of the claimed area.", "no"),  # the same word again is no conflict
        ("**No**: the script is Cyrillic.", "no"),
        ("Yes.\nNothing contradicts it.", "yes"),
    ],
)
def test_standalone_bare_verdict_still_read(text, verdict):
    res = parse_verdict(text)
    assert res.ok and res.verdict == verdict and RULE_REGEX_FALLBACK in res.rules


@pytest.mark.parametrize(
    "text",
    [
        "Initial verdict: yes. On reflection the verdict: no.",  # two labelled verdicts, no JSON
        '{"verdict": "yes", "confidence": 0.7}\nWait, correction. Final verdict: no',  # JSON, then a labelled reversal
    ],
)
def test_labelled_opposite_verdict_elsewhere_is_a_conflict_not_the_first_guess(text):
    res = parse_verdict(text)
    assert not res.ok and res.verdict is None and "conflicting" in res.reason and res.raw == text


@pytest.mark.parametrize(
    "text, verdict",
    [
        ('{"verdict": "no", "confidence": 0.8}\nSo my verdict: no.', "no"),  # the same verdict repeated
        ("verdict: no\nconfidence: 0.9\nverdict: no", "no"),
        ('```json\n{"verdict": "yes", "confidence": 0.6, "evidence": ["tram 28"]}\n```', "yes"),
    ],
)
def test_repeated_same_verdict_is_no_conflict(text, verdict):
    res = parse_verdict(text)
    assert res.ok and res.verdict == verdict


# -- GeoHint: several answer objects that name different places --------------------------------------------

@pytest.mark.parametrize(
    "text",
    [
        '{"city": "Paris", "area": "Le Marais", "building": "Musee Picasso"}\n'
        'Actually, on reflection: {"city": "Lyon", "area": "Vieux Lyon", "building": "Cathedrale Saint-Jean"}',
        '```json\n{"city": "Porto", "area": "Ribeira", "building": "unknown"}\n```\nor maybe\n'
        '```json\n{"city": "Lisbon", "area": "Alfama", "building": "unknown"}\n```',
        # a schema template echoed before the answer is not the answer
        'Format: {"city": "...", "area": "...", "building": "..."}\n{"city": "Rome", "area": "Monti", "building": "unknown"}',
    ],
)
def test_geohint_objects_naming_different_places_are_a_conflict_failure(text):
    # before: the first object with the most schema keys won, whichever the model meant
    ans = parse_answer(text)
    assert not ans.ok and "conflicting" in ans.error and ans.raw == text


@pytest.mark.parametrize(
    "text, city, area",
    [
        # the same answer in a fence and again in prose; a partial object agreeing with the full one
        ('```json\n{"city": "Porto", "area": "Ribeira", "building": "unknown"}\n```\n'
         'So: {"city": "porto", "area": "Ribeira"}', "Porto", "Ribeira"),
        ('{"city": "Rome", "area": "Monti", "building": "unknown", "evidence": {"script": "Latin {serif}"}}', "Rome", "Monti"),
    ],
)
def test_geohint_repeated_or_agreeing_objects_still_parse(text, city, area):
    ans = parse_answer(text)
    assert ans.ok and (ans.city, ans.area) == (city, area)


# -- degenerate (looping) answers: every pattern runs in time linear in the text ---------------------------
# Models stuck in a loop emit long runs of one character or of whitespace. Before the fix the fallback
# patterns were quadratic in such runs (seconds at 20,000 characters, minutes at 100,000: a stage worker
# stalled on one answer). The timeout is a hang guard with a wide margin, not a benchmark: the linear
# patterns take milliseconds here.
RUN = 100_000


@pytest.mark.timeout(60)
def test_geoverify_whitespace_run_after_a_label_reads_linearly():
    res = parse_verdict("verdict:" + " " * RUN + "yes\nconfidence:" + "\n" * RUN + "0.8")
    assert res.ok and res.verdict == "yes" and res.confidence == pytest.approx(0.8)
    res = parse_verdict("verdict:" + " " * RUN + "x")
    assert not res.ok and res.raw.endswith("x")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", ["x" * RUN, "a" * RUN + ": x", "city" * (RUN // 4)])
def test_geohint_letter_run_reads_linearly(text):
    ans = parse_answer(text)
    assert not ans.ok and ans.raw == text


def test_geohint_pattern_fallback_still_reads_pairs():
    ans = parse_answer('city: "Porto", area: \'Ribeira\', confidence_area: 80, building = none')
    assert ans.ok and ans.method == "regex" and (ans.city, ans.area) == ("Porto", "Ribeira")
    assert ans.confidence_area == pytest.approx(0.8)
