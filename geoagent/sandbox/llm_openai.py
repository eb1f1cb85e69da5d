"""Local fake of the OpenAI Chat Completions API (also stands in for OpenRouter, vLLM and Ollama).

``POST /v1/chat/completions``, so its provider base URL is ``http://host:port/v1`` as OpenAI's, vLLM's and Ollama's
is. A base URL without ``/v1`` posts to ``/chat/completions``, which is answered as api.openai.com answers an unknown
path: 404 ``{"error": {"message": "Invalid URL (POST /chat/completions)", "type": "invalid_request_error", "param":
null, "code": null}}`` (prov39 #7: before, the fake served both paths, so a campaign whose ``base_url`` lacked
``/v1`` worked here and got a 404 on every call of the real API; ``GET /models`` likewise). It checks the request as
the real API does and answers in the documented shapes (OpenAI API reference "Create chat completion" and "Error
codes"):

* ``Authorization: Bearer <key>``: missing -> 401 (``invalid_request_error``, "You didn't provide an API
  key"); unknown -> 401 ``invalid_api_key`` with the key masked in the message, as OpenAI does.
* Body: JSON object with ``model`` (string) and non-empty ``messages``; roles ``system``, ``developer``,
  ``user``, ``assistant``, ``tool``; ``content`` a string or a list of ``text`` / ``image_url`` parts;
  an ``image_url.url`` is an ``http(s)`` URL or a ``data:image/<jpeg|png|gif|webp>;base64,...`` URL with
  valid base64; ``max_tokens`` / ``max_completion_tokens`` positive integers; ``temperature`` in [0, 2];
  ``response_format = {"type": "json_object"}`` needs the word "json" in the messages. A violation ->
  400 ``invalid_request_error`` with ``param`` naming the field.
* OpenAI reasoning model ids (:data:`REASONING_ID`: ``o1``, ``o3``, ``o4-mini``, ``gpt-5*`` except ``gpt-5-chat*``,
  ``codex-mini``) are checked as api.openai.com checks them (reasoning guide, "Limitations"; error bodies as
  reported for o1-mini and gpt-5-mini): a ``temperature`` other than 1 -> 400 ``unsupported_value`` ("Unsupported
  value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.", ``param``
  ``temperature``); ``top_p``, ``presence_penalty``, ``frequency_penalty``, ``logprobs``, ``top_logprobs``,
  ``logit_bias`` or ``max_tokens`` -> 400 ``unsupported_parameter``. Their cap counts hidden reasoning tokens:
  a cap of at most :data:`REASONING_TOKENS` is spent on reasoning alone, answered as ``content: ""`` with
  ``finish_reason: "length"`` and ``usage.completion_tokens_details.reasoning_tokens`` = the cap (billed); a
  larger cap answers in what is left of it after :data:`REASONING_TOKENS`, billed in ``completion_tokens`` and
  named in ``completion_tokens_details.reasoning_tokens`` (providers39 #4).
  ``o1-mini`` and ``o1-preview`` (:data:`NO_SYSTEM_ID`, dated snapshots too) take user and assistant messages
  only: a ``system`` or ``developer`` message -> 400 ``unsupported_value`` ("Unsupported value: 'messages[0].role'
  does not support 'system' with this model.", ``param`` ``messages[<i>].role``), as reported for the real API.
  They also refuse ``response_format`` (:data:`NO_RESPONSE_FORMAT_ID`): 400 "Invalid parameter: 'response_format'
  of type 'json_object' is not supported with this model." (``param`` ``response_format``, ``code`` null; the
  wording reported for models without JSON mode, the json_schema form reported for o1-mini). ``o1-mini``,
  ``o1-preview`` and ``o3-mini`` (:data:`NO_IMAGE_ID`) take no image: an ``image_url`` part -> 400 "Invalid content
  type. image_url is only supported by certain models." (``param`` ``messages.[<i>].content.[<j>].type``, ``code``
  null, as quoted on the OpenAI community forum; sources in :mod:`geoagent.providers.sampling`).
* Models served only on the Responses API (:data:`RESPONSES_ONLY_ID`: ``o1-pro``, ``o3-pro``, ``o3-deep-research``,
  ``gpt-5-pro``, ``codex-mini-latest``, ``gpt-5-codex``, ``computer-use-preview``, ...) -> 404 ``{"error": {"message":
  RESPONSES_ONLY_MESSAGE, "type": "invalid_request_error", "param": "model", "code": null}}`` as api.openai.com
  answers (openai/codex#1306, alvinunreal/tmuxai#82); a deployment of one (Azure) -> 400 ``{"error": {"code":
  "OperationNotSupported", "message": ...}}`` (langgenius/dify-plugin-sdks#264). Not billed (prov46 #1).
* Claude ids (any ``vendor/`` prefix: ``anthropic/claude-opus-4.7``) get Anthropic's sampling refusals, 400
  ``invalid_request_error``: Claude 4.7+ any ``temperature`` / ``top_p`` / ``top_k``, Opus 4.1 and 4.5+ both
  ``temperature`` and ``top_p`` (:func:`_check_claude_sampling`, prov46 #2).
* ``deployments=`` (Azure OpenAI-style): a ``model`` naming a deployment is checked and answered as the model it
  serves.
* Azure OpenAI's classic per-deployment route, ``POST /openai/deployments/{deployment}/chat/completions?api-version=
  <version>`` (Azure OpenAI REST reference, "Chat completions"), checked in this order: an ``api-version`` missing
  or not among ``azure_api_versions=`` (default :data:`AZURE_API_VERSIONS`) -> 404 ``{"error": {"code": "404",
  "message": "Resource not found"}}`` (MicrosoftDocs/azure-docs#114602, microsoft/azurechat#426); the key must come
  in an ``api-key`` header: none with an ``Authorization: Bearer`` header -> 401 ``{"statusCode": 401, "message":
  AZURE_BEARER_401}`` (Azure reads Bearer as a Microsoft Entra token, run-llama/llama_index#12484), neither -> 401
  ``{"statusCode": 401, "message": AZURE_MISSING_KEY_401}`` (openai/openai-python#1527), an unknown key -> 401
  ``{"error": {"code": "401", "message": AZURE_KEY_401}}`` (SciSharp/BotSharp#386; the key is never echoed); a
  deployment not in ``deployments=`` (when given) -> 404 ``DeploymentNotFound`` (chatboxai/chatbox#861). Then the
  body is checked and answered as above, as the model the deployment serves (the body needs no ``model``; one it
  carries is ignored, as Azure ignores it). An injected 429 there is Azure's (``{"error": {"code": "429", "message":
  "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version <v> have exceeded token rate
  limit ..."}}``, alex-wolf-ps/dbchatprov2#2) with lower-case ``retry-after`` (whole seconds, rounded up) and
  ``retry-after-ms`` headers (:func:`geoagent.sandbox.llm_common.api_error_middleware`).
* Success: ``{"id": "chatcmpl-...", "object": "chat.completion", "created", "model", "choices": [{"index": 0,
  "message": {"role": "assistant", "content", "refusal": null}, "logprobs": null, "finish_reason":
  "stop"|"length"}], "usage": {"prompt_tokens", "completion_tokens", "total_tokens"},
  "system_fingerprint"}`` plus ``x-request-id`` and ``x-ratelimit-*`` headers.
* Prompt markers for documented non-answers: :data:`REFUSE_MARKER` -> ``content: null`` with the text in
  ``refusal``; :data:`FILTER_MARKER` -> ``content: null``, ``finish_reason: "content_filter"``, 0 output
  tokens; :data:`MIDSTREAM_ERROR_MARKER` -> OpenRouter's error during generation (``finish_reason: "error"``,
  ``choices[0].error``, part of an answer in ``content``); :data:`NO_USAGE_MARKER` -> a normal answer without ``usage`` (as some compatible servers send;
  the call is still logged as billed). ``make_app(usage="omit")`` does that to every answer, ``usage="null"``
  sends ``"usage": null`` instead (what a gateway that reassembles a stream forwards: every chunk but the last
  carries ``usage: null`` under ``stream_options.include_usage``, OpenAI API reference, "Chat Completions",
  ``stream_options``).
* ``moderation_flags=`` (words): a prompt containing one (case-insensitive) is refused the way OpenRouter
  refuses input its moderation flagged (OpenRouter API reference, "Errors": HTTP 403, ``{"error": {"code":
  403, "message": "... requires moderation ... your input was flagged ...", "metadata": {"reasons": [...],
  "flagged_input": "...", "provider_name": null, "model_slug": "..."}}}``); not billed.
* Injected faults (``faults=``, :mod:`geoagent.sandbox.faults`) answer 429/500/503 in this error shape
  (429: type ``requests``, code ``rate_limit_exceeded``), keeping ``Retry-After``.
* ``GET /v1/models`` (and ``/models``): the list shape of OpenAI's "List models" (``{"object": "list", "data":
  [{"id", "object": "model", "created", "owned_by"}]}``), naming the ids given as ``models=`` (default
  :data:`DEFAULT_MODEL_IDS`) and then every other id the fake has answered; ``GET /v1/models/{model}`` gives
  one such object for any id (the fake serves any model name). Same key check as chat completions; these
  calls are not model calls and are not logged in the call log.
* ``unknown_model=`` (walk39 #6): only the ``models=`` ids are served; a chat completion naming another is answered
  as api.openai.com, vLLM, Ollama, OpenRouter or a LiteLLM proxy answers an unknown model
  (:func:`unknown_model_error`), not billed.

Answer text comes from :func:`geoagent.sandbox.responders.simulate_answer` (same text and usage as the
``simulated`` provider for the same request key and seed; a reasoning model id, :data:`REASONING_ID`, answers within
its cap less :data:`REASONING_TOKENS` and bills those hidden tokens on top). Run standalone with
``python -m geoagent.sandbox.llm_openai --port 8001 --log calls.jsonl`` (it prints ``listening on
http://127.0.0.1:8001 (OpenAI-compatible; base_url http://127.0.0.1:8001/v1)`` on stderr; ``--no-auth``
accepts requests without a key, otherwise any non-empty key unless ``--api-key`` names the accepted ones).
"""

