"""The lenient JSON reader and UTF-16 surrogates in model output (``\\uXXXX`` escapes and literal ones).

A standard escaped astral character (``"\\ud83d\\udccd"``, as ``ensure_ascii`` JSON writers emit emoji) must
read as one character, as ``json.loads`` reads it; a surrogate half without its partner reads as U+FFFD, so
that every parsed string encodes as UTF-8 (queue payloads via orjson, store rows, CSV/Parquet exports).
The reference is the stdlib decoder (``json.loads``), with lone halves replaced by U+FFFD where it keeps
them, and hand-built expected strings.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import orjson
import pytest

from geoagent import llmjson as L
from geoagent.llmjson import extract_json

REPLACEMENT = "\ufffd"
_LONE = re.compile("[\ud800-\udfff]")


def _strings(value: Any) -> list[str]:
    """Every string in a parsed value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _assert_utf8(value: Any) -> None:
    for s in _strings(value):
        s.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    orjson.dumps(value)  # the queue's encoder refuses lone surrogates too


def _json_reference(text: str) -> Any:
    """``json.loads``, with every surrogate half it leaves unpaired replaced by U+FFFD (it combines the
    escaped pairs itself; whatever surrogate is left in its output has no partner)."""

    def fix(v: Any) -> Any:
        if isinstance(v, str):
            return _LONE.sub(REPLACEMENT, v)
        if isinstance(v, dict):
            return {fix(k): fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    return fix(json.loads(text))


def test_escaped_surrogate_pair_reads_like_json_loads():
    """The adversarial review's case: an escaped emoji next to an ordinary escape."""
    text = '{"city": "Lyon \\ud83d\\udccd", "evidence": "caf\\u00e9"}'
    expected = json.loads(text)
    assert expected == {"city": "Lyon \U0001f4cd", "evidence": "caf\u00e9"}  # the stdlib combines the pair
    got = extract_json(text)
    assert got == expected
    got["city"].encode("utf-8")
    _assert_utf8(got)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("\\ud83d\\udccd", "\U0001f4cd"),  # pair
        ("\\uD83D\\uDCCD", "\U0001f4cd"),  # pair, upper-case hex
        ("\\ud800\\udc00", "\U00010000"),  # the lowest astral code point
        ("\\udbff\\udfff", "\U0010ffff"),  # the highest
        ("\\ud800", REPLACEMENT),  # lone high
        ("x\\ud800y", f"x{REPLACEMENT}y"),
        ("\\udc00", REPLACEMENT),  # lone low
        ("a\\udccd", f"a{REPLACEMENT}"),
        ("\\udc00\\ud800", REPLACEMENT * 2),  # low then high: no pair
        ("\\ud83d\\u0041", f"{REPLACEMENT}A"),  # high, then an escape that is not a low half
        ("\\ud83d\\n", f"{REPLACEMENT}\n"),  # high, then another escape
        ("\\ud800\\ud83d\\udccd", f"{REPLACEMENT}\U0001f4cd"),  # lone high, then a pair
        ("\\ud83d\\udccd\\udccd", f"\U0001f4cd{REPLACEMENT}"),  # a pair, then a lone low
        ("\\ud83d\\ud83d\\udccd\\udccd", f"{REPLACEMENT}\U0001f4cd{REPLACEMENT}"),
        # mixed with every other escape
        ("\\n\\t\\r\\b\\f\\/\\\\\\\"\\u00e9\\ud83c\\udf0d\\u4e2d\\u0000!",
         "\n\t\r\b\f/\\\"\u00e9\U0001f30d\u4e2d\u0000!"),
    ],
)
def test_escapes_in_values(body, expected):
    text = '{"city": "%s", "n": 1}' % body
    got = extract_json(text)
    assert got == {"city": expected, "n": 1}
    assert got == _json_reference(text)  # json.loads accepts every one of these texts
    if not _LONE.search(json.loads(text)["city"]):
        assert got == json.loads(text)  # json.loads gives valid text: exactly its result
    _assert_utf8(got)


@pytest.mark.parametrize(
    "text",
    [
        '{"\\ud83d\\udccd pin": "x", "k\\ud800": "y", "\\udc00": {"\\ud83c\\udf0d": ["\\ud800", "\\ud83d\\udccd"]}}',
        '[{"a\\ud83d\\udccd": "\\udc00\\ud800"}, "\\ud83d"]',
        '{"evidence": {"sign\\ud83d\\udea7": "not visible \\u2014 \\ud83d\\ude48", "q": "\\"\\ud83d\\udccd\\""}}',
    ],
)
def test_surrogates_in_keys_and_nested_values(text):
    want = list if text.startswith("[") else dict
    got = extract_json(text, want)
    assert got == _json_reference(text)
    _assert_utf8(got)
    cand = next(L.iter_candidates(text, text[0]))
    assert cand.ok and cand.strict and not cand.truncated  # standard JSON, no leniency needed


