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
    {"", "unknown", "unk", "n/a", "na", "none", "null", "not visible", "not sure", "unclear", "unsure", "-", "?",
     # the release's own null token and its Japanese and English kin (geocode38 #11: looked up as place names)
     "未知", "不明", "不详", "i don't know", "i do not know", "don't know", "cannot tell", "can't tell",
     "i cannot tell", "i can't tell", "cannot determine", "can't determine", "i cannot determine", "i can't determine",
     "not determinable", "not identifiable"}
)

#: Abbreviations a place qualifier is written with ("Springfield, IL"), by lower-cased abbreviation, and the name each
#: stands for, for telling two spellings of one answer apart (:func:`geoagent.geohint.parse.same_place_text`,
#: geohint39 #2): the USPS codes of the 50 US states and DC, the Canada Post codes of the provinces and territories (none
#: is a US code), the Australian state and territory codes that are neither (NSW, VIC, QLD, TAS, ACT; session 41: not
#: WA, Washington, nor NT, the Northwest Territories, nor SA, which also stands for South Africa and Saudi Arabia), and a
#: few country abbreviations. No two-letter country code: CA, DE, IN, GA, PA would read as California, Delaware,
#: Indiana, Georgia, Pennsylvania as often as Canada, Germany, India, Gabon, Panama.
REGION_ABBREVIATIONS = {
    "al": "alabama", "ak": "alaska", "az": "arizona", "ar": "arkansas", "ca": "california", "co": "colorado",
    "ct": "connecticut", "de": "delaware", "fl": "florida", "ga": "georgia", "hi": "hawaii", "id": "idaho",
    "il": "illinois", "in": "indiana", "ia": "iowa", "ks": "kansas", "ky": "kentucky", "la": "louisiana",
    "me": "maine", "md": "maryland", "ma": "massachusetts", "mi": "michigan", "mn": "minnesota",
    "ms": "mississippi", "mo": "missouri", "mt": "montana", "ne": "nebraska", "nv": "nevada",
    "nh": "new hampshire", "nj": "new jersey", "nm": "new mexico", "ny": "new york", "nc": "north carolina",
    "nd": "north dakota", "oh": "ohio", "ok": "oklahoma", "or": "oregon", "pa": "pennsylvania",
    "ri": "rhode island", "sc": "south carolina", "sd": "south dakota", "tn": "tennessee", "tx": "texas",
    "ut": "utah", "vt": "vermont", "va": "virginia", "wa": "washington", "wv": "west virginia",
    "wi": "wisconsin", "wy": "wyoming", "dc": "district of columbia",
    "ab": "alberta", "bc": "british columbia", "mb": "manitoba", "nb": "new brunswick",
    "nl": "newfoundland and labrador", "ns": "nova scotia", "nt": "northwest territories", "nu": "nunavut",
    "on": "ontario", "pe": "prince edward island", "qc": "quebec", "sk": "saskatchewan", "yt": "yukon",
    "nsw": "new south wales", "vic": "victoria", "qld": "queensland", "tas": "tasmania",
    "act": "australian capital territory",
    "us": "united states", "usa": "united states", "united states of america": "united states",
    "uk": "united kingdom", "uae": "united arab emirates",
}

#: Codes of :data:`REGION_ABBREVIATIONS` that :func:`with_region_name` leaves as written in a city field: the country
#: abbreviations (no state or province), DC (part of the city's own name: "Washington DC") and LA (Los Angeles far more
#: often than Louisiana after a place name: "Hollywood, LA").
_NOT_REGION_CODES = frozenset({"us", "usa", "united states of america", "uk", "uae", "dc", "la"})
#: The codes of Canada's provinces and territories, and of the Australian states and territories, in
#: :data:`REGION_ABBREVIATIONS` (the rest are US states')
_CANADA_CODES = frozenset({"ab", "bc", "mb", "nb", "nl", "ns", "nt", "nu", "on", "pe", "qc", "sk", "yt"})
_AUSTRALIA_CODES = frozenset({"nsw", "vic", "qld", "tas", "act"})
#: A country segment after a region code, as written (casefolded, dots and spaces dropped), by the country whose
#: regions the code names
_COUNTRY_NAMES = {"us": frozenset({"us", "usa", "unitedstates", "unitedstatesofamerica", "america"}),
                  "ca": frozenset({"canada", "ca"}), "au": frozenset({"australia", "au", "aus"})}
