"""Parse a GeoVerify answer (untrusted model text) into verdict, confidence and evidence. Never raises.

The claim prompt (Appendix A.2 of seed 000, our template ``prompts/geoverify_claim.txt``) asks for a JSON
object ``{"verdict": "yes"|"no", "confidence": 0..1, "evidence": [str, ...]}``. Models wrap it in code
fences, add prose, use single quotes, trailing commas or comments, write ``"Yes."`` or ``"80%"``, or are
cut off by the token limit. :func:`parse_verdict` handles each of those with the shared lenient JSON
reader (:mod:`geoagent.llmjson`, no ``eval``), records which leniency rules fired, and returns a parse *failure* with the raw text and a
reason when no yes/no verdict can be recovered. A failure is never turned into a verdict.

The verdict value and the text the pattern readers scan are first normalised character by character
(:func:`normalize_chars`: byte-order marks and zero-width characters removed, fullwidth letters folded by NFKC);
which words count as yes or no is not changed by it.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import dataclasses
from dataclasses import dataclass
from typing import Any

from geoagent.llmjson import FENCE, Percent, iter_candidates, without_reasoning
from geoagent.scoring.truncation import is_finished
from geoagent.llmjson import (  # noqa: F401  (the reader's rule names, reported and re-exported with ours)
    RULE_BARE_WORDS,
    RULE_COMMENTS,
    RULE_SINGLE_QUOTES,
    RULE_TRAILING_COMMA,
)

# leniency rule names (reported per answer, counted by the report), besides the reader's four above
RULE_CODE_FENCE = "code_fence"
RULE_PROSE = "prose_around_json"
RULE_TRUNCATED = "truncated"
RULE_VERDICT_NORMALIZED = "verdict_case_or_punctuation"
RULE_VERDICT_BOOLEAN = "verdict_boolean"
RULE_VERDICT_SENTENCE = "verdict_sentence"
RULE_CONF_STRING = "confidence_string"
RULE_CONF_PERCENT = "confidence_percent"
RULE_CONF_INVALID = "confidence_invalid"
RULE_CONF_AMBIGUOUS = "confidence_ambiguous_scale"
RULE_REGEX_FALLBACK = "regex_fallback"

_VERDICT_KEYS = ("verdict", "answer", "decision")
_CONF_KEYS = ("confidence", "conf", "certainty")
_EVIDENCE_KEYS = ("evidence", "reasons", "visible_evidence")


@dataclass(frozen=True, slots=True)
class ParsedVerdict:
    """Result of parsing one answer.

    Attributes
    ----------
    ok : bool
        True when a yes/no verdict was recovered.
    verdict : {"yes", "no"} or None
    confidence : float in [0, 1] or None
        None when absent or unusable (the verdict still counts).
    evidence : tuple of str
    reason : str or None
        Why parsing failed (``ok`` False) or None.
    rules : tuple of str
        Leniency rules that fired (``RULE_*`` names).
    raw : str
        The verbatim answer text.
    """

    ok: bool
    verdict: str | None
    confidence: float | None
    evidence: tuple[str, ...] = ()
    reason: str | None = None
    rules: tuple[str, ...] = ()
    raw: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "confidence": self.confidence,
            "evidence": list(self.evidence),
            "reason": self.reason,
            "rules": list(self.rules),
        }


#: version of :func:`parse_verdict`'s rules, recorded in every scored row (``parser_version``): raised whenever a
#: change of the rules can read an answer text differently, so a campaign's answers read by an earlier version are
#: parsed again from their stored text (:mod:`geoagent.geoverify.reparse`; no model call). 1: up to 2026-12-03
#: (rows without the field); 2: the labelled ``verdict: yes|no`` form refuses the phrases that state no verdict
#: ("Verdict: No way to tell", "no idea", "yes and no", ...), as the bare-text and JSON rules did; 3: conflicts
#: found also in nested objects (of an object without a verdict of its own) and against a Yes/No standing alone at
#: the start of the prose, and a quoted or bold 'verdict: "yes" or "no"' is the question, not a verdict (break26
#: #1-#3, rev26); 4: a bare confidence in (1, 10] is no confidence (rule ``confidence_ambiguous_scale``: 9 may be
#: 9 % or 9 on a 0-10 scale), where 3 read it as a percentage (stats31 F2); 5: the opposite verdict said in other
#: words in the prose ("Final answer: No", "My verdict is no.", "Verdict — No", "the verdict should be no", a
#: "# Verdict" heading or a "| Verdict | No |" row, after the answer only) or under a final-verdict key
#: (``final_verdict``, ``revised_answer``; text values) is a conflict, where 4 kept the first verdict (break32 #1;
#: sub-checks' "Decision: No", a step's "Answer: No" and keys about the answer such as ``answer_changed`` are not,
#: break32b #2).
#: 6: an object under a finality key with a text ``verdict`` of its own (``"revised": {"verdict": "no"}``) beside the
#: answer's verdict is a conflict too (session 33; "My answer: No" after the answer was one for a while, withdrawn:
#: sub-questions and accounts of an earlier answer read so, review33 #3).
#: 7: a leading Yes/No followed by a statement that the question cannot be answered ("No, I can't determine that
#: from this image", "No. I am unable to verify ...", "Yes, it is impossible to tell", "No, I don't know"; apostrophes
#: straight or curly) is a refusal, where 6 read the word (geoverify38 #2, review38 #2); a label in Markdown bold or
#: underscores, before or around its colon ("**Confidence:** 85%", "**Verdict**: Yes"), is read, where 6 lost the
#: confidence (geoverify38 #3).
#: 8 (the same session, review38 #3, review38b #1): a hedge after the word is a verdict again ("No, I cannot be
#: certain", "Yes, hard to say"), as in 6; "I'm unable to" with a straight or curly apostrophe is a refusal, as
#: every other refusal of 7 (rows read by 7 are read again).
#: 9 (session 39, geohint39 #2): the answer is read outside the model's reasoning spans (``<think>...</think>``,
#: :func:`geoagent.llmjson.without_reasoning`).
#: 10 (session 40, walk39 #4a-c): reasoning after a short preamble ("Sure. <think>...</think>") and Magistral's
#: ``[THINK]...[/THINK]`` are cut too, and an unclosed reasoning block of an answer the model finished itself
#: (``finish_reason`` ``stop``, ``end_turn``) is read up to the JSON object it ends with, where 9 read no answer.
#: 11 (session 43, fixreason43 #1): the provider's finish reason is read, and stored with the scored row
#: (``finish_reason``, and as ``parse_reason`` quotes it), cleaned as GeoHint's answer parser 8 stores it
#: (:func:`geoagent.textfmt.finish_reason_text`: no control or bidirectional formatting characters); a row stored by
#: 10 kept it as sent (``"stop\u2066"``), and its ``truncated``, ``parse_reason`` and an unclosed reasoning block's
#: verdict were judged on that text before rev43b #1 read every reason cleaned.
VERDICT_PARSER_VERSION = 11


# --- field normalisation --------------------------------------------------------------------------

_VERDICT_WORD = re.compile(r"^[\s\"'`*_.!,;:()\[\]]*(yes|no)[\s\"'`*_.!,;:()\[\]]*$", re.I)


@functools.lru_cache(maxsize=4096)
def _nfkc_char(c: str) -> str:
    """``c`` in its NFKC form when that is one character (fullwidth "ｙ" -> "y"), else ``c`` itself: a symbol
    whose compatibility form spells a word ("№" -> "No", "㏂" -> "a.m.") must not become a verdict word."""
    n = unicodedata.normalize("NFKC", c)
    return n if len(n) == 1 else c


def normalize_chars(text: str) -> str:
    """``text`` as the verdict readers see it: invisible format characters (Unicode category Cf: byte-order mark
    U+FEFF, zero-width space/joiners U+200B-U+200D, word joiner U+2060, soft hyphen U+00AD, direction marks)
    removed and every other character in its one-character NFKC form (fullwidth "ｙｅｓ" -> "yes").

    Only characters change: which words count as a verdict is the readers' business, and the raw answer is kept
    as it came (:attr:`ParsedVerdict.raw`). ASCII text is returned as is."""
    if text.isascii():
        return text
    return "".join(_nfkc_char(c) for c in text if unicodedata.category(c) != "Cf")


def _norm_verdict(v: Any, rules: set[str]) -> str | None:
    if isinstance(v, bool):
        rules.add(RULE_VERDICT_BOOLEAN)
        return "yes" if v else "no"
    if not isinstance(v, str):
        return None
    if v in ("yes", "no"):
        return v
    seen = normalize_chars(v)
    m = _VERDICT_WORD.match(seen)
    if m:
        rules.add(RULE_VERDICT_NORMALIZED)
        return m.group(1).lower()
    word = _leading_verdict_word(seen)  # "Yes, the photo matches": the bare-text rule, applied to the value
    if word is not None:
        rules.add(RULE_VERDICT_SENTENCE)
    return word


def _norm_conf(v: Any, rules: set[str]) -> float | None:
    pct = False
    if isinstance(v, Percent):
        pct, v = True, v.value
    elif isinstance(v, str):
        rules.add(RULE_CONF_STRING)
        m = re.fullmatch(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%)?\s*", v)
        if not m:
            rules.add(RULE_CONF_INVALID)
            return None
        pct = bool(m.group(2))
        v = float(m.group(1))
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if v is not None:
            rules.add(RULE_CONF_INVALID)
        return None
    try:
        x = float(v)
    except OverflowError:  # an integer too large for a float (400 digits): as unusable as 1e309, the verdict stands
        rules.add(RULE_CONF_INVALID)
        return None
    if not pct and 1.0 < x <= 10.0:
        # "confidence": 9 reads as 9 % or as 9 on a 0-10 scale, two readings far apart (0.09 vs 0.9): it would move
        # the false acceptances' median confidence and share >= 0.8 (seed 000 Table 12) either way, so it is none
        rules.add(RULE_CONF_AMBIGUOUS)
        return None
    if pct or 10.0 < x <= 100.0:
        rules.add(RULE_CONF_PERCENT)
        x /= 100.0
    if not 0.0 <= x <= 1.0:
        rules.add(RULE_CONF_INVALID)
        return None
    return x


def _norm_evidence(v: Any) -> tuple[str, ...]:
    """The evidence (or ``reasons``) field as text items: a string, or a list's string items; a number (NaN and
    Infinity included), true/false, null, a nested list or an object is no evidence, never its text."""
    if isinstance(v, str):
        return (v,)
    if isinstance(v, list):
        return tuple(x for x in v if isinstance(x, str))
    return ()


def _lookup(d: dict[str, Any], keys: tuple[str, ...]) -> tuple[bool, Any]:
    lower = {str(k).strip().lower(): v for k, v in d.items()}
    for k in keys:
        if k in lower:
            return True, lower[k]
    return False, None


# one character class between the label and the value (not ``\s*[\"']*\s*``: two quantifiers over the same
# whitespace made a long run after "verdict:" quadratic, minutes for a looping answer)
# the word must not open a phrase that states no verdict: "Verdict: No way to tell", "Verdict: no idea" (break25
# #2, read as "no"); any other word after it still reads ("Verdict: No because ...", "Verdict: Yes it matches"),
# and "yes and no" is no verdict (rev25: a list of allowed followers refused clear verdicts and hid conflicts)
_NO_VERDICT_PHRASE = (r"(?![ \t\"'`*_]+(?:way|idea|clue|doubt|comment|opinion|decision|answer|verdict|conclusion|"
                      r"determination|telling|certainty|judge?ment|basis|information|info|data)\b)"
                      r"(?![ \t\"'`*_]+and[ \t]+(?:yes|no)\b)")
# "yes/no", "yes or no" are the question, not a verdict, also quoted or in bold ('Verdict: "yes" or "no"?', break26 #1)
# (on the same line, and only when the other word follows: "Verdict: **No** / **Confidence:** 0.7" is a verdict, rev26)
_RX_VERDICT = re.compile(r"[\"']?verdict[\"'*_]*\s*[:=][\s\"'*]*(yes|no)\b"
                         r"(?![ \t\"'`*_]*(?:/|\bor\b)[ \t\"'`*_]*(?:yes|no)\b)" + _NO_VERDICT_PHRASE, re.I)
# a verdict stated AFTER the answer (past the last JSON object, or past the labelled verdict of an answer without
# one) in other words than "verdict:", for the conflict check only (break32 #1: '{"verdict": "yes"}' then "Final
# answer: No", "My verdict is no.", "Verdict — No", "the verdict should be no" or a "| Verdict | No |" row was
# scored yes): the label "verdict" or "final answer|verdict|decision", then "is", "should be", "was" or a separator
# (: = | a dash or an arrow), then a verdict word standing alone ("The answer is no longer clear" is none); or a
# Markdown heading "# Verdict" / "# Final answer" with the word alone on the next line. Sub-checks ("Decision: No",
# "Conclusion: yes", a step's "Answer: No") and reasoning before the answer are never read (break32b #2, recheck32)
_RX_VERDICT_SAID = re.compile(
    r"(?:\b(?:final[ \t]+(?:answer|verdict|decision)|verdict)[\"'`*_]*(?:[ \t]+(?:is|should[ \t]+be|was)\b[ \t]*"
    r"[:=]?|[ \t]*[:=|\u2014\u2013\u2192-]+)|^[ \t]*#+[ \t]*(?:final[ \t]+(?:answer|verdict)|verdict)[ \t]*\r?\n)"
    r"[\s\"'`*_|]*(yes|no)\b(?=[ \t\"'`*_|]*(?:\Z|[\r\n.!,;:)|]))"
    r"(?![ \t\"'`*_]*(?:/|\bor\b)[ \t\"'`*_]*(?:yes|no)\b)", re.I | re.M)
# a key that names a final verdict in two words, the word of finality first ("final_verdict", "finalAnswer",
# "Overall decision", "revised_answer"); "answer_revised", "final_answer_changed" or "is_final_answer" are about the
# answer, not one (break32b #2, recheck32)
_RX_FINAL_KEY = re.compile(r"(?:final|overall|revised|corrected|updated)[ _\-]?(?:verdict|answer|decision)", re.I)
# a key whose OBJECT value holds a final verdict under its own ``verdict`` key: ``{"verdict": "yes", "revised":
# {"verdict": "no"}}`` (session 33); not "overall_assessment" or "overall_result" objects, whose ``answer`` is a
# sub-question's (review33 #3)
_RX_FINAL_OBJECT_KEY = re.compile(r"(?:final|revised|corrected|updated)(?:[ _\-]?(?:verdict|answer|decision))?", re.I)
# a verdict word standing alone at the start of the prose around a JSON or labelled verdict ("No.\n{...}", "Yes" on
# a line of its own), for the conflict check; not one opening a clause ("Yes, I can help with that", "No, I cannot be
# certain": a manner of speaking, rev26 #2)
_RX_LEAD_ALONE = re.compile(r"^[\s\"'`*_]*(yes|no)\b[\"'`*_]*\.?[ \t\"'`*_]*(?:\r?\n|\Z)", re.I)
# a decimal comma (``0,85``) is taken with the number, which then reads as no confidence (not 0.0, the digits before it)
_RX_CONF = re.compile(r"[\"']?confidence[\"']?[*_]*\s*[:=][\s\"'*_]*([-+]?(?:\d+(?:\.\d*|,\d+)?|\.\d+)\s*%?)", re.I)
# a verdict word standing alone: followed (after quotes/markup on the same line) by the end of the text, a
# line break or a clause delimiter; "No doubt ...", "no-entry sign ...", "Yes and no" are not verdicts
_STANDALONE = r"(?=[ \t\"'`*_]*(?:\Z|[\r\n.!,;:)]))"
_RX_BARE = re.compile(r"^[\s\"'`*_]*(yes|no)\b" + _STANDALONE + r"[\s\"'`*_.!,;:]*", re.I)
_RX_BARE_WORD = re.compile(r"^[\s\"'`*_]*(yes|no)\b", re.I)
# what follows a leading verdict word that says the question cannot be answered: "No, I can't determine that from
# this image", "No. I am unable to verify where this was taken", "Yes, it is impossible to tell", "No, I don't know"
# are refusals, not verdicts (geoverify38 #2); evidence in the same words stays a verdict ("No, I can't see a church
# here"), and so does a verdict with a hedge ("No, I cannot be certain", "Yes, hard to say": the prompt asks for a
# verdict and puts doubt in the confidence; review38 #3). Apostrophes straight or curly (review38 #2).
_APO = "['\u2019\u2018]"
_ADVERB = r"(?:(?:really|honestly|just|simply|truly)[ \t]+)?"
_CANNOT = (r"(?:i[ \t]+" + _ADVERB + r"(?:can[ \t]*no?t|can" + _APO + r"t|am[ \t]+(?:un|not[ \t]+)able[ \t]+to|"
           r"have[ \t]+no[ \t]+way[ \t]+to)|i" + _APO + r"m[ \t]+" + _ADVERB + r"(?:un|not[ \t]+)able[ \t]+to|"
           r"(?:there[ \t]+is|there" + _APO + r"s)[ \t]+no[ \t]+way[ \t]+to|"
           r"unable[ \t]+to|(?:it(?:[ \t]+is|" + _APO + r"s)[ \t]+)?(?:not[ \t]+possible|impossible)[ \t]+to)")
_RX_CANNOT_TELL = re.compile(
    _CANNOT + r"(?:[ \t]+(?:really|reliably|accurately|definitively|confidently|fully|exactly))?[ \t]+"
    r"(?:determine|verify|tell|say|confirm|know|identify|judge|assess|answer|pinpoint)\b"
    r"|i[ \t]+" + _ADVERB + r"do[ \t]*n(?:o|" + _APO + r")t[ \t]+know\b", re.I)
# the opposite word later in the text: standing alone, or asked ("Yes, or no?" states both; a question mark does
# not make a leading word standalone, "Yes? Not sure" is no verdict)
_RX_STANDALONE_WORD = re.compile(r"\b(yes|no)\b(?=[ \t\"'`*_]*(?:\Z|[\r\n.!?,;:)]))", re.I)


def _leading_verdict_word(seen: str) -> str | None:
    """The verdict ``"yes"``/``"no"`` of a sentence ``seen`` (already :func:`normalize_chars`) that opens with a
    standalone verdict word ("No, this is not the place") and never states the opposite word standing alone
    later; None otherwise ("No idea", "yes/no", "Yes or no", "Yes and no", "No, but on reflection: yes.").
    The same rule :func:`parse_verdict` applies to a bare-text answer (step 4), here for a sentence given as a
    JSON verdict value."""
    mb, conflicting = _bare_verdict(seen)
    return None if mb is None or conflicting else mb.group(1).lower()


def _bare_verdict(seen: str) -> tuple[re.Match[str] | None, bool]:
    """The bare-text rule on ``seen`` (already :func:`normalize_chars`): the match of a leading standalone verdict
    word (None: none), and whether the opposite word stands alone later in the text (a conflict)."""
    mb = _RX_BARE.match(seen)
    if not mb or _RX_CANNOT_TELL.match(seen, mb.end()):
        return None, False
    word = mb.group(1).lower()
    return mb, any(w.group(1).lower() != word for w in _RX_STANDALONE_WORD.finditer(seen, mb.end()))


def parse_verdict(raw: str | None, finish_reason: str | None = None) -> ParsedVerdict:
    """Parse one GeoVerify answer; never raises.

    Parameters
    ----------
    raw : str or None
        The model's verbatim answer text.
    finish_reason : str or None
        The provider's finish reason as stored with the answer (None: not recorded), raw or cleaned (it is read
        as :func:`geoagent.scoring.truncation.finish_reason_key` reads it). Only a reasoning block the
        answer opens and never closes depends on it: a finished answer (``stop``, ``end_turn``, ``STOP``:
        :func:`geoagent.scoring.truncation.is_finished`) is read up to the JSON object it ends with, any other is no
        answer (:func:`geoagent.llmjson.without_reasoning`; walk39 #4c).

    Returns
    -------
    ParsedVerdict
        ``ok`` with verdict ``"yes"``/``"no"``, confidence in [0, 1] (or None) and evidence strings; or a
        failure with ``reason`` and the raw text kept.

    Notes
    -----
    Order: (1) take the first fenced block if there is one (an unterminated fence is read to the end);
    (2) read each ``{`` in turn with the lenient reader until one yields an object with a verdict key;
    (3) otherwise a regex for ``verdict: yes|no`` anywhere; (4) otherwise a bare leading ``Yes``/``No`` that
    stands alone (end of text, line break or ``.!,;:)`` after it, so not "No doubt ..." or "no-entry ...")
    and is not contradicted by the opposite word standing alone later ("No, but ... yes." fails). An object
    whose verdict keys disagree (``{"answer": "no", "verdict": "yes"}``, or one key given twice) fails the same
    way, and so does another object (also a ``verdict`` nested at any depth in an object without one of its own), a
    labelled ``verdict: yes|no`` in the prose outside the objects, or a ``Yes``/``No`` standing alone (a line of its
    own, or "No." and a line break) at the start of that prose, that states the opposite verdict; text
    inside an object's string values (its evidence) is never read as one. ``verdict: yes or no`` and
    ``verdict: "yes"/"no"`` (quoted or in bold too) repeat the question and are no verdict.
    Confidence in percent (``"80%"``, ``"8 %"``, or a bare number in (10, 100]) is divided by 100; a bare number in
    (1, 10] becomes None (rule ``confidence_ambiguous_scale``: 9 may mean 9 % or 9 on a 0-10 scale; the protocol
    asks for [0, 1], seed 000 Sec. 5.2); anything else outside [0, 1], and a number with a decimal comma
    (``0,85``), becomes None (rule ``confidence_invalid``).
    A JSON verdict value may be ``true``/``false`` (rule ``verdict_boolean``) or a sentence that opens with a
    verdict word read by the rule of step (4) ("Yes, the photo matches"; rule ``verdict_sentence``); a value
    that also states the opposite word, or opens with a phrase ("No idea", "yes/no"), is a failure.
    """
    try:
        if isinstance(raw, str) and raw.strip():
            # read outside the model's reasoning spans (a "<think>" draft's "No" is no verdict); raw kept as it came
            read = without_reasoning(raw, finished=is_finished(finish_reason))
            if read is not raw:
                if not read.strip():
                    return ParsedVerdict(False, None, None, (), "no answer after the model's reasoning "
                                         "(<think> ... </think> or [THINK] ... [/THINK])", (), raw)
                return dataclasses.replace(_parse(read), raw=raw)
        return _parse(raw)
    except Exception as exc:  # defensive: parsing must never take a worker down
        return ParsedVerdict(False, None, None, (), f"parser error: {type(exc).__name__}: {exc}", (), raw or "")


def _parse(raw: str | None) -> ParsedVerdict:
    text = raw if isinstance(raw, str) else ""
    if not text.strip():
        return ParsedVerdict(False, None, None, (), "empty answer", (), text)
    rules: set[str] = set()
    body = text
    m = FENCE.search(text)
    if m:
        rules.add(RULE_CODE_FENCE)
        body = m.group(1)
        if text[: m.start()].strip() or text[m.end() :].strip():
            rules.add(RULE_PROSE)
    best_reason = "no JSON object found"
    candidates = [body] if body is text else [body, text]
    for src in candidates:
        for cand in iter_candidates(src, "{", percent=True):
            if not cand.ok:
                best_reason = f"malformed JSON: {cand.error}"
                continue
            obj = cand.value
            has_v, v = _lookup(obj, _VERDICT_KEYS)
            if not has_v:
                best_reason = "truncated before the verdict" if cand.truncated else "JSON object has no 'verdict'"
                continue
            rules |= cand.rules
            if cand.truncated:
                rules.add(RULE_TRUNCATED)
            if cand.prose_around:
                rules.add(RULE_PROSE)
            verdict = _norm_verdict(v, rules)
            if verdict is None:
                return ParsedVerdict(False, None, None, (), f"verdict is not yes/no: {v!r}", tuple(sorted(rules)), text)
            if _keys_disagree(obj, verdict, cand.repeated):  # {"answer": "no", "verdict": "yes"}: no first guess
                return ParsedVerdict(False, None, None, (), "conflicting verdicts in one answer (yes and no)",
                                     tuple(sorted(rules)), text)
            if _conflicting(text, verdict):  # e.g. {"verdict": "yes"} ... "I meant" {"verdict": "no"}
                return ParsedVerdict(False, None, None, (), "conflicting verdicts in one answer (yes and no)",
                                     tuple(sorted(rules)), text)
            _, c = _lookup(obj, _CONF_KEYS)
            conf = _norm_conf(c, rules)
            _, ev = _lookup(obj, _EVIDENCE_KEYS)
            return ParsedVerdict(True, verdict, conf, _norm_evidence(ev), None, tuple(sorted(rules)), text)
    # the pattern readers see the text with format characters removed and compatibility forms folded
    # (normalize_chars); the answer is kept verbatim
    seen = normalize_chars(text)
    mv = _RX_VERDICT.search(seen)
    if mv:
        if _conflicting(text, mv.group(1).lower()):  # "verdict: yes ... verdict: no"
            return ParsedVerdict(False, None, None, (), "conflicting verdicts in one answer (yes and no)",
                                 tuple(sorted(rules)), text)
        return _from_regex(mv.group(1), seen, rules | {RULE_REGEX_FALLBACK}, text)
    mb, conflicting = _bare_verdict(seen)
    if mb:
        word = mb.group(1).lower()
        if conflicting:
            return ParsedVerdict(False, None, None, (), "conflicting verdicts in one answer (yes and no)",
                                 tuple(sorted(rules)), text)
        rules |= {RULE_REGEX_FALLBACK, RULE_PROSE} if seen[mb.end() :].strip() else {RULE_REGEX_FALLBACK}
        return _from_regex(word, seen, rules, text)
    if (mw := _RX_BARE.match(seen)) and _RX_CANNOT_TELL.match(seen, mw.end()):
        best_reason = "a leading yes/no followed by a statement that it cannot be told (a refusal, not a verdict)"
    elif _RX_BARE_WORD.match(seen):
        best_reason = "leading yes/no is not a standalone verdict (part of a phrase)"
    return ParsedVerdict(False, None, None, (), best_reason, tuple(sorted(rules)), text)


def _is_final_verdict_key(key: Any) -> bool:
    """Whether an object key names a final verdict (:data:`_RX_FINAL_KEY`, the whole key: ``final_verdict``,
    ``finalAnswer``, ``Overall Decision``, ``revised_answer``: break32 #1); ``answer_changed``, ``decision_rule`` or
    ``is_final_answer`` are not (break32b #2)."""
    return _RX_FINAL_KEY.fullmatch(str(key).strip()) is not None


def _keys_disagree(obj: dict[str, Any], verdict: str, repeated: tuple[tuple[str, Any], ...] = ()) -> bool:
    """Whether another verdict key of the same object (``verdict``, ``answer``, ``decision``, any case; or, with a
    TEXT value, a final-verdict key such as ``final_verdict``, :func:`_is_final_verdict_key`), or the same key given
    twice (``repeated``: the values the reader's dict lost, :attr:`geoagent.llmjson.Candidate.repeated`), or the verdict
    key of an object under a finality key (``"revised": {"verdict": "no"}``, ``"final_answer": {"verdict": ...}``:
    :data:`_RX_FINAL_OBJECT_KEY`, a text ``verdict`` only) states the opposite verdict; a value that is no yes/no at all is not counted
    (``"answer": "a church"``)."""
    for k, v in [*obj.items(), *repeated]:
        if str(k).strip().lower() in _VERDICT_KEYS or (isinstance(v, str) and _is_final_verdict_key(k)):
            if _norm_verdict(v, set()) not in (None, verdict):
                return True
        elif isinstance(v, dict) and _RX_FINAL_OBJECT_KEY.fullmatch(str(k).strip()):
            # {"revised": {"verdict": "no"}}: a final verdict in its object; only a text ``verdict`` key counts, as in
            # the nested rule (a sub-question's ``answer``, a flag such as ``"answer": false``, are no verdict)
            has, nested = _lookup(v, ("verdict",))
            if has and isinstance(nested, str) and _norm_verdict(nested, set()) not in (None, verdict):
                return True
    return False


def _nested_disagree(obj: dict[str, Any], verdict: str, limit: int = 10_000) -> bool:
    """Whether ``obj``, a top-level object with no verdict key of its own (``verdict``, ``answer``, ``decision``),
    holds objects nested anywhere (through objects and lists) whose ``verdict`` key states the opposite of
    ``verdict`` (``{"analysis": {"verdict": "no"}, "final": {"verdict": "yes"}}``, break26 #2). An object with a
    verdict key of its own is the answer, and what it nests are sub-checks (``"checks": [{"feature": "snow",
    "answer": "no"}]``, rev26 #1); only nested ``verdict`` keys count, not ``answer`` or ``decision`` (a reasoning
    step's answer). Walks at most ``limit`` values (iteratively, so no depth limit is hit)."""
    if _lookup(obj, _VERDICT_KEYS)[0]:
        return False
    stack: list[Any] = list(obj.values())
    while stack and limit > 0:
        limit -= 1
        v = stack.pop()
        if isinstance(v, dict):
            has, nested = _lookup(v, ("verdict",))
            if has and _norm_verdict(nested, set()) not in (None, verdict):
                return True
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def _conflicting(text: str, verdict: str) -> bool:
    """Whether another top-level JSON object (by a verdict key or a final-verdict key, :func:`_keys_disagree`; or a
    key one object gives twice), an object nested at any depth in a top-level object without a verdict of its own
    (:func:`_nested_disagree`), a labelled ``verdict: yes|no`` in the prose outside the objects, a verdict said after
    the answer in other words (:data:`_RX_VERDICT_SAID`: "Final answer: No", "My verdict is no.", "Verdict — No":
    break32 #1), or a ``Yes``/``No`` standing alone at the start of that prose ("No.\n{"verdict": "yes"}", "No" on
    its own line, break26 #3; not "Yes, I can help with that", rev26 #2), states the opposite verdict (an ambiguous
    answer is a parse failure, never the first guess).

    The labelled pattern is searched only outside the objects read (each complete or cut-off top-level object
    is blanked first): words inside an object's string values are the model's evidence, not a second verdict
    (before session 13 ``{"verdict": "yes", "evidence": ["The verdict: no obvious mismatch"]}`` was a failure).
    A malformed object is not blanked, so its text still counts (conservative)."""
    prose = list(text)
    last_end = None  # where the last object read ends
    for cand in iter_candidates(text, "{", nested=False, percent=True):
        if cand.ok and isinstance(cand.value, dict):
            prose[cand.start : cand.end] = " " * (cand.end - cand.start)
            last_end = cand.end
            if _keys_disagree(cand.value, verdict, cand.repeated) or _nested_disagree(cand.value, verdict):
                return True
    seen = normalize_chars("".join(prose))
    lead = _RX_LEAD_ALONE.match(seen)
    if lead is not None and lead.group(1).lower() != verdict:
        return True
    if any(m.group(1).lower() != verdict for m in _RX_VERDICT.finditer(seen)):
        return True
    # said in other words: only after the answer (normalize_chars maps character by character, so the prefix's
    # length is the offset in ``seen``); without an object, after the answer's own labelled verdict
    if last_end is not None:
        after = len(normalize_chars("".join(prose[:last_end])))
    else:
        first = _RX_VERDICT.search(seen)
        after = first.end() if first is not None else 0
    return any(m.group(1).lower() != verdict for m in _RX_VERDICT_SAID.finditer(seen, after))


def _from_regex(word: str, text: str, rules: set[str], raw: str) -> ParsedVerdict:
    """A verdict found by pattern in ``text`` (the answer after :func:`normalize_chars`; no usable JSON object),
    with the confidence read the same way; ``raw``: the answer as it came, kept."""
    mc = _RX_CONF.search(text)
    conf = _norm_conf(mc.group(1), rules) if mc else None
    rules.discard(RULE_CONF_STRING)
    return ParsedVerdict(True, word.lower(), conf, (), None, tuple(sorted(rules)), raw)
