"""Anthropic Messages API provider.

Wire format (Claude API docs: Messages, Vision, Errors):

* ``POST {base_url}/v1/messages`` (base ``https://api.anthropic.com``) with headers ``x-api-key``,
  ``anthropic-version: 2023-06-01`` (``ProviderSettings.anthropic_version``) and
  ``content-type: application/json``.
* Body: ``model``, ``max_tokens`` (required by the API), optional top-level ``system`` (from
  ``params.system``; never a message role), ``temperature``, ``top_p``, and one user message whose
  content is ``[{"type": "image", "source": {"type": "base64", "media_type": <mime>, "data": <b64>}},
  {"type": "text", "text": <prompt>}]`` (image first, as the vision guide recommends; ``data`` has no
  ``data:`` prefix) or just the text block without an image. The Messages API has no sampling seed
  and no JSON mode: ``params.seed`` / ``params.json_mode`` are not sent. Claude 4.7+ models get neither
  ``temperature`` nor ``top_p`` (they refuse both at any value), and Opus 4.1 / 4.5+ models never both in one
  request (only ``top_p`` when both are set); no ``thinking`` block is ever sent
  (:mod:`geoagent.providers.sampling`, with the sources).
* Answer: the ``text`` blocks of ``content`` joined in order (other block types such as ``thinking``
  are skipped), ``stop_reason`` (``end_turn``, ``max_tokens``, ``stop_sequence``, ``refusal``, ...),
  ``usage.input_tokens`` / ``usage.output_tokens`` (cache-creation and cache-read input tokens, when
  reported, are added to input tokens), ``model``.
* ``stop_reason: "refusal"`` with no answer text (the model declined; the Messages reference's stop reasons) is a
  withheld answer: :class:`~geoagent.providers.errors.ContentBlocked` with the reported usage (not retried), as
  OpenAI's ``content_filter`` without content and Gemini's ``SAFETY`` without parts are. A refusal after part of an
  answer keeps that text as the answer, as those providers' partial answers do. ``stop_reason`` is read as the
  cut-off checks read it (:func:`geoagent.scoring.truncation.finish_reason_key`: cleaned, any case; fixreason43 #2)
  and kept as sent in the answer (:attr:`~geoagent.providers.base.ModelResponse.finish_reason`).
* An answer without a usable ``usage`` is still an answer (:class:`~geoagent.providers.base.Usage` with
  ``reported = False``, counts 0): ``usage`` left out, ``null`` or not an object, ``input_tokens`` or
  ``output_tokens`` missing, or a count no call can have (not a non-negative integer, above
  :data:`~geoagent.providers.http_base.MAX_USAGE_TOKENS`; the cache counts too, when present; ``output_tokens`` 0 beside
  a non-empty answer text, impossible where text is output). The API documents
  ``usage`` ("Billing and rate-limit usage": ``input_tokens``, ``output_tokens``, the cache counts) as a required
  field of every Message, with ``output_tokens`` non-zero even for an empty answer (Claude API docs, Messages;
  the SDKs' ``Message.usage``), but Anthropic-compatible servers and gateways do not all pass it on. The call was
  answered and billed: asking again pays again and likely gets the same body (each retry of such an answer used
  to cost one more call, up to ``[queue] max_attempts``, and end as a dead letter). The model caller stores the
  answer once and books it at its reservation, the worst case (:func:`geoagent.workers.billing.booked_answer`),
  as for an OpenAI-compatible answer (:mod:`geoagent.providers.openai_compat`).
"""

from __future__ import annotations

from typing import Any

from geoagent.providers.base import ModelRequest, ModelResponse, Usage, provider_model_text, register
from geoagent.providers.errors import ContentBlocked, MalformedResponse, body_excerpt
from geoagent.image_fit import ANTHROPIC_MAX_IMAGE_B64, ANTHROPIC_MAX_SIDE_PX, fitted
from geoagent.providers.http_base import HttpProvider, as_int, b64
from geoagent.providers.sampling import anthropic_sampling
from geoagent.scoring.truncation import finish_reason_key