from __future__ import annotations

import base64
import math
import os
import re
import time
from collections.abc import Collection
from typing import Any

import orjson
from aiohttp import web

from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.llm_common import (
    LOG_EXTRA_KEY,
    answer_and_log,
    auth_required,
    billed_image_tokens,
    build_app,
    cli_main,
    decode_b64,
    image_id_for,
    is_int_at_least,
    is_number_in,
    json_response,
    key_ok,
    log_call,
    note_model,
    read_json,
    sent_finish_reason,
    sha256_hex,
    short_id,
)
from geoagent.sandbox.responders import SIM_CHARS_PER_TOKEN, SIM_IMAGE_TOKENS

API = "openai"
DEFAULT_MAX_TOKENS = 4096
#: Prompt text that makes the fake refuse (``content: null``, ``refusal`` text, ``finish_reason: "stop"``).
REFUSE_MARKER = "[[sandbox:refuse]]"
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
#: Prompt text that makes the fake withhold the answer (``content: null``, ``finish_reason: "content_filter"``).
FILTER_MARKER = "[[sandbox:content_filter]]"
#: Prompt text that makes the fake answer as OpenRouter does when the upstream provider fails after generation
#: started: HTTP 200, ``choices[0].finish_reason: "error"`` and ``choices[0].error: {"code": 502, "message"}`` beside
#: the part of the answer sent before it (OpenRouter API reference, "Errors": errors during generation come in the
#: 200 body).
MIDSTREAM_ERROR_MARKER = "[[sandbox:midstream_error]]"
MIDSTREAM_PARTIAL_TEXT = '{"answer": "Par'
#: Prompt text that makes the fake leave ``usage`` out of an otherwise normal answer (still logged as billed).
NO_USAGE_MARKER = "[[sandbox:no_usage]]"
#: words (lower case) whose presence in a prompt makes the fake answer OpenRouter's moderation 403
MODERATION_FLAGS_KEY: web.AppKey[tuple[str, ...]] = web.AppKey("llm_moderation_flags", tuple)
IMAGE_MIME = ("image/jpeg", "image/png", "image/gif", "image/webp")
ROLES = ("system", "developer", "user", "assistant", "tool")
#: OpenAI reasoning model ids (the fake's own reading of the reasoning guide, kept apart from the client's)
REASONING_ID = re.compile(r"^(?:ft:)?(?:o\d+(?:[-.:_]|$)|gpt-5(?!-chat)|codex-mini)", re.IGNORECASE)
#: OpenAI models served only on the Responses API (the fake's own reading, kept apart from the client's;
#: sources in :mod:`geoagent.providers.sampling`): o1-pro, o3-pro, the deep-research models, gpt-5(.x)-pro,
#: codex-mini, gpt-5(.x)-codex, computer-use-preview (prov46 #1)
RESPONSES_ONLY_ID = re.compile(r"^(?:ft:)?(?:o1-pro|o3-pro|o\d+(?:-mini)?-deep-research|gpt-5(?:\.\d+)?-(?:pro|codex)"
                               r"|codex-mini|computer-use-preview)(?:[-.:_]|$)", re.IGNORECASE)
