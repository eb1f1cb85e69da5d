"""Answers cut off at the output-token limit: which finish reasons mean "truncated", and per-group counts.

Every stored model answer keeps the provider's own finish reason, verbatim (the providers do not rename
it): OpenAI-compatible Chat Completions ``choices[0].finish_reason = "length"``, Anthropic Messages
``stop_reason = "max_tokens"``, Gemini ``candidates[0].finishReason = "MAX_TOKENS"``; the simulated provider
and the local fakes use the same values, and a replayed record keeps its recorded ``stop_reason``. Any of
these means the answer stopped because it reached ``max_output_tokens``, not because the model finished.
Anthropic's ``model_context_window_exceeded`` (the answer filled the model's context window) is cut off too.

How a cut-off answer is scored (one rule for GeoHint and GeoVerify, :func:`is_no_answer`):

* cut off and parsed: an answer like any other (the lenient parsers close a JSON object cut inside its
  ``clues`` or ``evidence``), scored;
* cut off with nothing parsed (typically empty text: a reasoning or thinking model spent the whole cap on
  hidden reasoning): **no answer**. The campaign's ``max_output_tokens``, not the model, ended it, so it is a
  failure of the measurement, and failures are never answers (the project's rule for a model call whose
  retries ran out: missing, never a wrong answer). It enters no rate: in GeoHint it is neither a response, a
  miss, an echo verdict nor an unresolved answer (left out of every table but ``cutoff``, and out of the
  strictly paired comparisons, like a missing answer). The one exception is GeoHint's Table 11 (checklist
  compliance, :func:`geoagent.report.geohint.table11`): it counts a forced_chain one in its n, and so in the
  denominator of its evidence share, as an unparsed response, because the paper's n there is "every forced_chain
  response", unparseable ones included (seed 000 Sec. 6.3.2), as the release's script counts it. In GeoVerify it
  has no verdict and, like every parse failure, is outside H and F (neither a yes nor a no). Each report counts these answers per model and
  condition or arm (:attr:`TruncationCount.n_truncated_unparsed`). A stored GeoHint row of such an answer
  has ``hit`` and ``echo`` None and says why in ``extra["no_answer"]`` (:data:`NO_ANSWER_CUT_OFF`), in the
  ``geohint_scored`` export too.

An answer the model finished itself (no cut-off finish reason) that does not parse is the model's answer,
and the tasks keep the paper's treatment of it: a miss in GeoHint (the release's judged GeoHint answers,
``data/answers_judged.csv``, keep answers with empty parsed fields with ``hit`` False, so the paper's hit
rates count them), a parse failure outside H and F in GeoVerify (the paper reports none: "Every returned
response parsed; one call failed at the API and is excluded", seed 000 Sec. 6.4; a verdict-less answer is
neither a yes nor a no). Neither release table records finish reasons for GeoHint, so the release cannot
tell its own cut-off answers apart; its raw GeoVerify and forced_chain samples hold none (``stop`` and
``end_turn`` only).

Stopped by the provider's content filter (:data:`WITHHELD_FINISH_REASONS`: Gemini ``SAFETY``, ``RECITATION`` and the
other blocking ``FinishReason`` values, OpenAI's ``content_filter``, Anthropic's ``refusal``, the stop reason its
classifiers set when they intervene): the answer text is what the filter let through, not an answer the model
finished. The same rule holds (:func:`is_no_answer`): parsed, it is scored; nothing parsed, it is **no answer**, in
no rate, as a withheld answer with no text at all is (the model caller dead-letters that one as missing:
:class:`geoagent.providers.errors.ContentBlocked`), never a GeoHint miss. A stored GeoHint row of such an answer
says :data:`NO_ANSWER_WITHHELD`; the counts are :attr:`TruncationCount.n_withheld` and
:attr:`TruncationCount.n_withheld_unparsed`, and the reports name them (:func:`withheld_lines`). A model's own
refusal in words (OpenAI's ``message.refusal`` text, finish reason ``stop``) is its answer, as above.

Either way a low ``max_output_tokens`` biases the results without a word (long answers, e.g. careful
reasoning before a verdict, are the ones cut), so the reports count cut-off answers per model (and per arm
or condition) with :class:`TruncationCount` and warn above :data:`WARN_SHARE`.

Sources: OpenAI Chat Completions API reference (``finish_reason``), Anthropic Messages API reference
(``stop_reason``), Gemini API reference ``FinishReason``; seed 000 Sec. 6.4 and the release's
``answers_judged.csv`` for the tasks' treatment of unparsed answers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from geoagent.textfmt import finish_reason_text

#: finish reasons (compared as :func:`finish_reason_key` reads them: cleaned, any case) meaning "stopped at the
#: output-token limit": OpenAI ``length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``; ``max_output_tokens`` is
#: what OpenAI's Responses API reports in ``incomplete_details.reason``. The empty-answer breaker counts these alone:
#: raising the limit is its fix (:mod:`geoagent.workers.cutoff_breaker`)
OUTPUT_LIMIT_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})
#: every finish reason that means the answer was cut short by a limit rather than finished by the model: the
#: output-token limit, or Anthropic's ``model_context_window_exceeded`` (the answer filled the model's context
#: window; Anthropic's "Handling stop reasons" guide: treat the response as truncated)
TRUNCATION_FINISH_REASONS = OUTPUT_LIMIT_FINISH_REASONS | {"model_context_window_exceeded"}
#: finish reasons (compared as :func:`finish_reason_key` reads them: cleaned, any case) meaning the provider's content
#: filter stopped or withheld the answer: Gemini ``FinishReason`` SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT,
#: SPII, IMAGE_SAFETY and LANGUAGE (the provider's :data:`geoagent.providers.gemini.BLOCKING_FINISH_REASONS`), OpenAI
#: Chat Completions ``content_filter`` ("content was omitted due to a flag from our content filters"), Anthropic
#: Messages ``refusal`` ("streaming classifiers intervene to handle potential policy violations"; Anthropic, "Handling
#: stop reasons")
WITHHELD_FINISH_REASONS = frozenset({"safety", "recitation", "blocklist", "prohibited_content", "spii",
                                     "image_safety", "language", "content_filter", "refusal"})

#: finish reasons (compared as :func:`finish_reason_key` reads them: cleaned, any case) meaning the model ended its
#: output itself: OpenAI Chat Completions ``stop``, Anthropic Messages ``end_turn``, Gemini ``STOP``. Not Anthropic's
#: ``stop_sequence`` (no campaign sends stop sequences; a text ended by one is not known to be whole). The answer
#: parsers read a reasoning block such an answer never closed up to the JSON object it ends with
#: (:func:`geoagent.llmjson.without_reasoning`, walk39 #4c)
FINISHED_FINISH_REASONS = frozenset({"stop", "end_turn"})

#: share of cut-off answers (of one model, or one model and arm/condition) above which reports warn
WARN_SHARE = 0.01

#: one legend line shared by every report (Markdown list item text, no leading dash)
LEGEND_LINE = (
    "cut off: answers the provider stopped at the output-token limit (finish reason length, max_tokens or "
    "MAX_TOKENS) or at the end of the model's context window (model_context_window_exceeded); a cut-off answer that still parsed is scored, one with nothing parsed is no answer (the cap, "
    "not the model, ended it): it enters no rate, never a miss, an echo verdict or a 'no', and is counted as cut "
    "off with no answer; an answer the provider's content filter stopped (finish reason SAFETY, RECITATION, "
    "content_filter, refusal) is treated alike. Answers without a recorded finish reason count as not cut off."
)


#: why a stored GeoHint row holds no answer (``extra["no_answer"]``, export column ``extra.no_answer``; null on
#: every other row): its ``hit``, ``echo`` and echo verdicts are null, not False (:func:`is_no_answer`)
NO_ANSWER_CUT_OFF = "cut off at the output-token limit with nothing parsed"
#: the same for an answer the provider's content filter stopped with nothing parsed (:data:`WITHHELD_FINISH_REASONS`)
NO_ANSWER_WITHHELD = "stopped by the provider's content filter with nothing parsed"


def no_answer_reason(finish_reason: object) -> str:
    """Why an answer with nothing parsed is no answer (``extra["no_answer"]`` of a GeoHint row): :data:`NO_ANSWER_WITHHELD`
    for a content filter's finish reason (:func:`is_withheld`), else :data:`NO_ANSWER_CUT_OFF`."""
    return NO_ANSWER_WITHHELD if is_withheld(finish_reason) else NO_ANSWER_CUT_OFF


