"""Place-name text helpers for the GeoHint geocoder: folding, linear-feature detection, query variants.

Pure functions over strings (imports nothing of ours). Model output is untrusted text: nothing here
evaluates it, and every function accepts any string (or None) without raising.

Sources: seed 000 Sec. 4.3 fault 1 (parenthetical aliases must be stripped and the lookup retried),
fault 2 and Sec. 7 (linear features such as streets and avenues cannot be scored as points).
"""

from __future__ import annotations

import re
import unicodedata

#: Answer texts that mean "no answer" (the permissive schema allows "unknown"; models also write these).
NULL_ANSWERS = frozenset(
    {"", "unknown", "unk", "n/a", "na", "none", "null", "not visible", "not sure", "unclear", "unsure", "-", "?"}
)

# The release's lists (Yifan1209/geocontext, geocontext/geocode.py ``_LINEAR_SUFFIX`` and ``_LINEAR_PREFIX``, lines
# 226-235, read by its ``is_linear`` at the place level) are all in ours; ours adds designators of more languages.
# Street designators that END a linear feature's name ("Canal Street", "Meiji-dori", "Friedrichstraße"); the
# release's "crossing", "intersection" and "freeway" too ("Shibuya Crossing" is no point a photo was taken at).
_LINEAR_SUFFIX_WORDS = (
    "street", "st", "road", "rd", "avenue", "ave", "av", "boulevard", "blvd", "lane", "ln", "drive", "dr",
    "highway", "parkway", "pkwy", "expressway", "freeway", "crossing", "intersection", "alley", "dori", "dōri", "doori", "dôri", "douri",
    "strasse", "straße", "str", "gasse", "allee", "laan", "straat", "gade", "gatan", "vej", "utca", "ulica",
    "caddesi", "sokak", "promenade", "embankment", "broadway", "prospekt", "ulitsa", "pereulok", "shosse",
    "naberezhnaya", "улица", "проспект", "переулок", "шоссе", "набережная", "bulvar", "бульвар",
)
# Designators that START a linear feature's name ("Rue de Rivoli", "Calle Mayor", "Avenida Paulista").
_LINEAR_PREFIX_WORDS = (
    "rue", "calle", "avenida", "avenue", "av", "boulevard", "bd", "blvd", "via", "viale", "carrer", "rua",
    "calzada", "paseo", "passeig", "strada", "corso", "quai", "gran via", "allée", "allee", "straße", "strasse",
    "rambla",
    "ulitsa", "odos", "leoforos", "jalan", "duong", "đường", "phố", "pho", "ulica", "ul.", "улица",
    "проспект", "thanon", "sharia", "shari", "شارع", "rehov", "רחוב", "carrera",
)
# Compound endings written without a space ("Friedrichstraße", "Omotesando-dori", "表参道通り"); as in the release,
# the romanised bound morphemes -zaka (slope: "Dogenzaka") and -bashi (bridge: "Nihonbashi") and the kanji street
# and slope endings (通, 坂, 坂上, 坂下, 坂道, 街道, 大路). Not the release's bare 街: it also ends district names
# (中華街, Chinatown; 商店街, a shopping street's whole quarter).
_LINEAR_COMPOUND_ENDINGS = ("straße", "strasse", "gasse", "allee", "straat", "gatan", "-dori", "-dōri", "zaka", "bashi",
                            "通り", "通", "坂", "坂上", "坂下", "坂道", "街道", "大街", "大道", "大路", "路", "대로")
# Compound starts written without a space (Thai "ถนนสุขุมวิท", Thanon Sukhumvit).
_LINEAR_COMPOUND_STARTS = ("ถนน",)

