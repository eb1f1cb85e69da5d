"""Local fake of the Google Gemini API ``models.generateContent``.

``POST /v1beta/models/{model}:generateContent``. It checks the request as the real API does and answers in
the documented shapes (Gemini API reference ``models.generateContent``, ``GenerateContentResponse``):

* Key in the ``x-goog-api-key`` header or the ``key`` query parameter. Missing -> 403
  ``PERMISSION_DENIED`` ("Method doesn't allow unregistered callers ..."); unknown -> 400
  ``INVALID_ARGUMENT`` with an ``ErrorInfo`` detail ``reason: API_KEY_INVALID`` (what the real API
  sends for a bad key, not a 401).
* Body: protobuf JSON, so every field is accepted in lowerCamelCase or snake_case (``inlineData`` /
  ``inline_data``, ``generationConfig`` / ``generation_config``, ...); an unknown field name -> 400
  ``Invalid JSON payload received. Unknown name "..."``. ``contents`` must be non-empty; each part holds
  ``text`` or ``inlineData {mimeType, data}`` (raw base64, no ``data:`` prefix; MIME png/jpeg/webp/heic/heif);
  ``generationConfig.maxOutputTokens`` a positive integer (default 8192); ``temperature`` in [0, 2].
  Thinking models (Gemini 2.5 Flash / Pro, Gemini 3; not Flash-Lite) spend :data:`THINKING_TOKENS` thinking
  tokens (or ``thinkingConfig.thinkingBudget`` when lower; 0 turns 2.5 Flash's thinking off, Pro (2.5 and 3) refuses
  0 to 127 with "Budget 0 is invalid. This model only works in thinking mode.", Gemini 3 Flash takes 0 to 127 and
  still thinks :data:`GEMINI_3_FLASH_MIN_THINKING` tokens) out of ``maxOutputTokens``: a cap at or
  below that is answered as a candidate without parts, ``finishReason`` ``MAX_TOKENS`` and
  ``usageMetadata.thoughtsTokenCount`` = the cap (billed); above it, the answer has what is left of the cap and
  ``thoughtsTokenCount`` is billed beside ``candidatesTokenCount`` (providers39 #4). Each call record keeps the ``generationConfig``
  the request carried (``sampling``).
* Errors: ``{"error": {"code", "message", "status"[, "details"]}}``.
* Success: ``{"candidates": [{"content": {"role": "model", "parts": [{"text"}]}, "finishReason":
  "STOP"|"MAX_TOKENS", "index": 0}], "usageMetadata": {"promptTokenCount", "candidatesTokenCount",
  "totalTokenCount"}, "modelVersion", "responseId"}``. ``make_app(usage=...)`` changes ``usageMetadata`` in
  every answer (a candidate, with or without parts): ``"omit"`` leaves it out, ``"null"`` sends ``null``,
  ``"prompt_only"`` sends only ``promptTokenCount`` (no ``candidatesTokenCount`` nor ``totalTokenCount`` for an
  answer with text: what a gateway that drops the output count forwards), ``"total_only"`` sends
  ``promptTokenCount`` and ``totalTokenCount`` without ``candidatesTokenCount`` (the answer's tokens counted in the
  total) and ``"zero_output"`` sends ``candidatesTokenCount: 0`` beside the text; calls are logged as billed either way.
* A prompt containing :data:`WITHHOLD_MARKER` is answered like an answer the safety filter withheld: one candidate
  without ``content``, ``finishReason`` ``SAFETY`` (billed: the prompt's tokens; usage as ``usage=`` asks).
* A prompt containing :data:`BLOCK_MARKER` is answered like a prompt the safety filter blocked:
  ``promptFeedback.blockReason = "OTHER"``, no ``candidates`` (usage reports only prompt tokens).

* Injected faults (``faults=``) answer in this error shape: 429 ``RESOURCE_EXHAUSTED`` with a
  ``QuotaFailure`` detail; 500 ``INTERNAL``; 503 ``UNAVAILABLE``. A wait the fault asks for goes in a ``RetryInfo``
  detail (``retryDelay``, e.g. ``"1.5s"``) and in no ``Retry-After`` header, as the real API sends it
  (dcdpr/jp#1061). The ``quota`` fault is the free tier's used-up daily input-token quota as Google words it: a
  ``QuotaFailure`` with ``quotaId`` ``GenerateContentInputTokensPerModelPerDay-FreeTier`` and ``quotaValue``
  ``"250000"``, and a ``RetryInfo`` of ``37s`` that does not clear it (it clears at the daily reset; prov46 #3).
* ``GET /v1beta/models``: ``models.list`` (Gemini API reference, Models, https://ai.google.dev/api/models
  "Method: models.list" and "Resource: Model"): ``{"models": [Model], "nextPageToken"}`` with query
  ``pageSize`` / ``pageToken``; see :func:`list_models`. Key checked as for generateContent; not a model
  call, so not in the call log.
* ``GET /v1beta/models/{model}``: ``models.get`` (same page, "Method: models.get"): one ``Model`` of a listed
  id, 404 ``NOT_FOUND`` for any other; see :func:`get_model`.

Run standalone with ``python -m geoagent.sandbox.llm_gemini --port 8003 --log calls.jsonl``.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Collection
from typing import Any

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
from geoagent.sandbox.responders import SIM_CHARS_PER_TOKEN

API = "gemini"
DEFAULT_MAX_OUTPUT_TOKENS = 8192
IMAGE_MIME = ("image/png", "image/jpeg", "image/webp", "image/heic", "image/heif")
#: Prompt text that makes the fake answer as if the prompt had been blocked.
BLOCK_MARKER = "[[sandbox:block]]"
#: model ids ``GET /v1beta/models`` names when ``make_app(models=...)`` is not given (the fake answers any id)
DEFAULT_MODEL_IDS: tuple[str, ...] = ("sandbox-model",)
#: methods the fake serves, so the only one its ``Model`` objects list
SUPPORTED_METHODS: tuple[str, ...] = ("generateContent",)
#: nominal token limits of the fake's ``Model`` objects (those of Gemini 2.5 Flash; the fake enforces neither)
INPUT_TOKEN_LIMIT = 1_048_576
OUTPUT_TOKEN_LIMIT = 65_536
#: ``models.list`` page size: default when ``pageSize`` is absent or 0, and the largest page (larger is cut)
PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 1000
MODEL_IDS_KEY: web.AppKey[list[str]] = web.AppKey("gemini_model_ids", list)
#: how the fake reports ``usageMetadata`` in its answers (``make_app(usage=...)``)
USAGE_MODES = ("report", "omit", "null", "prompt_only", "total_only", "zero_output")
#: Prompt text that makes the fake withhold its answer: a candidate without ``content``, ``finishReason``
#: ``SAFETY`` (usage as ``make_app(usage=...)`` asks: ``"omit"`` sends none)
WITHHOLD_MARKER = "[[sandbox:withhold]]"
USAGE_MODE_KEY: web.AppKey[str] = web.AppKey("gemini_usage_mode", str)


def _usage_as_set(app: web.Application, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` (an answer with candidates) with its ``usageMetadata`` as ``make_app(usage=...)`` asks."""
    mode = app.get(USAGE_MODE_KEY, "report")
    if mode == "omit":
        del payload["usageMetadata"]
    elif mode == "null":
        payload["usageMetadata"] = None
    elif mode == "prompt_only":
        payload["usageMetadata"] = {"promptTokenCount": payload["usageMetadata"]["promptTokenCount"]}
    elif mode == "total_only":  # a gateway that drops candidatesTokenCount but keeps the total
        meta = payload["usageMetadata"]
        payload["usageMetadata"] = {"promptTokenCount": meta["promptTokenCount"], "totalTokenCount": meta["totalTokenCount"]}
    elif mode == "zero_output":  # an explicit zero output count beside the answer's text
        meta = payload["usageMetadata"]
        payload["usageMetadata"] = {"promptTokenCount": meta["promptTokenCount"], "candidatesTokenCount": 0,
                                    "totalTokenCount": meta["promptTokenCount"]}
    return payload

