"""GeoVerify parser (session 16): a JSON verdict value written as a sentence, or as a JSON boolean.

Before the fix ``{"verdict": "Yes, the photo matches", ...}`` was a parse failure ("verdict is not yes/no"),
so a clear answer was lost from H and F; the same sentence as bare text was already read. A verdict value
whose first word is a standalone yes/no (end of value, line break or ``.!,;:)`` after it) is now read as that
verdict by the same rule as bare text; a value that also states the opposite word standing alone, or whose
leading word opens a phrase ("No idea", "yes/no", "Yes or no"), stays a failure. Expected values by hand;
the answers are real records of ``verify_raw_sample.jsonl`` with the verdict value replaced.
"""

from __future__ import annotations

import json
import re

import pytest

from geoagent.geoverify import parse as P
from geoagent.geoverify.parse import parse_verdict

_VERDICT_VALUE = re.compile(r'"verdict":\s*"(yes|no)"')


@pytest.fixture(scope="module")
def recs(release_dir):
    with (release_dir / "verify_raw_sample.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _with_verdict(recs, word: str, value_json: str) -> tuple[str, dict]:
    """A real answer whose verdict is ``word``, with its verdict value replaced by ``value_json`` (JSON text)."""
    r = next(r for r in recs if (m := _VERDICT_VALUE.search(r["raw"])) and m.group(1) == word)
    text = _VERDICT_VALUE.sub(lambda m: '"verdict": ' + value_json, r["raw"], count=1)
    assert text != r["raw"]
    return text, r


def _truth(raw: str) -> dict:
    body = raw.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1].rsplit("```", 1)[0]
    return json.loads(body)


@pytest.mark.parametrize(
    "word, sentence",
    [
        ("yes", "Yes, the photo matches"),
        ("yes", "Yes. The tram livery matches the claimed district."),
        ("yes", "YES: same facade"),
        ("no", "No, this is not the place"),
        ("no", "No. There is no sign of the claimed area."),  # the same word again is no conflict
        ("no", "**No**: the script is Cyrillic"),
    ],
)
def test_verdict_sentence_with_leading_standalone_word_is_read(recs, word, sentence):
    text, r = _with_verdict(recs, word, json.dumps(sentence))
    t = _truth(r["raw"])
    res = parse_verdict(text)
    assert res.ok, res.reason
    assert res.verdict == word and P.RULE_VERDICT_SENTENCE in res.rules
    assert res.confidence == pytest.approx(float(t["confidence"])) and list(res.evidence) == t["evidence"]
    assert res.raw == text


@pytest.mark.parametrize(
    "word, sentence",
    [
        ("yes", "Yes and no"),  # both
        ("no", "No, but on reflection: yes."),  # both, each standing alone
        ("yes", "Yes, or no, hard to tell"),
        ("yes", "yes/no"),  # a template echo
        ("yes", "Yes or no"),
        ("no", "No idea, probably yes"),  # 'No' opens a phrase
        ("no", "no-entry sign, so yes"),
        ("yes", "Probably yes"),  # the first word is no verdict word
        ("no", "Not the place"),
    ],
)
def test_verdict_sentence_that_conflicts_or_hedges_stays_unparsed(recs, word, sentence):
    text, _ = _with_verdict(recs, word, json.dumps(sentence))
    res = parse_verdict(text)
    assert not res.ok and res.verdict is None and res.raw == text and "verdict" in res.reason


def test_verdict_keys_stating_opposite_sentences_conflict():
    text = '{"verdict": "Yes, it matches", "answer": "No, not the place", "confidence": 0.6}'
    res = parse_verdict(text)
    assert not res.ok and "conflicting" in res.reason and res.raw == text


@pytest.mark.parametrize("value, word", [("true", "yes"), ("false", "no")])
def test_json_boolean_verdict_is_read(recs, value, word):
    text, r = _with_verdict(recs, word, value)
    res = parse_verdict(text)
    assert res.ok and res.verdict == word and P.RULE_VERDICT_BOOLEAN in res.rules
    assert res.confidence == pytest.approx(float(_truth(r["raw"])["confidence"]))


def test_release_sample_count_unchanged(recs):
    parsed = [parse_verdict(r["raw"]) for r in recs]
    assert len(parsed) == 336 and sum(p.ok for p in parsed) == 336
    assert not any(P.RULE_VERDICT_SENTENCE in p.rules for p in parsed)  # the clean release answers need no new rule