#: Claude ids (after any ``vendor/`` prefix: OpenRouter's ``anthropic/claude-opus-4.7``; Anthropic's own OpenAI-compatible
#: endpoint takes ``claude-opus-4-7``; an OpenRouter variant ``:thinking``/``:beta`` ends the version, review46b
#: #6): tier, major, minor (the fake's own reading, kept apart from the client's)
CLAUDE_ID = re.compile(r"^claude-(?P<tier>[a-z]+)-(?P<major>\d+)(?:[-.](?P<minor>\d{1,2}))?(?:[-@.:]|$)", re.IGNORECASE)
#: api.openai.com's answer (404) to a Chat Completions call of a :data:`RESPONSES_ONLY_ID` model
RESPONSES_ONLY_MESSAGE = "This model is only supported in v1/responses and not in v1/chat/completions."
#: Azure OpenAI's answer (400 ``OperationNotSupported``) to the same call of a deployment of such a model
AZURE_OPERATION_NOT_SUPPORTED = ("The chatCompletion operation does not work with the specified model, {model}. Please "
                                 "choose different model and try again. You can learn more about which models can be "
                                 "used with each operation here: https://go.microsoft.com/fwlink/?linkid=2197993.")
#: the early o1 ids that refuse a system or developer message (the fake's own reading, kept apart from the client's)
NO_SYSTEM_ID = re.compile(r"^(?:ft:)?o1-(?:mini|preview)(?:[-.:_]|$)", re.IGNORECASE)
#: the OpenAI models that take no image input (the fake's own reading of the per-model table cited in
#: geoagent.providers.sampling, kept apart from the client's): o1-mini, o1-preview, o3-mini
NO_IMAGE_ID = re.compile(r"^(?:ft:)?(?:o1-(?:mini|preview)|o3-mini)(?:[-.:_]|$)", re.IGNORECASE)
#: the OpenAI models that refuse ``response_format`` (JSON mode, Structured Outputs): o1-mini, o1-preview
NO_RESPONSE_FORMAT_ID = NO_SYSTEM_ID
#: Azure OpenAI-style deployment names -> the model each serves (``make_app(deployments=...)``)
DEPLOYMENTS_KEY: web.AppKey[dict[str, str]] = web.AppKey("llm_deployments", dict)
#: Azure OpenAI ``api-version`` values the classic route accepts by default (GA and preview data-plane inference
#: versions; ``make_app(azure_api_versions=...)`` replaces them)
AZURE_API_VERSIONS: tuple[str, ...] = (
    "2023-05-15", "2024-02-01", "2024-06-01", "2024-10-21", "2024-02-15-preview", "2024-05-01-preview",
    "2024-08-01-preview", "2024-09-01-preview", "2024-10-01-preview", "2024-12-01-preview", "2025-01-01-preview",
    "2025-03-01-preview", "2025-04-01-preview",
)
AZURE_API_VERSIONS_KEY: web.AppKey[frozenset[str]] = web.AppKey("llm_azure_api_versions", frozenset)
#: Azure OpenAI's 401 texts: an ``Authorization: Bearer`` value that is no Microsoft Entra token, no key at all, and
#: an unknown ``api-key`` (sources in the module docstring)
AZURE_BEARER_401 = ("Unauthorized. Access token is missing, invalid, audience is incorrect "
                    "(https://cognitiveservices.azure.com), or have expired.")
AZURE_MISSING_KEY_401 = ("Access denied due to missing subscription key. Make sure to include subscription key when "
                         "making requests to an API.")
AZURE_KEY_401 = ("Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid "
                 "key for an active subscription and use a correct regional API endpoint for your resource.")
AZURE_DEPLOYMENT_404 = ("The API deployment for this resource does not exist. If you created the deployment within the "
                        "last 5 minutes, please wait a moment and try again.")
#: path prefix of the classic route (the error middleware answers its injected 429s in Azure's shape)
AZURE_ROUTE_PREFIX = "/openai/deployments/"
#: hidden reasoning tokens a reasoning model spends before its answer; a cap at or below it yields no text
REASONING_TOKENS = 512
#: body fields a reasoning model refuses whatever their value (reasoning guide, "Limitations")
REASONING_UNSUPPORTED = ("top_p", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "logit_bias",
                         "max_tokens")
#: body fields whose presence and value each call record keeps under ``sampling``
SAMPLING_FIELDS = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "logprobs", "max_tokens",
                   "max_completion_tokens", "reasoning_effort")
#: model ids ``GET /v1/models`` names when ``make_app(models=...)`` is not given (the fake answers any id)
DEFAULT_MODEL_IDS: tuple[str, ...] = ("sandbox-model",)
#: ``created`` (Unix s) and ``owned_by`` of the fake's model objects: fixed, so listings are reproducible
MODEL_CREATED = 1_700_000_000
MODEL_OWNER = "geoagent-sandbox"
MODEL_IDS_KEY: web.AppKey[list[str]] = web.AppKey("llm_model_ids", list)
#: how a reasoning model's answer cut off inside its reasoning looks ("openai" or "vllm": make_app's reasoning_style)
REASONING_STYLE_KEY: web.AppKey[str] = web.AppKey("llm_reasoning_style", str)
USAGE_MODE_KEY: web.AppKey[str] = web.AppKey("llm_usage_mode", str)
#: how the fake reports ``usage`` in its answers (``make_app(usage=...)``)
USAGE_MODES = ("report", "omit", "null", "zero_output")
#: how a refused key is repeated in the 401 body (make_app's echo_key): "" not at all (masked as OpenAI does),
#: "full" in full in JSON with "/" written "\\/", "upper" upper-cased, "prefix" its first 14 and last 4 characters
#: (a truncated echo), "base64" as standard base64 of the key (a proxy repeating a header it decoded or encoded)
ECHO_KEY_KEY: web.AppKey[str] = web.AppKey("llm_echo_key", str)
#: echo_key modes (:func:`make_app`)
ECHO_KEY_MODES = ("full", "upper", "prefix", "base64")
#: how the fake answers a model id it does not serve (make_app's ``unknown_model``; walk39 #6): as api.openai.com,
#: vLLM, Ollama, OpenRouter or a LiteLLM proxy does (:func:`unknown_model_error`)
UNKNOWN_MODEL_STYLES = ("openai", "vllm", "ollama", "openrouter", "litellm")
#: ``(style, served ids)`` when only some model ids are served (make_app's ``unknown_model``), else None
SERVED_MODELS_KEY: web.AppKey[tuple[str, frozenset[str]] | None] = web.AppKey("llm_served_models", object)