#: Codes :func:`with_region_name` writes out only when a comma segment after them names the region's country
#: ("Seattle WA, USA"; review41a #4): WA and NT, which also stand for Western Australia and the Northern Territory
#: ("Perth WA", "Darwin NT"), and the codes that are also ISO 3166-1 alpha-2 country codes, which a city may be
#: qualified by as well ("Berlin DE", "Mumbai IN", "Buenos Aires AR", "Lima PE", "Amsterdam NL"). Not CA and MA
#: (Canada, Morocco): docs/judgement-calls.md says why.
_CODES_NEEDING_COUNTRY = frozenset({
    "wa", "nt",
    "al", "ar", "az", "co", "de", "ga", "id", "il", "in", "ky", "md", "me", "mn", "mo", "ms", "mt", "nc", "ne",
    "pa", "sc", "sd", "tn", "va",  # US state codes that are also country codes
    "nl", "nu", "pe", "sk", "yt",  # Canadian ones
})
# a region code as written: 2 or 3 capital letters, a whole word
_REGION_CODE_RE = re.compile(r"[A-Z]{2,3}")
_LOWER_NAME_WORDS = frozenset({"and", "of"})


def _region_name(word: str) -> str | None:
    """The name a state, province or territory code written as ``word`` stands for ("MA" -> "Massachusetts"), in
    capitals as a name is written, else None (lower case, a country or :data:`_NOT_REGION_CODES`)."""
    if not _REGION_CODE_RE.fullmatch(word) or word.casefold() in _NOT_REGION_CODES:
        return None
    name = REGION_ABBREVIATIONS.get(word.casefold())
    if name is None:
        return None
    return " ".join(w if w in _LOWER_NAME_WORDS else w.capitalize() for w in name.split())


def _country_of(code: str) -> str:
    """``"us"``, ``"ca"`` or ``"au"``: the country whose region ``code`` (lower case) names."""
    return "ca" if code in _CANADA_CODES else "au" if code in _AUSTRALIA_CODES else "us"


def _read_as_region(code: str, after: list[str]) -> bool:
    """Whether the code ``code`` (as written) is written out, given the comma segments ``after`` it: the first
    non-empty one must name the region's country (:data:`_COUNTRY_NAMES`); with none, the code must not be one of
    :data:`_CODES_NEEDING_COUNTRY`. Any other segment there ("Perth WA, Australia", "Berlin DE, Germany") leaves it
    as written."""
    code = code.casefold()
    nxt = next((a for a in after if a), None)
    if nxt is None:
        return code not in _CODES_NEEDING_COUNTRY
    return nxt.casefold().replace(".", "").replace(" ", "") in _COUNTRY_NAMES[_country_of(code)]