def no_answer_words(n_withheld: int) -> str:
    """How a report names its no-answers: ``"cut off at the output-token limit with nothing parsed"``, and when
    ``n_withheld`` of them were stopped by the provider's content filter, ``"cut off at the output-token limit or
    stopped by the provider's content filter (N of them), with nothing parsed"``."""
    if not n_withheld:
        return NO_ANSWER_CUT_OFF
    return (f"cut off at the output-token limit or stopped by the provider's content filter ({n_withheld} of them), "
            "with nothing parsed")


def finish_reason_key(finish_reason: object) -> str | None:
    """``finish_reason`` (a provider's raw finish/stop reason, or one already cleaned) as the ``*_FINISH_REASONS``
    sets hold it: cleaned (:func:`geoagent.textfmt.finish_reason_text`: no control or bidirectional formatting
    characters, whitespace runs one space, stripped) and lower-cased; None for None, a non-string or a blank one.

    Every reader of a reason goes through it, so a caller that did not clean it first (the empty-answer breaker
    reads the provider's reason as sent) and one that did (GeoHint's stored ``extra.finish_reason``) agree:
    ``length`` followed by U+202E was no answer in the report but never tripped the breaker, whose ``str.strip()``
    left the U+202E (rev43b #1)."""
    text = finish_reason_text(finish_reason)
    return None if text is None else text.lower()


