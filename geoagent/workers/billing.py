"""How a failed model call closes its ledger reservation: released, settled, or unknown-outcome spend.

Issue 2 points 4 and 7: a call that certainly was not billed frees its reservation; a call whose provider
reported usage is settled with it; a call that may have been billed without telling us (connection lost
after sending, malformed 2xx body, cancelled while on the wire) stays counted at its reservation as
*unknown-outcome* spend, so the ledger can exceed the provider's bill but never fall short of it.

One table for every paid caller (the model-caller stage and the crawl's audit calls):

==========================  ===================================================================
exception                   reservation
==========================  ===================================================================
PermanentHTTPError (4xx)    released (the API refused it; not billed)
RetriesExhausted            unknown-outcome spend for ``possibly_billed`` attempts, else released
RetriesStopped (a stop      as RetriesExhausted (the task itself is released untouched: the
between attempts)           next run sends it again)
OutcomeUnknown              unknown-outcome spend (at least one attempt)
ProviderError with usage    settled with the reported usage
ContentBlocked, no usage    settled at the reservation as usage not reported (a withheld answer
                            came back with HTTP 200: billed, by an amount the body does not say),
                            with the worst-case tokens the reservation was priced from
ProviderError, no usage     released for a free model's non-retryable error; else unknown
raised before sending       released: anything else (cancellation included) that ended the HTTP
                            request before any attempt was handed to the connection, as the
                            HTTP layer proves (:func:`geoagent.runtime.http.never_sent`)
anything else / cancelled   unknown-outcome spend (the request may have been on the wire)
==========================  ===================================================================

Only the HTTP layer can prove a request never left (its ``on_request_headers_sent`` trace signal fires
before aiohttp writes a byte of the request); an exception that did not come through
:meth:`~geoagent.runtime.http.HttpClient.request`, or came after any attempt was sent, stays unknown-outcome
spend: where unsure, the ledger over-counts rather than under-counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from geoagent.providers.base import ModelResponse, ModelRequest, ProviderError, Usage
from geoagent.providers.errors import ContentBlocked
from geoagent.runtime.http import (OutcomeUnknown, PermanentHTTPError, RetriesExhausted, RetriesStopped, never_sent,
                                   slot_wait_listener)
from geoagent.runtime.stage import Abandoned

log = logging.getLogger(__name__)


#: why a call that waited for its model's first bill was given up at a stop request (nothing sent, nothing reserved)
STOP_WHILE_PROBING = "stop requested while waiting for the model's first bill in this run: released unsent"
#: how often (s) a call waiting for its model's first bill looks whether a stop was requested
PROBE_POLL_S = 0.25
#: the first-bill probe is waived for a kind whose first call finds at least this many times its model's concurrency
#: x its worst case left under the cap (:func:`far_from_cap`; :class:`OverrunGuard`, "Only near the cap")
PROBE_HEADROOM = 100.0


def far_from_cap(remaining_usd: float, concurrency: int, worst_usd: float) -> bool:
    """Whether a model's first wave of calls cannot pass the cap even if each bills :data:`PROBE_HEADROOM` times its
    worst case: ``remaining_usd >= PROBE_HEADROOM x concurrency x worst_usd`` (USD; ``concurrency``: the model's
    calls in flight at most, its ``[[models]] concurrency``). The overrun guard then waives the first-bill probe."""
    return remaining_usd >= PROBE_HEADROOM * max(1, int(concurrency)) * max(0.0, float(worst_usd))


class OverrunGuard:
    """Overrun guard of one process's paid calls: after a call billed more than its reservation, the worst case of
    the same model's later calls of the same kind (with an image, or without) is multiplied by the largest ratio of
    bill to worst case seen (>= 1; 1 until such a call); and until a kind's first bill is known, one call of it at a
    time (:meth:`first_bill`).

    The cap is only as hard as the worst case bounds each bill. A vision model whose image bill this code does not
    know (behind a gateway, left at ``image_input_tokens``' 1,600 where it bills 15,000; break34 provider #1, #3)
    passed the cap on every call in flight and again on every later call; after the first such call its later calls
    reserve what it showed it can bill. In this process only (a new run starts at 1, so a changed config is not
    multiplied by an old factor), and apart for calls with and without an image. The dry run does not know it.
    Used by the model caller (:class:`geoagent.workers.model_caller.ModelCaller`) and the crawl's auditors
    (:func:`geoagent.crawl.llmcall.metered_generate`).

    First bill (money39 #3): the factor only covers calls reserved after the overrun was seen; every call already in
    flight started on the low reservation, so a model at concurrency 20 billing 10x its worst case could pass the cap
    by 20 x 9 worst cases before the guard reacted. So, near the cap (below), a paid model's first call of a kind in
    this process is a *probe*: the other calls of that model and kind wait (unsent, no reservation) until its bill
    is known and settled in the ledger (its turn ends after the settlement, so the calls let go are checked against
    the cap with the probe counted at its bill, not at its low reservation), then all go at the model's full
    concurrency, reserving with the factor the bill gave. The cap is then passed by at most one call's overrun (the
    probe's; a model whose bills keep rising past the factor can still pass it by its rise). Bills and non-bills:

    * an answer booked (with its reported usage, or at its reservation when usage was not reported: the ledger then
      never counts it above its reservation) is the bill: the kind opens for good in this process;
    * a call that ends without an answer (refused, unreachable, unknown outcome, budget stop, stop request,
      cancellation) gives no bill: the next waiting call becomes the probe (never a deadlock);
    * a call answered from the response store is no paid call: it neither waits (the model caller and the auditors
      read the store before waiting) nor opens the kind.

    Only near the cap (a choice): the probe costs one call's latency per paid model and kind at each process start
    (seconds for a vision model, a minute for a slow reasoning model), and buys something only where the first
    wave of calls could pass the cap. So the kind's first call reads the ledger once (the callers pass ``far``) and
    the probe is waived, the kind opened at once, when what is left under the cap is at least
    :data:`PROBE_HEADROOM` (100) x the model's concurrency x the call's worst case (:func:`far_from_cap`): then
    even a first wave billing 100x its worst case fits under the cap, and the guard's factor covers the calls
    after it. A fresh run with a budget far above its first wave starts at full concurrency; a run near its cap
    (a small pilot budget, a resumed run with little left) probes. Beyond 100x (a worst case of a few tokens where
    the provider bills thousands) a waived first wave could still pass the cap; with several models sharing the
    cap, or several worker processes (each decides and probes for itself, by its own concurrency), the margin is
    100 over their number. Unpaid models (replay, simulated: :attr:`geoagent.config.ModelConfig.paid`) never wait.
    Once a kind is open a call pays one set lookup (:meth:`first_bill`'s fast path).

    Per process: a resumed run decides and probes again (a new process knows no bill).
    """

    def __init__(self) -> None:
        self._factor: dict[tuple[str, bool], float] = {}
        #: kinds (model, with an image) whose probe ended with a bill in this process: their calls go at full
        #: concurrency
        self._billed: set[tuple[str, bool]] = set()
        #: kinds with a bill noted (:meth:`note`), open once their probe's turn ends
        self._noted: set[tuple[str, bool]] = set()
        #: kinds whose first call asked whether the cap is far (``far``, once per kind)
        self._decided: set[tuple[str, bool]] = set()
        #: kinds whose probe is in flight -> the event set when its turn ends
        self._probing: dict[tuple[str, bool], asyncio.Event] = {}

    def factor(self, model: str, has_image: bool) -> float:
        """The factor the worst case of ``model``'s calls of this kind is multiplied by (1.0 until an overrun)."""
        return self._factor.get((model, has_image), 1.0)

    def opened(self, model: str, has_image: bool) -> bool:
        """Whether calls of ``model`` of this kind go without waiting (its first bill is known in this process, or
        its probe was waived far from the cap): the callers' fast path."""
        return (model, has_image) in self._billed

    def waive(self, model: str, has_image: bool) -> None:
        """Open ``model``'s kind without a probe (a model that is never billed: replay, simulated)."""
        self._billed.add((model, has_image))

    def probing(self, model: str, has_image: bool) -> bool:
        """Whether a call of ``model`` of this kind would wait now: no bill of the kind is known and its probe is in
        flight (callers read the response store first then, so a stored answer does not wait)."""
        kind = (model, has_image)
        return kind not in self._billed and kind in self._probing

    def first_bill(self, model: str, has_image: bool, *, paid: bool = True,
                   stopping: Callable[[], bool] | None = None,
                   far: Callable[[], Awaitable[bool]] | None = None) -> "_ProbeTurn":
        """``async with``: the turn of one call of ``model`` of this kind (class docstring, "First bill").

        Enters at once when the kind has a bill in this process or ``paid`` is False; else the first caller becomes
        the kind's probe and the others wait until its turn ends: with a bill (:meth:`note` was told one; then all
        enter) or without (then the next becomes the probe). The caller settles the bill before leaving the turn.
        ``far`` (optional): awaited once per kind, by its first call, before it probes: True (the ledger is far from
        the cap, :func:`far_from_cap`) opens the kind without a probe; None probes always. The wait tells the HTTP
        layer's slot-wait listener (:func:`geoagent.runtime.http.slot_wait_listener`), so the stage runner's task
        ceiling stands still, as for a host's concurrency slot.

        Raises
        ------
        geoagent.runtime.stage.Abandoned
            ``stopping()`` became true while waiting (checked every :data:`PROBE_POLL_S` s; nothing was sent).
        """
        return _ProbeTurn(self, (model, has_image), paid, stopping, far)

    async def _wait_turn(self, kind: tuple[str, bool], stopping: Callable[[], bool] | None,
                         far: Callable[[], Awaitable[bool]] | None) -> asyncio.Event | None:
        """Wait for ``kind``'s turn: None when its bill is known, else this call's probe event (to end)."""
        listener = None
        try:
            while kind not in self._billed:
                event = self._probing.get(kind)
                if event is None:
                    event = self._probing[kind] = asyncio.Event()
                    if far is not None and kind not in self._decided:
                        # once per kind and process, holding the probe's place so the calls behind wait for it
                        self._decided.add(kind)
                        try:
                            waived = await far()
                        except BaseException:
                            self._end_probe(kind, event)
                            raise
                        if waived:
                            self._billed.add(kind)
                            self._end_probe(kind, event)
                            return None
                    return event
                if stopping is not None and stopping():
                    raise Abandoned(STOP_WHILE_PROBING)
                if listener is None:
                    listener = slot_wait_listener() or _no_listener
                    listener(+1)
                with anyio.move_on_after(PROBE_POLL_S):  # a stop request is seen within this
                    await event.wait()
            return None
        finally:
            if listener is not None:
                listener(-1)

    def _end_probe(self, kind: tuple[str, bool], event: asyncio.Event) -> None:
        if kind in self._noted:  # billed (and settled: the probe's caller settles before its turn ends)
            self._billed.add(kind)
        if self._probing.get(kind) is event:
            del self._probing[kind]
        event.set()  # the waiters look again: open now, or the next one probes

    def note(self, model: str, has_image: bool, cost_usd: float, reserved_usd: float, base_usd: float) -> None:
        """A call of ``model`` cost ``cost_usd`` (USD) against a reservation of ``reserved_usd`` whose worst case
        before the guard was ``base_usd``: the kind's bill is known (its calls no longer wait once the probe that
        made this call ends, settled: :meth:`first_bill`); when it cost more than its reservation, raise the kind's
        factor to ``cost_usd / base_usd`` and say so once per rise (a warning naming the config keys that fix it)."""
        kind = (model, has_image)
        if reserved_usd > 0 and base_usd > 0 and cost_usd > reserved_usd * (1 + 1e-9):
            ratio = cost_usd / base_usd
            if ratio > self._factor.get(kind, 1.0):
                self._factor[kind] = ratio
                log.warning("model %r billed $%.6f for a call%s whose worst case was $%.6f (x%.2f): its later "
                            "such calls in this run reserve x%.2f their worst case; raise [[models]] "
                            "image_input_tokens or [budget] input_estimate_factor so the worst case covers its bills",
                            model, cost_usd, " with an image" if has_image else "", base_usd, ratio, ratio)
        # the kind opens when its probe's turn ends (_end_probe), once this bill is settled in the ledger: calls let
        # go before would be checked against the cap with the probe still counted at its low reservation
        self._noted.add(kind)


def _no_listener(_delta: int) -> None:
    """The slot-wait listener when the context has none."""


class _ProbeTurn:
    """``async with``: one call's turn of a kind (:meth:`OverrunGuard.first_bill`)."""

    __slots__ = ("_guard", "_kind", "_paid", "_stopping", "_far", "_event")

    def __init__(self, guard: OverrunGuard, kind: tuple[str, bool], paid: bool,
                 stopping: Callable[[], bool] | None, far: Callable[[], Awaitable[bool]] | None) -> None:
        self._guard, self._kind, self._paid, self._stopping, self._far = guard, kind, paid, stopping, far
        self._event: asyncio.Event | None = None

    async def __aenter__(self) -> None:
        if self._paid and self._kind not in self._guard._billed:  # open: a set lookup, no await
            self._event = await self._guard._wait_turn(self._kind, self._stopping, self._far)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._event is not None:
            self._guard._end_probe(self._kind, self._event)


def worst_case_usage(model_cfg: Any, request: ModelRequest, *, input_estimate_factor: float, has_image: bool,
                     size_px: tuple[int, int] | None = None) -> Usage:
    """The worst-case token counts of ``request`` that its reservation is priced from, marked not reported.

    Input: :func:`geoagent.config.reserved_input_tokens` (prompt, params, the image by ``has_image`` /
    ``size_px``) x ``input_estimate_factor``, rounded up; output: the request's ``max_output_tokens``. Tokens.
    """
    from geoagent.config import reserved_input_tokens

    n_in = math.ceil(reserved_input_tokens(model_cfg, request.prompt, request.params, has_image=has_image,
                                           size_px=size_px) * input_estimate_factor)
    return Usage(n_in, int(request.max_output_tokens), reported=False)


def booked_answer(response: ModelResponse, reservation: Any, model_cfg: Any, request: ModelRequest, *,
                  input_estimate_factor: float, has_image: bool, size_px: tuple[int, int] | None = None
                  ) -> tuple[ModelResponse, float]:
    """The answer to store and the cost (USD) to settle its reservation with.

    An answer whose provider reported its usage costs that usage at the model's prices. An answer that came
    without a usable usage (``response.usage.reported`` False: :mod:`geoagent.providers.openai_compat`,
    :mod:`geoagent.providers.anthropic`, :mod:`geoagent.providers.gemini`) is still
    stored (it was billed once; asking again would pay again), settled at the reservation's amount, the worst
    case the call could cost (input estimate x ``input_estimate_factor`` + the request's max output tokens,
    :func:`geoagent.config.reservation_usd`), so the ledger never counts it below the bill (unless the provider
    ignored the output limit, which no ledger could know). Its usage becomes those worst-case token counts,
    still marked not reported (stored as ``"usage_reported": false``; the ledger row carries
    :data:`geoagent.runtime.ledger.USAGE_NOT_REPORTED`).

    Parameters
    ----------
    response : ModelResponse
        The provider's answer.
    reservation : geoagent.runtime.ledger.Reservation
        The call's reservation (``amount_usd``: its worst case, USD).
    model_cfg : geoagent.config.ModelConfig
        The ``[[models]]`` entry (prices, image rule).
    request : ModelRequest
        The request as sent (prompt, params, ``max_output_tokens``).
    input_estimate_factor : float
        ``[budget] input_estimate_factor`` the reservation was made with (>= 1).
    has_image, size_px
        Whether the call attached an image, and its (width, height) in px when known (as for the reservation).

    Returns
    -------
    (ModelResponse, float)
        The response to store and its cost in USD.
    """
    usage = response.usage
    if usage.reported:
        return response, model_cfg.cost_usd(usage.input_tokens, usage.output_tokens)
    worst = worst_case_usage(model_cfg, request, input_estimate_factor=input_estimate_factor, has_image=has_image,
                             size_px=size_px)
    return dataclasses.replace(response, usage=worst), float(reservation.amount_usd)


async def close_failed_call(ledger: Any, reservation: Any, exc: BaseException, model_cfg: Any) -> str:
    """Close ``reservation`` after ``exc`` ended the call it paid for; return what was done.

    Parameters
    ----------
    ledger : geoagent.runtime.ledger.Ledger
    reservation : geoagent.runtime.ledger.Reservation
        The call's open reservation (worst case, USD; with the worst-case token counts it was priced from when its
        caller kept them, :func:`geoagent.runtime.ledger.with_worst_tokens`, booked with a withheld answer).
    exc : BaseException
        What the provider raised (see the module table).
    model_cfg : geoagent.config.ModelConfig
        The ``[[models]]`` entry: ``paid`` and ``cost_usd(input_tokens, output_tokens)`` (USD).

    Returns
    -------
    str
        ``"released"``, ``"settled"`` or ``"unknown"``.

    Cancellation: for anything outside the table (``CancelledError`` included) the release (request
    provably never sent) or the unknown-outcome mark is handed to the database thread without awaiting
    it, since awaiting inside a cancelled task is not reliable; it still commits.
    """
    if isinstance(exc, PermanentHTTPError):
        await ledger.arelease(reservation, note=f"http {exc.status}")
        return "released"
    if isinstance(exc, (RetriesExhausted, RetriesStopped)):
        what = "retries exhausted" if isinstance(exc, RetriesExhausted) else "stop requested between retries"
        maybe_billed = int(getattr(exc, "possibly_billed", 0) or 0)
        if maybe_billed:
            await ledger.amark_unknown(reservation, note=f"{what}; attempts may have been billed",
                                       attempts=maybe_billed)
            return "unknown"
        await ledger.arelease(reservation, note=what)
        return "released"
    if isinstance(exc, OutcomeUnknown):
        maybe_billed = max(1, int(getattr(exc, "possibly_billed", 1) or 1))
        await ledger.amark_unknown(reservation, note="outcome unknown", attempts=maybe_billed)
        return "unknown"
    if isinstance(exc, ProviderError):
        usage = getattr(exc, "usage", None)
        if not model_cfg.paid and not bool(getattr(exc, "retryable", True)):
            await ledger.arelease(reservation, note=type(exc).__name__)
            return "released"
        if usage is not None:
            await ledger.asettle(reservation, usage, model_cfg.cost_usd(usage.input_tokens, usage.output_tokens))
            return "settled"
        if isinstance(exc, ContentBlocked):
            # answered (HTTP 200: the Gemini billing FAQ, https://ai.google.dev/gemini-api/docs/billing, spares only
            # requests that fail with a 400 or 500 error) but without a count: a known outcome, booked at its worst
            # case like an answer without usage (Ledger.settle keeps a not-reported usage at the reservation), with
            # the worst-case tokens the reservation was priced from (0 where its caller did not keep them)
            worst = Usage(int(getattr(reservation, "input_tokens", 0) or 0),
                          int(getattr(reservation, "output_tokens", 0) or 0), reported=False)
            await ledger.asettle(reservation, worst, float(reservation.amount_usd))
            return "settled"
        await ledger.amark_unknown(reservation, note=type(exc).__name__)
        return "unknown"
    if never_sent(exc):
        # nothing of the request reached the connection (e.g. cancelled while it was opening): not billed
        note = f"{type(exc).__name__} before the request was sent"
        ledger.db.submit(functools.partial(ledger.release, reservation, note=note))
        return "released"
    ledger.db.submit(ledger.mark_unknown, reservation)
    return "unknown"
