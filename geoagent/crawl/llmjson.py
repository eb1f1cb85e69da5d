"""Field coercion for the crawl auditors' JSON answers (untrusted model text, never eval/exec).

The JSON itself is found by the shared lenient reader: :func:`extract_json` is
:func:`geoagent.llmjson.extract_json` (fenced blocks first, then the whole text; comments, trailing
commas and single quotes tolerated; a value cut off by the end does not count; None when nothing of the
wanted type is found, and the caller keeps the raw text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geoagent.llmjson import extract_json, fenced_blocks, iter_candidates

__all__ = ["as_bool", "as_int_in", "extract_json", "extract_json_like"]


def extract_json_like(text: str | None, want: type, looks_right: Callable[[Any], bool]) -> Any | None:
    """The first complete JSON value of type ``want`` in ``text`` that ``looks_right`` accepts, searched as
    :func:`extract_json` searches (fenced blocks first, then the whole text); when none does, what
    :func:`extract_json` returns. Never raises.

    Prose around an answer can hold bracketed or braced asides (``[Note] ...``, ``{"note": ...}``) that
    read as JSON on their own; taking the first value would drop the real answer behind them."""
    if not isinstance(text, str) or not text.strip():
        return None
    opener = "[" if want is list else "{"
    for src in [*fenced_blocks(text), text]:
        for cand in iter_candidates(src, opener):
            if cand.ok and not cand.truncated and isinstance(cand.value, want):
                try:
                    if looks_right(cand.value):
                        return cand.value
                except Exception:  # noqa: BLE001 - a predicate over untrusted data must not raise out
                    continue
    return extract_json(text, want)


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
    """An integer in ``[lo, hi]`` from an int, an integral float or a numeric string; else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            return None
    if isinstance(v, int):
        return v if lo <= v <= hi else None  # exact, also for ints too large for a float
    if isinstance(v, float) and v.is_integer() and lo <= v <= hi:
        return int(v)
    return None
