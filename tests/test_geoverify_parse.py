"""GeoVerify answer parser: every rule exercised with a real record of verify_raw_sample.jsonl."""

from __future__ import annotations

import json
import re

import pytest

from geoagent.geoverify import parse as P
from geoagent.geoverify.parse import parse_verdict


def _records(release_dir):
    with (release_dir / "verify_raw_sample.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _truth(raw: str) -> dict:
    """Independent reading of a clean record: strip fences, json.loads."""
    body = raw.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1].rsplit("```", 1)[0]
    return json.loads(body)


@pytest.fixture(scope="module")
def recs(release_dir):
    return _records(release_dir)


def _first(recs, pred):
    return next(r for r in recs if pred(r))


def test_whole_sample_parses_and_agrees_with_json(recs):
    failures = []
    for r in recs:
        res = parse_verdict(r["raw"])
        if not res.ok:
            failures.append((r["trial_id"], r["model"], res.reason))
            continue
        t = _truth(r["raw"])
        assert res.verdict == t["verdict"].strip().lower()
        assert res.confidence == pytest.approx(float(t["confidence"]))
        assert list(res.evidence) == t["evidence"]
        assert res.raw == r["raw"]
    rate = 1 - len(failures) / len(recs)
    assert rate >= 0.995, failures  # each failure listed with its reason


def test_code_fence(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("```json"))
    res = parse_verdict(r["raw"])
    assert res.ok and P.RULE_CODE_FENCE in res.rules and res.verdict == _truth(r["raw"])["verdict"]


def test_plain_json(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("{"))
    res = parse_verdict(r["raw"])
    assert res.ok and res.rules == () and res.verdict == _truth(r["raw"])["verdict"]


def test_prose_before_and_after(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("```json"))
    text = "Here is my assessment of the photo.\n" + r["raw"] + "\nI hope this helps."
    res = parse_verdict(text)
    t = _truth(r["raw"])
    assert res.ok and P.RULE_PROSE in res.rules and res.verdict == t["verdict"]
    assert res.confidence == pytest.approx(t["confidence"])
    r2 = _first(recs, lambda r: r["raw"].lstrip().startswith("{"))
    res2 = parse_verdict("Answer: " + r2["raw"] + " -- end")
    assert res2.ok and P.RULE_PROSE in res2.rules and res2.verdict == _truth(r2["raw"])["verdict"]


def test_single_quotes(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("{") and "'" not in r["raw"])
    t = _truth(r["raw"])
    text = repr(t)  # Python dict syntax: single-quoted keys and strings
    assert "'verdict'" in text
    res = parse_verdict(text)
    assert res.ok and P.RULE_SINGLE_QUOTES in res.rules
    assert (res.verdict, res.confidence, list(res.evidence)) == (t["verdict"], t["confidence"], t["evidence"])


def test_trailing_commas(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("{"))
    t = _truth(r["raw"])
    text = re.sub(r"\s*\]", ",\n  ]", r["raw"], count=1)
    text = text.rstrip()[:-1].rstrip() + ",\n}"
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    res = parse_verdict(text)
    assert res.ok and P.RULE_TRAILING_COMMA in res.rules
    assert (res.verdict, list(res.evidence)) == (t["verdict"], t["evidence"])


@pytest.mark.parametrize("spelling", ["Yes", "YES", "yes.", '"no."', "No!", " no "])
def test_verdict_case_and_punctuation(recs, spelling):
    word = spelling.strip(' ."!').lower()
    r = _first(recs, lambda r: _truth(r["raw"])["verdict"] == word)
    text = re.sub(r'"verdict":\s*"(yes|no)"', lambda m: '"verdict": ' + json.dumps(spelling), r["raw"], count=1)
    assert text != r["raw"]
    res = parse_verdict(text)
    assert res.ok and res.verdict == word and P.RULE_VERDICT_NORMALIZED in res.rules


@pytest.mark.parametrize("form, percent", [('"{c}"', False), ('"{p}%"', True), ("{p}", True), ('"{p} %"', True)])
def test_confidence_string_and_percent(recs, form, percent):
    r = _first(recs, lambda r: 0 < _truth(r["raw"])["confidence"] < 1)
    c = _truth(r["raw"])["confidence"]
    rep = form.format(c=c, p=round(c * 100, 6))
    text = re.sub(r'"confidence":\s*[0-9.]+', '"confidence": ' + rep, r["raw"], count=1)
    res = parse_verdict(text)
    assert res.ok and res.confidence == pytest.approx(c)
    assert (P.RULE_CONF_PERCENT in res.rules) == percent


def test_truncated_inside_evidence_keeps_verdict(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("```json") and len(_truth(r["raw"])["evidence"]) >= 2)
    t = _truth(r["raw"])
    cut = r["raw"].index(t["evidence"][1][:10]) + 5  # cut in the middle of the second evidence item
    res = parse_verdict(r["raw"][:cut])
    assert res.ok and P.RULE_TRUNCATED in res.rules
    assert res.verdict == t["verdict"] and res.confidence == pytest.approx(t["confidence"])
    assert list(res.evidence) == t["evidence"][:1]


def test_truncated_before_verdict_is_failure(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("{"))
    cut = r["raw"].index('"verdict"') + len('"verdict": "y') - 1
    res = parse_verdict(r["raw"][:cut])
    assert not res.ok and res.verdict is None and "truncated" in res.reason
    assert res.raw == r["raw"][:cut]


def test_unparseable_and_non_yes_no(recs):
    r = recs[0]
    res = parse_verdict("I cannot tell from this image where it was taken.")
    assert not res.ok and res.reason == "no JSON object found"
    bad = re.sub(r'"verdict":\s*"(yes|no)"', '"verdict": "uncertain"', r["raw"], count=1)
    res = parse_verdict(bad)
    assert not res.ok and "uncertain" in res.reason and res.raw == bad
    for empty in ("", "   ", None):
        assert parse_verdict(empty).reason == "empty answer"


def test_confidence_out_of_range_keeps_verdict(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("{"))
    text = re.sub(r'"confidence":\s*[0-9.]+', '"confidence": -3', r["raw"], count=1)
    res = parse_verdict(text)
    assert res.ok and res.confidence is None and P.RULE_CONF_INVALID in res.rules


def test_regex_fallback_on_broken_json(recs):
    r = _first(recs, lambda r: r["raw"].lstrip().startswith("{"))
    t = _truth(r["raw"])
    broken = r["raw"].replace('"evidence": [', '"evidence": [[[}', 1)
    res = parse_verdict(broken)
    assert res.ok and res.verdict == t["verdict"] and res.confidence == pytest.approx(t["confidence"])


def test_never_raises_on_garbage():
    for s in ["{", "{{{{", '{"verdict": "\\u12', "```", "```json\n", "{'a': [1, 2", "\x00\xff{" * 50, "}{", "[]"]:
        res = parse_verdict(s)
        assert isinstance(res, P.ParsedVerdict)
