"""The empty-answer breaker of the model caller: a model whose answers keep coming back EMPTY, cut off at the
output-token limit, stops being called.

A reasoning or thinking model spends hidden tokens out of the same output limit as its answer: OpenAI's
``max_completion_tokens`` counts reasoning tokens (OpenAI reasoning guide, "Allocating space for reasoning"),
Gemini's ``maxOutputTokens`` counts thinking tokens (Gemini API thinking guide), Anthropic's ``max_tokens`` counts
extended-thinking blocks. When the limit is too low for the model, every answer is billed and comes back with no
text: finish reason ``length`` / ``MAX_TOKENS`` / ``max_tokens``
(:data:`geoagent.scoring.truncation.OUTPUT_LIMIT_FINISH_REASONS`). The dry run warns of the known cases
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
A partly written answer cut off at the limit never counts: some of those parse.

**Across runs and processes.** A breaker that opens is written down in the campaign's state folder
(:data:`CUT_OFF_RECORD`: per model, the id of the request settings its empty answers were sent with, i.e. provider,
model id and every request parameter, the output-token limit included: :func:`request_settings_id`). A later run,
or another ``--stages`` process of the campaign, that sends that model's requests under the SAME settings puts the
model on probation instead of paying for :data:`CUT_OFF_EMPTY_TO_STOP` more empty answers plus whatever was in
flight (a re-run without the fix, and each scale-out process, used to pay all that again): one request of the model
goes out at a time (its other tasks wait, nothing reserved for them), and the first fresh answer decides. Empty and
cut off again: the breaker opens at once. Anything else (text, or an empty answer the model ended itself): probation
ends, the record of those settings is dropped and the model's tasks go out at full concurrency. The record is kept
per settings (one model may be asked under several, e.g. a crawl's two auditors): requests under other settings
(the limit raised, as the message says, or a thinking budget bounded) are counted afresh and leave it as it is. A process that gets an empty
cut-off answer reads the record again when the file changed (one ``stat``), so a sibling's record counts mid-run.
The record is rewritten whole (atomic replace); two processes writing at the same moment can lose one model's
entry, which costs at most the old count of empty answers, never an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from geoagent.files import atomic_write_bytes
from geoagent.runtime.errors import PicklableError
from geoagent.runtime.stage import Held
from geoagent.scoring.truncation import is_output_limit, is_planned_limit_key, rerun_advice
from geoagent.textfmt import label_text
from geoagent.workers.held import HeldTasks

#: answers in a row of one model that came back empty and cut off at the output-token limit that stop it
CUT_OFF_EMPTY_TO_STOP = 10
#: the window of a model's latest answers looked at, and how many of them empty and cut off stop it
CUT_OFF_WINDOW = 20
CUT_OFF_WINDOW_EMPTY = 18
#: the StageContext service holding the campaign's :class:`CutOffBreaker` (the engine reads it at the end)
CUTOFF_BREAKER_SERVICE = "cutoff_breaker"
#: the file under ``state/<campaign>/`` that records the models whose breaker opened, and under which settings
CUT_OFF_RECORD = "cut_off.json"

log = logging.getLogger(__name__)


def request_settings_id(provider: str, model: str, params: Mapping[str, Any]) -> str:
    """A short stable id (16 hex digits) of the settings a request of a model is sent with: ``provider``, the
    provider's ``model`` id and every request parameter (``max_output_tokens``, a thinking budget, sampling), keys
    sorted. Two requests with the same id meet the same output-token limit the same way."""
    data = orjson.dumps({"provider": provider, "model": model, "params": dict(params)},
                        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
    return hashlib.sha256(data).hexdigest()[:16]


def empty_cut_off(text: str | None, finish_reason: str | None) -> bool:
    """Whether an answer came back with no text (``None``, empty or whitespace) and a finish reason that says the
    output-token limit ended it (:func:`~geoagent.scoring.truncation.is_output_limit`: any case, read as the reports
    read it; not an answer that filled the context window: a higher limit is no fix for it)."""
    # the reason as the provider sent it, cleaned as GeoHint's stored one is: "length" followed by U+202E was no answer
    # in the report but never counted here, where str.strip() kept the U+202E (rev43b #1)
    return not (text or "").strip() and is_output_limit(finish_reason)


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
    #: when an earlier run (or another process) recorded this model's breaker open under the same settings (UTC,
    #: ISO text): the breaker opened on the first answer of the model's probation (module docstring); else None
    earlier_at: str | None = None

    def message(self) -> str:
        """``model X: its last 10 answers came back empty, cut off at the output-token limit (max_output_tokens =
        300, finish reason MAX_TOKENS): ...; raise models[0].max_output_tokens ...``; after a probation: ``model X:
        its answers came back empty, cut off at the output-token limit (...), in an earlier run or another process
        of this campaign (recorded 2026-12-04T20:00:00Z), and so did the one answer this run asked for under the
        same settings: ...``."""
        what = (f"its last {self.empty} answers" if self.empty == self.of
                else f"{self.empty} of its last {self.of} answers")
        limit = (f"max_output_tokens = {self.max_output_tokens}, " if self.max_output_tokens is not None else "")
        key = self.key or "the max_output_tokens its requests carry"
        if self.earlier_at is not None:
            said = (f"model {self.model}: its answers came back empty, cut off at the output-token limit ({limit}"
                    f"finish reason {self.finish_reason}), in an earlier run or another process of this campaign "
                    f"(recorded {self.earlier_at}), and so did the one answer this run asked for under the same "
                    "settings: ")
        else:
            said = (f"model {self.model}: {what} came back empty, cut off at the output-token limit ({limit}finish "
                    f"reason {self.finish_reason}): ")
        # walk44 B1: one advice with the summary's and the report's lines and docs/models.md (rerun_advice); a task
        # section's limit is planned into each request, so raising it reaches no queued request
        planned = is_planned_limit_key(self.key)
        also = "" if planned else " (a Gemini thinking model: or bound params.thinking_budget below it)"
        advice = rerun_advice(key, planned=planned, also=also)
        if planned:
            advice += ("; a Gemini thinking model: or bound its params.thinking_budget below the limit and re-run the "
                       "same command (read when a request is sent)")
        return (said + "hidden reasoning or thinking used the whole limit, so every further "
                f"call would be billed for no answer; {advice}; the empty answers stay stored as no answers (in no "
                "rate)")


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
    record : path, optional
        The campaign's :data:`CUT_OFF_RECORD` file (read now; written when a breaker opens or a recorded model
        answers with text). None: nothing is kept across runs (each breaker counts from zero).
    """

    def __init__(self, threshold: int = CUT_OFF_EMPTY_TO_STOP, window: int = CUT_OFF_WINDOW,
                 window_empty: int = CUT_OFF_WINDOW_EMPTY, record: str | Path | None = None) -> None:
        self.threshold = max(1, int(threshold))
        self.window, self.window_empty = max(1, int(window)), max(1, int(window_empty))
        self._streak: dict[str, int] = {}
        self._recent: dict[str, deque[bool]] = {}
        self.opened: dict[str, CutOff] = {}
        self._held: dict[str, set[str]] = {}
        self.record_path = Path(record) if record is not None else None
        #: model -> request settings id -> its recorded open breaker ({"opened_at", "max_output_tokens", ...}), read
        #: from the record file (per settings: one model may be asked under several, e.g. a crawl's two auditors)
        self.recorded: dict[str, dict[str, dict[str, Any]]] = {}
        self._record_stamp: tuple[int, int] | None = None
        self._turns: dict[str, asyncio.Lock] = {}
        self._reload()

    # -- the record across runs and processes -------------------------------------------------------------

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.record_path) if self.record_path is not None else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size) if st is not None else None

    def _reload(self) -> None:
        """Read the record file again when it changed since it was last read (a damaged or unreadable file is
        logged and read as empty: it only saves money, it decides nothing about results)."""
        stamp = self._stamp()
        if stamp == self._record_stamp:
            return
        self._record_stamp = stamp
        if stamp is None:
            self.recorded = {}
            return
        try:
            data = orjson.loads(Path(self.record_path).read_bytes())  # type: ignore[arg-type]
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("%s cannot be read (%s): empty-answer breakers count from zero", self.record_path, exc)
            data = {}
        models = data.get("models") if isinstance(data, dict) else None
        self.recorded = {m: {k: r for k, r in by.items() if isinstance(k, str) and isinstance(r, dict)}
                         for m, by in (models or {}).items() if isinstance(m, str) and isinstance(by, dict)}
        self.recorded = {m: by for m, by in self.recorded.items() if by}

    def _write(self) -> None:
        if self.record_path is None:
            return
        try:
            atomic_write_bytes(self.record_path, orjson.dumps({"models": self.recorded}, option=orjson.OPT_INDENT_2))
        except OSError as exc:  # a full disk: the record is a saving, not a result
            log.warning("%s could not be written (%s)", self.record_path, exc)
        self._record_stamp = self._stamp()

    def on_probation(self, model: str, settings: str | None) -> bool:
        """Whether ``model``'s requests under ``settings`` (:func:`request_settings_id`) are on probation: its
        breaker was recorded open under the same settings and has not opened in this process."""
        return settings is not None and settings in self.recorded.get(model, {}) and model not in self.opened

    def settings_needed(self, model: str) -> bool:
        """Whether ``model`` has a record (only then is a request's settings id worth computing)."""
        return model in self.recorded

    @contextlib.asynccontextmanager
    async def probe_turn(self, model: str, settings: str | None) -> AsyncIterator[bool]:
        """Around one task of ``model`` about to be sent under ``settings``: on probation, wait for the model's
        probe turn (one request at a time) and yield True while holding it (this task is the probe; its
        :meth:`answered` decides); yield False without holding anything when the model is not on probation, or
        no longer is once the turn came (the probe before it answered with text, or opened the breaker: the
        caller then finds it open and holds the task)."""
        if not self.on_probation(model, settings):
            yield False
            return
        turn = self._turns.setdefault(model, asyncio.Lock())
        await turn.acquire()
        if not self.on_probation(model, settings):
            turn.release()
            yield False
            return
        try:
            yield True
        finally:
            turn.release()

    # -- counting ------------------------------------------------------------------------------------

    def is_open(self, model: str) -> CutOff | None:
        """The open breaker of ``model``, or None."""
        return self.opened.get(model)

    def answered(self, model: str, text: str | None, finish_reason: str | None,
                 max_output_tokens: Any = None, key: str | None = None, settings: str | None = None
                 ) -> CutOff | None:
        """Count one fresh billed answer of ``model`` (its ``text`` and ``finish_reason``; ``max_output_tokens``:
        the limit it was sent with, ``key``: the config key that sets it, both for the message; ``settings``: its
        request's :func:`request_settings_id`, for the record); return the model's :class:`CutOff` once its
        breaker is open (the answer itself is kept: it was billed). An answer with text, or an empty one not cut
        off, ends a count in a row (the window keeps it). On probation (module docstring) an empty cut-off answer
        opens the breaker at once; an answer with text drops the model's record."""
        if model in self.opened:
            return self.opened[model]
        empty = empty_cut_off(text, finish_reason)
        # printed in the run's summary and status, written to the record: the provider's text as data, without
        # control or bidirectional formatting characters (str.strip() let "length\x1f" count as "length"; crawl43 #3)
        reason = label_text(str(finish_reason))
        limit = max_output_tokens if isinstance(max_output_tokens, int) and not isinstance(max_output_tokens, bool) \
            else None
        if not empty:
            by = self.recorded.get(model)
            if by is not None and settings in by:
                # not empty at the limit under these settings (an answer with text, or an empty one that the model
                # ended itself): the limit is not what stops it now (the provider changed); probation ends
                del by[settings]
                if not by:
                    del self.recorded[model]
                self._write()
        else:
            self._reload()  # a sibling process may have recorded it meanwhile (one stat)
            if self.on_probation(model, settings):
                rec = self.recorded[model][settings]  # type: ignore[index]
                self.opened[model] = CutOff(model, 1, 1, limit, reason, key,
                                            earlier_at=str(rec.get("opened_at") or "?"))
                return self.opened[model]
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
        self.opened[model] = CutOff(model, empty_n, of, limit, reason, key)
        if settings is not None:
            opened_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            self.recorded.setdefault(model, {})[settings] = {
                "max_output_tokens": limit, "key": key, "finish_reason": reason, "empty": empty_n,
                "of": of, "opened_at": opened_at}
            self._write()
        return self.opened[model]

    def stops(self) -> list[dict[str, Any]]:
        """One record per open breaker (order opened), for the progress stream and ``status``
        (:meth:`geoagent.workers.model_caller.ModelCaller.cut_off_holds`)::

            {"model": "flash", "empty": 10, "of": 10, "max_output_tokens": 300, "key": "models[0].max_output_tokens",
             "finish_reason": "MAX_TOKENS", "held": 40}

        ``held``: tasks of the model this process holds unsent; ``earlier_at`` (only after a probation): when the
        breaker was recorded open before (:attr:`CutOff.earlier_at`). Cheap: called once per progress tick."""
        return [{"model": c.model, "empty": c.empty, "of": c.of, "max_output_tokens": c.max_output_tokens,
                 "key": c.key, "finish_reason": c.finish_reason, "held": self.held(c.model),
                 **({"earlier_at": c.earlier_at} if c.earlier_at is not None else {})}
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
