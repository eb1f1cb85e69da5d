"""Defensive GeoHint answer parser on released raw answers and malformed variants (issue 4 point 3)."""

from __future__ import annotations

import json
import re

import pytest

from geoagent.geohint.parse import EVIDENCE_CATEGORIES, parse_answer


def _records(release_dir):
    with (release_dir / "forced_chain_raw_sample.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _independent_json(raw: str) -> dict:
    """The answer object, read independently: the last ```json fence, else the whole text."""
    fences = re.findall(r"```json\s*(.*?)```", raw, re.S)
    return json.loads(fences[-1] if fences else raw)


def test_release_forced_chain_records_parse_like_json(release_dir):
    recs = _records(release_dir)
    assert len(recs) >= 5
    for rec in recs:
        ans = parse_answer(rec["raw"])
        ref = _independent_json(rec["raw"])
        assert ans.ok and ans.method == "json", rec["context"]
        assert ans.raw == rec["raw"]
        assert ans.city == ref["city"] and ans.area == ref["area"] and ans.building == ref["building"]
        assert ans.confidence_area == pytest.approx(ref["confidence_area"])
        assert ans.confidence_building == pytest.approx(ref["confidence_building"])
        assert set(ans.evidence) == set(EVIDENCE_CATEGORIES)
        # "not visible" flags agree with a direct reading of the evidence object
        direct = {k.lower(): str(v).lower().startswith("not visible") for k, v in ref["evidence"].items()}
        assert sum(ans.evidence_not_visible().values()) == sum(direct.values())


def test_release_records_survive_truncation(release_dir):
    for rec in _records(release_dir):
        raw = rec["raw"]
        ref = _independent_json(raw)
        start = raw.rfind("```json") if "```json" in raw else 0
        m = re.compile(r'"area"\s*:\s*"(?:[^"\\]|\\.)*"\s*,').search(raw, start)
        after_area = m.end() - 1
        for cut in (after_area + 1, (after_area + len(raw)) // 2, len(raw) - 5):
            ans = parse_answer(raw[:cut])
            assert ans.ok, cut
            assert ans.city == ref["city"] and ans.area == ref["area"]
            assert ans.raw == raw[:cut]


@pytest.mark.parametrize(
    "text, city, area, building",
    [
        ("```json\n{\"city\": \"Paris\", \"area\": \"Le Marais\", \"building\": \"Musée Picasso\"}\n```", "Paris", "Le Marais", "Musée Picasso"),
        ("Here you go:\n{'city': 'Tokyo', 'area': 'Shibuya', 'building': 'Tokyu Hands',}\nHope it helps", "Tokyo", "Shibuya", "Tokyu Hands"),
        ('{"city": "Rome", // my guess\n "area": "Trastevere", "building": "Santa Maria", }', "Rome", "Trastevere", "Santa Maria"),
        ('{"city": "New York", "area": "SoHo", "building": "Apple Store", "clues": ["cast iron", "yellow cab"', "New York", "SoHo", "Apple Store"),
        ('{"country": "Japan", "city": "Tokyo", "area": "unknown", "place": "unknown", "confidence": 0.3}', "Tokyo", "unknown", "unknown"),
        ('{"city": "Rome", "area": "Monti", "building": "Don\'t know", "confidence_area": 70%}', "Rome", "Monti", "Don't know"),
    ],
)
def test_malformed_variants(text, city, area, building):
    ans = parse_answer(text)
    assert ans.ok
    assert (ans.city, ans.area, ans.building) == (city, area, building)
    assert ans.raw == text


def test_confidence_and_clue_coercion():
    ans = parse_answer('{"city": "A", "area": "B", "building": "C", "confidence_area": "85%", "confidence_building": 0.4, "clues": "one"}')
    assert ans.confidence_area == pytest.approx(0.85) and ans.confidence_building == pytest.approx(0.4)
    assert ans.clues == ["one"]
    v1 = parse_answer('{"city": "A", "area": "B", "place": "C", "confidence": 0.6}')
    assert v1.building == "C" and v1.confidence_area == v1.confidence_building == pytest.approx(0.6)


@pytest.mark.parametrize("text", ["", "   ", "I cannot tell where this is.", "{not json at all}", None, "[1, 2, 3]"])
def test_failures_are_recorded_not_raised(text):
    ans = parse_answer(text)
    assert not ans.ok
    assert ans.error
    assert ans.raw == (text or "")


def test_never_evaluates_code():
    ans = parse_answer('{"city": __import__("os").getcwd(), "area": "x"}')
    assert ans.city is None or "__import__" in ans.city
