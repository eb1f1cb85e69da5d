"""Defensive parser of GeoHint answers (untrusted model text -> fields), never eval/exec.

The forced schema (seed 000 Sec. 4.1, App. A.1) asks for a JSON object with ``city``, ``area``,
``building``, ``confidence_area``, ``confidence_building`` and ``clues``; the evidence-checklist
condition adds an ``evidence`` object with one string per category; the permissive control (v1) uses
``country``, ``city``, ``area``, ``place``, ``confidence``, ``clues``. Real answers wrap the JSON in code
fences, put prose (or a whole checklist in Markdown) before it, use single quotes, leave trailing commas
or comments, or are cut off at the token limit (release ``forced_chain_raw.jsonl``).

Strategy: read every top-level ``{...}`` object, fenced blocks first, then the whole text, with the
shared lenient reader (:mod:`geoagent.llmjson`: comments, trailing commas, single quotes, Python
literals, ``70%``, an answer cut off inside a string or bracket). The candidate with the most schema keys
wins, standard JSON before a repaired one on a tie; but when two objects name different places (a
shared ``city``/``area``/``building`` field differs, case aside: a correction, a second guess, an echoed
template), or when one object gives a field twice under keys that differ in case (``"city"`` and ``"City"``)
with different places, the answer is a failure ("conflicting answers"), never the first (or last) guess. If nothing parses, ``"key": "value"`` pairs are read
with a regular expression. The raw text is always kept; a failure is recorded, never raised.

A place field (``city``, ``area``, ``building``/``place``, ``country``) names a place only when it is a JSON
string: a number (``NaN``, ``Infinity`` and ``1e999`` included), true/false, null, a list or an object is
absent, no answer for that level (an answer with no place left is a failure); ``clues`` keep their text items
and an evidence slot its text (a slot that is not a string keeps its category with no text, ``""``).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from geoagent.geohint.placenames import REGION_ABBREVIATIONS, is_null_answer
from geoagent.llmjson import (MAX_CHARS, Candidate, Percent, decode_string_body, fenced_blocks, iter_candidates,
                              without_reasoning)
from geoagent.scoring.truncation import is_finished
# finish_reason_text lives in textfmt (neutral: scoring.truncation reads reasons through it too; rev43b #1) and is
# still importable from here, where the answer parser reads and stores the reason (crawl43 #3)
from geoagent.textfmt import finish_reason_text, label_text

SCHEMA_KEYS = frozenset(
    {"city", "area", "building", "place", "country", "confidence", "confidence_area", "confidence_building", "clues", "evidence"}
)
#: ``ParsedAnswer.error`` of an answer whose fields were read with a pattern (no JSON object), kept in stored
#: results as ``extra["parse_error"]`` (:func:`geoagent.geohint.aggregate.no_json_object` reads it)
PATTERN_READ_ERROR = "no parsable JSON object; fields read with a pattern"
EVIDENCE_CATEGORIES = ("infrastructure", "vegetation", "architecture", "script", "terrain")
NOT_VISIBLE = "not visible"

# a key starts at a word start (the lookbehind): trying every position inside a long run of letters made the
# fallback quadratic (minutes for a looping answer); a number followed by a decimal comma (``0,85``) is no value (it
# read as 0.0, the digits before the comma)
# a second quoted value right after a field's value: '"city": "Paris" or "Lyon"', '"city": "Paris"/"Lyon"'
# (the next quoted token a value, not the next key: '"area": "Montmartre" / "building": ...' is two fields, rev26 #7)
_RX_OR_NEXT = re.compile(r"""["']?[ \t]*(?:or\b|/)[ \t]*(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')(?![ \t]*:)""", re.I)
#: the fields that name a place (:func:`_place_fields`)
_PLACE_KEYS = frozenset({"city", "area", "building", "place"})
# a quoted "value" followed by a colon is the next key ('Final: "city": "Paris"' is the pair city: Paris, not
# Final: city, which hid the correction after a label: rev26 #7)
_PAIR = re.compile(r"""["']?(?<![A-Za-z_])(?P<key>[A-Za-z_]+)["']?\s*:\s*(?:"(?P<dq>(?:[^"\\]|\\.)*)"(?!\s*:)|'(?P<sq>(?:[^'\\]|\\.)*)'(?!\s*:)|(?P<num>-?\d+(?:\.\d+)?)(?!,\d))""")


