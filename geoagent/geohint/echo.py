"""Echo detection: does the answer's area or building name the reference point it was handed?

Seed 000, Sec. 6.2.1: "the echo rate is the fraction of responses whose area or building field names
the reference point itself". The paper leaves open how literally "names" is read, so two rules are
offered, chosen per campaign by ``[geohint] echo_rule`` (:data:`ECHO_RULES`; default
:data:`DEFAULT_ECHO_RULE`):

``"name"`` (default, :func:`is_echo`)
    The literal reading: the field must contain a whole name of the point. Matching is on normalised
    text (issue 4 point 4):

    * Unicode NFKC, then diacritics removed (NFKD minus combining marks), casefolded;
    * spelling variants of one name read alike (session 14; :data:`APOSTROPHES`, :data:`CONNECTORS`,
      :data:`SAINT_FORMS`):

      - every apostrophe-like character (straight ``'``, curly ``’`` ``‘``, the modifier letter ``ʼ``, prime,
        grave, acute) is one apostrophe; curly and straight already matched before (both were punctuation),
        but ``ʼ`` (U+02BC) is a letter to Unicode and stayed inside the word;
      - an English possessive keeps its word whole: ``'s`` after a letter loses its apostrophe ("St Paul's" =
        "St Pauls"), and after an ``s`` it goes altogether ("St James's" = "St James'" = "St James"). Before,
        the apostrophe split the word ("paul s"), so "St Pauls" missed "St Paul's" and a name "Nelson" was found
        in "Nelson's Column" (no longer: "nelsons" is another token). Other apostrophes still split ("L'Arc",
        "d'Orsay": the elided article is dropped);
      - ``&`` and the English ``and`` are both connectors, dropped like articles: "Barnes & Noble" = "Barnes and
        Noble" = "Barnes Noble" (``&`` was already dropped as punctuation);
      - "Saint" reads as its abbreviation "St", "Sainte" as "Ste" ("St." is "St" once the full stop goes):
        "Saint Paul's" = "St Paul's", "Ste-Chapelle" = "Sainte-Chapelle". "St" is NOT read as "Street": "Canal
        St Martin" (Saint-Martin) would then name "Canal Street";
    * punctuation and symbols become spaces (hyphens, apostrophes, slashes, brackets ...);
    * leading/inner articles dropped (English, French, Spanish, Italian, German, Dutch, Portuguese), never a last
      word: an article precedes its noun, so "Đại La" (Vietnamese) keeps its "la" and is not named by "Đại học"
      (session 36; the field is also read with its articles, so "Đại La street" still names it);
    * a name that is "The" and one word ("The Mall", "The Oval", "The Center": the word alone is a common noun) is
      named only where that word starts a segment of the field (between commas, slashes, brackets, quotes, dashes)
      or follows an article or a preposition ("du", "of", "near" ...): "Mall", "The Mall" and "near the Mall,
      Westminster" name it, "Pall Mall" and "a shopping mall" do not, nor does "Kennington Oval" name "The Oval"
      unless it is one of the point's aliases (session 36; the released ladders hold 10 such names: The Annex, The
      Belcher's, The Center, The Den, The Dakota, The Gherkin, The Mall, The Marais, The Masterpiece, The Oval);
    * whitespace collapsed.

    On the release sample none of the session-14 variants changes a verdict: 0 of its 936 context rows under
    each, alone or together (257 echoes before and after, before session 37's city qualifier;
    ``tests/test_echo_spelling_s14.py``). Its answers
    have ``&`` in 12 of those rows, a straight apostrophe in 26, "Saint" in 25 and a curly one in none, but
    where they name the reference point they spell it as the ladder does. The released ladders' names hold the
    variants (among the 6,210 English names and native labels: 62 possessives, 12 ``&``, 83 "and", 36 "St" or
    "St.", 27 "Saint" or "Sainte"), so a full campaign meets them. The release has no per-row echo label to
    move towards (see the end of this docstring).

    A field names a reference point when one of the point's names (English name, native label ``label_raw``,
    Chinese name ``name_zh``, Wikidata aliases when given, and each name with its parenthetical qualifier removed, e.g. "Ebisu Station
    (Tokyo)" -> "Ebisu Station", or a trailing ", <the site's city>" removed, e.g. "Akasaka, Tokyo" -> "Akasaka" at
    a Tokyo site: :func:`without_city_qualifier`, session 37) occurs in the field as a whole-token run. Names written in a script
    without word spaces (CJK, kana, Thai) are matched as substrings of the space-free text instead.

``"release_first_word"`` (:func:`is_echo_release_first_word`)
    The looser rule of the GeoContext release's analysis scripts (``analysis/two_regimes.py``
    ``echoed``, imported by ``analysis/model_tables.py`` for the paper's Table 2, and the same function
    in ``analysis/raw_tables.py`` for its echo-by-tier table, the paper's Table 4): a key is taken from
    the point's Chinese name and from its English name - the first 4 characters when the name holds a
    CJK ideograph, else its first whitespace-separated word, lower-cased (a first word under 3 characters is
    dropped, not replaced by the next word) - and the response echoes when a key of at least 3 characters occurs anywhere (as a substring) in the lower-cased text "area
    building". So area "Harajuku" echoes the hint "Harajuku Station" under this rule but not under
    ``"name"``, and a 2-character first word ("St", "La", "El") never counts. Use it to compare with the
    paper's echo figures (Tables 1, 2, 4).

On the release sample (``answers_judged_sample.csv``: 966 rows, all permissive schema ``v1``; 936
context rows whose reference point is in the site's ladder) the ``"name"`` rule finds 262 echoes
(28.0 %; 257 before session 37, when a name qualified by its site's city, "Saint-Eustache, Paris", was not named by
"Les Halles / Saint-Eustache") and the ``"release_first_word"`` rule 371 (39.6 %); ``tests/test_geohint_echo.py``
checks both counts.

The release reads its CSVs with pandas, so a field or name that pandas takes as missing (empty, or
exactly one of its missing-value spellings: "None", "NA", "N/A", "null", "nan", ...;
:data:`PANDAS_MISSING_SPELLINGS`) is missing here too under this rule: an area "None" is no text, not the
word "none". Known differences from the release's own computation:

* a missing area or building is the text ``"nan"`` there and empty here; this matters only for a key
  "nan" (a name whose first word is "Nan"), and no released ladder point has one;
* the release's Table-4 script (``raw_tables.py``) drops rows whose reference point has no Chinese name
  from the echo denominator (``dropna`` on the names), its Table-2 script (``model_tables.py``) keeps
  them with the English key alone; here they are kept, as for Table 2. 149 of the 3,105 released ladder
  points have no Chinese name; none of them is a reference point of the sample's rows, so the sample's
  rates agree with both scripts.

No released file carries a per-row echo label, so the rule is checked against the counts above and an
independent implementation, row by row.
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


#: characters read as one apostrophe: straight, curly right and left, modifier letter U+02BC (a letter to
#: Unicode, so it stayed inside a word), prime, grave, acute
APOSTROPHES = "'\u2019\u2018\u02bc\u2032`\u00b4"
#: possessive after an s ("James's"): the apostrophe and the s go ("James")
_POSSESSIVE_AFTER_S = re.compile(f"(?<=s)[{APOSTROPHES}]s\\b", re.IGNORECASE)
#: possessive after any other letter or digit ("Paul's"): the apostrophe goes ("Pauls")
_POSSESSIVE = re.compile(f"(?<=\\w)[{APOSTROPHES}](?=s\\b)", re.IGNORECASE)
#: connectors dropped like articles ("&" is punctuation and goes anyway)
CONNECTORS = frozenset({"and"})
#: full forms read as their abbreviation (tokens after folding)
SAINT_FORMS = {"saint": "st", "sainte": "ste"}


def _folded_words(text: str) -> list[str]:
    """Folded words of ``text``: possessives joined, diacritics removed, casefolded, punctuation as spaces."""
    t = _POSSESSIVE.sub("", _POSSESSIVE_AFTER_S.sub("", text))
    t = _fold(t)
    return "".join(ch if (ch.isalnum() or ch.isspace()) else " " for ch in t).split()


def normalize_tokens(text: str | None, *, keep_articles: bool = False) -> list[str]:
    """Normalised tokens of a place name or answer field (see module docstring); [] for None/empty.

    ``normalize_tokens("St James’s Palace & Gardens") == ["st", "james", "palace", "gardens"]``. An article is
    dropped only where a word follows it (an article precedes its noun): the last word stays whatever it is, so
    "Đại La" keeps "la" (Vietnamese, no article) and does not shrink to "dai", which "Đại học" (university) would
    then name (session 36). ``keep_articles`` keeps every article (connectors still go).
    """
    if not text:
        return []
    words = _folded_words(str(text))
    # the last word stays whatever it is, unless every word is an article ("La", "The": no name to look for)
    last = len(words) - 1 if any(w not in ARTICLES for w in words) else -1
    return [SAINT_FORMS.get(w, w) for i, w in enumerate(words)
            if w not in CONNECTORS and (keep_articles or i == last or w not in ARTICLES)]


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


#: where an answer field's text is cut into segments for the "The <word>" rule (:func:`field_names_reference`):
#: commas, semicolons, colons, slashes, bars, brackets, quotes, dashes (an en or em dash, or a hyphen between spaces)
#: and their full-width forms
_SEGMENT_BREAKS = re.compile(r"[,;:/|()\[\]（）【】\"“”«»，、；：・–—]|\s-\s")
#: words after which the word of a "The <word>" name still starts its phrase: articles, and prepositions that put a
#: name after them ("Quartier du Marais", "Bar am Oval", "the lawns of the Mall", "near Mall")
_PHRASE_LEADS = ARTICLES | frozenset({"du", "des", "del", "della", "dei", "di", "au", "aux", "im", "am", "zum", "zur",
                                      "of", "at", "near", "by", "around"})
#: a name written with its article after a comma ("Mall, The", as some indexes sort names)
_INVERTED = re.compile(r"^(?P<rest>.+?),\s*(?P<article>\w+)\s*$")


def _uninverted(name: str) -> str:
    """``name`` with an article written after a comma moved to the front ("Mall, The" -> "The Mall")."""
    m = _INVERTED.match(name)
    if m and _fold(m.group("article")) in ARTICLES:
        return f"{m.group('article')} {m.group('rest')}"
    return name


def _the_one_word(name: str) -> str | None:
    """The word of an English name that is "The" and one word ("The Mall" -> "mall"; "The Saint" -> "st", as the
    field's tokens read it), else None."""
    words = _folded_words(name)
    return SAINT_FORMS.get(words[1], words[1]) if len(words) == 2 and words[0] == "the" else None


def _starts_a_phrase(word: str, field: str) -> bool:
    """True when ``word`` occurs in ``field`` first in a segment (text between commas, slashes, brackets, dashes ...)
    or right after an article or a preposition that puts a name after it (:data:`_PHRASE_LEADS`): "Mall", "The Mall",
    "near the Mall, Westminster", "Quartier du Marais", "30 St Mary Axe – Gherkin"; not "Pall Mall", "shopping mall",
    "North Dakota"."""
    for segment in _SEGMENT_BREAKS.split(field):
        words = normalize_tokens(segment, keep_articles=True)
        for i, w in enumerate(words):
            if w == word and (i == 0 or words[i - 1] in _PHRASE_LEADS):
                return True
    return False


def field_names_reference(field: str | None, names: Iterable[str | None]) -> bool:
    """True when ``field`` (an answer's area or building) names any of ``names`` (see module docstring).

    A name that is "The" and one word ("The Mall", "The Oval", "The Center") is named only where that word starts
    a segment of the field or follows an article or a preposition (:func:`_starts_a_phrase`): its word alone is a
    common noun, so "Pall Mall", "a shopping mall" or "Rockefeller Center" do not name it (session 36). A form of
    the name with another word in front ("Kennington Oval", "Kia Oval") is then found only as one of the point's
    aliases. The field's words are matched both without and with its articles, so a name that keeps its last word
    ("Đại La") is found in "Đại La street". A name with its article after a comma ("Mall, The") reads as "The Mall".
    """
    if not field or not str(field).strip():
        return False
    tokens = normalize_tokens(field)
    padded = " " + " ".join(tokens) + " "
    padded_all = " " + " ".join(normalize_tokens(field, keep_articles=True)) + " "
    compact = "".join(tokens)
    for name in name_variants(names):
        name = _uninverted(name)
        ntok = normalize_tokens(name)
        if not ntok:
            continue
        if _NO_SPACE_SCRIPT.search(name):
            if "".join(ntok) in compact:
                return True
            continue
        the_word = _the_one_word(name)
        if the_word is not None:
            if _starts_a_phrase(the_word, str(field)):
                return True
            continue
        run = " " + " ".join(ntok) + " "
        if run in padded or run in padded_all:
            return True
    return False


def without_city_qualifier(names: Iterable[str | None], cities: Iterable[str | None]) -> list[str]:
    """The forms of ``names`` without a trailing ``", <city>"`` naming one of ``cities`` (the site's city), where
    a name has one: "Castro District, San Francisco" -> "Castro District", "Saint-Eustache, Paris" ->
    "Saint-Eustache" (Wikipedia's way to tell places of one name apart, as brackets are: :func:`name_variants`).
    Only a qualifier that folds to a given city (:func:`normalize_name`: case, accents) is taken off: a comma inside
    a name ("Foreign, Commonwealth and Development Office", "City, University of London") is no qualifier, and
    taking the part before it would make "Foreign" or "City" a name of the point. Session 37 (geohint37 #3): 129 of
    the 179 comma-qualified English names of the released ladders end in their site's city; the others keep only
    their whole form. Returns only the new forms (none for a name without such a qualifier)."""
    folded = {normalize_name(c) for c in cities if c and str(c).strip()}
    folded.discard("")
    out: list[str] = []
    if not folded:
        return out
    for n in names:
        if not n or "," not in str(n):
            continue
        head, _, tail = str(n).rpartition(",")
        if normalize_name(tail) in folded and normalize_tokens(head):
            head = head.strip()
            if head not in out:
                out.append(head)
    return out


def is_echo(area: str | None, building: str | None, names: Iterable[str | None], *,
            cities: Iterable[str | None] = ()) -> bool:
    """Echo (Sec. 6.2.1): the area or the building field names the reference point.

    Parameters
    ----------
    area, building : str or None
        Parsed answer fields (``place`` in the release's permissive schema counts as building).
    names : iterable of str
        The reference point's names: English name, native label, Wikidata aliases.
    cities : iterable of str
        The site's city (its name as the sites table gives it): a name qualified by it ("Akasaka, Tokyo") is named
        by its form without the qualifier too (:func:`without_city_qualifier`).
    """
    names = list(names)
    names += without_city_qualifier(names, cities)
    return field_names_reference(area, names) or field_names_reference(building, names)


# --- rule selection ------------------------------------------------------------------------------
ECHO_RULE_NAME = "name"
ECHO_RULE_RELEASE_FIRST_WORD = "release_first_word"
#: the echo rules ``[geohint] echo_rule`` may name (module docstring)
ECHO_RULES = (ECHO_RULE_NAME, ECHO_RULE_RELEASE_FIRST_WORD)
DEFAULT_ECHO_RULE = ECHO_RULE_NAME
#: one line per rule for report notes and summaries
ECHO_RULE_DESCRIPTIONS = {
    ECHO_RULE_NAME: "area or building contains a whole name of the reference point (normalised; Sec. 6.2.1 read literally)",
    ECHO_RULE_RELEASE_FIRST_WORD: "first word (>= 3 characters) of the English name, or the first 4 characters of the "
    "Chinese name, anywhere in the lower-cased area + building text (the release's analysis scripts)",
}

#: field texts pandas ``read_csv`` takes as missing by default (pandas docs, ``na_values``); the release's
#: scripts read its CSVs with pandas, so under its rule these are no text at all
PANDAS_MISSING_SPELLINGS = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
    "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
})
#: CJK unified ideographs, the range the release's scripts test for a "CJK name"
_CJK_IDEOGRAPH = re.compile(r"[\u4e00-\u9fff]")
RELEASE_KEY_MIN_CHARS = 3
RELEASE_CJK_PREFIX_CHARS = 4


