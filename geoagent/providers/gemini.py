"""Google Gemini ``generateContent`` provider.

Wire format (Gemini API reference ``models.generateContent``):

* ``POST {base_url}/v1beta/models/{model}:generateContent`` (base
  ``https://generativelanguage.googleapis.com``) with the key in the ``x-goog-api-key`` header (never
  in the URL, so it cannot leak through logged URLs or error messages).
* Body (lowerCamelCase, the spelling responses use): ``contents = [{"role": "user", "parts":
  [{"inlineData": {"mimeType": <mime>, "data": <b64>}}, {"text": <prompt>}]}]`` (image first; raw
  base64, no ``data:`` prefix), optional ``systemInstruction = {"parts": [{"text": <params.system>}]}``,
  ``generationConfig = {"maxOutputTokens", "temperature"? (never for Gemini 3: it samples at its default 1.0,
  :func:`geoagent.providers.sampling.gemini_sampling`), "topP"?, "seed"?,
  "responseMimeType": "application/json" (with params.json_mode), "thinkingConfig": {"thinkingBudget":
  <params.thinking_budget>}?}``. On thinking models (Gemini 2.5 Flash / Pro, Gemini 3) ``maxOutputTokens``
  includes the thinking tokens, which by default (dynamic thinking) may use the whole cap
  (:mod:`geoagent.providers.sampling`, with the sources); ``thinking_budget = 0`` turns Gemini 2.5 Flash's
  thinking off (not Gemini 3's: Pro refuses it, Flash keeps thinking; prov46 #4).
* Answer: the ``text`` parts of ``candidates[0].content.parts`` joined in order (``thought`` parts of
  thinking models skipped), ``candidates[0].finishReason``, ``usageMetadata.promptTokenCount`` and
  output = ``candidatesTokenCount + thoughtsTokenCount`` (thinking tokens are billed as output), ``modelVersion``.
* Counting from the total (s14): an answer with text needs ``candidatesTokenCount`` > 0; ``totalTokenCount -
  promptTokenCount - thoughtsTokenCount`` does not stand in for it. The ``UsageMetadata`` counts are protobuf
  integers, which the JSON mapping leaves out when 0 (Gemini API reference, ``GenerateContentResponse.UsageMetadata``,
  https://ai.google.dev/api/generate-content#UsageMetadata; the client libraries type every count as optional), so a
  body without ``candidatesTokenCount`` says zero candidate tokens, which an answer with text cannot have. The
  documented bodies that carry text and a total without that count are a streamed answer's chunks before the last,
  whose ``totalTokenCount`` is the running total (``promptTokenCount`` alone there: google-gemini-php/client#72;
  googleapis/python-genai#1204: only the last chunk has the call's counts): the difference can be 0 or anything up to
  the real count. The total is also no output measure: it sums prompt, candidates, tool-use prompt and thoughts
  tokens (Google Gen AI SDK, ``GenerateContentResponseUsageMetadata.total_token_count``,
  https://googleapis.github.io/kotlin-genai/google-genai-kotlin/com.google.genai.kotlin.types/-generate-content-response-usage-metadata/total-token-count.html).
  Such an answer, and one with ``candidatesTokenCount: 0`` beside its text, is booked as usage not reported (below),
  never counted from a difference that can under-count. Before s14 it was counted as ``total - prompt``.
* A blocked prompt comes back as ``promptFeedback.blockReason`` with no ``candidates``; a blocked answer
  as a candidate without ``content`` and ``finishReason`` ``SAFETY`` (or similar): both raise
  :class:`ContentBlocked` carrying the usage reported. No candidates at all otherwise ->
  :class:`MalformedResponse`. A candidate without parts that stopped on ``MAX_TOKENS`` (e.g. all budget
  spent thinking) is an empty answer with finish reason ``MAX_TOKENS``, not an error. These decisions read
  ``finishReason`` as the cut-off checks do (:func:`geoagent.scoring.truncation.finish_reason_key`: without control or
  bidirectional formatting characters, any case), so ``"MAX_TOKENS\u2066"`` is the empty answer too and reaches the
  empty-answer breaker, where it was a malformed body retried at a cost (fixreason43 #2); the answer keeps the reason
  as sent (:attr:`~geoagent.providers.base.ModelResponse.finish_reason`, the response store's record).
* Withheld answers (s14): a blocked prompt or a withheld answer without a usable ``usageMetadata`` is still
  :class:`ContentBlocked` (its ``usage`` None), not a malformed body: the API answered with HTTP 200 and said what
  happened, and a retry pays again (the billing FAQ, https://ai.google.dev/gemini-api/docs/billing, spares only
  requests that fail with a 400 or 500 error; pricing is per token) for the same prompt judged by the same
  thresholds (the safety settings guide, https://ai.google.dev/gemini-api/docs/safety-settings: what is blocked
  follows from the request's ``safetySettings``, which a retry leaves as they were). A blocked prompt is judged on
  the prompt alone; a withheld answer at a non-zero temperature might be sampled otherwise, but a withheld answer
  that did carry its usage was already final (:class:`ContentBlocked` is not retryable), and whether the count came
  along says nothing about what a retry would get. Before
  s14 it was retried (each attempt billed) and booked as unknown-outcome spend. The model caller dead-letters it with
  its reason (``answer withheld: finishReason SAFETY``) and books it at its reservation, the worst case, as usage
  not reported (:func:`geoagent.workers.billing.close_failed_call`).
* An answer (a candidate with text parts, or the empty ``MAX_TOKENS`` one) without a usable ``usageMetadata``
  is still an answer (:class:`~geoagent.providers.base.Usage` with ``reported = False``, counts 0):
  ``usageMetadata`` left out, ``null`` or not an object, no ``promptTokenCount`` (every call has a prompt: the
  count is never 0), text with no (or a zero) ``candidatesTokenCount``, or a count no call can have (not a
  non-negative integer, above :data:`~geoagent.providers.http_base.MAX_USAGE_TOKENS`, ``totalTokenCount`` below
  prompt + thoughts). An empty answer without ``candidatesTokenCount`` has none: its output is the thoughts (or
  ``totalTokenCount - promptTokenCount`` when the total is given). The call was answered and billed: asking again
  pays again and likely gets the same body (each retry of such an answer used to cost one more call, up to
  ``[queue] max_attempts``, and end as a dead letter). The model caller stores the answer once and books it at its
  reservation, the worst case (:func:`geoagent.workers.billing.booked_answer`), as for an OpenAI-compatible answer
  (:mod:`geoagent.providers.openai_compat`). A candidate without parts on another finish reason is no answer and
  keeps the handling above (its usage read with :meth:`GeminiProvider._usage`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from geoagent.providers.base import ModelRequest, ModelResponse, Usage, provider_model_text, register
from geoagent.providers.errors import ContentBlocked, MalformedResponse, body_excerpt
from geoagent.image_fit import GEMINI_FIT_EDGE_PX, GEMINI_IMAGE_MIMES, GEMINI_MAX_IMAGE_B64, fitted
from geoagent.providers.http_base import HttpProvider, as_int, b64
from geoagent.providers.sampling import gemini_sampling
from geoagent.scoring.truncation import finish_reason_key
from geoagent.textfmt import finish_reason_text

#: generationConfig field of each sampling setting (:data:`geoagent.providers.sampling.SAMPLING_PARAMS`)
_SAMPLING_WIRE = {"temperature": "temperature", "top_p": "topP", "seed": "seed"}

#: finishReason values that mean the answer was withheld rather than completed or cut.
BLOCKING_FINISH_REASONS = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE"}
)
#: :data:`BLOCKING_FINISH_REASONS` as :func:`~geoagent.scoring.truncation.finish_reason_key` reads a reason
_BLOCKING_KEYS = frozenset(r.lower() for r in BLOCKING_FINISH_REASONS)


@register
class GeminiProvider(HttpProvider):
    """Gemini generateContent over HTTP; ``kind = "gemini"``."""

    kind = "gemini"

    def build(self, request: ModelRequest) -> tuple[str, dict[str, Any], dict[str, str]]:
        params = request.params
        parts: list[dict[str, Any]] = []
        if request.image is not None:
            img = fitted(self.kind, request, max_b64=GEMINI_MAX_IMAGE_B64, mimes=GEMINI_IMAGE_MIMES,
                         fit_edge_px=GEMINI_FIT_EDGE_PX)
            parts.append({"inlineData": {"mimeType": img.mime, "data": b64(img.data)}})
        parts.append({"text": request.prompt})
        gen: dict[str, Any] = {"maxOutputTokens": request.max_output_tokens}
        # Gemini 3 models get no temperature (they sample at their default 1.0: geoagent.providers.sampling)
        for name, value in gemini_sampling(params, request.model).items():
            gen[_SAMPLING_WIRE[name]] = value
        if params.get("json_mode"):
            gen["responseMimeType"] = "application/json"
        if params.get("thinking_budget") is not None:
            gen["thinkingConfig"] = {"thinkingBudget": params["thinking_budget"]}
        body: dict[str, Any] = {"contents": [{"role": "user", "parts": parts}], "generationConfig": gen}
        if params.get("system"):
            body["systemInstruction"] = {"parts": [{"text": str(params["system"])}]}
        model = request.model.removeprefix("models/")
        headers = self.common_headers(request)
        key = self._api_key()
        if key:
            headers["x-goog-api-key"] = key
        return f"{self.base_url}/v1beta/models/{quote(model, safe='-._~')}:generateContent", body, headers

    def _usage(self, data: dict[str, Any], raw: bytes, text: str = "") -> Usage:
        """Input = ``promptTokenCount``; output = ``candidatesTokenCount + thoughtsTokenCount`` (thinking tokens are
        billed as output). Without ``candidatesTokenCount`` (the JSON mapping leaves a zero count out) the answer has
        no candidate tokens: for an empty answer (no ``text``) the output is ``totalTokenCount - promptTokenCount``
        when the total is given (at least the thoughts), else the thoughts.

        Raises
        ------
        MalformedResponse
            No ``usageMetadata``, a count that is not a non-negative integer, a total below prompt + thoughts, or
            answer text with 0 candidate tokens: ``candidatesTokenCount: 0``, or no ``candidatesTokenCount`` at all,
            whatever the total says (module docstring, "Counting from the total"): a paid answer never settles as
            free output nor as a difference of counts that cannot be trusted.
        """
        meta = data.get("usageMetadata")
        if not isinstance(meta, dict):
            raise MalformedResponse(self.kind, "usageMetadata missing", body_excerpt(raw))
        n_in = as_int(meta.get("promptTokenCount", 0), "usageMetadata.promptTokenCount", self.kind, raw)
        thoughts = as_int(meta.get("thoughtsTokenCount", 0), "usageMetadata.thoughtsTokenCount", self.kind, raw)
        if meta.get("candidatesTokenCount") is not None:
            candidates = as_int(meta["candidatesTokenCount"], "usageMetadata.candidatesTokenCount", self.kind, raw)
            if text and candidates == 0:
                raise MalformedResponse(self.kind, "usageMetadata.candidatesTokenCount is 0 for a non-empty answer",
                                        body_excerpt(raw))
            n_out = thoughts + candidates
        elif text:
            raise MalformedResponse(self.kind, "usageMetadata has no candidatesTokenCount (0 by the JSON mapping) for "
                                    "a non-empty answer", body_excerpt(raw))
        elif meta.get("totalTokenCount") is not None:
            n_out = as_int(meta["totalTokenCount"], "usageMetadata.totalTokenCount", self.kind, raw) - n_in
            if n_out < thoughts:
                raise MalformedResponse(self.kind, "usageMetadata.totalTokenCount < prompt + thoughts", body_excerpt(raw))
        else:
            n_out = thoughts
        return Usage(n_in, n_out)

    def _withheld_usage(self, data: dict[str, Any], raw: bytes) -> Usage | None:
        """The usage of a withheld answer or a blocked prompt: :meth:`_usage`, or None when the body carries none
        that can be used (``usageMetadata`` left out, ``null``, not an object, without ``promptTokenCount``, or
        counts no call can have). Never raises: the body said what happened (module docstring, "Withheld answers")."""
        meta = data.get("usageMetadata")
        if not isinstance(meta, dict) or meta.get("promptTokenCount") is None:
            return None
        try:
            return self._usage(data, raw)
        except MalformedResponse:
            return None

    def _answer_usage(self, data: dict[str, Any], raw: bytes, text: str) -> Usage:
        """The usage of a readable answer (``text``: its text, possibly empty): :meth:`_usage`, or ``Usage(0, 0,
        reported=False)`` when ``data`` carries none that can be used (module docstring: ``usageMetadata`` left
        out, ``null``, not an object, without ``promptTokenCount``, or counts no call can have). Never raises: the
        answer text was read."""
        meta = data.get("usageMetadata")
        if not isinstance(meta, dict) or meta.get("promptTokenCount") is None:
            return Usage(0, 0, reported=False)
        try:
            return self._usage(data, raw, text)
        except MalformedResponse:
            return Usage(0, 0, reported=False)

    def parse(self, request: ModelRequest, data: Any, raw: bytes) -> ModelResponse:
        if not isinstance(data, dict):
            raise MalformedResponse(self.kind, "body is not a JSON object", body_excerpt(raw))
        if data.get("error") is not None:
            err = data["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            raise MalformedResponse(self.kind, f"error in 2xx body: {str(msg)[:300]}")
        candidates = data.get("candidates")
        feedback = data.get("promptFeedback")
        block = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if not candidates:
            if block:
                raise ContentBlocked(self.kind, f"prompt blocked: {block}", self._withheld_usage(data, raw))
            usage = self._usage(data, raw) if isinstance(data.get("usageMetadata"), dict) else None
            raise MalformedResponse(self.kind, "no candidates", body_excerpt(raw), usage)
        if not isinstance(candidates, list) or not isinstance(candidates[0], dict):
            raise MalformedResponse(self.kind, "candidates is not a list of objects", body_excerpt(raw))
        cand = candidates[0]
        finish = cand.get("finishReason") if isinstance(cand.get("finishReason"), str) else None
        # decided on the reason as the cut-off checks read it (cleaned, any case), stored as sent (fixreason43 #2:
        # "MAX_TOKENS\u2066" was a malformed body, retried and never seen by the empty-answer breaker)
        key, shown = finish_reason_key(finish), finish_reason_text(finish)
        content = cand.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if not parts:
            if key == "max_tokens":  # an empty answer: the cap went on thinking (an answer all the same)
                texts: list[str] = []
                usage = self._answer_usage(data, raw, "")
            elif key in _BLOCKING_KEYS:
                raise ContentBlocked(self.kind, f"answer withheld: finishReason {shown}", self._withheld_usage(data, raw))
            else:
                raise MalformedResponse(self.kind, f"candidate has no parts (finishReason {shown})", body_excerpt(raw),
                                        self._usage(data, raw))
        else:
            if not isinstance(parts, list):
                raise MalformedResponse(self.kind, "content.parts is not a list", body_excerpt(raw))
            texts = [
                p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
            ]
            usage = self._answer_usage(data, raw, "".join(texts))
        return ModelResponse(
            text="".join(texts),
            usage=usage,
            finish_reason=finish,
            provider_model=provider_model_text(data.get("modelVersion")),  # cleaned and capped (sec42 #3)
        )
