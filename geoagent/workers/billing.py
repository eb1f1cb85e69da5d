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

import functools
from typing import Any

from geoagent.providers.base import ProviderError
from geoagent.runtime.http import OutcomeUnknown, PermanentHTTPError, RetriesExhausted, RetriesStopped, never_sent


async def close_failed_call(ledger: Any, reservation: Any, exc: BaseException, model_cfg: Any) -> str:
    """Close ``reservation`` after ``exc`` ended the call it paid for; return what was done.

    Parameters
    ----------
    ledger : geoagent.runtime.ledger.Ledger
    reservation : geoagent.runtime.ledger.Reservation
        The call's open reservation (worst case, USD).
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
        await ledger.amark_unknown(reservation, note=type(exc).__name__)
        return "unknown"
    if never_sent(exc):
        # nothing of the request reached the connection (e.g. cancelled while it was opening): not billed
        note = f"{type(exc).__name__} before the request was sent"
        ledger.db.submit(functools.partial(ledger.release, reservation, note=note))
        return "released"
    ledger.db.submit(ledger.mark_unknown, reservation)
    return "unknown"
