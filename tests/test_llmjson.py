"""The shared lenient JSON reader (geoagent.llmjson) that the GeoVerify, GeoHint and crawl parsers use."""

from __future__ import annotations

import json

import pytest

from geoagent import llmjson as L


def _first(text: str, openers: str = "{", **kw) -> L.Candidate:
    return next(L.iter_candidates(text, openers, **kw))


def test_standard_json_reads_like_json_loads_and_is_strict(release_dir):
    with (release_dir / "forced_chain_raw_sample.jsonl").open(encoding="utf-8") as fh:
        raws = [json.loads(line)["raw"] for line in fh if line.strip()]
    for raw in raws:
        fences = L.fenced_blocks(raw)
        body = fences[-1] if fences else raw.strip()
        cand = _first(body)
        assert cand.ok and cand.strict and not cand.truncated and cand.rules == frozenset()
        assert cand.value == json.loads(body)


@pytest.mark.parametrize(
    "text, rule",
    [
        ("{'a': 'b'}", L.RULE_SINGLE_QUOTES),
        ('{"a": [1, 2,],}', L.RULE_TRAILING_COMMA),
        ('{"a": 1, // note\n "b": 2}', L.RULE_COMMENTS),
        ('{"a": 1, /* note */ "b": 2}', L.RULE_COMMENTS),
        ('{a: 1, "b": 2}', L.RULE_BARE_WORDS),
    ],
)
def test_each_leniency_rule_is_reported_and_the_value_matches(text, rule):
    cand = _first(text)
    assert cand.ok and rule in cand.rules and not cand.strict
    assert cand.value in ({"a": "b"}, {"a": [1, 2]}, {"a": 1, "b": 2})


def test_truncation_drops_or_keeps_the_cut_string():
    text = '{"city": "Paris", "clues": ["one", "tw'
    dropped = _first(text)
    assert dropped.truncated and dropped.value == {"city": "Paris", "clues": ["one"]}
    kept = _first(text, partial_strings=True)
    assert kept.truncated and kept.value == {"city": "Paris", "clues": ["one", "tw"]}
    assert _first('{"a": 1, "b": 2').value == {"a": 1}  # a number cut by the end may be incomplete


def test_percent_only_when_asked():
    assert _first('{"c": 80 %}', percent=True).value == {"c": L.Percent(80.0)}
    assert not _first('{"c": 80%}').ok


def test_prose_and_nested_search():
    text = 'Answer: {"x": {"verdict": "yes"}} thanks'
    cands = list(L.iter_candidates(text, "{"))
    assert [c.value for c in cands] == [{"x": {"verdict": "yes"}}, {"verdict": "yes"}]
    assert cands[0].prose_around
    top = list(L.iter_candidates('{"a": {"b": 1}} {"c": 2}', "{", nested=False))
    assert [c.value for c in top] == [{"a": {"b": 1}}, {"c": 2}]


def test_work_is_bounded_and_nothing_raises():
    deep = _first("[" * 10_000 + "]" * 10_000, "[")
    assert not deep.ok and "deeper" in deep.error
    assert len(list(L.iter_candidates("{" * 10_000, "{"))) == L.MAX_STARTS
    long = '{"a": "' + "x" * (L.MAX_CHARS + 10) + '"}'
    assert _first(long).truncated  # only the first MAX_CHARS characters are read
    assert _first('{"q": ' + "9" * 5000 + "}").error.startswith("integer of 5000 digits")
    with pytest.raises(ValueError, match="no '\\{' or '\\['"):
        L.read_at("abc", 0)


def test_extract_json_wants_a_complete_value_of_the_type():
    text = "```json\n[{'idx': 0, 'ok': true,},]\n```"
    assert L.extract_json(text, list) == [{"idx": 0, "ok": True}]
    assert L.extract_json(text, dict) == {"idx": 0, "ok": True}
    assert L.extract_json('{"a": 1, "b": [2', dict) is None
    assert L.extract_json("no json", dict) is None and L.extract_json(None, list) is None