def is_output_limit(finish_reason: object) -> bool:
    """True when ``finish_reason`` (as :func:`finish_reason_key` reads it) says the output-token limit ended the
    answer (:data:`OUTPUT_LIMIT_FINISH_REASONS`); not the context window, where a higher limit is no fix. The
    empty-answer breaker counts these (:func:`geoagent.workers.cutoff_breaker.empty_cut_off`)."""
    return finish_reason_key(finish_reason) in OUTPUT_LIMIT_FINISH_REASONS


def is_no_answer(finish_reason: object, parsed: bool) -> bool:
    """True for an answer cut off at the output-token limit, or stopped by the provider's content filter, with
    nothing parsed: no answer (module doc).

    Parameters
    ----------
    finish_reason : str or None
        As stored with the answer (:func:`is_truncated`).
    parsed : bool
        Whether the task's parser got an answer out of the text (GeoHint ``parse_ok``, GeoVerify a verdict).

    Returns
    -------
    bool
        ``(is_truncated(finish_reason) or is_withheld(finish_reason)) and not parsed``. Such an answer enters no
        rate of either task and is counted in :attr:`TruncationCount.n_truncated_unparsed` or
        :attr:`TruncationCount.n_withheld_unparsed`.
    """
    return not parsed and (is_truncated(finish_reason) or is_withheld(finish_reason))


def is_withheld(finish_reason: object) -> bool:
    """True when ``finish_reason`` (a provider's raw finish/stop reason, read by :func:`finish_reason_key`) says the
    provider's content filter stopped or withheld the answer (:data:`WITHHELD_FINISH_REASONS`); None and non-strings
    are False."""
    return finish_reason_key(finish_reason) in WITHHELD_FINISH_REASONS


def is_finished(finish_reason: object) -> bool:
    """True when ``finish_reason`` (a provider's raw finish/stop reason, read by :func:`finish_reason_key`) says the
    model ended its output itself (:data:`FINISHED_FINISH_REASONS`: ``stop``, ``end_turn``, ``STOP``); a cut-off or
    withheld answer, None (no recorded reason: a row imported without one, an old row) and non-strings are False."""
    return finish_reason_key(finish_reason) in FINISHED_FINISH_REASONS


def is_truncated(finish_reason: object) -> bool:
    """True when ``finish_reason`` (a provider's raw finish/stop reason, read by :func:`finish_reason_key`) means the
    answer was cut short: the output-token limit was hit, or the model's context window
    (:data:`TRUNCATION_FINISH_REASONS`).

    Parameters
    ----------
    finish_reason : str or None
        As stored with the answer (:attr:`geoagent.providers.base.ModelResponse.finish_reason`); None and
        non-strings (no recorded reason) are False.
    """
    return finish_reason_key(finish_reason) in TRUNCATION_FINISH_REASONS