_SUFFIX_RE = re.compile(r"(?:^|\s)(?:" + "|".join(re.escape(w) for w in _LINEAR_SUFFIX_WORDS) + r")\.?$", re.IGNORECASE)
# the designator is a whole word ("Viaduct", "Avalon", "Phoenix" are not "via", "av", "pho"), an abbreviation
# may carry its period ("Av. Paulista"), and a name follows
_PREFIX_RE = re.compile(r"^(?:" + "|".join(re.escape(w) for w in _LINEAR_PREFIX_WORDS) + r")\.?\s+\S", re.IGNORECASE)
# short designators that also begin business names ("Pho 10", "Pho 24": noodle restaurants; "Via 45"): followed by
# a bare number and nothing else, the name is not a street's ("Pho Hue", "Via 20 Settembre", "Av. 9 de Julio" are).
# Full designators keep numbered streets ("Calle 72", "Carrera 7" in Bogota's grid).
_SHORT_PREFIX_NUMBER_RE = re.compile(r"^(?:pho|via|av)\.?\s+\d+[a-z]?$", re.IGNORECASE)
_HOUSE_NUMBER_RE = re.compile(r"^\d+[a-z]?\s", re.IGNORECASE)  # "500 Fifth Avenue" is a building address
_PAREN_RE = re.compile(r"\s*[\(\[（【][^\)\]）】]*[\)\]）】]")
_PAREN_CONTENT_RE = re.compile(r"[\(\[（【]([^\)\]）】]*)[\)\]）】]")
_SPLIT_RE = re.compile(
    r"\s*(?:/|;|\||,|\s+or\s+|\s+[—–-]\s+|\s+&\s+|\s+and\s+|\s+near\s+|\s+at\s+)\s*", re.IGNORECASE
)
_LEAD_RE = re.compile(r"^(?:near|around|by|off|in|at|the area (?:of|around)|just off|close to|next to)\s+", re.IGNORECASE)
_TRAIL_RE = re.compile(
    r"\s+(?:area|district|neighbourhood|neighborhood|vicinity|region|intersection|ward)$", re.IGNORECASE
)
_PUNCT_RE = re.compile(r"[\W_]+", re.UNICODE)


def is_null_answer(text: str | None) -> bool:
    """True when ``text`` is empty or a stock "no answer" word (``unknown``, ``n/a``, ...), case-insensitive."""
    if text is None:
        return True
    return text.strip().strip(".").casefold() in NULL_ANSWERS


def _is_latin(ch: str) -> bool:
    o = ord(ch)
    return o < 0x0250 or 0x1E00 <= o <= 0x1EFF


def fold(text: str | None) -> str:
    """Case-, diacritic-, punctuation- and article-insensitive key of a name.

    ``"Meiji-Dōri"`` and ``"meiji dori"`` fold to ``"meiji dori"``; a leading English article ("the")
    is dropped; accents are removed from Latin letters only, so CJK and kana (with their voicing marks)
    are kept as they are.

    Parameters
    ----------
    text : str or None
        Any text (None folds to ``""``).

    Returns
    -------
    str
        Lower-case ASCII-folded words joined by single spaces.
    """
    if not text:
        return ""
    decomposed = unicodedata.normalize("NFKD", text)
    kept: list[str] = []
    for ch in decomposed:
        # drop accents on Latin letters only (Vietnamese included); kana voicing marks etc. stay
        if unicodedata.combining(ch) and kept and _is_latin(kept[-1]):
            continue
        kept.append(ch)
    stripped = unicodedata.normalize("NFC", "".join(kept))
    words = _PUNCT_RE.sub(" ", stripped.casefold()).split()
    if len(words) > 1 and words[0] == "the":
        words = words[1:]
    return " ".join(words)


def strip_parentheticals(text: str) -> str:
    """Remove parenthesised asides: ``"Fire Street (Jinnan 1-chome)"`` -> ``"Fire Street"`` (fault 1)."""
    return re.sub(r"\s{2,}", " ", _PAREN_RE.sub("", text)).strip()


