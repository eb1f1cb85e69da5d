"""Echo detection: does the answer's area or building name the reference point it was handed?

Seed 000, Sec. 6.2.1: "the echo rate is the fraction of responses whose area or building field names
the reference point itself". Matching is on normalised text (issue 4 point 4):

* Unicode NFKC, then diacritics removed (NFKD minus combining marks), casefolded;
* punctuation and symbols become spaces (hyphens, apostrophes, slashes, brackets ...);
* leading/inner articles dropped (English, French, Spanish, Italian, German, Dutch, Portuguese);
* whitespace collapsed.

A field names a reference point when one of the point's names (English name, native label, Wikidata
aliases when given, and each name with its parenthetical qualifier removed, e.g. "Ebisu Station
(Tokyo)" -> "Ebisu Station") occurs in the field as a whole-token run. Names written in a script
without word spaces (CJK, kana, Thai) are matched as substrings of the space-free text instead.

Choice (the paper is ambiguous): we read "names the reference point itself" literally - the field must
contain a whole name of the point. The release's analysis scripts (``analysis/two_regimes.py``
``echoed``) use a looser rule: the *first word* of the English name (at least 3 letters; first 4
characters of a CJK name) occurring anywhere in the lower-cased area + place text, so area "Harajuku"
echoes the hint "Harajuku Station" there but not here. On the release sample
(``answers_judged_sample.csv``, 936 context rows with a ladder point) the rates are 27.5 % (this rule)
against 39.6 % (first-word rule), so the paper's echo figures (Tables 1, 2, 4) are not expected to be
reproduced exactly by this module.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

ARTICLES = frozenset(
    {
        "the", "a", "an",
        "le", "la", "les", "l",
        "el", "los", "las",
        "il", "lo", "gli", "i",
        "der", "die", "das",
        "de", "het",  # Dutch "de"/"het" articles; "de" is also the French/Spanish "of" (dropped alike)
        "o", "os", "as",
    }
)
_PARENS = re.compile(r"\s*[\(\[（【][^\)\]）】]*[\)\]）】]\s*")
_NO_SPACE_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0e7f\uf900-\ufaff]")


def _fold(text: str) -> str:
    t = unicodedata.normalize("NFKC", text)
    t = "".join(ch for ch in unicodedata.normalize("NFKD", t) if not unicodedata.combining(ch))
    t = t.casefold()
    # ø/ł/ß etc. have no decomposition; map the common ones by hand.
    return t.translate(str.maketrans({"ø": "o", "ł": "l", "đ": "d", "ß": "ss", "æ": "ae", "œ": "oe", "ı": "i"}))


def normalize_tokens(text: str | None) -> list[str]:
    """Normalised tokens of a place name or answer field (see module docstring); [] for None/empty."""
    if not text:
        return []
    t = _fold(str(text))
    t = "".join(ch if (ch.isalnum() or ch.isspace()) else " " for ch in t)
    return [w for w in t.split() if w not in ARTICLES]


def normalize_name(text: str | None) -> str:
    """Normalised text of a name, tokens joined by single spaces."""
    return " ".join(normalize_tokens(text))


def name_variants(names: Iterable[str | None]) -> list[str]:
    """Every name plus its form without parenthetical qualifiers, de-duplicated, empties dropped."""
    out: list[str] = []
    for n in names:
        if not n or not str(n).strip():
            continue
        for v in (str(n), _PARENS.sub(" ", str(n))):
            v = v.strip()
            if v and v not in out:
                out.append(v)
    return out


def field_names_reference(field: str | None, names: Iterable[str | None]) -> bool:
    """True when ``field`` (an answer's area or building) names any of ``names`` (see module docstring)."""
    if not field or not str(field).strip():
        return False
    tokens = normalize_tokens(field)
    padded = " " + " ".join(tokens) + " "
    compact = "".join(tokens)
    for name in name_variants(names):
        ntok = normalize_tokens(name)
        if not ntok:
            continue
        if _NO_SPACE_SCRIPT.search(name):
            if "".join(ntok) in compact:
                return True
        elif " " + " ".join(ntok) + " " in padded:
            return True
    return False


def is_echo(area: str | None, building: str | None, names: Iterable[str | None]) -> bool:
    """Echo (Sec. 6.2.1): the area or the building field names the reference point.

    Parameters
    ----------
    area, building : str or None
        Parsed answer fields (``place`` in the release's permissive schema counts as building).
    names : iterable of str
        The reference point's names: English name, native label, Wikidata aliases.
    """
    names = list(names)
    return field_names_reference(area, names) or field_names_reference(building, names)