def with_region_name(text: str | None) -> str:
    """A city field with its state, province or territory code written out: ``"Cambridge MA"`` and ``"Cambridge, MA"``
    -> ``"Cambridge, Massachusetts"``, ``"Cambridge MA, USA"`` -> ``"Cambridge, Massachusetts, USA"`` (geocode38 #5).

    The geocoder looks the field's names up by exact label (:mod:`geoagent.geohint.geocode`, point 1): "Cambridge MA"
    is no item's label, and "MA" beside "Cambridge" none that says which Cambridge is meant. Written out, the state
    is a segment whose item contains one of the city's namesakes (``located in``, P131), which then anchors.

    A code is read only where it qualifies a name: the last word of a comma segment after a name ("Cambridge MA"), or a
    comma segment of its own after the first ("Cambridge, MA"); written in capitals (2 or 3 letters), as codes are
    ("Cambridge ma" is left as written); one of :data:`REGION_ABBREVIATIONS` other than a country's, DC and LA
    (:data:`_NOT_REGION_CODES`). And only where nothing after it says another country (review41a #4): a comma segment
    after the code must name the region's country ("Seattle WA, USA"; "Perth WA, Australia" and "Berlin DE,
    Germany" are left as written), and a code that also stands for another place, a country (ISO 3166-1) or an
    Australian state (:data:`_CODES_NEEDING_COUNTRY`: "Berlin DE", "Mumbai IN", "Perth WA", "Darwin NT"), is written
    out only with that segment. Anything else is returned as given (``None`` as ``""``); runs of spaces become one.
    """
    if not text:
        return ""
    parts = [" ".join(p.split()) for p in str(text)[:MAX_NAME_CHARS].split(",")]
    out: list[str] = []
    country_segments: set[int] = set()  # segments read as the country of a code before them: never a code themselves
    for i, part in enumerate(parts):
        words = part.split(" ")
        name = _region_name(words[-1]) if words and i not in country_segments else None
        if name is not None and not _read_as_region(words[-1], parts[i + 1:]):
            name = None
        if name is not None:
            # the segment that named the code's country ("Toronto ON, CA": Canada) stays as written, not California
            # (review41c #2)
            nxt = next((j for j in range(i + 1, len(parts)) if parts[j]), None)
            if nxt is not None:
                country_segments.add(nxt)
        if name is not None and len(words) > 1:
            out += [" ".join(words[:-1]), name]  # "Cambridge MA": the name, then its state
        elif name is not None and i > 0 and len(words) == 1:
            out.append(name)  # "Cambridge, MA"
        else:
            out.append(part)
    if len(out) == len(parts) and all(a == b for a, b in zip(out, parts)):
        return str(text)
    return ", ".join(out)


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
    # session 35 (geocode35 #5): Japanese highways ("Koshu-kaido"), Hungarian út / körút ("Andrássy út"), English
    # "prospect" ("Nevsky Prospect"), motorways. Not "mile": the Square Mile and the Magnificent Mile are districts
    "kaido", "kaidō", "kaidou", "kaidô", "út", "körút", "prospect", "motorway",
)
# Designators that START a linear feature's name ("Rue de Rivoli", "Calle Mayor", "Avenida Paulista").
_LINEAR_PREFIX_WORDS = (
    "rue", "calle", "avenida", "avenue", "av", "boulevard", "bd", "blvd", "via", "viale", "carrer", "rua",
    "calzada", "paseo", "passeig", "strada", "corso", "quai", "gran via", "allée", "allee", "straße", "strasse",
    "rambla",
    "ulitsa", "odos", "leoforos", "jalan", "duong", "đường", "phố", "pho", "ulica", "ul.", "улица",
    "проспект", "thanon", "sharia", "shari", "شارع", "rehov", "רחוב", "carrera",
    # session 35: Portuguese calçada, French "Route de Lausanne", Spanish ruta / carretera (numbered routes alone:
    # _ROUTE_NUMBER_RE; "Route One Cafe", "Route 9 Diner" are businesses)
    "calçada", "calcada", "route de", "ruta", "carretera",
)
# Compound endings written without a space ("Friedrichstraße", "Omotesando-dori", "表参道通り"); as in the release,
# the romanised bound morphemes -zaka (slope: "Dogenzaka") and -bashi (bridge: "Nihonbashi") and the kanji street
# and slope endings (通, 坂, 坂上, 坂下, 坂道, 街道, 大路). Not the release's bare 街: it also ends district names
# (中華街, Chinatown; 商店街, a shopping street's whole quarter).
_LINEAR_COMPOUND_ENDINGS = ("straße", "strasse", "gasse", "allee", "straat", "gatan", "-dori", "-dōri", "zaka", "bashi",
                            "通り", "通", "坂", "坂上", "坂下", "坂道", "街道", "大街", "大道", "大路", "路", "대로",
                            # session 35: "-kaido"
                            "-kaido", "-kaidō")
