"""Readable text for small mappings in console lines and reports (never a Python ``repr`` of a dict).

``{'signal': 26, '0.15-0.3km': 5}`` becomes ``signal 26, 0.15-0.3km 5``; numbers print as integers when
whole (``1``, not ``1.0``) and otherwise with up to 4 significant digits (``0.3333``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

#: C0 control characters other than tab and line feed, DEL and the C1 controls: ESC (0x1b) starts the
#: terminal's escape sequences (clear the screen, set the window title, OSC 52 writes the clipboard)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert_text(text: str) -> str:
    """``text`` with every control character that a terminal would act on written as an escape (``\\x1b``).

    For untrusted text shown on a console: an API's error body or a model's answer quoted in a failure
    reason. Tab and line feed stay; everything else is unchanged, so the text still reads as it was sent.
    """
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if text else text


#: what a one-line field must not hold besides :data:`_CONTROLS`: tab and line feed, the Unicode line and paragraph
#: separators, and the bidirectional formatting characters (U+202E shows the rest of a line reversed)
#: the bidirectional formatting characters (ALM, LRM, RLM, the embeddings and overrides, the isolates)
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_LINE_BREAKERS = re.compile("[\t\n\u2028\u2029" + _BIDI + "]")


def one_line_text(text: str) -> str:
    """``text`` for a field printed on one line (a stored failure reason, a ``dead`` or ``status`` line): as
    :func:`inert_text`, and tab, line feed, the Unicode line/paragraph separators and the bidirectional controls
    written as escapes too (``\\n``, ``\\t``, ``\\u2028``), so an API's error body cannot add a made-up line to a
    tab-separated listing or reorder what follows it (break28 #6)."""
    if not text:
        return text

    def esc(m: re.Match[str]) -> str:
        c = m.group()
        return {"\t": "\\t", "\n": "\\n"}.get(c) or f"\\u{ord(c):04x}"

    return _LINE_BREAKERS.sub(esc, inert_text(text))


#: what a name from an API (a Wikidata label, an auditor's English name) may not carry into a table or a prompt: the
#: C0 and C1 controls and the bidirectional formatting characters (U+202E shows the rest of a line reversed); line
#: breaks, tabs and the Unicode line/paragraph separators become spaces (:func:`label_text`)
_LABEL_DROP = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + _BIDI + "]")
_LABEL_SPACE = re.compile("[\t\n\r\u2028\u2029]")


def label_text(text: str | None, *, collapse: bool = True) -> str:
    """A place's name as data: ``text`` without control characters (NUL, ESC, BEL, ...) and bidirectional
    formatting characters, line breaks and tabs as spaces, and (``collapse``) runs of whitespace as one space,
    stripped; ``""`` for None. Letters, marks and the joiners some scripts need (U+200C, U+200D) are kept. For
    labels and names from APIs and models that become table cells and prompt text (crawl38 #2: ``A\x00B\x1b[31m``
    reached ``sites.csv`` and a GeoVerify claim)."""
    if not text:
        return ""
    out = _LABEL_SPACE.sub(" ", _LABEL_DROP.sub("", str(text)))
    return " ".join(out.split()) if collapse else out.strip()


def finish_reason_text(value: Any) -> str | None:
    """A provider's finish reason as the answer parsers, the reports and the empty-answer breaker read it: a string
    cleaned as a place field is (:func:`label_text`: no control or bidirectional formatting characters, whitespace
    runs one space, stripped), None for anything else or a blank one. Providers send ``stop``, ``length``,
    ``MAX_TOKENS`` ...; a server's reason is text it chose (crawl43 #3). GeoHint stores it so
    (``extra.finish_reason``, the ``geohint_scored`` export); the response store keeps the reason as the provider
    sent it. Here, not in :mod:`geoagent.geohint.parse` (which still exports it), so
    :mod:`geoagent.scoring.truncation` reads every reason the same way without an import cycle (rev43b #1:
    ``length`` followed by U+202E was no answer in the report but never tripped the breaker). Unlike a place's name
    it keeps no format character at all (Unicode category Cf: the zero-width space U+200B, the word joiner U+2060,
    the byte-order mark U+FEFF, the joiners): a reason is a provider's keyword, and ``length`` followed by U+200B
    read as no known reason (review43c #8)."""
    if not isinstance(value, str):
        return None
    text = label_text(value)
    if not text.isascii():
        text = " ".join(_REASON_DROP.sub("", "".join(c for c in text if unicodedata.category(c) != "Cf")).split())
    return text or None


#: what a finish reason loses besides the format characters (Cf): the other Unicode default-ignorable code points
#: (DerivedCoreProperties.txt, Default_Ignorable_Code_Point: the combining grapheme joiner, the Hangul fillers, the
#: Mongolian and other variation selectors, the reserved U+FFF0-FFF8 and U+E0000-E0FFF) and the Braille blank, all
#: invisible: ``length`` followed by one read as no known reason (review43d #6)
_REASON_DROP = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
                          "\ufff0-\ufff8\U000e0000-\U000e0fff]")


def value_text(v: Any) -> str:
    """One value: whole numbers without a decimal point, other floats with 4 significant digits, else ``str``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def fixed_text(x: float, decimals: int, *, signed: bool = False) -> str:
    """``x`` with ``decimals`` decimals (``signed``: with a ``+`` before a positive value, as a difference is shown).

    A value that rounds to zero prints ``0.00`` (``decimals`` zeros), without a sign: never ``-0.00`` (a tiny
    negative slope, difference or criterion, or a negative zero) nor ``+0.00``. NaN and infinities print as
    Python formats them (callers show NaN as their own dash first).
    """
    text = f"{x:+.{decimals}f}" if signed else f"{x:.{decimals}f}"
    return f"{0.0:.{decimals}f}" if float(text) == 0 else text


def mapping_text(d: Mapping[Any, Any] | None, *, empty: str = "none", sep: str = ", ") -> str:
    """``key value`` pairs of ``d`` in its order, joined by ``sep`` (``connection 36, timeout 2``); ``empty``
    when ``d`` is empty or None.

    Parameters
    ----------
    d : mapping or None
    empty : str
        Text for an empty mapping.
    sep : str
        Separator between pairs.
    """
    if not d:
        return empty
    return sep.join(f"{k} {value_text(v)}" for k, v in d.items())


def count_text(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in agreement: ``count_text(1, "attempt")`` -> ``"1 attempt"``, ``(3, "attempt")`` ->
    ``"3 attempts"`` (``plural`` when the plural is not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def first_few_text(items: Sequence[Any], limit: int = 5) -> str:
    """The first ``limit`` of ``items`` joined with ", ", then `` and N more`` for the rest: ``first_few_text(["a",
    "b", "c"], 2)`` -> ``"a, b and 1 more"`` (the lines that name a few sites, cities or keys of many)."""
    shown = ", ".join(str(x) for x in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
