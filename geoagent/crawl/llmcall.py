"""Model calls of the crawl's auditors, metered by the campaign ledger when one is configured.

Issue 2 point 7 applies to the crawl's paid audits too: before a call, reserve its worst case (input
estimate x input price + max output tokens x output price) and never start one that could pass the
cap (``BudgetExhausted`` is a ``BudgetStop``: the runner releases the task and drains); afterwards
settle with the actual usage, release when the call certainly was not billed, or keep it as
unknown-outcome spend when it may have been billed (the same table as the model caller:
:mod:`geoagent.workers.billing`).
"""

from __future__ import annotations

from typing import Any

from geoagent.providers.base import ModelRequest, ModelResponse
from geoagent.workers.billing import close_failed_call


async def metered_generate(provider: Any, request: ModelRequest, *, ledger: Any = None, model_cfg: Any = None) -> ModelResponse:
    """``provider.generate(request)``, wrapped in a ledger reservation when ``ledger`` and ``model_cfg``
    (a ``[[models]]`` entry with prices) are given.

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
    est_in = provider.estimate_input_tokens(request)
    res = await ledger.areserve(request.key(), model_cfg.worst_case_usd(est_in, request.max_output_tokens),
                                model=getattr(model_cfg, "name", request.model))
    try:
        resp = await provider.generate(request)
    except BaseException as exc:
        # released only when certainly not billed; a cancelled or dropped call counts as unknown spend
        await close_failed_call(ledger, res, exc, model_cfg)
        raise
    await ledger.asettle(res, resp.usage, model_cfg.cost_usd(resp.usage.input_tokens, resp.usage.output_tokens))
    return resp