@dataclass(slots=True)
class TruncationCount:
    """Counts of answers of one group (model, model x arm, model x condition; answers, not tokens).

    Attributes
    ----------
    n : int
        Answers counted (parsed or not).
    n_truncated : int
        Of those, answers cut off at the output-token limit.
    n_truncated_unparsed : int
        Cut-off answers with nothing parsed: no answer (:func:`is_no_answer`), in no rate of either task
        (GeoVerify also lists them among its parse failures, outside H and F).
    n_no_reason : int
        Answers without a recorded finish reason (counted as not cut off).
    n_withheld : int
        Answers the provider's content filter stopped (:func:`is_withheld`; not cut off).
    n_withheld_unparsed : int
        Of those, answers with nothing parsed: no answer, as :attr:`n_truncated_unparsed`.
    """

    n: int = 0
    n_truncated: int = 0
    n_truncated_unparsed: int = 0
    n_no_reason: int = 0
    n_withheld: int = 0
    n_withheld_unparsed: int = 0

    def add(self, finish_reason: object, parsed: bool) -> None:
        """Count one answer with its finish reason and whether it parsed."""
        self.n += 1
        if finish_reason is None:
            self.n_no_reason += 1
        if is_truncated(finish_reason):
            self.n_truncated += 1
            self.n_truncated_unparsed += not parsed
        elif is_withheld(finish_reason):
            self.n_withheld += 1
            self.n_withheld_unparsed += not parsed

    def merge(self, other: "TruncationCount") -> "TruncationCount":
        """Add ``other``'s counts to this one (in place); returns self."""
        self.n += other.n
        self.n_truncated += other.n_truncated
        self.n_truncated_unparsed += other.n_truncated_unparsed
        self.n_no_reason += other.n_no_reason
        self.n_withheld += other.n_withheld
        self.n_withheld_unparsed += other.n_withheld_unparsed
        return self

    @property
    def share(self) -> float:
        """``n_truncated / n`` in [0, 1]; NaN without answers."""
        return self.n_truncated / self.n if self.n else float("nan")

    def to_json(self) -> dict[str, int]:
        return {"n": self.n, "n_truncated": self.n_truncated, "n_truncated_unparsed": self.n_truncated_unparsed,
                "n_no_reason": self.n_no_reason, "n_withheld": self.n_withheld,
                "n_withheld_unparsed": self.n_withheld_unparsed}


def total(counts: Mapping[object, TruncationCount]) -> TruncationCount:
    """Sum of every group's counts."""
    out = TruncationCount()
    for c in counts.values():
        out.merge(c)
    return out


def is_planned_limit_key(key: str | None) -> bool:
    """Whether config key ``key`` (:func:`geoagent.config.output_limit_keys`: ``geohint.max_output_tokens``,
    ``models[0].max_output_tokens``, ...) is a task section's limit, which planning writes into each request (a
    queued request keeps the value it was planned with), rather than a model's, which is read when a request is
    sent. None (unknown) counts as a model's."""
    return bool(key) and re.fullmatch(r"[a-z_]+(\.[a-z_]+)*\.max_output_tokens", key) is not None


def rerun_advice(key: str, *, planned: bool = False, also: str = "") -> str:
    """The one advice every line about answers cut off at the output-token limit gives, as docs/models.md does
    (walk44 B1: the breaker's line said re-run the same command while the summary's and the report's said re-run
    under a new campaign name). Lower case, no final period.

    Parameters
    ----------
    key : str
        The config key (or keys, in words) that sets the limit, e.g. ``models[1].max_output_tokens``.
    planned : bool
        ``key`` is a task section's limit (:func:`is_planned_limit_key`): planning wrote it into each request, so
        a re-run of the same command sends the requests still queued with the old one and only a new
        ``[campaign] name`` asks them under a raised one.
    also : str
        Words inserted after ``key`` (e.g. the breaker's ``(a Gemini thinking model: or bound
        params.thinking_budget below it)``).
    """
    if planned:
        return (f"raise {key}{also} and re-run under a new [campaign] name: {key} is planned into each request, so a "
                "re-run of the same command sends the requests still queued with the old limit, and only a new name "
                "asks every request again under the new one")
    return (f"raise {key}{also} and re-run the same command: the requests still queued are then sent under the new "
            "limit, and the answers already stored keep theirs (a new [campaign] name starts clean, asking every "
            "request again)")