def unknown_model_error(style: str, model: str) -> web.Response:
    """The answer of a server of ``style`` (:data:`UNKNOWN_MODEL_STYLES`) to a chat completion naming ``model``,
    an id it does not serve (walk39 #6), with the status and body it is reported to send:

    * ``openai``: 404 ``{"error": {"message": "The model `<id>` does not exist or you do not have access to it.",
      "type": "invalid_request_error", "param": null, "code": "model_not_found"}}`` (api-notes section 7, "404
      (unknown model)"; the message as api.openai.com and OpenAI-compatible hosts word it, continuedev/continue#11567);
    * ``vllm``: 404 ``{"object": "error", "message": "The model `<id>` does not exist.", "type": "NotFoundError",
      "param": null, "code": 404}`` (vllm-project/vllm#3485, QwenLM/Qwen-Agent#110);
    * ``ollama``: 404 ``{"error": {"message": "model \"<id>\" not found, try pulling it first", "type":
      "api_error", "param": null, "code": null}}`` (its OpenAI-compatible endpoint; netease-youdao/QAnything#555);
    * ``openrouter``: 400 ``{"error": {"message": "<id> is not a valid model ID", "code": 400}, "user_id": ...}``
      (OpenRouterTeam/openrouter-examples#74; numeric ``code`` as api-notes says of OpenRouter's errors);
    * ``litellm``: 400 ``{"error": {"message": "/chat/completions: Invalid model name passed in model=<id>. Call
      `/v1/models` to view available models for your key.", "type": "None", "param": "None", "code": "400"}}``
      (BerriAI/litellm#9663, #3142).
    """
    rid = {"x-request-id": "req_" + short_id(time.time_ns())}
    if style == "vllm":
        return json_response({"object": "error", "message": f"The model `{model}` does not exist.",
                              "type": "NotFoundError", "param": None, "code": 404}, status=404, headers=rid)
    if style == "ollama":
        return json_response({"error": {"message": f'model "{model}" not found, try pulling it first',
                                        "type": "api_error", "param": None, "code": None}}, status=404, headers=rid)
    if style == "openrouter":
        return json_response({"error": {"message": f"{model} is not a valid model ID", "code": 400},
                              "user_id": "user_sandbox"}, status=400, headers=rid)
    if style == "litellm":
        return json_response({"error": {"message": f"/chat/completions: Invalid model name passed in model={model}. "
                                                   "Call `/v1/models` to view available models for your key.",
                                        "type": "None", "param": "None", "code": "400"}}, status=400, headers=rid)
    return _err(404, f"The model `{model}` does not exist or you do not have access to it.", "invalid_request_error",
                "model_not_found")