# Compound endings of one-word names only (session 35): "Nagykörút", "Kurfürstendamm", "Prinsengracht" (a canal and
# its quays), not "Hotel Prinsengracht"
_ONE_WORD_COMPOUND_ENDINGS = ("körút", "damm", "gracht")
# a numbered route and nothing else: "Route 66", "National Route 20", "Route 413" (geocode35 #5)
_ROUTE_NUMBER_RE = re.compile(r"^(?:national\s+)?route\s+\d+[a-z]?$", re.IGNORECASE)
# Compound starts written without a space (Thai "ถนนสุขุมวิท", Thanon Sukhumvit).
_LINEAR_COMPOUND_STARTS = ("ถนน",)

#: generic designators: a name that is one of them alone ("Intersection", "the street") is no linear feature's name
#: (not "Broadway", "Corso", "Rambla", "Embankment": streets' names too)
_DESIGNATORS = frozenset({"street", "st", "road", "rd", "avenue", "ave", "av", "boulevard", "blvd", "bd", "lane", "ln",
                          "drive", "dr", "highway", "freeway", "expressway", "parkway", "pkwy", "crossing", "intersection",
                          "alley", "motorway", "route", "calle", "rue", "via", "kaido", "prospect", "mile"})
_SUFFIX_RE = re.compile(r"(?:^|\s)(?:" + "|".join(re.escape(w) for w in _LINEAR_SUFFIX_WORDS) + r")\.?$", re.IGNORECASE)
# the designator is a whole word ("Viaduct", "Avalon", "Phoenix" are not "via", "av", "pho"), an abbreviation
# may carry its period ("Av. Paulista"), and a name follows
_PREFIX_RE = re.compile(r"^(?:" + "|".join(re.escape(w) for w in _LINEAR_PREFIX_WORDS) + r")\.?\s+\S", re.IGNORECASE)
# short designators that also begin business names ("Pho 10", "Pho 24": noodle restaurants; "Via 45"): followed by
# a bare number and nothing else, the name is not a street's ("Pho Hue", "Via 20 Settembre", "Av. 9 de Julio" are).
# Full designators keep numbered streets ("Calle 72", "Carrera 7" in Bogota's grid).
_SHORT_PREFIX_NUMBER_RE = re.compile(r"^(?:pho|via|av)\.?\s+\d+[a-z]?$", re.IGNORECASE)
_HOUSE_NUMBER_RE = re.compile(r"^\d+[a-z]?\s", re.IGNORECASE)  # "500 Fifth Avenue" is a building address
#: the most characters of one answered name the geocoder reads (a longer field is no name: a looping answer cut off
#: inside its string); it bounds every pattern run over the untrusted text, the bracket pattern below among them,
#: which is quadratic in the length of a run of unclosed brackets (break33 #2: 58 s for 32,000 of them)
MAX_NAME_CHARS = 300

_PAREN_RE = re.compile(r"\s*[\(\[（【{｛][^\)\]）】}｝]*[\)\]）】}｝]")
_PAREN_CONTENT_RE = re.compile(r"[\(\[（【{｛]([^\)\]）】}｝]*)[\)\]）】}｝]")
# an aside opened and never closed, to the end of the text: "Shibuya (Miyamasuzaka" (an answer cut off at the token
# limit, its JSON closed by the lenient reader; geocode38 #7: fault 1 came back there); no bracket after the opening
_UNCLOSED_RE = re.compile(r"\s*[\(\[（【{｛]([^\(\[（【{｛\)\]）】}｝]*)$")
_SPLIT_RE = re.compile(
    r"\s*(?:/|;|\||,|\s+or\s+|\s+[—–-]\s+|\s+&\s+|\s+and\s+|\s+near\s+|\s+at\s+"
    # a place placed by another (geocode35 #8): "TGI Fridays across the street", "Shibuya Station on Meiji-dori";
    # written in lower case only, as a name capitalises such a word ("The Opposite House")
    r"|(?-i:\s+across(?:\s+from)?\s+|\s+opposite(?:\s+to)?\s+|\s+in\s+front\s+of\s+|\s+behind\s+|\s+beside\s+"
    r"|\s+next\s+to\s+|\s+on\s+))\s*", re.IGNORECASE
)
# leading words before the name, repeated ("likely near the Marais"): place words ("between Shibuya and Harajuku": the
# first name, break33 #4, as "Shibuya / Harajuku") and hedges (geocode35 #6: "probably Le Marais" fell to the city)
_LEAD_RE = re.compile(r"^(?:(?:in front of|across from|across|opposite to|opposite|behind|beside"
                      r"|near|around|by|off|in|at|between|the area (?:of|around)|just off|close to|next to"
                      r"|likely|probably|possibly|perhaps|maybe|presumably|apparently|somewhere)\s+)+",
                      re.IGNORECASE)