@register
class AnthropicProvider(HttpProvider):
    """Anthropic Messages over HTTP; ``kind = "anthropic"``."""

    kind = "anthropic"

    def build(self, request: ModelRequest) -> tuple[str, dict[str, Any], dict[str, str]]:
        params = request.params
        content: list[dict[str, Any]] = []
        if request.image is not None:
            # refitted at the long edge this model reads images at (1568 px, 2576 px from Claude Opus 4.7:
            # geoagent.config.anthropic_resolution; review39b #5)
            from geoagent.config import anthropic_resolution

            img = fitted(self.kind, request, max_b64=ANTHROPIC_MAX_IMAGE_B64, max_side_px=ANTHROPIC_MAX_SIDE_PX,
                         fit_edge_px=anthropic_resolution(request.model)[0])
            content.append({"type": "image", "source": {"type": "base64", "media_type": img.mime, "data": b64(img.data)}})
        content.append({"type": "text", "text": request.prompt})
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            "messages": [{"role": "user", "content": content}],
        }
        if params.get("system"):
            body["system"] = str(params["system"])
        body.update(anthropic_sampling(params, request.model))
        headers = self.common_headers(request)
        headers["anthropic-version"] = self.settings.anthropic_version
        key = self._api_key()
        if key:
            headers["x-api-key"] = key
        return f"{self.base_url}/v1/messages", body, headers

    def parse(self, request: ModelRequest, data: Any, raw: bytes) -> ModelResponse:
        if not isinstance(data, dict):
            raise MalformedResponse(self.kind, "body is not a JSON object", body_excerpt(raw))
        if data.get("type") == "error" or data.get("error") is not None:
            err = data.get("error")
            msg = err.get("message") if isinstance(err, dict) else err
            raise MalformedResponse(self.kind, f"error in 2xx body: {str(msg)[:300]}")
        blocks = data.get("content")
        if not isinstance(blocks, list):
            raise MalformedResponse(self.kind, "content is not a list", body_excerpt(raw))
        texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        if any(not isinstance(t, str) for t in texts):
            raise MalformedResponse(self.kind, "a text block has no text", body_excerpt(raw))
        stop = data.get("stop_reason")
        # read as the cut-off checks read it (cleaned, any case), stored as sent (fixreason43 #2)
        if finish_reason_key(stop) == "refusal" and not "".join(texts).strip():  # type: ignore[arg-type]
            # the model declined before any answer text: a withheld answer, as OpenAI's content_filter with content
            # null and Gemini's SAFETY without parts are (providers37 #7: it was stored as an empty answer)
            usage = data.get("usage")
            try:
                withheld = self._usage(usage, raw) if isinstance(usage, dict) else None
            except MalformedResponse:
                withheld = None
            raise ContentBlocked(self.kind, "answer withheld: stop_reason refusal", withheld)
        return ModelResponse(
            text="".join(texts),  # type: ignore[arg-type]
            usage=self._answer_usage(data.get("usage"), raw, "".join(texts)),  # type: ignore[arg-type]
            finish_reason=stop if isinstance(stop, str) else None,
            provider_model=provider_model_text(data.get("model")),  # cleaned and capped (sec42 #3)
        )

    def _answer_usage(self, usage: Any, raw: bytes, text: str = "") -> Usage:
        """The usage of a readable answer: :meth:`_usage` of ``usage``, or ``Usage(0, 0, reported=False)`` when
        the body carries none that can be used (module docstring: left out, ``null``, not an object, a count
        missing, or counts no call can have, 0 output tokens for the non-empty ``text`` among them). Never raises:
        the answer text was read."""
        if not isinstance(usage, dict):
            return Usage(0, 0, reported=False)
        try:
            return self._usage(usage, raw, text)
        except MalformedResponse:
            return Usage(0, 0, reported=False)

    def _usage(self, usage: dict[str, Any], raw: bytes, text: str = "") -> Usage:
        """Input tokens (``input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``, the
        cache counts when present) and output tokens (``output_tokens``) of ``usage``.

        Raises
        ------
        MalformedResponse
            ``input_tokens`` or ``output_tokens`` missing, a count that is not a non-negative integer (at most
            :data:`~geoagent.providers.http_base.MAX_USAGE_TOKENS`), or ``output_tokens`` 0 beside a non-empty
            ``text`` (the answer's text is output; the Messages reference documents ``output_tokens`` as non-zero
            even for an empty answer: a zero count beside text is a count no call can have, not free output).
        """
        n_in = as_int(usage.get("input_tokens"), "usage.input_tokens", self.kind, raw)
        for extra in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            if usage.get(extra) is not None:
                n_in += as_int(usage.get(extra), f"usage.{extra}", self.kind, raw)
        n_out = as_int(usage.get("output_tokens"), "usage.output_tokens", self.kind, raw)
        if text and n_out == 0:
            raise MalformedResponse(self.kind, "usage.output_tokens is 0 for a non-empty answer", body_excerpt(raw))
        return Usage(n_in, n_out)