def _err(status: int, message: str, type_: str, code: str | None = None, param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return json_response(body, status=status, headers={"x-request-id": "req_" + short_id(time.time_ns())})


def _mask(key: str) -> str:
    return (key[:3] + "*" * 4 + key[-4:]) if len(key) > 8 else "****"


class _Bad(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def _parse_messages(messages: Any) -> tuple[str, str, bytes | None, str | None, bool, str]:
    """Validate ``messages``; return (user text, system text, first image bytes, image URL, mentions json,
    the first image's ``detail``: ``auto``, ``low``, ``high`` or ``original``, the last checked against the model
    by the caller)."""
    if not isinstance(messages, list) or not messages:
        raise _Bad("'messages' must be a non-empty array.", "messages")
    user_texts: list[str] = []
    system_texts: list[str] = []
    image: bytes | None = None
    image_url: str | None = None
    mentions_json = False
    image_detail = "auto"
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise _Bad(f"Invalid type for 'messages[{i}]': expected an object.", f"messages[{i}]")
        role = msg.get("role")
        if role not in ROLES:
            raise _Bad(f"Invalid value for 'messages[{i}].role': {role!r}.", f"messages[{i}].role")
        content = msg.get("content")
        texts: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for j, part in enumerate(content):
                where = f"messages[{i}].content[{j}]"
                if not isinstance(part, dict):
                    raise _Bad(f"Invalid type for '{where}': expected an object.", where)
                ptype = part.get("type")
                if ptype == "text":
                    if not isinstance(part.get("text"), str):
                        raise _Bad(f"Missing required parameter: '{where}.text'.", f"{where}.text")
                    texts.append(part["text"])
                elif ptype == "image_url":
                    if role != "user":
                        raise _Bad(f"Image content is only allowed in user messages ('{where}').", where)
                    iu = part.get("image_url")
                    url = iu.get("url") if isinstance(iu, dict) else None
                    if not isinstance(url, str):
                        raise _Bad(f"Missing required parameter: '{where}.image_url.url'.", f"{where}.image_url.url")
                    detail = iu.get("detail", "auto")
                    if detail not in ("auto", "low", "high", "original"):
                        raise _Bad(f"Invalid value for '{where}.image_url.detail': {detail!r}.", f"{where}.image_url.detail")
                    if url.startswith("data:"):
                        head, sep, data = url.partition(",")
                        mime = head[5:].split(";")[0]
                        if not sep or ";base64" not in head or mime not in IMAGE_MIME:
                            raise _Bad(
                                "Invalid image URL: expected data:image/<jpeg|png|gif|webp>;base64,<data>.",
                                f"{where}.image_url.url",
                                "invalid_image_url",
                            )
                        raw = decode_b64(data)
                        if raw is None:
                            raise _Bad("You uploaded an unsupported image: invalid base64 data.", f"{where}.image_url.url", "invalid_image_format")
                        if image is None:
                            image, image_detail = raw, detail
                    elif url.startswith(("http://", "https://")):
                        image_url = image_url or url
                    else:
                        raise _Bad("Invalid image URL: must be an http(s) URL or a base64 data URL.", f"{where}.image_url.url", "invalid_image_url")
                else:
                    raise _Bad(f"Invalid value for '{where}.type': {ptype!r}.", f"{where}.type")
        elif content is None and role == "assistant":
            pass
        else:
            raise _Bad(f"Invalid type for 'messages[{i}].content': expected a string or an array.", f"messages[{i}].content")
        joined = "\n".join(texts)
        mentions_json = mentions_json or "json" in joined.lower()
        if role in ("system", "developer"):
            system_texts.append(joined)
        elif role == "user":
            user_texts.append(joined)
    return "\n".join(user_texts), "\n".join(system_texts), image, image_url, mentions_json, image_detail


def _check_claude_sampling(model: str, body: dict[str, Any]) -> None:
    """A Claude model's sampling refusals, as Anthropic's API answers them on every route (its OpenAI-compatible
    endpoint, a gateway passing the call on; prov46 #2): the Anthropic fake's rule
    (:func:`geoagent.sandbox.llm_anthropic.claude_sampling_rule`: Claude 4.7+ refuses ``temperature`` / ``top_p`` /
    ``top_k`` at any value, Opus 4.1 and every 4.5+ model refuse both in one request) applied to the id read by
    :data:`CLAUDE_ID` (a ``vendor/`` prefix, a dotted minor, a ``:variant``) and written as the Messages API writes
    it. Raises :class:`_Bad` (400, naming the first refused field)."""
    from geoagent.sandbox.llm_anthropic import claude_sampling_rule

    m = CLAUDE_ID.match(model.rsplit("/", 1)[-1])
    if m is None:
        return
    canonical = f"claude-{m['tier'].lower()}-{m['major']}" + (f"-{m['minor']}" if m["minor"] else "")
    message = claude_sampling_rule(canonical, body)
    if message is not None:
        raise _Bad(message, next(n for n in ("temperature", "top_p", "top_k") if f"`{n}`" in message))


def _positive_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not is_int_at_least(value, 1):
        raise _Bad(f"Invalid '{name}': expected an integer >= 1, got {value!r}.", name, "integer_below_min_value")
    return value


def _auth_error(request: web.Request, *, log: bool = True) -> web.Response | None:
    """The 401 OpenAI answers for a missing, malformed or unknown key (logged as a call when ``log``), or None."""
    auth = request.headers.get("Authorization", "")
    if not auth and auth_required(request.app):
        if log:
            log_call(request, API, 401, error="missing_api_key")
        return _err(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header "
            "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            "invalid_request_error",
        )
    token = auth[7:].strip() if auth.startswith("Bearer ") else ""
    if auth and not token:  # not Bearer auth
        if log:
            log_call(request, API, 401, error="invalid_api_key")
        return _err(401, "Invalid authorization header: expected 'Bearer <key>'.", "invalid_request_error", "invalid_api_key")
    if not key_ok(request.app, token or None):
        if log:
            log_call(request, API, 401, error="invalid_api_key")
        if request.app[ECHO_KEY_KEY]:  # a careless proxy: the whole key, "/" escaped as PHP's json_encode does
            shown = {"full": token, "upper": token.upper(),
                     "prefix": token[:14] + "..." + token[-4:],
                     "base64": base64.b64encode(token.encode()).decode("ascii")}[request.app[ECHO_KEY_KEY]]
            body = orjson.dumps({"error": {"message": f"Incorrect API key provided: {shown}.",
                                           "type": "invalid_request_error", "code": "invalid_api_key"}})
            return web.Response(status=401, body=body.replace(b"/", b"\\/"), content_type="application/json")
        return _err(401, f"Incorrect API key provided: {_mask(token)}.", "invalid_request_error", "invalid_api_key")
    return None


def _model_object(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": MODEL_CREATED, "owned_by": MODEL_OWNER}


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: OpenAI's "List models" shape, ``{"object": "list", "data": [model objects]}``.

    Names the configured ids (``make_app(models=...)``, default :data:`DEFAULT_MODEL_IDS`) and then every other
    model id this fake has answered, in first-use order.
    """
    denied = _auth_error(request, log=False)
    if denied is not None:
        return denied
    return json_response({"object": "list", "data": [_model_object(m) for m in request.app[MODEL_IDS_KEY]]},
                         headers={"x-request-id": "req_" + short_id(time.time_ns())})


async def retrieve_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{model}``: one model object (``id``, ``object: "model"``, ``created``, ``owned_by``);
    the fake serves any model id, so every id is found, unless ``make_app(unknown_model=...)`` limits it to the
    ``models=`` ids (another: 404 ``model_not_found``)."""
    denied = _auth_error(request, log=False)
    if denied is not None:
        return denied
    served = request.app[SERVED_MODELS_KEY]
    if served is not None and request.match_info["model"] not in served[1]:
        return _err(404, f"The model `{request.match_info['model']}` does not exist or you do not have access to it.",
                    "invalid_request_error", "model_not_found")
    return json_response(_model_object(request.match_info["model"]),
                         headers={"x-request-id": "req_" + short_id(time.time_ns())})


def _azure_auth_error(request: web.Request) -> web.Response | None:
    """The 401 Azure OpenAI answers on its classic route for a missing or unknown ``api-key`` (a Bearer header is not
    read as a key), logged as a call, or None."""
    key = request.headers.get("api-key")
    if key is None:
        if request.headers.get("Authorization"):
            log_call(request, API, 401, error="bearer_not_entra_token")
            return json_response({"statusCode": 401, "message": AZURE_BEARER_401}, status=401)
        if auth_required(request.app):
            log_call(request, API, 401, error="missing_api_key")
            return json_response({"statusCode": 401, "message": AZURE_MISSING_KEY_401}, status=401)
        return None
    if not key_ok(request.app, key):
        log_call(request, API, 401, error="invalid_api_key")
        return json_response({"error": {"code": "401", "message": AZURE_KEY_401}}, status=401)
    return None


async def azure_chat_completions(request: web.Request) -> web.Response:
    """``POST /openai/deployments/{deployment}/chat/completions?api-version=...``: Azure OpenAI's classic route
    (module docstring: api-version, then the ``api-key`` header, then the deployment; then as chat completions)."""
    version = request.query.get("api-version")
    if not version or version not in request.app[AZURE_API_VERSIONS_KEY]:
        log_call(request, API, 404, error="api_version")
        return json_response({"error": {"code": "404", "message": "Resource not found"}}, status=404)
    denied = _azure_auth_error(request)
    if denied is not None:
        return denied
    deployment = request.match_info["deployment"]
    deployments = request.app[DEPLOYMENTS_KEY]
    if deployments and deployment not in deployments:
        log_call(request, API, 404, error="deployment_not_found", model=deployment)
        return json_response({"error": {"code": "DeploymentNotFound", "message": AZURE_DEPLOYMENT_404}}, status=404)
    return await _completion(request, deployment=deployment)


async def invalid_url(request: web.Request) -> web.Response:
    """An API path outside ``/v1`` (``POST /chat/completions``, ``GET /models``: a base URL without ``/v1``): 404
    ``invalid_request_error`` "Invalid URL (<METHOD> <path>)", api.openai.com's answer to a path it does not serve,
    logged as a call with ``error = "invalid_url"`` (nothing billed)."""
    log_call(request, API, 404, error="invalid_url")
    return _err(404, f"Invalid URL ({request.method} {request.path})", "invalid_request_error")


async def chat_completions(request: web.Request) -> web.Response:
    """The ``/v1/chat/completions`` handler."""
    denied = _auth_error(request)
    if denied is not None:
        return denied
    return await _completion(request)


async def _completion(request: web.Request, deployment: str | None = None) -> web.Response:
    """Check and answer one authorised chat completion; ``deployment`` (Azure's classic route) names the model
    instead of the body's ``model``."""
    body, problem = await read_json(request)
    if problem is not None or not isinstance(body, dict):
        log_call(request, API, 400, error="invalid_json")
        return _err(400, "We could not parse the JSON body of your request. (HINT: the body must be a JSON object.)", "invalid_request_error")
    # what the request carried, for the call log: which sampling fields a client sends is part of the contract
    request[LOG_EXTRA_KEY] = {"sampling": {k: body[k] for k in SAMPLING_FIELDS if k in body}}
    try:
        model = deployment if deployment is not None else body.get("model")
        if not isinstance(model, str) or not model:
            raise _Bad("you must provide a model parameter", "model")
        prompt, system, image, image_url, mentions_json, image_detail = _parse_messages(body.get("messages"))
        # an Azure OpenAI deployment name is checked as the model it serves (its rules, its echoed id)
        model = request.app[DEPLOYMENTS_KEY].get(model, model)
        served = request.app[SERVED_MODELS_KEY]
        if served is not None and model not in served[1]:  # a model id this server does not serve (walk39 #6)
            log_call(request, API, 404 if served[0] in ("openai", "vllm", "ollama") else 400,
                     error="model_not_found", model=model)
            return unknown_model_error(served[0], model)
        if RESPONSES_ONLY_ID.match(model):  # served on /v1/responses only (prov46 #1): nothing generated, not billed
            log_call(request, API, 400 if deployment is not None or model != body.get("model") else 404,
                     error="responses_only", model=model)
            if deployment is not None or model != body.get("model"):  # an Azure deployment of it
                return json_response({"error": {"code": "OperationNotSupported",
                                                "message": AZURE_OPERATION_NOT_SUPPORTED.format(model=model)}},
                                     status=400)
            return _err(404, RESPONSES_ONLY_MESSAGE, "invalid_request_error", None, "model")
        if NO_IMAGE_ID.match(model):
            for i, msg in enumerate(body["messages"]):
                parts = msg.get("content") if isinstance(msg.get("content"), list) else []
                for j, part in enumerate(parts):
                    if part.get("type") == "image_url":
                        raise _Bad("Invalid content type. image_url is only supported by certain models.",
                                   f"messages.[{i}].content.[{j}].type")
        if image_detail == "original":
            from geoagent.config import openai_large_patch_model

            if not openai_large_patch_model(model):  # "Available on gpt-5.4 and future models" (vision guide)
                raise _Bad("Invalid value for 'image_url.detail': 'original' (this model takes 'auto', 'low' or "
                           "'high').", "image_url.detail")
        if NO_SYSTEM_ID.match(model):
            for i, msg in enumerate(body["messages"]):
                if msg.get("role") in ("system", "developer"):
                    raise _Bad(f"Unsupported value: 'messages[{i}].role' does not support '{msg['role']}' with this "
                               "model.", f"messages[{i}].role", "unsupported_value")
        _check_claude_sampling(model, body)
        cap_a = _positive_int(body, "max_tokens")
        cap_b = _positive_int(body, "max_completion_tokens")
        temp = body.get("temperature")
        if temp is not None and not is_number_in(temp, 0, 2):
            raise _Bad(f"Invalid 'temperature': expected a number in [0, 2], got {temp!r}.", "temperature", "decimal_above_max_value")
        reasoning = bool(REASONING_ID.match(model))
        if reasoning:
            if temp is not None and temp != 1:
                raise _Bad(f"Unsupported value: 'temperature' does not support {temp!r} with this model. Only the "
                           "default (1) value is supported.", "temperature", "unsupported_value")
            for name in REASONING_UNSUPPORTED:
                if name in body:
                    hint = " Use 'max_completion_tokens' instead." if name == "max_tokens" else ""
                    raise _Bad(f"Unsupported parameter: '{name}' is not supported with this model.{hint}", name,
                               "unsupported_parameter")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _Bad(f"Invalid 'seed': expected an integer, got {seed!r}.", "seed")
        rf = body.get("response_format")
        if rf is not None and NO_RESPONSE_FORMAT_ID.match(model):
            kind = rf.get("type") if isinstance(rf, dict) else None
            raise _Bad(f"Invalid parameter: 'response_format' of type '{kind}' is not supported with this model.",
                       "response_format")
        if rf is not None:
            if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
                raise _Bad("Invalid 'response_format': expected type text, json_object or json_schema.", "response_format")
            if rf["type"] == "json_object" and not mentions_json:
                raise _Bad(
                    "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
                    "messages",
                )
    except _Bad as bad:
        log_call(request, API, 400, error="invalid_request_error", model=body.get("model"), param=bad.param)
        return _err(400, str(bad), "invalid_request_error", bad.code, bad.param)

    max_tokens = cap_b or cap_a or DEFAULT_MAX_TOKENS
    note_model(request.app[MODEL_IDS_KEY], model)
    flagged = [w for w in request.app.get(MODERATION_FLAGS_KEY, ()) if w in prompt.lower()]
    if flagged:  # OpenRouter's moderation refusal of the input (403; nothing generated, not billed)
        log_call(request, API, 403, error="moderation", model=model)
        start = prompt.lower().index(flagged[0])
        return json_response({"error": {
            "code": 403,
            "message": f"{model} requires moderation on this gateway. Your input was flagged for \"{flagged[0]}\".",
            "metadata": {"reasons": flagged, "flagged_input": prompt[max(0, start - 20): start + 80],
                         "provider_name": None, "model_slug": model},
        }}, status=403, headers={"x-request-id": "req_" + short_id(time.time_ns())})
    if REFUSE_MARKER in prompt or FILTER_MARKER in prompt or MIDSTREAM_ERROR_MARKER in prompt:
        return _non_answer(request, model, prompt, system, image, image_url, image_detail)
    if reasoning and max_tokens <= REASONING_TOKENS:
        return _all_reasoning(request, model, prompt, system, image, image_url, image_detail, max_tokens,
                              vllm=request.app[REASONING_STYLE_KEY] == "vllm")
    hidden = REASONING_TOKENS if reasoning else 0  # spent before the answer, billed as completion tokens
    ans = answer_and_log(request, API, model=model, prompt=prompt, system=system, image=image, image_url=image_url,
                         max_output_tokens=max_tokens - hidden, finish_reasons=("stop", "length"),
                         image_detail=image_detail, hidden_output_tokens=hidden)
    n_in, n_out = ans.input_tokens, ans.output_tokens
    payload = {
        "id": f"chatcmpl-{ans.response_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": ans.text, "refusal": None}, "logprobs": None,
             "finish_reason": ans.finish_reason}
        ],
        "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out,
                  **({"completion_tokens_details": {"reasoning_tokens": hidden}} if hidden else {})},
        "system_fingerprint": "fp_sandbox",
    }
    mode = request.app.get(USAGE_MODE_KEY, "report")
    if NO_USAGE_MARKER in prompt or mode == "omit":  # a compatible server that reports no usage (billed all the same)
        del payload["usage"]
    elif mode == "null":  # a gateway that forwards a streamed answer's "usage": null (billed all the same)
        payload["usage"] = None
    elif mode == "zero_output":  # a gateway that counts no output for an answer with text (impossible usage)
        payload["usage"] = {"prompt_tokens": n_in, "completion_tokens": 0, "total_tokens": n_in}
    headers = {
        "x-request-id": f"req_{ans.response_id}",
        "openai-processing-ms": "1",
        "x-ratelimit-limit-requests": "10000",
        "x-ratelimit-remaining-requests": "9999",
        "x-ratelimit-reset-requests": "6ms",
        "x-ratelimit-limit-tokens": "10000000",
        "x-ratelimit-remaining-tokens": str(max(0, 10_000_000 - n_in - max_tokens)),
        "x-ratelimit-reset-tokens": "0s",
    }
    return json_response(payload, headers=headers)


