"""Defensive extraction of a JSON value from untrusted model text (never eval/exec).

Models wrap JSON in code fences, add prose around it, or leave trailing commas. :func:`extract_json`
tries, in order: the first fenced block, then every ``[``/``{`` position with the standard JSON decoder
(``raw_decode``), with trailing commas before ``]``/``}`` removed. It returns None when nothing of the
wanted type is found; the caller keeps the raw text.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_TRAILING_COMMA = re.compile(r",(\s*[\]}])")


def extract_json(text: str | None, want: type = dict) -> Any | None:
    """First JSON value of type ``want`` (``dict`` or ``list``) found in ``text``, else None."""
    if not isinstance(text, str) or not text.strip():
        return None
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    opener = "[" if want is list else "{"
    dec = json.JSONDecoder()
    for chunk in candidates:
        for variant in (chunk, _TRAILING_COMMA.sub(r"\1", chunk)):
            pos = variant.find(opener)
            tries = 0
            while pos != -1 and tries < 50:
                try:
                    value, _ = dec.raw_decode(variant, pos)
                except (ValueError, RecursionError):  # JSONDecodeError, or an int past 4300 digits
                    value = None
                if isinstance(value, want):
                    return value
                pos = variant.find(opener, pos + 1)
                tries += 1
    return None


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