def check_echo_rule(rule: str) -> str:
    """Return ``rule`` if it is one of :data:`ECHO_RULES`.

    Raises
    ------
    ValueError
        Unknown rule (the message lists the allowed values).
    """
    if rule not in ECHO_RULES:
        raise ValueError(f"unknown echo rule {rule!r}; allowed: {', '.join(repr(r) for r in ECHO_RULES)}")
    return rule


def describe_echo_rule(rule: str) -> str:
    """``"<rule>: <one-line description>"`` for report headers and notes (raises ValueError for an unknown rule)."""
    return f"{check_echo_rule(rule)}: {ECHO_RULE_DESCRIPTIONS[rule]}"


def release_echo_key(name: str | None) -> str | None:
    """The key the release's first-word rule looks for, from one name of a reference point.

    The name is stripped and lower-cased (``str.lower``); a name holding a CJK ideograph (U+4E00-U+9FFF)
    gives its first 4 characters, any other name its first whitespace-separated word. Keys shorter than
    3 characters are dropped (None), as are missing names (None, empty, a pandas missing-value spelling
    of :data:`PANDAS_MISSING_SPELLINGS`, or "nan" in any case).

    Source: GeoContext release, ``analysis/two_regimes.py`` ``echoed`` (rule described in the module
    docstring; implemented here from that description).
    """
    if name is None or str(name) in PANDAS_MISSING_SPELLINGS:
        return None
    text = str(name).strip().lower()
    if not text or text == "nan":
        return None
    key = text[:RELEASE_CJK_PREFIX_CHARS] if _CJK_IDEOGRAPH.search(text) else text.split()[0]
    return key if len(key) >= RELEASE_KEY_MIN_CHARS else None