def _non_answer(request: web.Request, model: str, prompt: str, system: str, image: bytes | None,
                image_url: str | None, image_detail: str | None = None) -> web.Response:
    """A billed 200 without answer text: a refusal (:data:`REFUSE_MARKER`), a filtered answer
    (:data:`FILTER_MARKER`) or an error after part of the answer (:data:`MIDSTREAM_ERROR_MARKER`), with the simulation's prompt tokens (chars / 4 + per image 765, or its documented
    bill under ``image_billing="documented"``: :func:`~geoagent.sandbox.llm_common.billed_image_tokens`)."""
    n_in = math.ceil((len(system) + len(prompt)) / SIM_CHARS_PER_TOKEN) + (
        billed_image_tokens(request, API, model, image, detail=image_detail) if image is not None
        else SIM_IMAGE_TOKENS if image_url is not None else 0)
    content, error = None, None
    if REFUSE_MARKER in prompt:
        refusal, finish, n_out = REFUSAL_TEXT, "stop", math.ceil(len(REFUSAL_TEXT) / SIM_CHARS_PER_TOKEN)
    elif MIDSTREAM_ERROR_MARKER in prompt:
        content, refusal, finish = MIDSTREAM_PARTIAL_TEXT, None, "error"
        n_out = math.ceil(len(content) / SIM_CHARS_PER_TOKEN)
        error = {"code": 502, "message": "Provider returned error", "metadata": {"provider_name": "sandbox-upstream"}}
    else:
        refusal, finish, n_out = None, "content_filter", 0
    finish = sent_finish_reason(request, finish)
    log_call(request, API, 200, model=model, input_tokens=n_in, output_tokens=n_out,
             image_id=image_id_for(request, image, image_url), image_sha256=sha256_hex(image), finish_reason=finish)
    rid = short_id(request.headers.get("X-Request-Key"), time.time_ns())
    return json_response({
        "id": f"chatcmpl-{rid}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": refusal},
                     "logprobs": None, "finish_reason": finish, **({"error": error} if error else {})}],
        "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
        "system_fingerprint": "fp_sandbox",
    }, headers={"x-request-id": f"req_{rid}"})