@dataclass(slots=True)
class ParsedAnswer:
    """A parsed GeoHint answer.

    Attributes
    ----------
    ok : bool
        A JSON object (possibly repaired) or at least one schema field was recovered.
    city, area, building : str or None
        Answer fields; the permissive schema's ``place`` is stored as ``building``.
    confidence_area, confidence_building : float or None
        Confidences in [0, 1] (v1's single ``confidence`` fills both).
    clues : list of str
        The answer's clues, text items only, each cleaned as a place field (:func:`geoagent.textfmt.label_text`;
        blank ones dropped).
    evidence : dict or None
        Checklist answers by canonical category (:data:`EVIDENCE_CATEGORIES`), when an ``evidence``
        object was present.
    evidence_slots : dict or None
        Table 11's counts of that object, every matching key: category -> [slots, "not visible" slots]
        (:func:`evidence_slot_counts`).
    country : str or None
    method : str
        ``json`` (standard JSON as written), ``repaired`` (read leniently), ``regex`` or ``failed``.
    error : str or None
        Why parsing failed or needed repair.
    truncated : bool
        The JSON object was not closed (answer cut off).
    raw : str
        The verbatim text.
    """

    ok: bool
    raw: str
    city: str | None = None
    area: str | None = None
    building: str | None = None
    confidence_area: float | None = None
    confidence_building: float | None = None
    clues: list[str] = field(default_factory=list)
    evidence: dict[str, str] | None = None
    evidence_slots: dict[str, list[int]] | None = None
    country: str | None = None
    method: str = "failed"
    error: str | None = None
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def evidence_not_visible(self) -> dict[str, bool]:
        """Per category: the slot is answered "not visible" (starts with it, any case)."""
        if not self.evidence:
            return {}
        return {k: v.strip().lower().startswith(NOT_VISIBLE) for k, v in self.evidence.items()}


#: the words an evidence key is matched by, in the order tried, and the category each names: the release's
#: ``analysis/chain_compliance.py`` ``CATS`` (``infrastructure``, ``vegetation``, ``architecture``, ``language``,
#: ``terrain``; its ``language`` is Table 11's Script column), plus ``script``, the key our own checklist prompt
#: asks for (``geoagent/prompts/geohint_chain.txt``), which names the same category; tried last, so a key the
#: release counts under one of its words ("terrain_and_script": terrain) keeps that category
_CATEGORY_WORDS = (("infrastructure", "infrastructure"), ("vegetation", "vegetation"),
                   ("architecture", "architecture"), ("language", "script"), ("terrain", "terrain"),
                   ("script", "script"))


def canonical_category(key: str) -> str | None:
    """The checklist category (:data:`EVIDENCE_CATEGORIES`) an evidence key as models write it names, or None.

    The release's rule (``analysis/chain_compliance.py``, which Table 11 is computed from; seed 000 Sec. 6.3.2
    does not say how keys are matched): the first of its category words that the lower-cased key contains
    ("Language" -> script, "terrain_climate_vehicles" -> terrain, "1. Infrastructure" -> infrastructure), with
    ``script`` (our prompt's key) read as the release's ``language``. A key naming none of them ("climate",
    "vehicles", "flora", "building") counts in no category, as in the release (before session 12 such words were
    matched too, a category the release never counted)."""
    k = key.lower()
    return next((cat for word, cat in _CATEGORY_WORDS if word in k), None)


# --- candidates ------------------------------------------------------------------------------
def _candidates(text: str) -> list[Candidate]:
    """Every top-level object read leniently from the fenced blocks, then from the whole text."""
    out: list[Candidate] = []
    for src in [*fenced_blocks(text), text]:
        out.extend(c for c in iter_candidates(src, "{", nested=False, percent=True, partial_strings=True)
                   if c.ok and isinstance(c.value, dict))
    return out