_TRAIL_RE = re.compile(
    r"\s+(?:area|district|neighbourhood|neighborhood|vicinity|region|intersection|ward|shop|store)$", re.IGNORECASE
)
_PUNCT_RE = re.compile(r"[\W_]+", re.UNICODE)

# one coordinate of a pair: an optional label ("lat", "Longitude:", "lng="), an optional hemisphere letter before or
# after the number, an optional degree sign (also the look-alikes º and ˚); ASCII digits only, at most 3 before the point
_COORD_PART = (
    r"(?:(?P<label{i}>latitude|lat|longitude|long|lon|lng)\.?\s*[:=]?\s*)?"
    r"(?:(?P<pre{i}>[NSEW])\s*)?"
    r"(?P<num{i}>[+\-\u2212]?[0-9]{{1,3}}(?:\.[0-9]+)?)"
    r"(?:\s*(?P<deg{i}>[°º˚]))?"
    # minutes and seconds (degrees-minutes-seconds, session 17): only after a degree sign (checked in the code),
    # each with its own mark (prime or apostrophe; double prime, straight or curly double quote, two primes)
    r"(?:\s*(?P<min{i}>[0-9]{{1,2}}(?:\.[0-9]+)?)\s*[\u2032'\u2019]"
    r"(?:\s*(?P<sec{i}>[0-9]{{1,2}}(?:\.[0-9]+)?)\s*(?:[\u2033\"\u201d]|\u2032\u2032|''))?)?"
    r"(?:\s*(?P<post{i}>[NSEW])(?![A-Za-z]))?"
)
_COORD_PAIR_RE = re.compile(_COORD_PART.format(i=1) + r"(?:\s*[,;/]\s*|\s+)" + _COORD_PART.format(i=2), re.IGNORECASE)
# a geo URI (RFC 5870, https://www.rfc-editor.org/rfc/rfc5870): "geo:" latitude "," longitude, an optional altitude,
# then parameters (";u=35", ";crs=wgs84"); a URI's numbers are plain decimals, integers included (geocode38 #11)
_GEO_URI_RE = re.compile(r"geo:\s*(?P<lat>[+\-]?[0-9]{1,3}(?:\.[0-9]+)?)\s*,\s*(?P<lon>[+\-]?[0-9]{1,3}(?:\.[0-9]+)?)"
                         r"(?:\s*,\s*[+\-]?[0-9]+(?:\.[0-9]+)?)?(?P<params>(?:;[a-z0-9\-]+(?:=[^;\s]*)?)*)", re.IGNORECASE)
# full-width forms (U+FF01-U+FF5E: "３５.６６，１３９.７０", "Ｎ", "ｌａｔ", as a Japanese or Chinese input method writes them)
# and the ideographic space read as their ASCII forms (geocode38 #11). Not NFKC: it would also turn the degree
# look-alikes "º" and "˚" into a letter and a combining mark
_FULL_WIDTH = {**{c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}, 0x3000: 0x20}
_BRACKETS = {"(": ")", "[": "]", "<": ">"}
#: longest text read as coordinates, characters after collapsing whitespace ("Latitude: 33.856812° S, Longitude:
#: 151.215312° E" is 48); longer text (a looping answer) is no plain pair and is not matched at all
COORDINATES_MAX_CHARS = 100


def is_null_answer(text: str | None) -> bool:
    """True when ``text`` is empty or a stock "no answer" word (``unknown``, ``n/a``, ...), case-insensitive."""
    if text is None:
        return True
    # curly apostrophes as straight ones, and a full stop of any script ("未知。") off (review38b #4)
    folded = text.replace("\u2019", "'").replace("\u2018", "'").strip().strip(".。．!！").strip().casefold()
    return folded in NULL_ANSWERS