def _all_reasoning(request: web.Request, model: str, prompt: str, system: str, image: bytes | None,
                   image_url: str | None, image_detail: str | None, cap: int, vllm: bool = False) -> web.Response:
    """A reasoning model whose cap (tokens) went on hidden reasoning: billed 200, ``content: ""``, ``finish_reason:
    "length"``, ``completion_tokens`` = ``reasoning_tokens`` = ``cap``. With ``vllm`` as vLLM's reasoning parser
    answers it: ``content: null`` and the unfinished reasoning text in ``message.reasoning`` (vllm-project/vllm#52640)."""
    n_in = math.ceil((len(system) + len(prompt)) / SIM_CHARS_PER_TOKEN) + (
        billed_image_tokens(request, API, model, image, detail=image_detail) if image is not None
        else SIM_IMAGE_TOKENS if image_url is not None else 0)
    finish = sent_finish_reason(request, "length")
    log_call(request, API, 200, model=model, input_tokens=n_in, output_tokens=cap,
             image_id=image_id_for(request, image, image_url), image_sha256=sha256_hex(image), finish_reason=finish)
    rid = short_id(request.headers.get("X-Request-Key"), time.time_ns())
    return json_response({
        "id": f"chatcmpl-{rid}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": ({"role": "assistant", "content": None, "reasoning": "Let me look at the "
                                              "street signs first, then the"} if vllm else
                                             {"role": "assistant", "content": "", "refusal": None}),
                     "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": n_in, "completion_tokens": cap, "total_tokens": n_in + cap,
                  "completion_tokens_details": {"reasoning_tokens": cap}},
        "system_fingerprint": "fp_sandbox",
    }, headers={"x-request-id": f"req_{rid}"})