def _no_answer_part(c: TruncationCount) -> str:
    """The warning's parenthesis on the cut-off answers of ``c`` with nothing parsed (no answer); "" when there
    are none (also the generic campaign's, which parses nothing)."""
    if not c.n_truncated_unparsed:
        return ""
    return f" ({c.n_truncated_unparsed} of them with nothing parsed: no answer, left out of every rate)"


def warning_lines(counts: Mapping[str, TruncationCount], *, setting: str, threshold: float = WARN_SHARE,
                  scored: bool = True, planned_key: str | None = None) -> list[str]:
    """One warning per group whose cut-off share exceeds ``threshold``.

    Parameters
    ----------
    counts : mapping of group label -> TruncationCount
        Labels as the report names them (e.g. ``"gpt-4o-mini"`` or ``"gpt-4o-mini, forced"``).
    setting : str
        The config key to raise, e.g. ``"[geohint] max_output_tokens (or [[models]] max_output_tokens)"``.
    threshold : float
        Share in [0, 1] above which a group is named (default :data:`WARN_SHARE`, 1 %).
    scored : bool
        Whether the campaign parses and scores its answers (False: the generic campaign, whose withheld lines then
        say nothing of parsing; :func:`withheld_lines`).
    planned_key : str, optional
        A task section's key among ``setting`` (``[geohint] max_output_tokens``): planned into each request, so a
        raised one reaches no request already queued (:func:`rerun_advice`), which the warning says.

    Returns
    -------
    list of str
        ``"Warning: 3.2 % of the answers of gpt-4o-mini (16 of 500) were cut off at the output-token
        limit (3 of them with nothing parsed: no answer, left out of every rate); ..."`` (no parenthesis when
        none is a no-answer; the words of :data:`LEGEND_LINE` and :func:`is_no_answer`, one rule for both
        tasks), in label order; [] when no group exceeds the threshold.
    """
    # walk44 B1: the advice of the breaker's line and of docs/models.md, not "re-run under a new campaign name"
    advice = rerun_advice(setting)
    if planned_key:
        advice += (f"; where {planned_key} sets the limit, planning wrote it into each request, so a raised one "
                   "reaches only requests planned after it: re-run under a new [campaign] name")
    advice = advice[0].upper() + advice[1:]
    out = []
    for label in sorted(counts):
        c = counts[label]
        if c.n and c.share > threshold:
            out.append(
                f"Warning: {100 * c.share:.1f} % of the answers of {label} ({c.n_truncated} of {c.n}) were cut off at the "
                f"output-token limit{_no_answer_part(c)}; results are biased towards short answers. {advice}."
            )
    return out + withheld_lines(counts, scored=scored)


def withheld_lines(counts: Mapping[str, TruncationCount], *, scored: bool = True) -> list[str]:
    """One line per group (label order) with answers the provider's content filter stopped (:func:`is_withheld`),
    whatever their share: ``"Withheld: 2 of the 500 answers of gemini-2.5-flash were stopped by the provider's
    content filter (finish reason SAFETY, RECITATION, content_filter or refusal); 1 with nothing parsed is no answer,
    left out of every rate, the other parsed and is scored"``; [] when there are none. ``scored`` False (a campaign
    that parses nothing): the line ends after the filter's finish reasons. :func:`warning_lines` appends them."""
    out = []
    for label in sorted(counts):
        c = counts[label]
        if not c.n_withheld:
            continue
        u, p = c.n_withheld_unparsed, c.n_withheld - c.n_withheld_unparsed
        parts = ([f"{u} with nothing parsed {'is' if u == 1 else 'are'} no answer, left out of every rate"] if u else []) + (
            [f"{p} parsed and {'is' if p == 1 else 'are'} scored"] if p else [])
        what = (f"Withheld: {c.n_withheld} of the {c.n} answers of {label} were stopped by the provider's content "
                "filter (finish reason SAFETY, RECITATION, content_filter, refusal or another blocking reason)")
        out.append(what + ("; " + ", ".join(parts) + "." if scored else "."))
    return out
