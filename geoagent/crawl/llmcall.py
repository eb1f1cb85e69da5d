"""Model calls of the crawl's auditors, metered by the campaign ledger when one is configured.

Issue 2 point 7 applies to the crawl's paid audits too: before a call, reserve its worst case (input
estimate x input price + max output tokens x output price) and never start one that could pass the
cap (``BudgetExhausted`` is a ``BudgetStop``: the runner releases the task and drains); afterwards
settle with the actual usage, release when the call certainly was not billed, or keep it as
unknown-outcome spend when the connection dropped after sending.
"""

from __future__ import annotations

from typing import Any

from geoagent.providers.base import ModelRequest, ModelResponse
from geoagent.runtime.http import OutcomeUnknown


async def metered_generate(provider: Any, request: ModelRequest, *, ledger: Any = None, model_cfg: Any = None) -> ModelResponse:
    """``provider.generate(request)``, wrapped in a ledger reservation when ``ledger`` and ``model_cfg``
    (a ``[[models]]`` entry with prices) are given.

    Raises
    ------
    geoagent.runtime.ledger.BudgetExhausted
        The reservation does not fit under the cap (nothing was sent).
    """
    if ledger is None or model_cfg is None:
        return await provider.generate(request)
    est_in = provider.estimate_input_tokens(request)
    res = await ledger.areserve(request.key(), model_cfg.worst_case_usd(est_in, request.max_output_tokens),
                                model=getattr(model_cfg, "name", request.model))
    try:
        resp = await provider.generate(request)
    except OutcomeUnknown:
        await ledger.amark_unknown(res, note="crawl audit: outcome unknown")
        raise
    except BaseException:
        await ledger.arelease(res, note="crawl audit: call failed")
        raise
    await ledger.asettle(res, resp.usage, model_cfg.cost_usd(resp.usage.input_tokens, resp.usage.output_tokens))
    return resp
