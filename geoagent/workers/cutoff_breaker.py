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

This breaker watches, per model, its fresh answers from a billing provider (a stored answer cost nothing now; a
replay or simulated model costs nothing, and no limit changes a recorded answer). It opens for that model, for the
rest of the run (in memory, per process), once :data:`CUT_OFF_EMPTY_TO_STOP` answers IN A ROW came back empty and
cut off, or once :data:`CUT_OFF_WINDOW_EMPTY` of its last :data:`CUT_OFF_WINDOW` answers did (a model whose few
answers with text kept resetting a count in a row paid for 450 empty answers out of 500: break30 #6). The model's
further tasks then raise :class:`CutOffStop`, a :class:`~geoagent.runtime.stage.Held` (nothing sent, nothing
reserved, no attempt counted), the other models go on, and the run ends ``incomplete`` with a line naming the
model, the limit its requests carried, the config key that sets it and the fix (:meth:`CutOffBreaker.report_lines`).
A partly written answer cut off at the limit never counts: some of those parse. Each process of a scale-out
campaign (``--stages``) counts its own answers.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

from geoagent.runtime.errors import PicklableError
from geoagent.runtime.stage import Held
from geoagent.scoring.truncation import TRUNCATION_FINISH_REASONS
from geoagent.workers.held import HeldTasks

#: answers in a row of one model that came back empty and cut off at the output-token limit that stop it
CUT_OFF_EMPTY_TO_STOP = 10
#: the window of a model's latest answers looked at, and how many of them empty and cut off stop it
CUT_OFF_WINDOW = 20
CUT_OFF_WINDOW_EMPTY = 18
#: the StageContext service holding the campaign's :class:`CutOffBreaker` (the engine reads it at the end)
CUTOFF_BREAKER_SERVICE = "cutoff_breaker"


def empty_cut_off(text: str | None, finish_reason: str | None) -> bool:
    """Whether an answer came back with no text (``None``, empty or whitespace) and a finish reason that says the
    output-token limit ended it (:data:`~geoagent.scoring.truncation.TRUNCATION_FINISH_REASONS`, any case)."""
    return not (text or "").strip() and str(finish_reason or "").strip().lower() in TRUNCATION_FINISH_REASONS


@dataclasses.dataclass(slots=True)
class CutOff:
    """The open breaker of one model: its name, how many of how many of its latest answers came back empty and cut
    off, the output-token limit its last one was sent with (None when unknown), the config key that sets that
    limit (``models[0].max_output_tokens``, ``geoverify.max_output_tokens``, ...; None when unknown) and that
    answer's finish reason as the provider wrote it."""

    model: str
    empty: int
    of: int
    max_output_tokens: int | None
    finish_reason: str
    key: str | None = None

    def message(self) -> str:
        """``model X: its last 10 answers came back empty, cut off at the output-token limit (max_output_tokens =
        300, finish reason MAX_TOKENS): ...; raise models[0].max_output_tokens ...``."""
        what = (f"its last {self.empty} answers" if self.empty == self.of
                else f"{self.empty} of its last {self.of} answers")
        limit = (f"max_output_tokens = {self.max_output_tokens}, " if self.max_output_tokens is not None else "")
        key = self.key or "the max_output_tokens its requests carry"
        return (f"model {self.model}: {what} came back empty, cut off at the output-token limit ({limit}finish "
                f"reason {self.finish_reason}): hidden reasoning or thinking used the whole limit, so every further "
                f"call would be billed for no answer; raise {key} (a Gemini thinking model: or bound "
                "params.thinking_budget below it) and re-run: the requests left queued are then sent under the new "
                "limit, and the empty answers stay stored as no answers (in no rate; a new [campaign] name starts "
                "clean)")


class CutOffStop(PicklableError, Held):
    """A model's empty-answer breaker is open: hold the task untouched (nothing sent) while the other models' tasks
    go on; ``model`` names the model. Picklable (the message and ``model`` travel)."""

    def __init__(self, cut: CutOff) -> None:
        super().__init__(cut.message())
        self.model = cut.model


class CutOffBreaker(HeldTasks):
    """Per-model count of fresh answers that came back empty and cut off (module docstring).

    Parameters
    ----------
    threshold : int
        Such answers in a row, with no other answer of that model in between, that open its breaker (>= 1).
    window, window_empty : int
        Or: ``window_empty`` such answers among the model's latest ``window`` answers open it (>= 1 each).
    """

    def __init__(self, threshold: int = CUT_OFF_EMPTY_TO_STOP, window: int = CUT_OFF_WINDOW,
                 window_empty: int = CUT_OFF_WINDOW_EMPTY) -> None:
        self.threshold = max(1, int(threshold))
        self.window, self.window_empty = max(1, int(window)), max(1, int(window_empty))
        self._streak: dict[str, int] = {}
        self._recent: dict[str, deque[bool]] = {}
        self.opened: dict[str, CutOff] = {}
        self._held: dict[str, set[str]] = {}

    def is_open(self, model: str) -> CutOff | None:
        """The open breaker of ``model``, or None."""
        return self.opened.get(model)

    def answered(self, model: str, text: str | None, finish_reason: str | None,
                 max_output_tokens: Any = None, key: str | None = None) -> CutOff | None:
        """Count one fresh billed answer of ``model`` (its ``text`` and ``finish_reason``; ``max_output_tokens``:
        the limit it was sent with, ``key``: the config key that sets it, both for the message); return the
        model's :class:`CutOff` once its breaker is open (the answer itself is kept: it was billed). An answer with
        text, or an empty one not cut off, ends a count in a row (the window keeps it)."""
        if model in self.opened:
            return self.opened[model]
        empty = empty_cut_off(text, finish_reason)
        recent = self._recent.setdefault(model, deque(maxlen=self.window))
        recent.append(empty)
        n = self._streak[model] = self._streak.get(model, 0) + 1 if empty else 0
        if not empty:
            return None
        in_window = sum(recent)
        if n >= self.threshold:
            empty_n, of = n, n
        elif len(recent) >= self.window and in_window >= self.window_empty:
            empty_n, of = in_window, len(recent)
        else:
            return None
        limit = max_output_tokens if isinstance(max_output_tokens, int) and not isinstance(max_output_tokens, bool) \
            else None
        self.opened[model] = CutOff(model, empty_n, of, limit, str(finish_reason), key)
        return self.opened[model]

    def stops(self) -> list[dict[str, Any]]:
        """One record per open breaker (order opened), for the progress stream and ``status``
        (:meth:`geoagent.workers.model_caller.ModelCaller.cut_off_holds`)::

            {"model": "flash", "empty": 10, "of": 10, "max_output_tokens": 300, "key": "models[0].max_output_tokens",
             "finish_reason": "MAX_TOKENS", "held": 40}

        ``held``: tasks of the model this process holds unsent. Cheap: called once per progress tick."""
        return [{"model": c.model, "empty": c.empty, "of": c.of, "max_output_tokens": c.max_output_tokens,
                 "key": c.key, "finish_reason": c.finish_reason, "held": self.held(c.model)}
                for c in self.opened.values()]

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