def _release_field(value: str | None) -> str:
    return "" if value is None or str(value) in PANDAS_MISSING_SPELLINGS else str(value)


def is_echo_release_first_word(area: str | None, building: str | None, name_en: str | None, name_zh: str | None) -> bool:
    """Echo under the release's first-word rule (``echo_rule = "release_first_word"``).

    True when the key (:func:`release_echo_key`) of the Chinese name or of the English name occurs as a
    substring of ``f"{area} {building}".lower()``, a missing field (None or a pandas missing-value
    spelling, :data:`PANDAS_MISSING_SPELLINGS`) being empty text. No other normalisation: no diacritic
    folding, no aliases, no whole-word test.

    Parameters
    ----------
    area, building : str or None
        Parsed answer fields (``place`` in the release's permissive schema counts as building).
    name_en, name_zh : str or None
        The reference point's English and Chinese names (ladder columns ``name_en``, ``name_zh``).

    Source: Sec. 6.2.1 (echo rate) as computed by the GeoContext release's ``analysis/two_regimes.py``
    ``echoed`` (used for the paper's Tables 2 and 4 by ``analysis/model_tables.py`` and
    ``analysis/raw_tables.py``).
    """
    text = f"{_release_field(area)} {_release_field(building)}".lower()
    for name in (name_zh, name_en):
        key = release_echo_key(name)
        if key is not None and key in text:
            return True
    return False


def echo_by_rule(
    area: str | None,
    building: str | None,
    names: Iterable[str | None],
    *,
    name_en: str | None,
    name_zh: str | None,
    cities: Iterable[str | None] = (),
) -> dict[str, bool]:
    """The echo verdict of every rule in :data:`ECHO_RULES`, ``{rule: bool}``.

    ``names`` (English name, native label, Chinese name, Wikidata aliases) and ``cities`` (the site's city: a name
    qualified by it is named without it too) feed the ``"name"`` rule; ``name_en`` and ``name_zh`` feed the
    ``"release_first_word"`` rule, which uses only those two.
    """
    return {
        ECHO_RULE_NAME: is_echo(area, building, names, cities=cities),
        ECHO_RULE_RELEASE_FIRST_WORD: is_echo_release_first_word(area, building, name_en, name_zh),
    }
