"""The ``simulated`` provider: deterministic answers without any network (dry runs, demo, benchmarks).

Answers come from the responder registry (:mod:`geoagent.sandbox.responders`), seeded by the request key
and ``ProviderSettings.seed``, so a re-run gives byte-identical answers. Token usage follows
:func:`geoagent.sandbox.responders.simulated_usage` (about 4 characters per token, 765 tokens per image),
the same model the local fake API servers use, so a dry run's token and cost estimate matches what the
demo campaign over HTTP records.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from geoagent.providers.base import ModelRequest, ModelResponse, Provider, Usage, register
from geoagent.providers.settings import ProviderSettings


@register
class SimulatedProvider(Provider):
    """Seeded, offline stand-in for a model. ``paid = False``: the ledger records usage at zero cost."""

    kind = "simulated"
    paid = False

    def __init__(self, model_cfg: ProviderSettings, http: Any = None) -> None:
        self.settings = model_cfg
        self.seed = int(model_cfg.seed)
        self._remote: Any = None
        if model_cfg.base_url:
            from geoagent.providers.openai_compat import OpenAICompatProvider

            self._remote = OpenAICompatProvider(dataclasses.replace(model_cfg, kind="openai"), http)
        # over HTTP the remote provider hands ``request.before_send`` to the HTTP layer; offline the caller
        # awaits it before ``generate``
        self.supports_before_send = self._remote is not None

    def __repr__(self) -> str:
        where = f", base_url={self.settings.base_url!r}" if self._remote is not None else ""
        return f"SimulatedProvider(model={self.settings.model!r}, seed={self.seed}{where})"

    async def aclose(self) -> None:
        if self._remote is not None:
            await self._remote.aclose()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` from the responder registry.

        ``finish_reason`` is ``stop``, or ``length`` when the answer was cut to
        ``request.max_output_tokens``. An image counts (765 tokens) when image bytes are attached, as on the
        fake servers; an ``image_id`` alone only seeds the answer.
        With ``base_url`` set, the call goes over HTTP to the local fake (see module docstring) and may
        raise the HTTP layer's errors.
        """
        if self._remote is not None:
            return await self._remote.generate(request)
        from geoagent.sandbox.responders import simulate_answer

        t0 = time.perf_counter()
        text, n_in, n_out, truncated = simulate_answer(
            request.prompt,
            request.image_id,
            request.model,
            self.seed,
            request.max_output_tokens,
            has_image=request.image is not None,
            system=str(request.params.get("system") or ""),
            key=request.key(),
        )
        return ModelResponse(
            text=text,
            usage=Usage(n_in, n_out),
            latency_s=time.perf_counter() - t0,
            finish_reason="length" if truncated else "stop",
            provider_model=request.model,
        )