# --- field coercion ---------------------------------------------------------------------------
def _text(v: Any) -> str | None:
    """Free text (an evidence slot): a JSON string; anything else (a number, NaN or Infinity, true/false, null, a
    list, an object) is no text (a list's items joined could read ``["not visible"]`` as a declined slot, which the
    release's ``analysis/chain_compliance.py`` counts as an answered one). Cleaned as a label
    (:func:`geoagent.textfmt.label_text`): no control or bidirectional formatting character reaches a table cell,
    and line breaks, tabs and runs of spaces are one space (sec42 #3); the answer's text keeps them (``raw``)."""
    if not isinstance(v, str):
        return None
    return label_text(v) or None


def _place(v: Any) -> str | None:
    """A place name (city, area, building, country): a JSON string that is not blank, else None (no answer
    for that level). The schema asks for a string: a number (also NaN, Infinity, 1e999: read as the city
    "NaN" or "inf" they reached the geocoders), true/false (a "don't know"), null, a list (several guesses,
    never joined into one query) or an object names no place. Cleaned as a label (:func:`geoagent.textfmt.
    label_text`): control characters (ESC, CR, NUL) and bidirectional formatting characters (U+202E) are dropped,
    and line breaks, tabs and runs of spaces are one space, so none reaches ``geohint_scored.csv`` or a geocoder
    query (sec42 #3; a name of only such characters is blank, no place); the answer's text keeps them (``raw``)."""
    if not isinstance(v, str):
        return None
    return label_text(v) or None


def _conf(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, Percent):
        v = f"{v.value}%"
    try:
        x = float(str(v).strip().rstrip("%"))
    except ValueError:
        return None
    if isinstance(v, str) and v.strip().endswith("%"):
        x /= 100  # "80%": a percent, read once (150% stays 1.5, out of range: no confidence; break26 #7)
    elif x > 1 and x <= 100:
        x /= 100  # a bare number in (1, 100]: a percent
    return x if 0 <= x <= 1 else None