_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
_TOP_FIELDS = {
    "contents", "systemInstruction", "generationConfig", "safetySettings", "tools", "toolConfig", "cachedContent",
}  # fmt: skip
_GEN_FIELDS = {
    "maxOutputTokens", "temperature", "topP", "topK", "candidateCount", "stopSequences", "responseMimeType",
    "responseSchema", "responseJsonSchema", "seed", "thinkingConfig", "presencePenalty", "frequencyPenalty",
    "responseLogprobs", "logprobs", "responseModalities", "mediaResolution",
}  # fmt: skip
_PART_FIELDS = {"text", "inlineData", "fileData", "thought", "thoughtSignature", "functionCall", "functionResponse"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _norm(obj: dict[str, Any], allowed: set[str], where: str) -> dict[str, Any]:
    """Map snake_case names to lowerCamelCase; raise on unknown names (as protobuf JSON parsing does)."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        ck = _camel(k)
        if ck not in allowed:
            raise _Bad(f'Invalid JSON payload received. Unknown name "{k}" at \'{where}\': Cannot find field.')
        out[ck] = v
    return out


class _Bad(Exception):
    pass


def _err(code: int, message: str, details: list[dict[str, Any]] | None = None) -> web.Response:
    err: dict[str, Any] = {"code": code, "message": message, "status": _STATUS.get(code, "INVALID_ARGUMENT")}
    if details:
        err["details"] = details
    return json_response({"error": err}, status=code)


def _parse(body: dict[str, Any]) -> tuple[str, str, bytes | None, int, Any]:
    """Validate the request; return (user text, system text, first image, maxOutputTokens, temperature)."""
    top = _norm(body, _TOP_FIELDS, "")
    contents = top.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _Bad("* GenerateContentRequest.contents: contents is not specified")
    user_texts: list[str] = []
    image: bytes | None = None
    for i, content in enumerate(contents):
        if not isinstance(content, dict):
            raise _Bad(f"Invalid value at 'contents[{i}]': expected an object")
        c = _norm(content, {"role", "parts"}, f"contents[{i}]")
        if c.get("role") not in (None, "user", "model"):
            raise _Bad(f"* GenerateContentRequest.contents[{i}].role: Please use a valid role: user, model.")
        parts = c.get("parts")
        if not isinstance(parts, list) or not parts:
            raise _Bad(f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.")
        texts = []
        for j, part in enumerate(parts):
            where = f"contents[{i}].parts[{j}]"
            if not isinstance(part, dict):
                raise _Bad(f"Invalid value at '{where}': expected an object")
            p = _norm(part, _PART_FIELDS, where)
            if "text" in p:
                if not isinstance(p["text"], str):
                    raise _Bad(f"Invalid value at '{where}.text': expected a string")
                texts.append(p["text"])
            elif "inlineData" in p:
                blob = p["inlineData"]
                if not isinstance(blob, dict):
                    raise _Bad(f"Invalid value at '{where}.inline_data': expected an object")
                b = _norm(blob, {"mimeType", "data"}, f"{where}.inline_data")
                if b.get("mimeType") not in IMAGE_MIME:
                    raise _Bad(f"* GenerateContentRequest.{where}.inline_data.mime_type: Unsupported MIME type: {b.get('mimeType')}")
                data = b.get("data")
                raw = None if (isinstance(data, str) and data.startswith("data:")) else decode_b64(data)
                if raw is None:
                    raise _Bad(f"Invalid value at '{where}.inline_data.data' (TYPE_BYTES), Base64 decoding failed")
                if image is None:
                    image = raw
            else:
                raise _Bad(f"* GenerateContentRequest.{where}.data: required oneof field 'data' must have one initialized field")
        if c.get("role", "user") == "user":
            user_texts.append("\n".join(texts))
    system = ""
    si = top.get("systemInstruction")
    if si is not None:
        if not isinstance(si, dict):
            raise _Bad("Invalid value at 'system_instruction': expected an object")
        s = _norm(si, {"role", "parts"}, "system_instruction")
        sparts = s.get("parts") or []
        if not isinstance(sparts, list):
            raise _Bad("Invalid value at 'system_instruction.parts': expected a list")
        system = "\n".join(
            str(_norm(sp, _PART_FIELDS, "system_instruction.parts").get("text", "")) for sp in sparts if isinstance(sp, dict)
        )
    gen = top.get("generationConfig") or {}
    if not isinstance(gen, dict):
        raise _Bad("Invalid value at 'generation_config': expected an object")
    g = _norm(gen, _GEN_FIELDS, "generation_config")
    max_out = g.get("maxOutputTokens", DEFAULT_MAX_OUTPUT_TOKENS)
    if not is_int_at_least(max_out, 1):
        raise _Bad(f"Invalid value at 'generation_config.max_output_tokens' (TYPE_INT32), {max_out!r}")
    temp = g.get("temperature")
    if temp is not None and not is_number_in(temp, 0, 2):
        raise _Bad("* GenerateContentRequest.generation_config.temperature: must be in [0.0, 2.0]")
    if g.get("candidateCount", 1) != 1:
        raise _Bad("* GenerateContentRequest.generation_config.candidate_count: only 1 candidate is supported here")
    thinking = g.get("thinkingConfig") or {}
    if not isinstance(thinking, dict):
        raise _Bad("Invalid value at 'generation_config.thinking_config': expected an object")
    tc = _norm(thinking, {"thinkingBudget", "includeThoughts", "thinkingLevel"}, "generation_config.thinking_config")
    budget = tc.get("thinkingBudget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < -1):
        raise _Bad(f"Invalid value at 'generation_config.thinking_config.thinking_budget' (TYPE_INT32), {budget!r}")
    return "\n".join(user_texts), system, image, max_out, temp, budget


#: thinking tokens a thinking model (:func:`_thinking_tokens`) spends before its answer under dynamic thinking
THINKING_TOKENS = 512
#: Gemini 3 Pro ids (the fake's own reading): they refuse thinkingBudget 0-127 as 2.5 Pro does; Gemini 3 Flash takes
#: such a budget and still spends :data:`GEMINI_3_FLASH_MIN_THINKING` thinking tokens
GEMINI_3_PRO_ID = re.compile(r"^gemini-3(?:\.\d+)?-pro(?:[-.]|$)")
GEMINI_3_FLASH_MIN_THINKING = 128
#: documented thinkingBudget ranges (Gemini API thinking guide): Flash 0-24,576 (0 = off), Pro 128-32,768 (always on)
_BUDGET_RANGE = {"flash": (0, 24_576), "pro": (128, 32_768)}


def _thinking_tokens(model: str, budget: int | None) -> int:
    """Thinking tokens ``model`` spends before answering (0: it does not think) under ``thinkingBudget``
    ``budget`` (None or -1: dynamic, :data:`THINKING_TOKENS`); Gemini 2.5 Flash / Pro and Gemini 3 think by
    default, Flash-Lite and older models not. A budget out of the model's documented range -> 400."""
    mid = model.lower()
    tier = None if "lite" in mid else "flash" if mid.startswith("gemini-2.5-flash") else (
        "pro" if mid.startswith(("gemini-2.5-pro", "gemini-3")) else None)
    if tier is None:
        return min(budget, THINKING_TOKENS) if budget and budget > 0 else 0
    if budget is None or budget == -1:
        return THINKING_TOKENS
    if mid.startswith("gemini-3") and not GEMINI_3_PRO_ID.match(mid) and 0 <= budget < _BUDGET_RANGE["pro"][0]:
        # Gemini 3 Flash takes a budget below Pro's range (0 too) and still thinks: its thinking is never fully off
        # (Google's thinking guide; maragudk/gai#369: 3.x Flash accepts 0 and usually thinks anyway; prov46 #4)
        return GEMINI_3_FLASH_MIN_THINKING
    low, high = _BUDGET_RANGE[tier]
    if not low <= budget <= high:
        if budget == 0:
            raise _Bad("Budget 0 is invalid. This model only works in thinking mode.")
        raise _Bad(f"The thinking budget {budget} is invalid. Please choose a value between {low} and {high}.")
    return min(budget, THINKING_TOKENS)


def _key_error(request: web.Request, *, model: str | None = None, log: bool = True) -> web.Response | None:
    """The 403 for a missing key or the 400 ``API_KEY_INVALID`` for an unknown one (key from the
    ``x-goog-api-key`` header or the ``key`` query parameter; logged as a call when ``log``), or None."""
    key = request.headers.get("x-goog-api-key") or request.query.get("key")
    if not key and auth_required(request.app):
        if log:
            log_call(request, API, 403, error="PERMISSION_DENIED", model=model)
        return _err(
            403,
            "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API.",
        )
    if not key_ok(request.app, key):
        if log:
            log_call(request, API, 400, error="API_KEY_INVALID", model=model)
        return _err(
            400,
            "API key not valid. Please pass a valid API key.",
            [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            ],
        )
    return None


def _model_resource(model_id: str) -> dict[str, Any]:
    """One ``Model`` resource as ``models.list`` gives it (lowerCamelCase protobuf JSON)."""
    return {
        "name": f"models/{model_id}", "baseModelId": model_id, "version": "001", "displayName": model_id,
        "description": "Local fake of the Gemini API (simulated answers).", "inputTokenLimit": INPUT_TOKEN_LIMIT,
        "outputTokenLimit": OUTPUT_TOKEN_LIMIT, "supportedGenerationMethods": list(SUPPORTED_METHODS),
        "temperature": 1.0, "maxTemperature": 2.0, "topP": 0.95, "topK": 64, "thinking": False,
    }


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1beta/models``: ``models.list``.

    Source: Gemini API reference, Models (https://ai.google.dev/api/models), "Method: models.list" (query
    ``pageSize``: default 50, at most 1000 per page even when more is asked; ``pageToken`` from the previous
    answer) and "Resource: Model" (https://ai.google.dev/api/rest/v1/models). Answer: ``{"models": [Model],
    "nextPageToken": str}``, the token only when more models follow (protobuf JSON leaves empty fields out).
    Each ``Model``: ``name`` ``models/<id>``, ``baseModelId``, ``version``, ``displayName``, ``description``,
    ``inputTokenLimit``, ``outputTokenLimit`` (nominal), ``supportedGenerationMethods`` (``["generateContent"]``,
    the one method the fake serves), ``temperature``, ``maxTemperature``, ``topP``, ``topK``, ``thinking``.
    Lists the configured ids (``make_app(models=...)``, default :data:`DEFAULT_MODEL_IDS`) and then every other
    id this fake has answered. A ``pageSize`` that is not a non-negative integer or a ``pageToken`` this fake
    did not hand out -> 400 ``INVALID_ARGUMENT``. Key checked as for generateContent; not logged as a call.
    """
    denied = _key_error(request, log=False)
    if denied is not None:
        return denied
    raw_size, token = request.query.get("pageSize", "0"), request.query.get("pageToken", "")
    try:
        size = int(raw_size)
    except ValueError:
        size = -1
    if size < 0:
        return _err(400, f"Invalid value at 'page_size' (TYPE_INT32), \"{raw_size}\"")
    size = min(size or PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX)
    ids = list(request.app[MODEL_IDS_KEY])
    start = 0
    if token:
        start = int(token[2:]) if token.startswith("p:") and token[2:].isdigit() else -1
        if not 0 < start < len(ids):
            return _err(400, "Invalid page token.")
    page = ids[start:start + size]
    body: dict[str, Any] = {"models": [_model_resource(m) for m in page]}
    if start + size < len(ids):
        body["nextPageToken"] = f"p:{start + size}"
    return json_response(body)


async def get_model(request: web.Request) -> web.Response:
    """``GET /v1beta/models/{model}``: ``models.get``.

    Source: Gemini API reference, Models (https://ai.google.dev/api/models), "Method: models.get": ``GET
    https://generativelanguage.googleapis.com/v1beta/{name=models/*}``, empty request body, the answer is one
    ``Model`` resource (the same object :func:`list_models` lists). A model this fake does not list (the
    configured ids and those it has answered), or a name with a ``:method`` suffix, -> 404 ``NOT_FOUND``.
    Key checked as for generateContent; not logged as a call.
    """
    denied = _key_error(request, log=False)
    if denied is not None:
        return denied
    model_id = request.match_info["name"]
    if ":" in model_id or model_id not in request.app[MODEL_IDS_KEY]:
        return _err(404, f"models/{model_id} is not found for API version v1beta. Call ListModels to see the "
                         "available models.")
    return json_response(_model_resource(model_id))


async def generate_content(request: web.Request) -> web.Response:
    """The ``/v1beta/models/{model}:generateContent`` handler."""
    name = request.match_info["name"]
    model, sep, method = name.rpartition(":")
    if not sep or method != "generateContent" or not model:
        log_call(request, API, 404, error="NOT_FOUND")
        return _err(404, f"Method not found: {name}")
    denied = _key_error(request, model=model)
    if denied is not None:
        return denied
    body, problem = await read_json(request)
    if problem is not None or not isinstance(body, dict):
        log_call(request, API, 400, error="INVALID_ARGUMENT", model=model)
        return _err(400, f"Invalid JSON payload received. {problem or 'Expected an object.'}")
    gen = body.get("generationConfig", body.get("generation_config"))
    request[LOG_EXTRA_KEY] = {"sampling": dict(gen) if isinstance(gen, dict) else {}}
    try:
        prompt, system, image, max_out, _temp, budget = _parse(body)
        thoughts = _thinking_tokens(model, budget)
    except _Bad as bad:
        log_call(request, API, 400, error="INVALID_ARGUMENT", model=model)
        return _err(400, str(bad))

    if BLOCK_MARKER in prompt:
        image_id = image_id_for(request, image)
        n_in = math.ceil((len(system) + len(prompt)) / SIM_CHARS_PER_TOKEN) + billed_image_tokens(request, API, model, image)
        log_call(request, API, 200, model=model, input_tokens=n_in, output_tokens=0, image_id=image_id, image_sha256=sha256_hex(image), finish_reason="BLOCKED:OTHER")
        return json_response(
            {
                "promptFeedback": {"blockReason": "OTHER"},
                "usageMetadata": {"promptTokenCount": n_in, "totalTokenCount": n_in},
                "modelVersion": model,
                "responseId": short_id(request.headers.get("X-Request-Key"), time.time_ns()),
            }
        )
    if WITHHOLD_MARKER in prompt:
        image_id = image_id_for(request, image)
        n_in = math.ceil((len(system) + len(prompt)) / SIM_CHARS_PER_TOKEN) + (
            billed_image_tokens(request, API, model, image) if image is not None else 0)
        finish = sent_finish_reason(request, "SAFETY")
        log_call(request, API, 200, model=model, input_tokens=n_in, output_tokens=0, image_id=image_id,
                 image_sha256=sha256_hex(image), finish_reason=finish)
        payload = {"candidates": [{"finishReason": finish, "index": 0}],
                   "usageMetadata": {"promptTokenCount": n_in, "totalTokenCount": n_in},
                   "modelVersion": model, "responseId": short_id(request.headers.get("X-Request-Key"), time.time_ns())}
        mode = request.app.get(USAGE_MODE_KEY, "report")
        if mode == "omit":
            del payload["usageMetadata"]
        elif mode == "null":
            payload["usageMetadata"] = None
        return json_response(payload)
    if thoughts and max_out <= thoughts:  # the cap went on thinking: no text part at all
        image_id = image_id_for(request, image)
        n_in = math.ceil((len(system) + len(prompt)) / SIM_CHARS_PER_TOKEN) + (
            billed_image_tokens(request, API, model, image) if image is not None else 0)
        finish = sent_finish_reason(request, "MAX_TOKENS")
        log_call(request, API, 200, model=model, input_tokens=n_in, output_tokens=max_out, image_id=image_id,
                 image_sha256=sha256_hex(image), finish_reason=finish)
        note_model(request.app[MODEL_IDS_KEY], model)
        return json_response(_usage_as_set(request.app, {
            "candidates": [{"content": {"role": "model"}, "finishReason": finish, "index": 0}],
            "usageMetadata": {"promptTokenCount": n_in, "totalTokenCount": n_in + max_out, "thoughtsTokenCount": max_out},
            "modelVersion": model,
            "responseId": short_id(request.headers.get("X-Request-Key"), time.time_ns()),
        }))
    # thinking spent out of maxOutputTokens before the answer, billed as output (thoughtsTokenCount)
    ans = answer_and_log(request, API, model=model, prompt=prompt, system=system, image=image,
                         max_output_tokens=max_out - thoughts, finish_reasons=("STOP", "MAX_TOKENS"),
                         hidden_output_tokens=thoughts)
    note_model(request.app[MODEL_IDS_KEY], model)
    n_in, n_out = ans.input_tokens, ans.output_tokens - thoughts
    payload = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": ans.text}]}, "finishReason": ans.finish_reason, "index": 0}],
        "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": n_out,
                          "totalTokenCount": n_in + n_out + thoughts, **({"thoughtsTokenCount": thoughts} if thoughts else {})},
        "modelVersion": model,
        "responseId": ans.response_id,
    }
    return json_response(_usage_as_set(request.app, payload))


def make_app(
    faults: FaultConfig | dict[str, Any] | None = None,
    seed: int = 0,
    token_log: str | os.PathLike[str] | None = None,
    api_keys: Collection[str] | None = None,
    require_auth: bool = True,
    calls_max: int | None = None,
    models: Collection[str] | None = None,
    image_billing: str = "simulated",
    usage: str = "report",
    finish_reason_suffix: str = "",
) -> web.Application:
    """Build the fake Gemini generateContent app (parameters as :func:`geoagent.sandbox.llm_openai.make_app`;
    ``models``: the ids ``GET /v1beta/models`` lists first, default :data:`DEFAULT_MODEL_IDS`; ``GET
    /v1beta/models/{model}`` answers for the listed ids; ``usage``: ``"report"`` (default), ``"omit"``,
    ``"null"``, ``"prompt_only"``, ``"total_only"`` or ``"zero_output"``, one of :data:`USAGE_MODES` (module docstring), else ``ValueError``; a
    blocked prompt's answer keeps its usage; ``finish_reason_suffix``: appended to every ``finishReason`` it
    sends)."""
    if usage not in USAGE_MODES:
        raise ValueError(f"usage must be one of {USAGE_MODES}, got {usage!r}")
    routes = [("POST", "/v1beta/models/{name}", generate_content), ("GET", "/v1beta/models", list_models),
              ("GET", "/v1beta/models/{name}", get_model)]
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
    app[MODEL_IDS_KEY] = list(dict.fromkeys(DEFAULT_MODEL_IDS if models is None else models))
    app[USAGE_MODE_KEY] = usage
    return app


if __name__ == "__main__":  # pragma: no cover - exercised by the separate-process test
    cli_main(make_app, "python -m geoagent.sandbox.llm_gemini",
             describe=lambda base: f" (Gemini generateContent API; base_url {base})")