#: Latin letters without a Unicode decomposition, folded by hand (lower case: applied after casefold)
_UNDECOMPOSED = str.maketrans({"ø": "o", "ł": "l", "đ": "d", "æ": "ae", "œ": "oe", "ı": "i", "ð": "d", "þ": "th",
                               "ħ": "h"})


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
    # Latin letters with no decomposition (geocode35 #7: "Ba Đình" and "Ba Dinh", "Nørrebro" and "Norrebro" were two
    # names), as the echo rule folds them (geoagent.geohint.echo)
    words = _PUNCT_RE.sub(" ", stripped.casefold().translate(_UNDECOMPOSED)).split()
    if len(words) > 1 and words[0] == "the":
        words = words[1:]
    return " ".join(words)


def strip_parentheticals(text: str) -> str:
    """Remove parenthesised asides: ``"Fire Street (Jinnan 1-chome)"`` -> ``"Fire Street"`` (fault 1), in round,
    square, curly or CJK brackets, and an aside opened and never closed at the end (``"Shibuya (Miyamasuzaka"``)."""
    return re.sub(r"\s{2,}", " ", _UNCLOSED_RE.sub("", _PAREN_RE.sub("", text))).strip()


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
    core = strip_parentheticals(str(text)[:MAX_NAME_CHARS]).strip().rstrip(".")
    if not core or _HOUSE_NUMBER_RE.match(core) or _SHORT_PREFIX_NUMBER_RE.match(core):
        return False
    if fold(core) in _DESIGNATORS:  # a designator alone ("Intersection", "the street") names no feature
        return False
    if _SUFFIX_RE.search(core) or _PREFIX_RE.search(core) or _ROUTE_NUMBER_RE.match(core):
        return True
    low = core.casefold()
    if " " not in low and any(low.endswith(e) and len(low) > len(e) for e in _ONE_WORD_COMPOUND_ENDINGS):
        return True
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
    segment of a compound answer split on ``/ ; , or — & and near at``, with a leading "near/around/in/between"
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
    text = " ".join(str(text).split())[:MAX_NAME_CHARS]
    out: list[str] = []
    seen: set[str] = set()

    def add(candidate: str, *, segment: bool = True) -> None:
        c = candidate.strip()
        key = fold(c)
        # a segment that is a designator alone ("Intersection" of "Intersection near X") names nothing to look up;
        # the whole text is looked up whatever it is (a town named Street, a suburb named Prospect, "The Crossing")
        if len(c) >= 2 and key and key not in seen and not is_null_answer(c) and not (segment and key in _DESIGNATORS):
            seen.add(key)
            out.append(c)

    add(text, segment=False)
    bare = strip_parentheticals(text)
    add(bare, segment=False)
    # leading place and hedge words off the whole text first: "likely near the Marais" is the Marais, not "likely"
    for seg in _SPLIT_RE.split(_LEAD_RE.sub("", bare)):
        for cleaned in _clean_segment(seg):
            add(cleaned)
    for inner in [*_PAREN_CONTENT_RE.findall(text), *_UNCLOSED_RE.findall(_PAREN_RE.sub("", text))]:
        for seg in _SPLIT_RE.split(inner):
            for cleaned in _clean_segment(seg):
                add(cleaned)
    return out[:max_variants]


def primary_name(text: str | None) -> str:
    """The first named thing in an answer: parentheticals removed, first segment of a compound answer.

    ``"Yamate-dori near Naka-Meguro Station"`` -> ``"Yamate-dori"``; ``"Fire Street (Jinnan 1-chome)"``
    -> ``"Fire Street"``. A segment that is a designator alone is passed over when another follows
    (``"Intersection near 1251 Avenue of the Americas"`` -> ``"1251 Avenue of the Americas"``; a lone ``"Street"`` stays,
    :func:`is_bare_designator`). Empty for a null answer. Reads the first :data:`MAX_NAME_CHARS` characters.
    """
    if text is None or is_null_answer(text):
        return ""
    bare = strip_parentheticals(" ".join(str(text).split())[:MAX_NAME_CHARS])
    names = [c for seg in _SPLIT_RE.split(_LEAD_RE.sub("", bare)) if (c := _clean_segment(seg)[0])]
    return next((c for c in names if not is_bare_designator(c)), names[0] if names else "")


