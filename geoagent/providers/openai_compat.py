"""OpenAI-compatible Chat Completions provider (OpenAI, OpenRouter, vLLM, Ollama, other compatible servers).

Wire format (OpenAI API reference, "Create chat completion"):

* ``POST {base_url}/chat/completions`` with ``Authorization: Bearer <key>``. Base URLs:
  OpenAI ``https://api.openai.com/v1``, OpenRouter ``https://openrouter.ai/api/v1``,
  vLLM ``http://<host>:8000/v1``, Ollama ``http://<host>:11434/v1`` (Ollama ignores the key; any
  non-empty value works; no ``Authorization`` header is sent when no key is configured).
* Body: ``model``; ``messages`` = optional ``{"role": "system", "content": <params.system>}`` and one user
  message whose ``content`` is the prompt string (``o1-mini`` / ``o1-preview``, which refuse a system message
  with HTTP 400: :func:`geoagent.providers.sampling.openai_rejects_system`, get no system message; its text leads
  the prompt, followed by a blank line; the request key still hashes ``params.system``), or, with an image, the parts
  ``[{"type": "text", ...}, {"type": "image_url", "image_url": {"url": "data:<mime>;base64,<b64>"}}]``;
  the output cap as ``max_completion_tokens`` (OpenAI's current field; reasoning models reject
  ``max_tokens``) for ``api.openai.com`` and ``max_tokens`` elsewhere (vLLM, Ollama and OpenRouter
  document ``max_tokens``), and ``max_completion_tokens`` on any host for ``ProviderSettings.reasoning_model =
  True``; override with ``ProviderSettings.max_tokens_field``. Optional
  ``temperature``, ``seed``, ``top_p`` and, with ``params.json_mode``, ``response_format =
  {"type": "json_object"}`` (not for ``o1-mini`` / ``o1-preview``, which refuse it with HTTP 400:
  :func:`geoagent.providers.sampling.openai_rejects_response_format`; their JSON is read from the text). OpenAI
  reasoning models (``o1``, ``o3``, ``o4-mini``, ``gpt-5*`` on ``api.openai.com``, a reasoning
  ``ProviderSettings.model_family`` on any host, or ``ProviderSettings.reasoning_model``) get no ``top_p`` and no
  ``temperature`` (they sample at their default 1: :mod:`geoagent.providers.sampling`, with the sources); their
  ``max_completion_tokens`` also bounds the hidden reasoning tokens, so a small cap can come back as
  ``content: ""`` with ``finish_reason: "length"`` (a cut-off answer, not an error); servers whose reasoning parser
  keeps the unfinished reasoning apart (vLLM: ``content: null``, the text in ``message.reasoning``,
  vllm-project/vllm#52640) give the same empty cut-off answer. An OpenAI reasoning id behind a vendor prefix
  (``openai/o3`` on OpenRouter) is sent no ``temperature`` / ``top_p`` either (a gateway ignores or refuses them), and
  a Claude id on any host (``anthropic/claude-opus-4.7`` on OpenRouter, ``claude-opus-4-7`` on
  ``https://api.anthropic.com/v1``) gets the Messages API's rules: none for Claude 4.7+, not both for Opus 4.1 /
  4.5+ (:func:`geoagent.providers.sampling.openai_compat_sampling`; prov46 #2).
* Azure OpenAI (v1 API, ``base_url = "https://<resource>.openai.azure.com/openai/v1"``, Bearer key): ``model``
  is the deployment name; ``ProviderSettings.model_family`` names the OpenAI model it serves, and every id rule
  above (reasoning, system message, ``response_format``, the ``max_completion_tokens`` field) reads it instead.
* Azure OpenAI, classic per-deployment route (``ProviderSettings.api_version`` set, ``[[models]] api_version``):
  ``POST {base_url}/openai/deployments/{model}/chat/completions?api-version={api_version}`` with the key in an
  ``api-key`` header (never ``Authorization``: Azure reads a Bearer value as a Microsoft Entra token and answers
  401), ``base_url`` the resource endpoint ``https://<resource>.openai.azure.com``, ``model`` the deployment name
  (in the path; the body carries no ``model``); the body and answer are the Chat Completions ones above, errors
  ``{"error": {"code", "message"}}`` (Azure OpenAI REST reference, "Chat completions"; the route, the api-key
  header and the query parameter as quoted in MicrosoftDocs/azure-docs#114602). A missing or unknown api-version
  is answered 404 "Resource not found" (that issue; microsoft/azurechat#426), a throttled call 429 with
  ``retry-after`` / ``retry-after-ms`` headers, which the HTTP layer honours (:func:`geoagent.runtime.http.
  retry_after_of`). The deployment's rate limits are its own: the limit key is ``<resource host>/<deployment>``.
* Answer: ``choices[0].message.content`` (a refusal has ``content: null`` and the text in ``refusal``;
  that text is returned as the answer), ``choices[0].finish_reason``, ``usage.prompt_tokens`` /
  ``usage.completion_tokens`` (completion tokens include reasoning tokens; when absent, ``total_tokens -
  prompt_tokens``), ``model``.
* An answer without a usable ``usage`` is still an answer (:class:`~geoagent.providers.base.Usage` with
  ``reported = False``, counts 0): ``usage`` left out or ``null``, no count in it, or counts no call can have (not
  a non-negative integer, above :data:`~geoagent.providers.http_base.MAX_USAGE_TOKENS`, ``total_tokens <
  prompt_tokens``, answer text with neither ``completion_tokens`` nor ``total_tokens``, or with 0 of them: text is
  made of completion tokens, so a zero count beside it is impossible, not free output). OpenAI documents
  ``usage`` ("Usage statistics for the completion request": ``prompt_tokens``, ``completion_tokens``,
  ``total_tokens``) on every chat completion object (OpenAI API reference, "The chat completion object"), but
  compatible servers and gateways do not all send it: with ``stream_options.include_usage`` every streamed
  chunk but the last carries ``"usage": null`` and an interrupted stream may never send the last one (same
  reference, ``stream_options``), so a gateway that reassembles a stream can forward ``null``; Ollama lists
  ``stream_options.include_usage`` among the fields its compatibility layer takes (docs.ollama.com,
  "OpenAI compatibility"); vLLM returns ``usage`` in OpenAI's shape. The call was answered and billed:
  asking again pays again and likely gets the same body (each retry of such an answer used to cost one more
  call, up to ``[queue] max_attempts``, and end as a dead letter). The model caller stores the answer once and
  books it at its reservation, the worst case (:func:`geoagent.workers.billing.booked_answer`).
* ``content: null`` with ``finish_reason: "content_filter"`` (and no refusal text) is a withheld answer:
  :class:`ContentBlocked` with the reported usage (not retried).
* OpenRouter reports errors that happen after generation started inside an HTTP 200 body
  (``{"error": {"code": <int>, "message": ...}}``, or in the choice: ``choices[0].error`` with ``finish_reason:
  "error"``, beside whatever ``content`` came before it; OpenRouter API reference, "Errors"): raised as
  :class:`MalformedResponse` (retryable), whatever that content holds.
* These decisions read ``finish_reason`` as the cut-off checks do (:func:`geoagent.scoring.truncation.
  finish_reason_key`: without control or bidirectional formatting characters, any case), so ``"length\u2066"`` with
  ``content: null`` is the empty cut-off answer and ``"content_filter\u2066"`` the withheld one, where both were a
  malformed body, retried at a cost (fixreason43 #2). The answer keeps the reason as sent
  (:attr:`~geoagent.providers.base.ModelResponse.finish_reason`, the response store's record).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

from geoagent.providers.base import ModelRequest, ModelResponse, Usage, provider_model_text, register
from geoagent.providers.errors import ContentBlocked, MalformedResponse, UnsupportedRequest, body_excerpt
from geoagent.providers.http_base import HttpProvider, as_int, b64
from geoagent.scoring.truncation import finish_reason_key
from geoagent.providers.sampling import (azure_deployment_problem, is_openai_host, is_openai_reasoning_id,
                                         openai_compat_sampling, openai_reasoning, openai_rejects_images,
                                         openai_rejects_response_format, openai_rejects_system)


def _error_message(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    return str(err)[:300]


#: the part types of a ``content`` list that carry answer text (``text``; ``output_text`` as the Responses API
#: names it); others (``reasoning``, ``thinking``, images) are not the answer
_TEXT_PART_TYPES = ("text", "output_text")


def _text_of_parts(parts: list[Any], raw: bytes, kind: str) -> str:
    """The answer text of a ``content`` given as a list of parts (``[{"type": "text", "text": ...}, ...]``, as some
    OpenAI-compatible servers send for reasoning models): the text parts joined, thinking parts left out. A list
    holding anything but objects is no answer (:class:`MalformedResponse`). break34 provider #6: such a body was
    malformed, and its task was sent and billed again up to ``[queue] max_attempts`` times."""
    out: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            raise MalformedResponse(kind, "choices[0].message.content is a list with a part that is not an object",
                                    body_excerpt(raw))
        if part.get("type") in _TEXT_PART_TYPES and isinstance(part.get("text"), str):
            out.append(part["text"])
    return "".join(out)


@register
class OpenAICompatProvider(HttpProvider):
    """Chat Completions over HTTP; ``kind = "openai"``."""

    kind = "openai"

    @property
    def rules_id(self) -> str:
        """The OpenAI model id the id rules read: ``ProviderSettings.model_family`` (the model an Azure OpenAI
        deployment serves under its own name), else ``ProviderSettings.model``."""
        return self.settings.model_family or self.settings.model

    @property
    def reasoning(self) -> bool:
        """Whether OpenAI's reasoning-model rules apply (:func:`geoagent.providers.sampling.openai_reasoning`:
        ``ProviderSettings.reasoning_model``, else a reasoning ``model_family`` on any host, else a documented
        reasoning id on ``api.openai.com``)."""
        return openai_reasoning(self.settings.model, self.base_url, self.settings.reasoning_model,
                                self.settings.model_family)

    @property
    def max_tokens_field(self) -> str:
        """Body field of the output cap (see module docstring): ``ProviderSettings.max_tokens_field`` when set,
        else ``max_completion_tokens`` for an explicit ``reasoning_model = true`` (OpenAI's reasoning models
        refuse ``max_tokens``, and so do servers that follow their rules) or for ``api.openai.com``, else
        ``max_tokens``."""
        if self.settings.max_tokens_field:
            return self.settings.max_tokens_field
        if self.settings.reasoning_model is True:
            return "max_completion_tokens"
        if self.settings.reasoning_model is None and self.settings.model_family and \
                is_openai_reasoning_id(self.settings.model_family):
            return "max_completion_tokens"  # a deployment of a reasoning model refuses max_tokens on any host
        # eu.api.openai.com and the other regional hosts too (review46b #7)
        return "max_completion_tokens" if is_openai_host(urlsplit(self.base_url).hostname) else "max_tokens"

    def build(self, request: ModelRequest) -> tuple[str, dict[str, Any], dict[str, str]]:
        """``(url, body, headers)`` of one Chat Completions call (module docstring): ``{base_url}/chat/completions``
        with a Bearer key, or Azure OpenAI's per-deployment URL with an ``api-key`` header when
        ``ProviderSettings.api_version`` is set.

        Raises
        ------
        UnsupportedRequest
            ``request`` carries an image and the model (its ``model_family`` when declared) takes no image input
            (``o1-mini``, ``o1-preview``, ``o3-mini``: :func:`geoagent.providers.sampling.openai_rejects_images`).
            :meth:`generate` calls this first, so nothing is sent and ``request.before_send`` (the model caller's
            cost reservation) never runs; the config loader already refuses campaigns that would do this
            (:func:`geoagent.config.image_problems`). Also, on Azure's classic route, a deployment name the URL
            path cannot carry (``.``, ``..``, a control character: :func:`geoagent.providers.sampling.azure_deployment_problem`).
        """
        params = request.params
        family = self.settings.model_family or request.model
        if request.image is not None and openai_rejects_images(family):
            named = family if family == request.model else f"{request.model} ({family})"
            raise UnsupportedRequest(self.kind, family, (
                f"{named} takes no image input (the API answers HTTP 400 'Invalid content type. image_url is only "
                "supported by certain models.'); send this request to a vision model (e.g. o1, o4-mini, gpt-4o)"))
        messages: list[dict[str, Any]] = []
        text = request.prompt
        if params.get("system"):
            if openai_rejects_system(family):
                # o1-mini / o1-preview take no system message (HTTP 400): the text leads the user message instead
                text = f"{params['system']}\n\n{request.prompt}"
            else:
                messages.append({"role": "system", "content": str(params["system"])})
        if request.image is not None:
            url = f"data:{request.image_mime};base64,{b64(request.image)}"
            content: Any = [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": url, **({"detail": params["detail"]} if params.get("detail") else {})}},
            ]
        else:
            content = text
        messages.append({"role": "user", "content": content})
        body: dict[str, Any] = {"messages": messages, self.max_tokens_field: request.max_output_tokens}
        if not self.settings.api_version:  # Azure's classic route names the deployment in its path instead
            body = {"model": request.model, **body}
        # OpenAI's reasoning rules (also for openai/o3 behind a gateway), Gemini 3's default temperature and Claude's
        # refusals (anthropic/claude-opus-4.7: HTTP 400 on a temperature; prov46 #2), as the manifest records them
        body.update(openai_compat_sampling(params, request.model, self.base_url,
                                           reasoning_model=self.settings.reasoning_model,
                                           family=self.settings.model_family))
        if params.get("json_mode") and not openai_rejects_response_format(family):
            # o1-mini / o1-preview refuse response_format (HTTP 400): their JSON is read from the text as usual
            body["response_format"] = {"type": "json_object"}
        headers = self.common_headers(request)
        key = self._api_key()
        if self.settings.api_version:  # Azure OpenAI's classic per-deployment route (module docstring)
            problem = azure_deployment_problem(request.model)
            if problem:  # a dot segment would be resolved away by the URL: the call would miss the deployment
                raise UnsupportedRequest(self.kind, request.model, f"Azure OpenAI deployment name: {problem}")
            if key:
                headers["api-key"] = key
            url = (f"{self.base_url}/openai/deployments/{quote(request.model, safe='')}/chat/completions"
                   f"?api-version={quote(self.settings.api_version, safe='')}")
            return url, body, headers
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return f"{self.base_url}/chat/completions", body, headers

    def parse(self, request: ModelRequest, data: Any, raw: bytes) -> ModelResponse:
        if not isinstance(data, dict):
            raise MalformedResponse(self.kind, "body is not a JSON object", body_excerpt(raw))
        if data.get("error") is not None:  # OpenRouter: error inside a 200
            raise MalformedResponse(self.kind, f"error in 200 body: {_error_message(data['error'])}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise MalformedResponse(self.kind, "no choices[0]", body_excerpt(raw))
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise MalformedResponse(self.kind, "choices[0].message missing", body_excerpt(raw))
        finish = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None
        # decided on the reason as the cut-off checks read it (cleaned, any case), stored as sent (fixreason43 #2:
        # "length" or "content_filter" followed by U+2066 fell through to "content is not text", a retried bad body)
        key = finish_reason_key(finish)
        text = message.get("content")
        if text is None and isinstance(message.get("refusal"), str):
            text = message["refusal"]
        if isinstance(choice.get("error"), dict) or key == "error":
            # OpenRouter's mid-generation error: whatever content came before it ("", or part of an answer) is no
            # answer (providers37 #2: such a partial text was stored and scored)
            what = _error_message(choice["error"]) if isinstance(choice.get("error"), dict) else 'finish_reason "error"'
            raise MalformedResponse(self.kind, f"error in choice: {what}")
        if text is None and key == "content_filter":  # withheld: a definite answer, not a bad body
            usage = data.get("usage")
            raise ContentBlocked(self.kind, "answer withheld: finish_reason content_filter",
                                 self._usage(usage, "", raw) if isinstance(usage, dict) else None)
        if text is None and key == "length":  # cut off before any answer text: vLLM's reasoning parser writes
            text = ""  # content null (the unfinished reasoning in message.reasoning), api.openai.com content ""
        if isinstance(text, list):  # content as parts (some compatible servers, for reasoning models): the text parts
            text = _text_of_parts(text, raw, self.kind)
        if text is None and isinstance(message.get("tool_calls"), list) and message["tool_calls"]:
            # no tools are offered, yet a tool call came back instead of an answer: billed, and asking again would
            # be billed again for the same non-answer (break34 provider #6), so it is an empty answer
            text = ""
        if not isinstance(text, str):
            raise MalformedResponse(self.kind, "choices[0].message.content is not text", body_excerpt(raw))
        return ModelResponse(
            text=text,
            usage=self._answer_usage(data.get("usage"), text, raw),
            finish_reason=finish,
            provider_model=provider_model_text(data.get("model")),  # cleaned and capped (sec42 #3)
        )

    def _answer_usage(self, usage: Any, text: str, raw: bytes) -> Usage:
        """The usage of a readable answer: :meth:`_usage` of ``usage``, or ``Usage(0, 0, reported=False)`` when
        the body carries none that can be used (module docstring: left out, ``null``, not an object, without a
        single count, or counts no call can have). Never raises: the answer text was read."""
        if not isinstance(usage, dict) or all(usage.get(k) is None for k in
                                              ("prompt_tokens", "completion_tokens", "total_tokens")):
            return Usage(0, 0, reported=False)
        try:
            return self._usage(usage, text, raw)
        except MalformedResponse:
            return Usage(0, 0, reported=False)

    def _usage(self, usage: dict[str, Any], text: str, raw: bytes) -> Usage:
        """Input and output tokens of ``usage``; output = ``completion_tokens`` (raised to ``total_tokens -
        prompt_tokens`` when that is larger, and by ``completion_tokens_details.reasoning_tokens`` when those exceed
        it: a gateway's count without the thinking tokens), else ``total_tokens - prompt_tokens``, else 0 only when
        no text came back (a paid answer never settles as free output).

        Raises
        ------
        MalformedResponse
            ``prompt_tokens`` missing or not a count, text came back with no way to count its tokens, or with 0
            output tokens (``completion_tokens: 0``, or a total equal to the prompt's): the answer's text is made of
            completion tokens (OpenAI API reference, "The chat completion object": ``usage.completion_tokens``,
            "Number of tokens in the generated completion"), so a zero count beside text is a count no call can have.
        """
        n_in = as_int(usage.get("prompt_tokens"), "usage.prompt_tokens", self.kind, raw)
        if usage.get("completion_tokens") is not None:
            n_out = as_int(usage.get("completion_tokens"), "usage.completion_tokens", self.kind, raw)
            # gateways that turn Gemini's usage into this shape have reported completion_tokens without the
            # thinking tokens, which Google bills as output: those are then only in total_tokens and in
            # completion_tokens_details.reasoning_tokens (mozilla-ai/any-llm#1290: prompt 20, completion 151, total
            # 553; router-for-me/CLIProxyAPI#5733: completion 0, reasoning 60, total 81). OpenAI's own completion
            # count includes its reasoning tokens and total = prompt + completion, so there nothing changes; where
            # the counts disagree the larger bill is booked (break34 provider #2)
            total = usage.get("total_tokens")
            if type(total) is int and total - n_in > n_out:
                n_out = total - n_in
            details = usage.get("completion_tokens_details")
            reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
            if type(reasoning) is int and reasoning > n_out:  # more reasoning than all output: not counted in it
                n_out += reasoning
        elif usage.get("total_tokens") is not None:
            n_out = as_int(usage.get("total_tokens"), "usage.total_tokens", self.kind, raw) - n_in
            if n_out < 0:
                raise MalformedResponse(self.kind, "usage.total_tokens < usage.prompt_tokens", body_excerpt(raw))
        elif text:
            raise MalformedResponse(self.kind, "usage has no completion_tokens (nor total_tokens) for a non-empty "
                                    "answer", body_excerpt(raw))
        else:
            n_out = 0
        if text and n_out == 0:  # every token of the text is a completion token: none for text is no count
            raise MalformedResponse(self.kind, "usage counts 0 completion tokens for a non-empty answer", body_excerpt(raw))
        return Usage(n_in, n_out)