def _lowered(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` by lower-cased, stripped key (a later spelling wins), except ``evidence``: the key spelled exactly so
    when there is one, as the release's ``chain_compliance.py`` reads it (a later ``"Evidence": null`` hid the
    checklist), another spelling only without it."""
    low = {str(k).strip().lower(): v for k, v in obj.items()}
    if "evidence" in obj:
        low["evidence"] = obj["evidence"]
    return low


def _fill(ans: ParsedAnswer, obj: dict[str, Any]) -> None:
    low = _lowered(obj)
    places: dict[str, str] = {}  # the first place each field names, over keys that differ in case or spaces
    for k, v in obj.items():
        t = _place(v)
        if t:
            places.setdefault(str(k).strip().lower(), t)
    ans.city = places.get("city")
    ans.area = places.get("area")
    # "place" stands in for a building the answer does not name: absent, or a null answer ("N/A", "unknown": break33
    # #5, the geocoder would drop both)
    building = places.get("building")
    ans.building = places.get("place") if (building is None or is_null_answer(building)) and places.get("place") \
        else building
    ans.country = places.get("country")
    conf = _conf(low.get("confidence"))
    ans.confidence_area = _conf(low.get("confidence_area", conf))
    ans.confidence_building = _conf(low.get("confidence_building", conf))
    clues = low.get("clues")
    # text items only (a number or NaN is no clue), cleaned as the place fields are (crawl43 #3): the answer's
    # text keeps them; a clue of nothing but such characters is none
    items = clues if isinstance(clues, list) else [clues] if isinstance(clues, str) else []
    ans.clues = [t for c in items if (t := _text(c))]
    ans.evidence = _evidence(low)
    ans.evidence_slots = evidence_slot_counts(low.get("evidence"))


def _evidence(low: dict[str, Any]) -> dict[str, str] | None:
    """The object's ``evidence`` object by canonical category (the first key of each; a slot that is not text:
    ``""``), else None."""
    ev = low.get("evidence")
    if not isinstance(ev, dict):
        return None
    out: dict[str, str] = {}
    for k, v in ev.items():
        cat = canonical_category(str(k))
        if cat and cat not in out:
            out[cat] = _text(v) or ""
    return out


def evidence_slot_counts(ev: Any) -> dict[str, list[int]] | None:
    """Table 11's slot counts of one ``evidence`` object: category -> ``[slots, slots answered "not visible"]``
    over every key that names the category (:func:`canonical_category`), as the release's
    ``analysis/chain_compliance.py`` counts them (a model writing ``"terrain"`` and ``"terrain_notes"`` gives two
    terrain slots there; before session 12 only the first counted). A slot is "not visible" when its text starts
    with it (any case, spaces stripped); a value that is not text (null, a number, a list, an object) is an answered
    slot, as the release's ``json.dumps`` of it never starts with "not visible". None when ``ev`` is no object;
    categories without a key are absent."""
    if not isinstance(ev, dict):
        return None
    out: dict[str, list[int]] = {}
    for k, v in ev.items():
        cat = canonical_category(str(k))
        if cat is None:
            continue
        c = out.setdefault(cat, [0, 0])
        c[0] += 1
        c[1] += (_text(v) or "").lower().startswith(NOT_VISIBLE)
    return out


def _place_fields(obj: dict[str, Any]) -> dict[str, str]:
    """``city``/``area``/``building`` (or ``place``) of one candidate object, case-folded, blanks left out: the
    place :func:`_fill` reads (the first place each field names over keys that differ in case or spaces; a
    last-spelling-wins read let ``{"city": "Paris", "City": null}`` hide Paris from the clash check)."""
    first: dict[str, str] = {}
    for k, v in obj.items():
        t = _place(v)
        if t:
            first.setdefault(str(k).strip().lower(), t)
    out: dict[str, str] = {}
    for name, keys in (("city", ("city",)), ("area", ("area",)), ("building", ("building", "place"))):
        for k in keys:
            if k in first:
                out[name] = first[k].casefold()
                break
    return out


def _key_clash(obj: dict[str, Any], repeated: tuple[tuple[str, Any], ...] = ()) -> str | None:
    """The first place field one object gives twice, under keys that differ only in case or spaces or under the
    same key (``repeated``: the earlier values the reader's dict lost, :attr:`geoagent.llmjson.Candidate.repeated`),
    with different values (``{"city": "Paris", "City": "Lyon"}`` -> ``"city: 'paris' vs 'lyon'"``), else None.
    Read as one field, the last spelling would win without a word."""
    seen: dict[str, list[str]] = {}
    for k, v in [*repeated, *obj.items()]:
        name = str(k).strip().lower()
        if name not in ("city", "area", "building", "place"):
            continue
        t = _place(v)
        if not t:
            continue
        clash = _first_other(seen.setdefault(name, []), t.casefold())
        if clash is not None:
            return f"{name}: {clash!r} vs {t.casefold()!r}"
    return None


def _first_other(values: list[str], value: str) -> str | None:
    """The first of ``values`` (one field's texts so far) that names another place than ``value``
    (:func:`same_place_text`), else None, ``value`` then added: each new text is compared with every earlier one,
    since "Springfield" agrees with both "Springfield, Illinois" and "Springfield, Missouri", which disagree
    (review39b #3)."""
    for other in values:
        if not same_place_text(other, value):
            return other
    if value not in values:
        values.append(value)
    return None


def same_place_text(a: str, b: str) -> bool:
    """Whether two texts of one answer field name the same place as written, for the clash checks: one place in two
    spellings is one answer, not two (geohint39 #2: "Marais" then "Le Marais" was a conflict, a miss).

    The same place: equal after case folding, or after :func:`geoagent.geohint.echo.normalize_name` (diacritics,
    articles, punctuation: "Marais" / "Le Marais", "Sao Paulo" / "São Paulo"), or, cut at commas into a name and its
    qualifiers, the same name with the qualifiers of one among the other's, in order ("Paris" / "Paris, France",
    "Paris, France" / "Paris, Ile-de-France, France"). A qualifier is compared by what its abbreviation stands for
    (:data:`geoagent.geohint.placenames.REGION_ABBREVIATIONS`: "Springfield, IL" / "Springfield, Illinois", "Austin,
    TX, USA" / "Austin, Texas, United States", "Washington, D.C." / "Washington, DC"); the name itself never is.

    A bare name and a qualified one are the same place whatever the qualifier: "Paris" and "Paris, Texas" read as
    one answer (the bare name names none of its namesakes in particular; the geocoder finds which). Two qualifiers
    that differ are two places: "Paris, France" / "Paris, Texas", "Springfield, Illinois" / "Springfield, Missouri"
    (and a text agreeing with both hides nothing: :func:`_first_other`). A two-letter qualifier is read as a US state
    or Canadian province code, never a country's ("Delhi, IN" is Indiana, so it and "Delhi, India" differ); NSW, VIC, QLD,
    TAS and ACT as Australia's."""
    if a.casefold() == b.casefold():
        return True
    from geoagent.geohint.echo import normalize_name

    na, nb = normalize_name(a), normalize_name(b)
    if na and na == nb:
        return True
    pa, pb = _place_parts(a), _place_parts(b)
    if not pa or not pb or pa[0] != pb[0]:
        return False
    short, long_ = (pa, pb) if len(pa) <= len(pb) else (pb, pa)
    rest = iter(long_[1:])
    return all(q in rest for q in short[1:])  # short's qualifiers among long's, in order


def _place_parts(text: str) -> list[str]:
    """``text`` cut at commas, blank parts left out: its name (:func:`~geoagent.geohint.echo.normalize_name`) and its
    qualifiers (their normalised words, articles kept: "IL" and "LA" are codes there, not the Italian and French
    articles; letters written apart, "U.S.A.", "D.C.", joined; then read through :data:`REGION_ABBREVIATIONS`); []
    when the name is blank."""
    from geoagent.geohint.echo import normalize_name, normalize_tokens

    name, *quals = text.split(",")
    head = normalize_name(name)
    if not head:
        return []
    out = [head]
    for q in quals:
        words = normalize_tokens(q, keep_articles=True)
        if not words:
            continue
        q = " ".join(words)
        if all(len(w) == 1 for w in words):
            q = "".join(words)
        out.append(REGION_ABBREVIATIONS.get(q, q))
    return out


def _clash(places: list[dict[str, str]]) -> str | None:
    """The first field two candidate objects give different places for (``"city: 'a' vs 'b'"``; one place in two
    spellings is none: :func:`same_place_text`), or None."""
    seen: dict[str, list[str]] = {}
    for fields in places:
        for name, value in fields.items():
            other = _first_other(seen.setdefault(name, []), value)
            if other is not None:
                return f"{name}: {other!r} vs {value!r}"
    return None


# a double-quoted string in a JSON key or value position: after "{", "[", "," or ":" (spaces allowed); a quote
# mark in prose (5" tall) is preceded by something else and opens no span
_JSON_STRING = re.compile(r'(?<=[{\[,:])(\s*)"(?:[^"\\]|\\.)*"')


def _json_string_spans(raw: str) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the double-quoted JSON string literals in ``raw`` (opening to closing quote
    inclusive, end exclusive), for the pattern fallback: a ``key: value`` pattern that starts strictly inside
    one is text of a value (a clue saying "city: 'Lyon'"), not a field (before session 13 it was read as the
    city, ahead of the real ``"city"`` key after it)."""
    return [(m.start() + len(m.group(1)), m.end()) for m in _JSON_STRING.finditer(raw)]


def _inside_span(m: re.Match[str], starts: list[int], spans: list[tuple[int, int]]) -> bool:
    """Whether the ``key: value`` pattern match ``m`` is text inside a JSON string of ``spans``
    (:func:`_json_string_spans`: in order, not overlapping; ``starts`` their start offsets): it starts strictly
    inside one, or at one's opening quote while that string runs on past the key (``["city: 'Lyon'"]``, a clue whose
    text starts like a field; a real key's string, ``"city"``, closes right after it). By binary search: testing every
    span for every match was quadratic (minutes for a long looping answer)."""
    pos = m.start()
    i = bisect.bisect_right(starts, pos) - 1  # the last span starting at or before pos
    if i < 0:
        return False
    s, e = spans[i]
    return s < pos < e or (s == pos and m.end("key") + 1 < e)


def _score(obj: dict[str, Any]) -> int:
    return sum(1 for k in obj if str(k).strip().lower() in SCHEMA_KEYS)


#: version of :func:`parse_answer`'s rules, recorded with every parsed campaign answer (the ``answers`` message's
#: ``parser_version``, carried on to the scored row's ``extra.parser_version``) and with every row the raw importer
#: reads: raise it whenever a change of the rules can read an answer text differently, so rows read by different
#: rules can be told apart (the answer text is kept: ``model_responses``). 1: from 2026-12-04 (rows without the
#: field were parsed before versions were recorded); 2: an object running past the reader's first 200,000
#: characters is "answer too long", no answer, where 1 parsed it as a truncated one (break32 #5); 3: a ``place``
#: field stands in for a ``building`` that is a null answer ("N/A"), not only for a missing one (break33 #5); 4: the
#: answer is read outside the model's reasoning spans (``<think>...</think>``, :func:`geoagent.llmjson.without_reasoning`)
#: and one place in two spellings ("Marais" / "Le Marais", "Paris" / "Paris, France") is no conflict
#: (:func:`same_place_text`; geohint39 #2); 5 (session 40): reasoning after a short preamble ("Sure. <think>...</think>")
#: and Magistral's ``[THINK]...[/THINK]`` are cut too, an unclosed reasoning block of an answer the model finished
#: itself (``finish_reason``: ``stop``, ``end_turn``) is read up to the JSON object it ends with (walk39 #4a-c), and a
#: qualifier in another spelling ("Springfield, IL" / "Springfield, Illinois", "Austin, TX, USA") or with more parts
#: after the same ones is one place (geohint39 #2); 6 (session 41): the Australian state and territory codes NSW, VIC,
#: QLD, TAS and ACT are read as qualifiers ("Sydney, NSW" / "Sydney, New South Wales" is one place); 7 (session 42):
#: place fields and evidence texts lose control and bidirectional formatting characters, and line breaks, tabs and
#: runs of spaces are one space (:func:`geoagent.textfmt.label_text`; sec42 #3: ESC, CR and U+202E reached
#: ``geohint_scored.csv`` and the Wikidata search); 8 (session 43, crawl43 #3): the finish reason is read, and stored
#: with the answer (``extra.finish_reason``), cleaned the same way (:func:`finish_reason_text`), so a reason such as
#: ``"length\u202e"`` is ``length`` (cut off) and ``"stop\x1b"`` is ``stop`` (a finished answer) where 7 read them as
#: no known reason, and the clues (kept on the queue with the parsed fields, in no row) are cleaned too.
ANSWER_PARSER_VERSION = 8


def parse_answer(text: str | None, finish_reason: str | None = None) -> ParsedAnswer:
    """Parse a GeoHint answer; never raises on bad text.

    Parameters
    ----------
    text : str or None
        The model's verbatim answer.
    finish_reason : str or None
        The provider's finish reason as stored with the answer (None: not recorded), read as
        :func:`finish_reason_text` cleans it. Only a reasoning block the answer opens and never closes depends on
        it: a finished answer (``stop``, ``end_turn``, ``STOP``: :func:`geoagent.scoring.truncation.is_finished`) is
        read up to the JSON object it ends with, any other is no answer (:func:`geoagent.llmjson.without_reasoning`;
        walk39 #4c).

    Returns
    -------
    ParsedAnswer
        ``ok`` False (with ``error``) when no schema field could be recovered.
    """
    kept = "" if text is None else str(text)
    ans = ParsedAnswer(ok=False, raw=kept)
    if not kept.strip():
        ans.error = "empty answer"
        return ans
    # the answer is read outside the model's reasoning spans (``<think>...</think>``: its drafts are no answer);
    # ``ans.raw`` keeps the text as it came
    raw = without_reasoning(kept, finished=is_finished(finish_reason_text(finish_reason)))
    if not raw.strip():
        ans.error = "no answer after the model's reasoning (<think> ... </think> or [THINK] ... [/THINK])"
        return ans
    best: tuple[int, dict[str, Any], str, bool] | None = None
    places: list[dict[str, str]] = []
    read: str | None = None  # how the first JSON object was read, when one was
    for cand in _candidates(raw):
        obj = cand.value
        method = "json" if cand.strict else "repaired"
        read = read or method
        sc = _score(obj)
        if sc:
            inner = _key_clash(obj, cand.repeated)
            if inner is not None:  # one object naming two places for one field: never the last spelling
                ans.error = f"conflicting answers in one response ({inner})"
                # no place, but the object still carries its checklist (Table 11 counts it, as the release's
                # chain_compliance.py does every JSON object holding an evidence object)
                low = _lowered(obj)
                ans.evidence = _evidence(low)
                ans.evidence_slots = evidence_slot_counts(low.get("evidence"))
                ans.method = method  # a JSON object was read: not Table 11's Unparseable (release's count)
                return ans
            places.append(_place_fields(obj))
        if sc and (best is None or sc > best[0] or (sc == best[0] and method == "json" and best[2] != "json")):
            best = (sc, obj, method, cand.truncated)
    clash = _clash(places)
    if clash is not None:  # e.g. an answer, then "actually" another one: never the first guess
        ans.error = f"conflicting answers in one response ({clash})"
        return ans
    if best is not None:
        _, obj, method, truncated = best
        if truncated and len(raw) > MAX_CHARS:  # cut by the reader's limit, not by the model (break32 #5)
            ans.error = (f"answer too long: its JSON object runs past the first {MAX_CHARS:,} characters the reader "
                         f"reads (the answer has {len(raw):,})")
            ans.method = method
            return ans
        _fill(ans, obj)
        ans.ok, ans.method, ans.truncated = True, method, truncated
        if method == "repaired":
            ans.error = "answer was truncated; closed and parsed" if truncated else "answer needed repair (quotes, commas or comments)"
        if not (ans.city or ans.area or ans.building):  # e.g. {"confidence": 0.9}: nothing to geocode
            ans.ok, ans.error = False, "JSON object has no city, area or building"
        return ans
    pairs = {}
    inside = _json_string_spans(raw)
    starts = [s for s, _ in inside]
    named: list[dict[str, str]] = []  # every place field the pattern finds, for the clash check (break26 #4)
    for m in _PAIR.finditer(raw):
        key = m.group("key").lower()
        if key not in SCHEMA_KEYS:
            continue
        if _inside_span(m, starts, inside):  # "city: 'Lyon'" within a clue's text is no key
            continue
        if m.group("num") is not None:
            value: Any = float(m.group("num"))  # a bare number is no place name
        else:  # escapes decoded as the JSON reader decodes a string ("S\u00e3o Paulo" is São Paulo)
            value = decode_string_body(m.group("dq") if m.group("dq") is not None else m.group("sq"))
            if _RX_OR_NEXT.match(raw, m.end()) and key in _PLACE_KEYS:  # "city": "Paris" or "Lyon": two guesses
                ans.error = f"conflicting answers in one response ({key}: {value!r} or another)"
                return ans
        place = _place(value)
        if place and key in _PLACE_KEYS:  # per key as written: "place" and "building" both given is no clash
            named.append({key: place.casefold()})  # (the JSON path reads them so too: building wins; rev26 #7)
        pairs.setdefault(key, value)
    clash = _clash(named)
    if clash is not None:  # two objects or an "actually" the reader could not parse: never the first guess
        ans.error = f"conflicting answers in one response ({clash})"
        return ans
    if pairs:
        _fill(ans, pairs)
        ans.ok, ans.method = True, "regex"
        ans.error = PATTERN_READ_ERROR
        if not (ans.city or ans.area or ans.building):
            ans.ok, ans.error = False, "no city, area or building found"
        return ans
    if read:  # an object with none of the schema's keys ({"note": ...}): the release parses it (Table 11)
        ans.method, ans.error = read, "JSON object has no city, area or building"
        return ans
    ans.error = "no JSON object and no schema fields found"
    return ans
