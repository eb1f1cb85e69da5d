"""Field coercion for the crawl auditors' JSON answers (untrusted model text, never eval/exec).

The JSON itself is found by the shared lenient reader: :func:`extract_json` is
:func:`geoagent.llmjson.extract_json` (fenced blocks first, then the whole text; comments, trailing
commas and single quotes tolerated; a value cut off by the end does not count; None when nothing of the
wanted type is found, and the caller keeps the raw text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geoagent.llmjson import extract_json, iter_candidates

__all__ = ["as_bool", "as_int_in", "as_text", "extract_json", "extract_json_like", "prompt_example"]


def extract_json_like(text: str | None, want: type, looks_right: Callable[[Any], bool]) -> Any | None:
    """The first complete JSON value of type ``want`` in ``text`` that ``looks_right`` accepts, else the
    first such value (None when there is none); :func:`geoagent.llmjson.extract_json` with a predicate.
    Never raises."""
    return extract_json(text, want, looks_right)


def as_bool(v: Any) -> bool | None:
    """JSON booleans, and the strings/numbers models use for them; None when unclear."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "yes", "y", "1"):
            return True
        if s in ("false", "no", "n", "0"):
            return False
    return None


def as_int_in(v: Any, lo: int, hi: int) -> int | None:
    """An integer in ``[lo, hi]`` from an int, an integral float or a numeric string of ASCII characters; else None
    (``float`` reads fullwidth and Arabic-Indic digits too, ``"４"`` as 4: crawl38 #5, as :mod:`geoagent.qid`
    refuses them)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        if not v.isascii():
            return None
        try:
            v = float(v.strip())
        except ValueError:
            return None
    if isinstance(v, int):
        return v if lo <= v <= hi else None  # exact, also for ints too large for a float
    if isinstance(v, float) and v.is_integer() and lo <= v <= hi:
        return int(v)
    return None


def as_text(v: Any, max_chars: int) -> str:
    """A free-text field (an auditor's ``why``): a JSON string, cut to ``max_chars`` characters; anything else (a
    number, NaN or Infinity, true/false, null, a list, an object) is no text, ``""`` as a missing field is (the
    caller keeps the verbatim answer). ``str()`` would have written ``42``, ``nan`` or a list's repr as the reason."""
    return v[:max_chars] if isinstance(v, str) else ""


def prompt_example(prompt: str | None, want: type, looks_right: Callable[[Any], bool]) -> Any | None:
    """The example answer a prompt template shows: its last complete JSON value of type ``want`` that
    ``looks_right`` accepts (templates end with one), None when it has none. An answer that repeats it verbatim
    has said nothing of its own (a model that echoes the example before or instead of its answer: crawl36 #1, #2).
    Never raises."""
    if not isinstance(prompt, str):
        return None
    found = None
    for cand in iter_candidates(prompt, "[" if want is list else "{", nested=False):
        if cand.ok and not cand.truncated and isinstance(cand.value, want) and looks_right(cand.value):
            found = cand.value
    return found
