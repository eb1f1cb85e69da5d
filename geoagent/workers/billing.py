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

import dataclasses
import functools
import logging
import math
from typing import Any

from geoagent.providers.base import ModelResponse, ModelRequest, ProviderError, Usage
from geoagent.providers.errors import ContentBlocked
from geoagent.runtime.http import OutcomeUnknown, PermanentHTTPError, RetriesExhausted, RetriesStopped, never_sent

log = logging.getLogger(__name__)


class OverrunGuard:
    """Overrun guard of one process's paid calls: after a call billed more than its reservation, the worst case of
    the same model's later calls of the same kind (with an image, or without) is multiplied by the largest ratio of
    bill to worst case seen (>= 1; 1 until such a call).

    The cap is only as hard as the worst case bounds each bill. A vision model whose image bill this code does not
    know (behind a gateway, left at ``image_input_tokens``' 1,600 where it bills 15,000; break34 provider #1, #3)
    passed the cap on every call in flight and again on every later call; after the first such call its later calls
    reserve what it showed it can bill. In this process only (a new run starts at 1, so a changed config is not
    multiplied by an old factor), and apart for calls with and without an image. The dry run does not know it.
    Used by the model caller (:class:`geoagent.workers.model_caller.ModelCaller`) and the crawl's auditors
    (:func:`geoagent.crawl.llmcall.metered_generate`)."""

    def __init__(self) -> None:
        self._factor: dict[tuple[str, bool], float] = {}

    def factor(self, model: str, has_image: bool) -> float:
        """The factor the worst case of ``model``'s calls of this kind is multiplied by (1.0 until an overrun)."""
        return self._factor.get((model, has_image), 1.0)

    def note(self, model: str, has_image: bool, cost_usd: float, reserved_usd: float, base_usd: float) -> None:
        """A call of ``model`` cost ``cost_usd`` (USD) against a reservation of ``reserved_usd`` whose worst case
        before the guard was ``base_usd``: when it cost more than its reservation, raise the kind's factor to
        ``cost_usd / base_usd`` and say so once per rise (a warning naming the config keys that fix it)."""
        if not reserved_usd > 0 or not base_usd > 0 or not cost_usd > reserved_usd * (1 + 1e-9):
            return
        ratio = cost_usd / base_usd
        kind = (model, has_image)
        if ratio > self._factor.get(kind, 1.0):
            self._factor[kind] = ratio
            log.warning("model %r billed $%.6f for a call%s whose worst case was $%.6f (x%.2f): its later such calls "
                        "in this run reserve x%.2f their worst case; raise [[models]] image_input_tokens or [budget] "
                        "input_estimate_factor so the worst case covers its bills", model, cost_usd,
                        " with an image" if has_image else "", base_usd, ratio, ratio)


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