def is_linear_name(text: str | None) -> bool:
    """Whether a name denotes a linear feature (street, road, avenue, dōri, calle, rue, Straße, ...).

    A name is linear when, after removing parenthetical asides, it ends with a street designator
    ("Canal Street", "Meiji-dōri", "Friedrichstraße") or starts with one in a language that puts it
    first ("Rue de Rivoli", "Calle Mayor"). Crossings and intersections ("Shibuya Crossing") and the bound
    morphemes -zaka and -bashi ("Dogenzaka", "Nihonbashi") count, as in the release. Addresses with a house
    number ("500 Fifth Avenue") name a building, a short designator followed only by a number ("Pho 10", a
    restaurant; "Via 45") names a business, and names that merely contain a designator ("Park Street
    Church", "Broadway station") are not linear. Wikidata classes catch the rest (see
    :data:`geoagent.geohint.geocode.LINEAR_CLASSES`).

    Source: seed 000 Sec. 4.3 fault 2 and Sec. 7; the release's ``geocontext/geocode.py`` ``is_linear``
    (Yifan1209/geocontext @ f4975f2, lines 221-238), whose word lists this one contains.
    """
    if not text:
        return False
    core = strip_parentheticals(text).strip().rstrip(".")
    if not core or _HOUSE_NUMBER_RE.match(core) or _SHORT_PREFIX_NUMBER_RE.match(core):
        return False
    if _SUFFIX_RE.search(core) or _PREFIX_RE.search(core):
        return True
    low = core.casefold()
    return any(low.endswith(e) and len(low) > len(e) for e in _LINEAR_COMPOUND_ENDINGS) or any(
        low.startswith(e) and len(low) > len(e) for e in _LINEAR_COMPOUND_STARTS
    )


def _clean_segment(seg: str) -> list[str]:
    """The segment without a leading "near/around/in", then also without a trailing "area/district"."""
    seg = _LEAD_RE.sub("", seg.strip().strip(".,;:'\"")).strip()
    return [seg, _TRAIL_RE.sub("", seg).strip()]


def name_variants(text: str | None, *, max_variants: int = 6) -> list[str]:
    """Lookup strings to try for one answered name, most specific first, without duplicates.

    Order: the text as given; the text with parenthetical asides removed (fault 1, Sec. 4.3); each
    segment of a compound answer split on ``/ ; , or — & and near at``, with a leading "near/around/in"
    removed, then also with a trailing "area/district/neighbourhood/intersection" removed; finally the contents of the parentheses
    (``"Shibuya (宮益坂)"`` also tries ``"宮益坂"``). A null answer (see :func:`is_null_answer`) gives ``[]``.

    Parameters
    ----------
    text : str or None
        The model's answer for one level (untrusted free text).
    max_variants : int
        Upper bound on the number of variants returned (bounds API traffic per answer).

    Returns
    -------
    list of str
        Variants, each at least 2 characters long.
    """
    if text is None or is_null_answer(text):
        return []
    text = " ".join(str(text).split())[:300]
    out: list[str] = []
    seen: set[str] = set()

    def add(candidate: str) -> None:
        c = candidate.strip()
        key = fold(c)
        if len(c) >= 2 and key and key not in seen and not is_null_answer(c):
            seen.add(key)
            out.append(c)

    add(text)
    bare = strip_parentheticals(text)
    add(bare)
    for seg in _SPLIT_RE.split(bare):
        for cleaned in _clean_segment(seg):
            add(cleaned)
    for inner in _PAREN_CONTENT_RE.findall(text):
        for seg in _SPLIT_RE.split(inner):
            for cleaned in _clean_segment(seg):
                add(cleaned)
    return out[:max_variants]


def primary_name(text: str | None) -> str:
    """The first named thing in an answer: parentheticals removed, first segment of a compound answer.

    ``"Yamate-dori near Naka-Meguro Station"`` -> ``"Yamate-dori"``; ``"Fire Street (Jinnan 1-chome)"``
    -> ``"Fire Street"``. Empty for a null answer.
    """
    if text is None or is_null_answer(text):
        return ""
    bare = strip_parentheticals(" ".join(str(text).split()))
    for seg in _SPLIT_RE.split(bare):
        cleaned = _clean_segment(seg)[0]
        if cleaned:
            return cleaned
    return ""