def is_bare_designator(text: str | None) -> bool:
    """Whether ``text`` is a street designator alone, naming no feature (``"Street"``, ``"the intersection"``,
    ``"Crossing"``): :func:`is_linear_name` is False for it (a town named Street, a suburb named Prospect are places),
    and the geocoder's building level defers it to the area as a street (:mod:`geoagent.geohint.geocode`)."""
    return bool(text) and fold(text) in _DESIGNATORS


def plain_coordinates(text: str | None) -> tuple[float, float] | None:
    """The point an answer gives as plain coordinates, ``(lat_deg, lon_deg)`` in degrees (WGS84), else None.

    Not part of the paper's protocol (seed 000 App. A.1 asks for names; Sec. 4.2 geocodes them): a model that answers
    a field with coordinates anyway ("48.8584, 2.2945", "48.8584° N, 2.2945° E", "lat 48.8584 lon 2.2945") has named
    a point, which the geocoder uses as it is instead of searching for the text as a name (session 16).

    Accepted: the whole text (spaces and one pair of round or square brackets aside) is two numbers separated by a
    comma, semicolon, slash or spaces, each optionally labelled (``lat``/``latitude``, ``lon``/``long``/``lng``/
    ``longitude``, with ``:`` or ``=``), with a degree sign and a hemisphere letter (N/S/E/W, before or after the
    number, any case; S and W negate). Unlabelled numbers without letters are latitude, then longitude; labels or
    letters may swap the order. Latitude must lie in [-90, 90] and longitude in [-180, 180].

    Degrees-minutes-seconds are read as well (session 17; version 3 of the geocoding rules): whole degrees with a
    degree sign, then minutes with a prime or apostrophe (``48°51'``, ``48° 51.5′``), then optionally seconds with a
    double prime or double quote (``48°51'30"N``, ``48°51′29.6″ N``); minutes and seconds below 60, the seconds'
    minutes whole; the value is degrees + minutes / 60 + seconds / 3600 with the sign or hemisphere of the whole.

    A geo URI (RFC 5870; version 14 of the geocoding rules, geocode38 #11) is read as well: ``geo:48.8584,2.2945``,
    any case, optionally in angle brackets, with an altitude and parameters after the pair (``;u=35``); its numbers
    are the URI's own decimals (an integer pair is a point there: the scheme says what they are); a ``crs``
    parameter other than ``wgs84`` makes it None (another reference system). And full-width forms
    (``"３５.６６，１３９.７０"``, ``"ｌａｔ ３５.６６"``) and the ideographic space are read as their ASCII forms first.

    Ambiguous text is None, so that it is looked up as a name as before: one number, three or more, a number out
    of range, minutes without a degree sign ("48 51' N") or after fractional degrees ("48.5°30'"), minutes or
    seconds of 60 or more, degrees-minutes beside a number without a degree sign ("48° 51' 30.5 N": one latitude
    whose seconds lost their mark, not the pair 30.5 N, 48.85 E), decimal commas ("48,8584"), an integer without a
    degree sign or label ("48, 2"; also with a hemisphere letter alone: "E19, N1" and "N1, W1" are road numbers and
    postcode districts), a sign together with a hemisphere letter ("-48.8 S"), two letters or labels that name the
    same axis or disagree, coordinates inside other text ("Eiffel Tower (48.8584, 2.2945)") and text over
    :data:`COORDINATES_MAX_CHARS` characters. The point (0, 0) is None as well: "0.0, 0.0" is how software writes
    "no location", and read as a point it would score a guess ~5,000 km off where the text names no place (it then
    falls back to the city).
    """
    if text is None:
        return None
    # one space per run: adjacent optional spaces in the pattern stay linear
    t = " ".join(str(text).translate(_FULL_WIDTH).split())
    if len(t) > COORDINATES_MAX_CHARS:
        return None
    if t[:1] in _BRACKETS and t.endswith(_BRACKETS[t[:1]]):
        t = t[1:-1].strip()
    if t[:4].casefold() == "geo:":
        return _geo_uri(t)
    m = _COORD_PAIR_RE.fullmatch(t)
    if m is None:
        return None
    values: list[float] = []
    axes: list[str | None] = []
    if (m.group("min1") or m.group("min2")) and not (m.group("deg1") and m.group("deg2")):
        # degrees-minutes beside a number without a degree sign: "48° 51' 30.5 N" is one latitude whose seconds lost
        # their mark, not the pair (30.5 N, 48° 51'); "48°51'30\" 2.5" mixes two notations
        return None
    for i in (1, 2):
        num, label, pre, post, deg, minutes, seconds = (
            m.group(f"{g}{i}") for g in ("num", "label", "pre", "post", "deg", "min", "sec"))
        if pre and post:
            return None  # "N 48.8 N": one letter too many
        hemi = (pre or post or "").upper()
        if not (label or deg) and "." not in num:
            # "48, 2", "10 20": no sign that these are degrees; nor is a letter alone: "E19, N1" (a motorway
            # junction), "N1, W1" (London postcode districts) are road numbers and postcodes
            return None
        if hemi and num[0] in "+-\u2212":
            return None  # "-48.8 S": the sign and the letter may both mean south
        value = float(num.replace("\u2212", "-"))
        if minutes is not None:
            if not deg or "." in num or float(minutes) >= 60.0:
                return None  # "48 51' N", "48.5°30'", "48°75'": not degrees-minutes as written anywhere
            if seconds is not None and ("." in minutes or float(seconds) >= 60.0):
                return None  # "48°51.5'30\"", "48°51'60\""
            extra = float(minutes) / 60.0 + (float(seconds) / 3600.0 if seconds is not None else 0.0)
            value = -(abs(value) + extra) if num[0] in "-\u2212" else value + extra  # "-0°30'" is south/west
        axis = None if not label else "lat" if label.lower().startswith("lat") else "lon"
        if hemi:
            hemi_axis = "lat" if hemi in "NS" else "lon"
            if axis is not None and axis != hemi_axis:
                return None  # "lat 2.3 E"
            axis = hemi_axis
            value = -value if hemi in "SW" else value
        values.append(value)
        axes.append(axis)
    if axes[0] is None and axes[1] is None:
        axes = ["lat", "lon"]
    elif axes[0] is None or axes[1] is None:
        known = axes[0] or axes[1]
        other = "lon" if known == "lat" else "lat"
        axes = [a or other for a in axes]
    if axes[0] == axes[1]:
        return None  # both latitudes (or both longitudes)
    lat, lon = (values[0], values[1]) if axes[0] == "lat" else (values[1], values[0])
    if not (-90.0 <= lat <= 90.0 and -180.0 <= lon <= 180.0):
        return None
    if lat == 0.0 and lon == 0.0:
        return None  # "0.0, 0.0" ("Null Island") is the usual placeholder for an unknown point, not a guess
    return lat, lon


def _geo_uri(t: str) -> tuple[float, float] | None:
    """The ``(lat_deg, lon_deg)`` of a whole geo URI ``t`` (RFC 5870, :func:`plain_coordinates`), else None: another
    ``crs`` than WGS84, a number out of range, (0, 0), or anything after the URI."""
    m = _GEO_URI_RE.fullmatch(t)
    if m is None:
        return None
    params = {k.casefold(): v.casefold() for k, _, v in (p.partition("=") for p in m.group("params").split(";")[1:])}
    if params.get("crs", "wgs84") != "wgs84":
        return None  # another reference system's numbers are not WGS84 degrees
    lat, lon = float(m.group("lat")), float(m.group("lon"))
    if not (-90.0 <= lat <= 90.0 and -180.0 <= lon <= 180.0) or (lat == 0.0 and lon == 0.0):
        return None
    return lat, lon