def make_app(
    faults: FaultConfig | dict[str, Any] | None = None,
    seed: int = 0,
    token_log: str | os.PathLike[str] | None = None,
    api_keys: Collection[str] | None = None,
    require_auth: bool = True,
    calls_max: int | None = None,
    moderation_flags: Collection[str] | None = None,
    models: Collection[str] | None = None,
    image_billing: str = "simulated",
    reasoning_style: str = "openai",
    deployments: dict[str, str] | None = None,
    azure_api_versions: Collection[str] | None = None,
    echo_key: bool | str = False,
    usage: str = "report",
    unknown_model: str | None = None,
    finish_reason_suffix: str = "",
) -> web.Application:
    """Build the fake OpenAI Chat Completions app.

    Parameters
    ----------
    faults : FaultConfig or dict, optional
        Fault injection (:mod:`geoagent.sandbox.faults`); default none (request log only).
    seed : int
        Simulation seed of the answers (use the ``simulated`` provider's seed to get identical answers).
    token_log : path, optional
        JSONL file every call record is appended to (see :class:`~geoagent.sandbox.llm_common.CallLog`).
    api_keys : collection of str, optional
        Accepted keys; default any non-empty key.
    require_auth : bool
        ``False`` accepts requests without a key (like a local vLLM/Ollama server; the offline demo).
    calls_max : int, optional
        Newest call records kept in memory (default all; the ``token_log`` file always gets every one).
    moderation_flags : collection of str, optional
        Words that, found in a prompt (case-insensitive), make the fake answer OpenRouter's moderation
        403 (input flagged) instead of an answer.
    models : collection of str, optional
        Model ids ``GET /v1/models`` names first (default :data:`DEFAULT_MODEL_IDS`); the fake answers any id,
        and the listing adds each one it has answered.

    image_billing : str
        ``"simulated"`` (default: 765 input tokens per image, as the ``simulated`` provider) or
        ``"documented"`` (the tokens the API's documented rule bills for the image's size:
        :data:`~geoagent.sandbox.llm_common.IMAGE_BILLING`).
    reasoning_style : str
        How a reasoning model's answer cut off inside its reasoning looks: ``"openai"`` (default, api.openai.com:
        ``content: ""``) or ``"vllm"`` (vLLM's reasoning parser: ``content: null``, the text in ``reasoning``).
    deployments : dict of str to str, optional
        Azure OpenAI-style deployment names and the model each serves (``{"geo-reasoner": "o1-mini"}``): a request
        naming a deployment is checked by that model's rules and answered with its id, as Azure OpenAI's v1 API
        does (``model`` = the deployment name), and on the classic route ``/openai/deployments/{deployment}/...``
        only these deployments exist (404 ``DeploymentNotFound`` for another; with none given every name is a
        deployment of the model of that name). Default none.
    azure_api_versions : collection of str, optional
        ``api-version`` values the classic Azure route accepts (default :data:`AZURE_API_VERSIONS`); another -> 404.
    echo_key : bool or str
        A careless proxy (default False): the 401 for a refused key repeats the key, in JSON whose every ``/`` is
        written ``\\/`` (as PHP's ``json_encode`` does), instead of OpenAI's masked ``sk-...abcd``: in full (True
        or ``"full"``), upper-cased (``"upper"``), as its first 14 and last 4 characters (``"prefix"``, a
        truncated echo) or as its standard base64 (``"base64"``, with ``/`` written ``\\/`` too). Raises ValueError
        for another string.
    usage : str
        ``"report"`` (default: every answer carries ``usage``), ``"omit"`` (no ``usage`` key in any answer) or
        ``"null"`` (``"usage": null``) or ``"zero_output"`` (``completion_tokens: 0`` beside the answer's text: a count no
        call with text can have); calls are logged as billed either way.
    unknown_model : str, optional
        None (default): every model id is served. One of :data:`UNKNOWN_MODEL_STYLES`: only the ids given as
        ``models=`` (default :data:`DEFAULT_MODEL_IDS`) are served, and a chat completion naming another is answered
        as that server answers an unknown model (:func:`unknown_model_error`: 404 for ``openai``, ``vllm``,
        ``ollama``; 400 for ``openrouter``, ``litellm``), logged with ``error = "model_not_found"``, not billed;
        ``GET /v1/models/{model}`` of another id is 404 ``model_not_found`` too. Raises ValueError for another
        string.
    finish_reason_suffix : str
        Text appended to every finish reason the fake sends and logs (default none): ``"\u2066"`` makes it a server
        whose reasons carry a bidirectional formatting character (``length\u2066``; fixreason43 #2).

    Returns
    -------
    aiohttp.web.Application
        Call records in ``app["calls"]`` / ``app[CALLS_KEY]``; fault state in ``app[FAULTS_KEY]``.
    """
    # the paths without /v1 answer 404 as api.openai.com does (a base_url lacking /v1 fails here too; prov39 #7)
    routes = [("POST", "/v1/chat/completions", chat_completions), ("POST", "/chat/completions", invalid_url),
              ("GET", "/v1/models", list_models), ("GET", "/models", invalid_url),
              ("GET", "/v1/models/{model}", retrieve_model), ("GET", "/models/{model}", invalid_url),
              ("POST", AZURE_ROUTE_PREFIX + "{deployment}/chat/completions", azure_chat_completions)]
    app = build_app(
        routes,
        api=API,
        faults=faults,
        seed=seed,
        token_log=token_log,
        api_keys=api_keys,
        require_auth=require_auth,
        calls_max=calls_max,
        image_billing=image_billing,
        finish_reason_suffix=finish_reason_suffix,
    )
    if reasoning_style not in ("openai", "vllm"):
        raise ValueError(f"reasoning_style must be 'openai' or 'vllm', got {reasoning_style!r}")
    app[REASONING_STYLE_KEY] = reasoning_style
    if usage not in USAGE_MODES:
        raise ValueError(f"usage must be one of {USAGE_MODES}, got {usage!r}")
    app[USAGE_MODE_KEY] = usage
    mode = ("full" if echo_key else "") if isinstance(echo_key, bool) else echo_key
    if mode and mode not in ECHO_KEY_MODES:
        raise ValueError(f"echo_key must be a bool or one of {ECHO_KEY_MODES}, got {echo_key!r}")
    app[ECHO_KEY_KEY] = mode
    app[DEPLOYMENTS_KEY] = dict(deployments or {})
    app[AZURE_API_VERSIONS_KEY] = frozenset(AZURE_API_VERSIONS if azure_api_versions is None else azure_api_versions)
    app[MODERATION_FLAGS_KEY] = tuple(w.lower() for w in (moderation_flags or ()))
    app[MODEL_IDS_KEY] = list(dict.fromkeys(DEFAULT_MODEL_IDS if models is None else models))
    if unknown_model is not None and unknown_model not in UNKNOWN_MODEL_STYLES:
        raise ValueError(f"unknown_model must be None or one of {UNKNOWN_MODEL_STYLES}, got {unknown_model!r}")
    app[SERVED_MODELS_KEY] = (None if unknown_model is None
                              else (unknown_model, frozenset(DEFAULT_MODEL_IDS if models is None else models)))
    return app


if __name__ == "__main__":  # pragma: no cover - exercised by the separate-process test
    cli_main(make_app, "python -m geoagent.sandbox.llm_openai",
             describe=lambda base: f" (OpenAI-compatible; base_url {base}/v1)")