def test_lenient_strings_decode_surrogates_too():
    """Single-quoted, curly-quoted and unquoted-key objects (json.loads cannot read them): compared with
    json.loads of the same object written strictly."""
    strict = json.loads('{"city": "Lyon \\ud83d\\udccd", "area": "\\ud800x"}')
    strict = {k: _LONE.sub(REPLACEMENT, v) for k, v in strict.items()}
    for text in (
        "{'city': 'Lyon \\ud83d\\udccd', 'area': '\\ud800x',}",
        "{city: \u201cLyon \\ud83d\\udccd\u201d, area: '\\ud800x'} // the model's note",
        "```json\n{\"city\": \"Lyon \\ud83d\\udccd\", \"area\": \"\\ud800x\"}\n```",
    ):
        got = extract_json(text)
        assert got == strict, text
        _assert_utf8(got)


def test_truncated_string_ending_inside_a_pair():
    text = '{"a": "ok", "b": "Lyon \\ud83d'
    kept = next(L.iter_candidates(text, partial_strings=True))
    assert kept.truncated and kept.value == {"a": "ok", "b": f"Lyon {REPLACEMENT}"}
    _assert_utf8(kept.value)
    dropped = next(L.iter_candidates(text))
    assert dropped.truncated and dropped.value == {"a": "ok"}
    assert extract_json(text) is None  # a cut-off value does not count


def test_literal_surrogate_characters_in_the_text():
    """Text that already holds surrogate code points (e.g. from a decoder that let lone escapes through):
    an adjacent high+low pair is the character it encodes, a lone half is U+FFFD."""
    text = '{"a": "pin \ud83d\udccd", "b": "x\ud800y", "c\udc00": "z"}'
    got = extract_json(text)
    assert got == {"a": "pin \U0001f4cd", "b": f"x{REPLACEMENT}y", f"c{REPLACEMENT}": "z"}
    _assert_utf8(got)


def _random_case(rng: random.Random) -> tuple[str, str]:
    """A random string of ordinary, astral and lone-surrogate code points, and what it should read as:
    itself with each lone half replaced. A lone high half is never directly followed by a lone low half
    (they would be a pair)."""
    pool_valid = ["a", "Z", " ", "\u00e9", "\u4e2d", "\u2014", '"', "\\", "\n", "\u0001", "\U0001f4cd",
                  "\U0001f30d", "\U00010000", "\U0010ffff", "\ufffd"]
    src, want = [], []
    for _ in range(rng.randint(0, 12)):
        kind = rng.random()
        if kind < 0.6:
            c = rng.choice(pool_valid)
            src.append(c)
            want.append(c)
        else:
            high = kind < 0.8
            if not high and src and "\ud800" <= src[-1] <= "\udbff":
                src.append("x")  # break the would-be pair
                want.append("x")
            c = chr(rng.randint(0xD800, 0xDBFF) if high else rng.randint(0xDC00, 0xDFFF))
            src.append(c)
            want.append(REPLACEMENT)
    return "".join(src), "".join(want)


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_random_strings_written_by_json_dumps(ensure_ascii):
    """``json.dumps`` writes lone halves as ``\\udXXX`` escapes (ensure_ascii) or as they are; astral
    characters as escaped pairs (ensure_ascii) or as themselves. Every one reads back as the original
    string with its lone halves replaced, keys included."""
    rng = random.Random(11 + ensure_ascii)
    for _ in range(400):
        key, want_key = _random_case(rng)
        val, want_val = _random_case(rng)
        text = json.dumps({key: val, "k": [val]}, ensure_ascii=ensure_ascii)
        got = extract_json(text)
        assert got == {want_key: want_val, "k": [want_val]}, text
        if not _LONE.search(key + val):
            assert got == json.loads(text)
        _assert_utf8(got)


@pytest.mark.parametrize("city_json", ["Lyon \\ud83d\\udccd", "Lyon \\ud800", "\\udc00Lyon"])
def test_task_parsers_return_encodable_fields(city_json):
    """GeoHint's and GeoVerify's parsers read through llmjson: their parsed fields go into queue messages
    (orjson) and must encode."""
    from geoagent.geohint.parse import parse_answer
    from geoagent.geoverify.parse import parse_verdict

    text = '{"city": "%s", "area": "x", "building": "y", "evidence": "z"}' % city_json
    ans = parse_answer(text)
    assert ans.ok and ans.city == _json_reference(text)["city"]
    orjson.dumps(ans.to_json())
    verdict = parse_verdict('{"verdict": "yes", "confidence": 0.7, "evidence": ["%s"]}' % city_json)
    assert verdict.ok and verdict.verdict == "yes"
    assert list(verdict.evidence) == [_json_reference('"%s"' % city_json)]
    orjson.dumps(verdict.to_json())
