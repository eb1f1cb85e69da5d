"""The empty-answer breaker of the model caller: a model whose answers keep coming back EMPTY, cut off at the
output-token limit, stops being called.

A reasoning or thinking model spends hidden tokens out of the same output limit as its answer: OpenAI's
``max_completion_tokens`` counts reasoning tokens (OpenAI reasoning guide, "Allocating space for reasoning"),
Gemini's ``maxOutputTokens`` counts thinking tokens (Gemini API thinking guide), Anthropic's ``max_tokens`` counts
extended-thinking blocks. When the limit is too low for the model, every answer is billed and comes back with no
text: finish reason ``length`` / ``MAX_TOKENS`` / ``max_tokens``
(:data:`geoagent.scoring.truncation.TRUNCATION_FINISH_REASONS`). The dry run warns of the known cases
(:func:`geoagent.config.output_room_warnings`), but a campaign started anyway spent its cap on nothing (walk30 #2:
$0.51 of $1.00, 488 answers, none with text) and ended exit 6 only at the end.

This breaker counts, per model, the answers in a row that came back empty and cut off (fresh calls only: a stored
answer cost nothing now). At :data:`CUT_OFF_EMPTY_TO_STOP` it opens for that model, for the rest of the run (in
memory, per process): the model's further tasks raise :class:`CutOffStop`, a
:class:`~geoagent.runtime.stage.Held` (nothing sent, nothing reserved, no attempt counted), the other models go
on, and the run ends ``incomplete`` with a line naming the model, its output limit and the fix
(:meth:`CutOffBreaker.report_lines`). Any answer with text, or an empty one that was not cut off, starts the count
over. A partly written answer cut off at the limit never counts: some of those parse.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from geoagent.runtime.errors import PicklableError
from geoagent.runtime.stage import Held
from geoagent.scoring.truncation import TRUNCATION_FINISH_REASONS

#: answers in a row of one model that came back empty and cut off at the output-token limit that stop it
CUT_OFF_EMPTY_TO_STOP = 10
#: the StageContext service holding the campaign's :class:`CutOffBreaker` (the engine reads it at the end)
CUTOFF_BREAKER_SERVICE = "cutoff_breaker"


def empty_cut_off(text: str | None, finish_reason: str | None) -> bool:
    """Whether an answer came back with no text (``None``, empty or whitespace) and a finish reason that says the
    output-token limit ended it (:data:`~geoagent.scoring.truncation.TRUNCATION_FINISH_REASONS`, any case)."""
    return not (text or "").strip() and str(finish_reason or "").strip().lower() in TRUNCATION_FINISH_REASONS


@dataclasses.dataclass(slots=True)
class CutOff:
    """The open breaker of one model: its name, the answers in a row that opened it, the output-token limit its
    last one was sent with (None when unknown) and that answer's finish reason as the provider wrote it."""

    model: str
    answers: int
    max_output_tokens: int | None
    finish_reason: str

    def message(self) -> str:
        """``model X: its last 10 answers came back empty, cut off at the output-token limit (max_output_tokens =
        300, finish reason MAX_TOKENS): ...; raise its max_output_tokens ...``."""
        limit = (f"max_output_tokens = {self.max_output_tokens}, " if self.max_output_tokens is not None else "")
        return (f"model {self.model}: its last {self.answers} answers came back empty, cut off at the output-token "
                f"limit ({limit}finish reason {self.finish_reason}): hidden reasoning or thinking used the whole "
                "limit, so every further call would be billed for no answer; raise the model's max_output_tokens "
                "(a Gemini thinking model: or bound params.thinking_budget below it) and re-run")


class CutOffStop(PicklableError, Held):
    """A model's empty-answer breaker is open: hold the task untouched (nothing sent) while the other models' tasks
    go on; ``model`` names the model. Picklable (the message and ``model`` travel)."""

    def __init__(self, cut: CutOff) -> None:
        super().__init__(cut.message())
        self.model = cut.model


class CutOffBreaker:
    """Per-model count of fresh answers in a row that came back empty and cut off (module docstring).

    Parameters
    ----------
    threshold : int
        Such answers in a row, with no other answer of that model in between, that open its breaker (>= 1).
    """

    def __init__(self, threshold: int = CUT_OFF_EMPTY_TO_STOP) -> None:
        self.threshold = max(1, int(threshold))
        self._streak: dict[str, int] = {}
        self.opened: dict[str, CutOff] = {}
        self._held: dict[str, set[str]] = {}

    def is_open(self, model: str) -> CutOff | None:
        """The open breaker of ``model``, or None."""
        return self.opened.get(model)

    def answered(self, model: str, text: str | None, finish_reason: str | None,
                 max_output_tokens: Any = None) -> CutOff | None:
        """Count one fresh answer of ``model`` (its ``text`` and ``finish_reason``; ``max_output_tokens``: the limit
        it was sent with, for the message); return the model's :class:`CutOff` once its breaker is open (the answer
        itself is kept: it was billed). An answer with text, or an empty one not cut off, starts the count over."""
        if model in self.opened:
            return self.opened[model]
        if not empty_cut_off(text, finish_reason):
            self._streak[model] = 0
            return None
        n = self._streak.get(model, 0) + 1
        self._streak[model] = n
        if n < self.threshold:
            return None
        limit = max_output_tokens if isinstance(max_output_tokens, int) and not isinstance(max_output_tokens, bool) \
            else None
        self.opened[model] = CutOff(model, n, limit, str(finish_reason))
        return self.opened[model]

    def hold(self, model: str, task_key: str) -> None:
        """Record that task ``task_key`` of ``model`` was held unsent because the model's breaker is open."""
        self._held.setdefault(model, set()).add(task_key)

    def held(self, model: str) -> int:
        """Tasks of ``model`` held unsent by its open breaker in this process (distinct task keys)."""
        return len(self._held.get(model, ()))

    def report_lines(self, left_queued: int | None = None) -> list[str]:
        """One line per open breaker (order opened): :meth:`CutOff.message` and how many of the model's requests
        this process left queued, e.g. ``...; 40 request(s) of model flash left queued``.

        ``left_queued``: the model caller stopped leasing because no model could run any more, so the held
        counts cover only what it had leased; the last line then says how many requests were left in the queue."""
        lines = [f"{c.message()}; {self.held(c.model)} request(s) of model {c.model} left queued"
                 for c in self.opened.values()]
        if lines and left_queued is not None:
            lines[-1] = (lines[-1].rsplit("; ", 1)[0] + f"; no model can run any more, so dispatching stopped: "
                         f"{left_queued} request(s) left queued")
        return lines
