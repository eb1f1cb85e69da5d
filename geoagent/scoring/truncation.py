"""Answers cut off at the output-token limit: which finish reasons mean "truncated", and per-group counts.

Every stored model answer keeps the provider's own finish reason, verbatim (the providers do not rename
it): OpenAI-compatible Chat Completions ``choices[0].finish_reason = "length"``, Anthropic Messages
``stop_reason = "max_tokens"``, Gemini ``candidates[0].finishReason = "MAX_TOKENS"``; the simulated provider
and the local fakes use the same values, and a replayed record keeps its recorded ``stop_reason``. Any of
these means the answer stopped because it reached ``max_output_tokens``, not because the model finished.

A cut-off answer that still parsed is scored like any other; one that did not parse is a parse failure.
Either way a low ``max_output_tokens`` biases the results without a word (long answers, e.g. careful
reasoning before a verdict, are the ones cut), so the reports count cut-off answers per model (and per arm
or condition) with :class:`TruncationCount` and warn above :data:`WARN_SHARE`.

Sources: OpenAI Chat Completions API reference (``finish_reason``), Anthropic Messages API reference
(``stop_reason``), Gemini API reference ``FinishReason``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: finish reasons (compared case-insensitively) meaning "stopped at the output-token limit": OpenAI
#: ``length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``; ``max_output_tokens`` is what OpenAI's
#: Responses API reports in ``incomplete_details.reason``
TRUNCATION_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})

#: share of cut-off answers (of one model, or one model and arm/condition) above which reports warn
WARN_SHARE = 0.01

#: one legend line shared by every report (Markdown list item text, no leading dash)
LEGEND_LINE = (
    "cut off: answers the provider stopped at the output-token limit (finish reason length, max_tokens or "
    "MAX_TOKENS); a cut-off answer that still parsed is scored, one that did not is counted as a parse failure. "
    "Answers without a recorded finish reason count as not cut off."
)


def is_truncated(finish_reason: object) -> bool:
    """True when ``finish_reason`` (a provider's raw finish/stop reason) means the output-token limit was hit.

    Parameters
    ----------
    finish_reason : str or None
        As stored with the answer (:attr:`geoagent.providers.base.ModelResponse.finish_reason`); None and
        non-strings (no recorded reason) are False.
    """
    return isinstance(finish_reason, str) and finish_reason.strip().lower() in TRUNCATION_FINISH_REASONS


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
        Cut-off answers that did not parse (they are among the parse failures).
    n_no_reason : int
        Answers without a recorded finish reason (counted as not cut off).
    """

    n: int = 0
    n_truncated: int = 0
    n_truncated_unparsed: int = 0
    n_no_reason: int = 0

    def add(self, finish_reason: object, parsed: bool) -> None:
        """Count one answer with its finish reason and whether it parsed."""
        self.n += 1
        if finish_reason is None:
            self.n_no_reason += 1
        if is_truncated(finish_reason):
            self.n_truncated += 1
            self.n_truncated_unparsed += not parsed

    def merge(self, other: "TruncationCount") -> "TruncationCount":
        """Add ``other``'s counts to this one (in place); returns self."""
        self.n += other.n
        self.n_truncated += other.n_truncated
        self.n_truncated_unparsed += other.n_truncated_unparsed
        self.n_no_reason += other.n_no_reason
        return self

    @property
    def share(self) -> float:
        """``n_truncated / n`` in [0, 1]; NaN without answers."""
        return self.n_truncated / self.n if self.n else float("nan")

    def to_json(self) -> dict[str, int]:
        return {"n": self.n, "n_truncated": self.n_truncated, "n_truncated_unparsed": self.n_truncated_unparsed,
                "n_no_reason": self.n_no_reason}


def total(counts: Mapping[object, TruncationCount]) -> TruncationCount:
    """Sum of every group's counts."""
    out = TruncationCount()
    for c in counts.values():
        out.merge(c)
    return out


def warning_lines(counts: Mapping[str, TruncationCount], *, setting: str, threshold: float = WARN_SHARE) -> list[str]:
    """One warning per group whose cut-off share exceeds ``threshold``.

    Parameters
    ----------
    counts : mapping of group label -> TruncationCount
        Labels as the report names them (e.g. ``"gpt-4o-mini"`` or ``"gpt-4o-mini, forced"``).
    setting : str
        The config key to raise, e.g. ``"[geohint] max_output_tokens (or [[models]] max_output_tokens)"``.
    threshold : float
        Share in [0, 1] above which a group is named (default :data:`WARN_SHARE`, 1 %).

    Returns
    -------
    list of str
        ``"Warning: 3.2 % of the answers of gpt-4o-mini (16 of 500) were cut off at the output-token
        limit; ..."``, in label order; [] when no group exceeds the threshold.
    """
    out = []
    for label in sorted(counts):
        c = counts[label]
        if c.n and c.share > threshold:
            out.append(
                f"Warning: {100 * c.share:.1f} % of the answers of {label} ({c.n_truncated} of {c.n}) were cut off at the "
                f"output-token limit ({c.n_truncated_unparsed} of them unparsed); results are biased towards short "
                f"answers. Raise {setting} and re-run under a new campaign name."
            )
    return out
