"""One lenient JSON reader for untrusted model output (never eval/exec).

Models asked for JSON wrap it in code fences, put prose around it, use single (or curly) quotes, unquoted
keys, trailing commas or comments, write ``80%`` for a number, or are cut off by the token limit. This
module finds JSON objects and arrays in such text with a small recursive-descent reader that tolerates
those defects, reports which leniency rules fired and whether the value was cut off, and bounds its work
(nesting depth, characters searched, start positions tried, characters read in all) so that huge or
deeply nested input costs little and never raises.

The task parsers keep their own field normalisation: GeoVerify (:mod:`geoagent.geoverify.parse`:
verdict, confidence, evidence), GeoHint (:mod:`geoagent.geohint.parse`: city, area, building, evidence)
and the crawl audits (:mod:`geoagent.crawl.image_audit`, :mod:`geoagent.crawl.referenceability`).

Reading rules
-------------
- Strings in ``"``, ``'`` or curly quotes; an apostrophe inside a single-quoted word (``'it's'``) does
  not close it. The usual backslash escapes and ``\\uXXXX``; an escaped UTF-16 surrogate pair
  (``\\ud83d\\udccd``, as ``ensure_ascii`` JSON writers emit astral characters) is one character, as
  with ``json.loads``, and a surrogate half without its partner (escaped or literal) becomes U+FFFD, so
  every string read encodes as UTF-8.
- Unquoted keys and bare words (``yes``) are strings; ``true``/``false``/``null``/``none`` in any case
  are JSON literals. The non-finite words ``NaN``, ``Infinity`` (JavaScript, and Python's ``json`` module)
  and ``nan``, ``inf`` (Python's repr), with an optional sign, are the floats ``json.loads`` makes of them,
  never text: read as strings, ``{"city": NaN}`` named the city "NaN" (a quoted ``"Nan"`` stays a string).
  A number too large for a float (``1e999``) is infinite too, so callers check ``math.isfinite``.
- ``//``, ``#`` and ``/* */`` comments; trailing commas; ``=`` in place of ``:``.
- With ``percent=True`` a number followed by ``%`` is read as :class:`Percent`; otherwise the ``%`` is a
  syntax error, as in JSON.
- A container cut off by the end of the text returns what it completed and sets ``truncated``. A string
  cut off by the end is dropped with its key (``partial_strings=False``) or kept as far as it goes.
- An integer too long to convert (Python's 4300-digit limit) or nesting deeper than ``max_depth`` makes
  the value malformed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# leniency rule names (the reader's; GeoVerify reports them per answer)
RULE_SINGLE_QUOTES = "single_quotes"
RULE_TRAILING_COMMA = "trailing_comma"
RULE_COMMENTS = "comments"
RULE_BARE_WORDS = "unquoted_keys_or_words"

MAX_DEPTH = 100
"""Deepest nesting of objects/arrays read; deeper is malformed (model answers nest a few levels)."""
MAX_CHARS = 200_000
"""Characters of a text searched; the rest is ignored (a value running past it reads as truncated)."""
MAX_STARTS = 64
"""Opening brackets tried per searched text."""
MAX_READ_CHARS = 400_000
"""Characters read over all tries in one searched text before giving up."""

FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
"""A Markdown code fence; group 1 is its body (an unterminated fence runs to the end of the text)."""


@dataclass(frozen=True, slots=True)
class Percent:
    """A number written with a percent sign (``80%``), as read with ``percent=True``; ``value`` is the
    number as written (80.0), not divided by 100."""

    value: float


@dataclass(frozen=True, slots=True)
class Candidate:
    """One try at reading a JSON value at an opening bracket.

    Attributes
    ----------
    source : str
        The text searched (the whole answer or one fenced block's body).
    start : int
        Offset of the opening bracket in ``source``.
    end : int
        Offset just past the value (``len(source)`` when truncated); ``start`` when malformed.
    value : dict, list or None
        The value read; None when malformed.
    error : str or None
        Why the text at ``start`` is not a value, or None.
    truncated : bool
        The text ended inside the value; ``value`` holds what was complete.
    rules : frozenset of str
        Leniency rules (``RULE_*``) that fired while reading it.
    repeated : tuple of (str, Any)
        Keys the outermost object gives more than once, each with a value the dict lost (``{"city": "Paris",
        "city": "Lyon"}`` reads as ``{"city": "Lyon"}`` with ``repeated == (("city", "Paris"),)``), in order;
        a task parser compares them with the kept value (two answers in one object), ``json.loads`` silently
        keeps the last.
    """

    source: str
    start: int
    end: int
    value: Any
    error: str | None
    truncated: bool = False
    rules: frozenset[str] = frozenset()
    repeated: tuple[tuple[str, Any], ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def prose_around(self) -> bool:
        """Text other than white space before the value, or after it (when it was complete)."""
        return bool(self.source[: self.start].strip() or (not self.truncated and self.source[self.end :].strip()))

    @property
    def strict(self) -> bool:
        """The value's text is standard JSON as it stands (complete, no leniency needed)."""
        return self.ok and not self.truncated and not self.rules and is_strict_json(self.source[self.start : self.end])


class _Syntax(Exception):
    pass


class _EOF(Exception):
    pass


_NUM = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_NONFINITE = re.compile(r"([-+]?)(NaN|nan|Infinity|inf)(?![A-Za-z0-9_\-])")
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}
_PLAIN = {q: re.compile("[^\\\\" + re.escape(c) + "]+") for q, c in _QUOTES.items()}
_ESC = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\", '"': '"', "'": "'"}
_SPACE = re.compile(r"\s+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _fix_surrogates(text: str) -> str:
    """``text`` with each high+low surrogate pair combined into one character (as ``json.loads`` does for
    ``\\ud83d\\udccd``) and each surrogate half without its partner replaced by U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class _Reader:
    """Recursive-descent reader over ``s`` from ``i``; see the module notes for what it tolerates."""

    def __init__(self, text: str, pos: int, *, percent: bool, partial_strings: bool, max_depth: int) -> None:
        self.s = text
        self.n = len(text)
        self.i = pos
        self.rules: set[str] = set()
        self.truncated = False
        self.percent = percent
        self.partial_strings = partial_strings
        self.max_depth = max_depth
        self.depth = 0
        self.repeated: list[tuple[str, Any]] = []

    def ws(self) -> None:
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c.isspace():
                self.i = _SPACE.match(s, self.i).end()  # type: ignore[union-attr]
            elif s.startswith("//", self.i) or c == "#":
                self.rules.add(RULE_COMMENTS)
                j = s.find("\n", self.i)
                self.i = self.n if j < 0 else j + 1
            elif s.startswith("/*", self.i):
                self.rules.add(RULE_COMMENTS)
                j = s.find("*/", self.i + 2)
                self.i = self.n if j < 0 else j + 2
            else:
                break

    def value(self) -> Any:
        self.ws()
        if self.i >= self.n:
            raise _EOF
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c in _QUOTES:
            return self.string()
        m = _NONFINITE.match(self.s, self.i)
        if m:  # a number word, never text (module notes)
            self.i = m.end()
            self.rules.add(RULE_BARE_WORDS)
            return float(m.group(1) + ("nan" if m.group(2).lower() == "nan" else "inf"))
        m = _NUM.match(self.s, self.i)
        if m:
            self.i = m.end()
            if self.percent:
                j = self.i
                while j < self.n and self.s[j] == " ":
                    j += 1
                if j < self.n and self.s[j] == "%":
                    self.i = j + 1
                    return Percent(float(m.group()))
            if self.i >= self.n:
                raise _EOF  # a number cut off by the end may be incomplete
            text = m.group()
            if any(ch in text for ch in ".eE"):
                return float(text)
            try:
                return int(text)
            except ValueError:  # longer than Python's int/str conversion limit
                raise _Syntax(f"integer of {len(text)} digits at {m.start()}") from None
        m = _WORD.match(self.s, self.i)
        if m:
            self.i = m.end()
            w = m.group()
            lw = w.lower()
            if lw == "true":
                return True
            if lw == "false":
                return False
            if lw in ("null", "none"):
                return None
            self.rules.add(RULE_BARE_WORDS)
            return w
        raise _Syntax(f"unexpected {c!r} at {self.i}")

    def string(self) -> str:
        s = self.s
        q = s[self.i]
        plain = _PLAIN[q]
        if q != '"':
            self.rules.add(RULE_SINGLE_QUOTES)
        self.i += 1
        out: list[str] = []
        while True:
            if self.i >= self.n:
                return self._cut_string(out)
            m = plain.match(s, self.i)
            if m:
                out.append(m.group())
                self.i = m.end()
                continue
            c = s[self.i]
            if c == "\\":
                if self.i + 1 >= self.n:
                    self.i = self.n
                    return self._cut_string(out)
                e = s[self.i + 1]
                if e == "u":
                    hexd = s[self.i + 2 : self.i + 6]
                    if len(hexd) < 4:
                        self.i = self.n
                        return self._cut_string(out)
                    try:
                        out.append(chr(int(hexd, 16)))
                    except ValueError:
                        raise _Syntax("bad \\u escape") from None
                    self.i += 6
                    continue
                out.append(_ESC.get(e, e))
                self.i += 2
                continue
            # c == close: an apostrophe inside a single-quoted word (it's) closes only before a non-letter
            if q == "'" and self.i + 1 < self.n and s[self.i + 1].isalpha():
                out.append(c)
                self.i += 1
                continue
            self.i += 1
            return _fix_surrogates("".join(out))

    def _cut_string(self, out: list[str]) -> str:
        if not self.partial_strings:
            raise _EOF
        self.truncated = True
        return _fix_surrogates("".join(out))

    def key(self) -> str:
        self.ws()
        if self.i >= self.n:
            raise _EOF
        c = self.s[self.i]
        if c in _QUOTES:
            return self.string()
        m = _WORD.match(self.s, self.i)
        if m:
            self.rules.add(RULE_BARE_WORDS)
            self.i = m.end()
            return m.group()
        raise _Syntax(f"expected a key at {self.i}, got {c!r}")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise _Syntax(f"nested deeper than {self.max_depth} at {self.i}")
        self.i += 1

    def obj(self) -> dict[str, Any]:
        self._enter()
        out: dict[str, Any] = {}
        try:
            while True:
                self.ws()
                if self.i >= self.n:
                    raise _EOF
                if self.s[self.i] == "}":
                    self.i += 1
                    self.depth -= 1
                    return out
                k = self.key()
                self.ws()
                if self.i >= self.n:
                    raise _EOF
                if self.s[self.i] not in ":=":
                    raise _Syntax(f"expected ':' after key {k!r}")
                self.i += 1
                v = self.value()
                if k in out and self.depth == 1:  # the outermost object (value() may have gone deeper and back)
                    self.repeated.append((k, out[k]))
                out[k] = v
                self.ws()
                if self.i >= self.n:
                    raise _EOF
                c = self.s[self.i]
                if c == ",":
                    self.i += 1
                    self.ws()
                    if self.i < self.n and self.s[self.i] == "}":
                        self.rules.add(RULE_TRAILING_COMMA)
                elif c != "}":
                    raise _Syntax(f"expected ',' or '}}' after value of {k!r}, got {c!r}")
        except _EOF:
            self.truncated = True
            self.depth -= 1
            return out

    def arr(self) -> list[Any]:
        self._enter()
        out: list[Any] = []
        try:
            while True:
                self.ws()
                if self.i >= self.n:
                    raise _EOF
                if self.s[self.i] == "]":
                    self.i += 1
                    self.depth -= 1
                    return out
                out.append(self.value())
                self.ws()
                if self.i >= self.n:
                    raise _EOF
                c = self.s[self.i]
                if c == ",":
                    self.i += 1
                    self.ws()
                    if self.i < self.n and self.s[self.i] == "]":
                        self.rules.add(RULE_TRAILING_COMMA)
                elif c != "]":
                    raise _Syntax(f"expected ',' or ']' in list, got {c!r}")
        except _EOF:
            self.truncated = True
            self.depth -= 1
            return out


def read_at(source: str, start: int, *, percent: bool = False, partial_strings: bool = False,
            max_depth: int = MAX_DEPTH) -> Candidate:
    """Read one object or array starting at ``source[start]`` (which must be ``{`` or ``[``); never raises.

    Parameters
    ----------
    source : str
        The text.
    start : int
        Offset of the opening bracket.
    percent : bool
        Read ``80%`` as :class:`Percent` (else a syntax error).
    partial_strings : bool
        Keep a string cut off by the end of the text (else it is dropped with its key).
    max_depth : int
        Deepest nesting read.

    Returns
    -------
    Candidate
        With ``value`` (and ``truncated``, ``rules``), or with ``error`` when malformed.

    Raises
    ------
    ValueError
        When ``source[start]`` is not an opening bracket (a caller error, not a model one).
    """
    return _read(source, start, percent, partial_strings, max_depth)[0]


def _read(source: str, start: int, percent: bool, partial_strings: bool, max_depth: int) -> tuple[Candidate, int]:
    """:func:`read_at`, and how many characters the try read."""
    opener = source[start : start + 1]
    if opener not in ("{", "["):
        raise ValueError(f"read_at: no '{{' or '[' at offset {start}")
    r = _Reader(source, start, percent=percent, partial_strings=partial_strings, max_depth=max_depth)
    try:
        value = r.obj() if opener == "{" else r.arr()
    except _Syntax as exc:
        return Candidate(source, start, start, None, str(exc), False, frozenset(r.rules)), r.i - start
    except RecursionError:  # max_depth above the interpreter's limit
        return Candidate(source, start, start, None, "nested too deeply", False, frozenset(r.rules)), r.i - start
    return (Candidate(source, start, r.i, value, None, r.truncated, frozenset(r.rules), tuple(r.repeated)),
            r.i - start)


def iter_candidates(source: str, openers: str = "{", *, nested: bool = True, percent: bool = False,
                    partial_strings: bool = False, max_depth: int = MAX_DEPTH, max_starts: int = MAX_STARTS,
                    max_chars: int = MAX_CHARS, max_read_chars: int = MAX_READ_CHARS) -> Iterator[Candidate]:
    """Try each opening bracket in ``source`` in turn, yielding one :class:`Candidate` per try.

    Parameters
    ----------
    source : str
        The text searched; only its first ``max_chars`` characters are read.
    openers : str
        Which brackets start a try: ``"{"`` (objects), ``"["`` (arrays) or ``"{["``.
    nested : bool
        After a complete value, also try the brackets inside it (True) or go on after its end (False).
        After a malformed one the next bracket is always tried.
    percent, partial_strings, max_depth
        As for :func:`read_at`.
    max_starts : int
        Most brackets tried.
    max_read_chars : int
        Stop once the tries together have read this many characters.

    Yields
    ------
    Candidate
        Malformed tries included (``error`` set); the caller stops when it has what it wants.
    """
    text = source[:max_chars]
    pos, tries, read = _next_opener(text, openers, 0), 0, 0
    while pos >= 0 and tries < max_starts and read < max_read_chars:
        cand, n_read = _read(text, pos, percent, partial_strings, max_depth)
        tries += 1
        read += max(n_read, 1)
        yield cand
        if cand.truncated and not nested:
            return
        nxt = cand.end if cand.ok and not nested else pos + 1
        pos = _next_opener(text, openers, nxt)


def _next_opener(text: str, openers: str, i: int) -> int:
    hits = [j for j in (text.find(o, i) for o in openers) if j >= 0]
    return min(hits) if hits else -1


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)


def decode_string_body(body: str) -> str:
    """The text of a quoted string's body (what lies between its quotes) as the reader decodes a string: the usual
    backslash escapes (``\\"`` -> ``"``, ``\\'`` -> ``'``, ``\\n`` -> a line break, an unknown one -> the character)
    and ``\\uXXXX``, a surrogate pair as one character and a lone half as U+FFFD. For text found by a pattern
    rather than read (GeoHint's pattern fallback), which kept ``S\\u00e3o Paulo`` as written."""
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        return chr(int(e[1:], 16)) if len(e) == 5 else _ESC.get(e, e)

    return _fix_surrogates(_ESCAPE.sub(one, body)) if "\\" in body else body


#: a reasoning tag some models write into the answer text itself, opener or closer: ``<think>``, ``<thinking>``,
#: ``<reasoning>`` (Qwen3 and DeepSeek-R1 style, served through an OpenAI-compatible server without a reasoning parser;
#: group 1 is "/" in a closer) and Magistral's ``[THINK]`` / ``[/THINK]`` (walk39 #4b; group 2 is "/" in a closer);
#: any case
_REASONING_TAG = re.compile(r"<(/?)(?:think|thinking|reasoning)\s*>|\[(/?)think\]", re.I)
#: the most characters (white space around them aside) a preamble before a reasoning block may have: "Sure.", "Okay,
#: let me look at the photo." (walk39 #4a); a longer text before a tag is an answer or prose that mentions one
MAX_PREAMBLE_CHARS = 200


def _closer(tag: re.Match[str]) -> bool:
    return bool(tag.group(1) or tag.group(2))


def _angled(tag: re.Match[str]) -> bool:
    """The tag's family: ``<...>`` (True) or Magistral's ``[...]`` (False); a block is closed by its own family."""
    return tag.group(0).startswith("<")


def _matching_closer(tags: list[re.Match[str]], i: int) -> int | None:
    """Index in ``tags`` of the closer that ends the reasoning opened by ``tags[i]`` (nested openers of its family
    counted; the other family's tags are text inside it), or None when it is never closed."""
    family, depth = _angled(tags[i]), 1
    for j in range(i + 1, len(tags)):
        if _angled(tags[j]) is family:
            depth += -1 if _closer(tags[j]) else 1
            if not depth:
                return j
    return None


def _is_preamble(text: str) -> bool:
    """Whether ``text`` (what comes before a reasoning opener) is a short preamble ("Sure.", "Let me think."): at
    most :data:`MAX_PREAMBLE_CHARS` characters besides white space and no ``{`` (a JSON object begun before the tag:
    an answer, or a string of one that mentions the tag)."""
    body = text.strip()
    return len(body) <= MAX_PREAMBLE_CHARS and "{" not in body


def without_reasoning(text: str, *, finished: bool = False) -> str:
    """``text`` without the model's reasoning at its start, for reading the answer (the raw text is kept by the
    caller). One linear scan of the tags (``<think>``, ``<thinking>``, ``<reasoning>`` and Magistral's ``[THINK]``;
    any case; a block is closed by a closer of its own family, ``<...>`` or ``[...]``):

    * reasoning that opens the text (only whitespace before the tag) runs to its matching closer (nested tags
      counted) and is removed, again while the rest opens with one;
    * so is reasoning after a short preamble ("Sure. <think>...</think> {...}", walk39 #4a: at most
      :data:`MAX_PREAMBLE_CHARS` characters and no ``{`` before the tag), when it is closed; the preamble is kept
      (a "Yes." there is still read, and still conflicts with a later "no"); an opener after a preamble that is
      never closed is text, as before (prose that mentions the tag: "I will not use <thinking> here.");
    * an opener that opens the text and is never closed makes the whole rest reasoning (an answer cut off while
      reasoning: its drafts are no answer) and leaves "", unless ``finished`` (the provider said the model ended
      its output itself: finish reason ``stop``, ``end_turn``, ``STOP``; :func:`geoagent.scoring.truncation.is_finished`)
      and the rest ends with a complete JSON object (a closing code fence and white space after it allowed): then
      that object, the last one, is the answer (walk39 #4c; a model that forgot its closer). A cut-off answer
      (``length``) or an unknown finish reason keeps "";
    * a closer that comes before any opener (the chat template put the opener in the prompt, as Qwen3's and
      DeepSeek-R1's do, so the text starts inside the reasoning) ends reasoning that began the text, unless it
      stands inside a string of a JSON object (an answer that mentions the tag: :func:`_inside_object`); a draft
      object before it, finished or not, is reasoning, whatever follows (walk39 #4, review39c #1: a draft's "yes"
      was read before the final "No.").

    Tags anywhere else are text (a JSON string or prose after the answer may mention one: review39b #1). Linear in
    the text (review39b #2: a regex over the blocks rescanned the text from every unclosed opener). Text without a
    tag comes back unchanged (the same object). Drafts inside the reasoning were read as answers: a ``<think>`` draft
    naming Lyon before the final Paris made a GeoHint answer "conflicting" (geohint39 #2)."""
    if "<" not in text and "[" not in text:
        return text
    tags = list(_REASONING_TAG.finditer(text))
    if not tags:
        return text
    pos = i = 0
    kept = ""  # a preamble before the first block, kept as text (walk39 #4a)
    first = tags[0]
    if _closer(first):
        if not _inside_object(text, first.start()):
            pos, i = first.end(), 1  # the template's opener: the text began inside the reasoning
    elif text[: first.start()].strip() and _is_preamble(text[: first.start()]):
        close = _matching_closer(tags, 0)
        if close is not None:
            kept, pos, i = text[: first.start()], tags[close].end(), close + 1
    while i < len(tags) and not _closer(tags[i]) and not text[pos : tags[i].start()].strip():
        close = _matching_closer(tags, i)  # reasoning opens the rest of the text
        if close is None:  # never closed
            return (_final_object(text, tags[i].end()) or "") if finished else ""
        pos, i = tags[close].end(), close + 1
    return kept + text[pos:] if pos else text


def _final_object(text: str, start: int) -> str | None:
    """The complete ``{...}`` object that ends ``text[start:]`` (white space and one closing code fence after it
    allowed), as its text, else None: the answer of a model that finished without closing its reasoning (walk39
    #4c). Openers are tried from the end back (the outermost one that closes at the end wins over an object nested
    in it); at most :data:`MAX_STARTS` of them, within the last :data:`MAX_CHARS` characters and
    :data:`MAX_READ_CHARS` read in all."""
    end = len(text.rstrip())
    if text.endswith("```", start, end):
        end = len(text[: end - 3].rstrip())
    if end <= start or text[end - 1] != "}":
        return None
    src = text[:end]
    lo, j, tries, read = max(start, end - MAX_CHARS), end, 0, 0
    while tries < MAX_STARTS and read < MAX_READ_CHARS:
        j = src.rfind("{", lo, j)
        if j < 0:
            return None
        cand, n = _read(src, j, True, False, MAX_DEPTH)  # "80%" read as the task parsers read it
        tries, read = tries + 1, read + max(n, 1)
        if cand.ok and not cand.truncated and cand.end == end:
            return text[j:end]
    return None


def _inside_object(text: str, at: int) -> bool:
    """Whether position ``at`` of ``text`` lies inside a string value of a ``{...}`` object begun before it: an
    object still open there and a double-quoted string (with its escapes; a line break ends it, as no JSON string
    holds one) open too, one linear pass over ``text[:at]``. A draft object the model abandoned leaves a brace open
    but no string (review39c #1: its closer of the reasoning was read as text, and the draft's "yes" won)."""
    depth, quote, esc = 0, "", False
    for ch in text[:at]:
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote or ch == "\n":
                quote = ""
        elif ch == '"' or (ch == "'" and depth):  # single-quoted strings only inside an object (the lenient reader's)
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
    return depth > 0 and bool(quote)


def fenced_blocks(text: str) -> list[str]:
    """Bodies of the Markdown code fences in ``text``, in order (an unterminated last fence runs to the end)."""
    return [m.group(1) for m in FENCE.finditer(text)]


def is_strict_json(text: str) -> bool:
    """``text`` is one standard JSON value (``json.loads`` accepts it)."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def extract_json(text: str | None, want: type = dict, looks_right: Callable[[Any], bool] | None = None) -> Any | None:
    """First complete JSON value of type ``want`` (``dict`` or ``list``) in ``text``, else None; never raises.

    Fenced blocks are searched first, then the whole text; each ``{`` (or ``[``) in turn is read with the
    lenient reader (comments, trailing commas, single quotes, unquoted keys tolerated). A value cut off by
    the end of the text does not count.

    ``looks_right`` (optional): take the first such value it accepts, and only when it accepts none, the
    first value. Prose around an answer can hold bracketed or braced asides (``[Note] ...``,
    ``{"note": ...}``) that read as JSON on their own; taking the first value would drop the real answer
    behind them. A predicate that raises counts as a rejection.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    opener = "[" if want is list else "{"
    first = None
    for src in [*fenced_blocks(text), text]:
        for cand in iter_candidates(src, opener):
            if cand.ok and not cand.truncated and isinstance(cand.value, want):
                if looks_right is None:
                    return cand.value
                if first is None:
                    first = (cand.value,)
                try:
                    if looks_right(cand.value):
                        return cand.value
                except Exception:  # noqa: BLE001 - a predicate over untrusted data must not raise out
                    continue
    return first[0] if first is not None else None
