"""Model calls of the crawl's auditors, metered by the campaign ledger when one is configured.

Issue 2 point 7 applies to the crawl's paid audits too: before a call, reserve its worst case (input
estimate x input price + max output tokens x output price) and never start one that could pass the
cap (``BudgetExhausted`` is a ``BudgetStop``: the runner releases the task and drains); afterwards
settle with the actual usage, release when the call certainly was not billed, or keep it as
unknown-outcome spend when it may have been billed (the same table as the model caller:
:mod:`geoagent.workers.billing`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from geoagent.providers.base import ModelRequest, ModelResponse
from geoagent.workers.billing import close_failed_call


async def metered_generate(provider: Any, request: ModelRequest, *, ledger: Any = None, model_cfg: Any = None) -> ModelResponse:
    """``provider.generate(request)``, wrapped in a ledger reservation when ``ledger`` and ``model_cfg``
    (a ``[[models]]`` entry with prices) are given.

    The reservation is made at send time: for providers that go over HTTP it is the request's
    ``before_send`` hook, awaited once the host admitted the request (rate and concurrency slot held),
    so calls queued behind a host's limits hold no reservation; offline providers reserve first.

    Raises
    ------
    geoagent.runtime.ledger.BudgetExhausted
        The reservation does not fit under the cap (nothing was sent).
    Exception
        Whatever the provider raised, after the reservation was closed by
        :func:`geoagent.workers.billing.close_failed_call`.
    """
    if ledger is None or model_cfg is None:
        return await provider.generate(request)
    est_in = model_cfg.estimate_input_tokens(request.prompt, request.image is not None or bool(request.image_id))
    worst_usd = model_cfg.worst_case_usd(est_in, request.max_output_tokens)
    held: list[Any] = []  # the reservation, once made

    async def reserve() -> None:
        held.append(await ledger.areserve(request.key(), worst_usd, model=getattr(model_cfg, "name", request.model)))

    if getattr(provider, "supports_before_send", False):
        # reserve at send time, once the host admitted the request (as the model caller does): a call
        # still waiting for its host holds no reservation, so a crash leaves no unknown spend for it
        request = dataclasses.replace(request, before_send=reserve)
    else:
        await reserve()
    try:
        resp = await provider.generate(request)
    except BaseException as exc:
        if held:  # else the reservation itself failed (e.g. BudgetExhausted): nothing was sent
            # released only when certainly not billed; a cancelled or dropped call counts as unknown spend
            await close_failed_call(ledger, held[0], exc, model_cfg)
        raise
    if not held:
        raise RuntimeError(f"{type(provider).__name__} answered without awaiting request.before_send")
    await ledger.asettle(held[0], resp.usage, model_cfg.cost_usd(resp.usage.input_tokens, resp.usage.output_tokens))
    return resp
