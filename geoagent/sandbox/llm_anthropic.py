"""Local fake of the Anthropic Messages API.

``POST /v1/messages``. It checks the request as the real API does and answers in the documented shapes
(Claude API docs: Messages, Vision, Errors):

* Headers: ``x-api-key`` missing -> 401 ``authentication_error`` ("x-api-key header is required");
  unknown -> 401 ``authentication_error`` ("invalid x-api-key"); ``anthropic-version`` missing -> 400
  ``invalid_request_error``.
* Body: JSON object with ``model``, ``max_tokens`` (required; integer >= 1), non-empty ``messages`` with
  roles ``user`` / ``assistant`` only (a ``system`` role is rejected: system text is the top-level
  ``system`` field, a string or a list of text blocks); content a string or a list of ``text`` /
  ``image`` blocks; an image ``source`` of type ``base64`` needs ``media_type`` in jpeg/png/gif/webp and
  ``data`` that is valid base64 *without* a ``data:`` prefix (type ``url`` needs ``url``);
  ``temperature`` in [0, 1]. A violation -> 400 ``invalid_request_error``. Model rules as the API enforces
  them (:func:`claude_sampling_rule`): a Claude 4.7+ id (``claude-opus-4-7``, ``claude-sonnet-5``) refuses
  ``temperature``, ``top_p`` and ``top_k`` ("`temperature` is deprecated for this model."); an Opus 4.1 or
  4.5+ id refuses ``temperature`` with ``top_p`` ("`temperature` and `top_p` cannot both be specified for
  this model. Please use only one."). Each call record keeps the request's sampling fields (``sampling``).
* Errors: ``{"type": "error", "error": {"type", "message"}, "request_id": "req_..."}`` and a
  ``request-id`` header on every answer.
* Success: ``{"id": "msg_...", "type": "message", "role": "assistant", "model", "content": [{"type": "text",
  "text"}], "stop_reason": "end_turn"|"max_tokens", "stop_sequence": null, "usage": {"input_tokens",
  "output_tokens", "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}``. ``make_app(usage="omit")``
  leaves ``usage`` out of every answer and ``usage="null"`` sends ``"usage": null`` (an Anthropic-compatible
  server or gateway that does not pass the count on; the API documents ``usage`` on every Message: "Billing and
  rate-limit usage"); the call is logged as billed either way.
* :data:`REFUSE_MARKER` in the prompt: the model declines before any text (``content: []``, ``stop_reason:
  "refusal"``, billed; the Messages reference's stop reasons).
* Injected faults (``faults=``) answer in this error shape: 429 ``rate_limit_error``, 500 ``api_error``,
  and a 503 fault is sent as 529 ``overloaded_error`` (Anthropic's overload status); ``Retry-After`` kept.
* ``GET /v1/models``: Anthropic's "List Models" (Claude API docs, Models, "List Models",
  https://docs.anthropic.com/en/api/models-list; ``ModelInfo`` on https://platform.claude.com/docs/en/api/models):
  ``{"data": [{"type": "model", "id", "display_name", "created_at"}], "has_more", "first_id", "last_id"}``
  with the query parameters ``limit`` (1-1000, default 20), ``after_id`` and ``before_id``; see
  :func:`list_models`. Same headers as messages (``x-api-key``, ``anthropic-version``: the real API wants the
  version header on every request, its curl examples send it to the models endpoints too); not a model call,
  so not in the call log.
* ``GET /v1/models/{model_id}``: "Get a Model" (https://platform.claude.com/docs/en/api/models/retrieve): one
  ``ModelInfo`` of a listed id, 404 ``not_found_error`` for any other; see :func:`get_model`.

Run standalone with ``python -m geoagent.sandbox.llm_anthropic --port 8002 --log calls.jsonl``.
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
from geoagent.sandbox.responders import SIM_CHARS_PER_TOKEN
from geoagent.sandbox.llm_common import (
    LOG_EXTRA_KEY,
    answer_and_log,
    auth_required,
    build_app,
    cli_main,
    decode_b64,
    is_int_at_least,
    is_number_in,
    json_response,
    key_ok,
    log_call,
    note_model,
    read_json,
    sent_finish_reason,
    short_id,
)

API = "anthropic"
#: Prompt text that makes the fake decline before any text (``content: []``, ``stop_reason: "refusal"``)
REFUSE_MARKER = "[[sandbox:refuse]]"
IMAGE_MIME = ("image/jpeg", "image/png", "image/gif", "image/webp")
#: the API's limit on one image's base64 data (characters) and on an image's side (px)
MAX_IMAGE_B64 = 5 * 1024 * 1024
MAX_SIDE_PX = 8000


def _largest_side(raw: bytes) -> int | None:
    """The longer side of an image in px from its header (Pillow), or None when it cannot be read."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(raw)) as img:
            return max(img.size)
    except Exception:  # noqa: BLE001 - an unreadable image is the model's problem, not the request's
        return None
#: model ids ``GET /v1/models`` names when ``make_app(models=...)`` is not given (the fake answers any id)
DEFAULT_MODEL_IDS: tuple[str, ...] = ("sandbox-model",)
#: ``created_at`` of the fake's models (RFC 3339; fixed, so listings are reproducible): Unix 1_700_000_000
MODEL_CREATED_AT = "2023-11-14T22:13:20Z"
#: ``limit`` of "List Models": default and largest accepted value (the docs: 1 <= limit <= 1000, default 20)
LIST_LIMIT_DEFAULT = 20
LIST_LIMIT_MAX = 1000
MODEL_IDS_KEY: web.AppKey[list[str]] = web.AppKey("anthropic_model_ids", list)
#: how the fake reports ``usage`` in its answers (``make_app(usage=...)``)
USAGE_MODES = ("report", "omit", "null", "zero_output")
USAGE_MODE_KEY: web.AppKey[str] = web.AppKey("anthropic_usage_mode", str)


def _err(status: int, type_: str, message: str) -> web.Response:
    rid = "req_" + short_id(time.time_ns(), message)
    body = {"type": "error", "error": {"type": type_, "message": message}, "request_id": rid}
    return json_response(body, status=status, headers={"request-id": rid})


class _Bad(Exception):
    pass


def _texts_of_system(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        out = []
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
                raise _Bad(f"system.{i}: expected a text block")
            out.append(block["text"])
        return "\n".join(out)
    raise _Bad("system: Input should be a valid string or a list of text blocks")


def _parse_messages(messages: Any) -> tuple[str, bytes | None, str | None]:
    if not isinstance(messages, list):
        raise _Bad("messages: Field required" if messages is None else "messages: Input should be a valid list")
    if not messages:
        raise _Bad("messages: at least one message is required")
    user_texts: list[str] = []
    image: bytes | None = None
    image_url: str | None = None
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise _Bad(f"messages.{i}: Input should be a valid dictionary")
        role = msg.get("role")
        if role == "system":
            raise _Bad(
                'messages: Unexpected role "system". The Messages API accepts a top-level `system` parameter, '
                "not \"system\" as an input message role."
            )
        if role not in ("user", "assistant"):
            raise _Bad(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = msg.get("content")
        texts: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for j, block in enumerate(content):
                where = f"messages.{i}.content.{j}"
                if not isinstance(block, dict):
                    raise _Bad(f"{where}: Input should be a valid dictionary")
                btype = block.get("type")
                if btype == "text":
                    if not isinstance(block.get("text"), str):
                        raise _Bad(f"{where}.text: Field required")
                    if not block["text"]:
                        raise _Bad(f"{where}: text content blocks must be non-empty")
                    texts.append(block["text"])
                elif btype == "image":
                    src = block.get("source")
                    if not isinstance(src, dict):
                        raise _Bad(f"{where}.image.source: Field required")
                    if src.get("type") == "base64":
                        if src.get("media_type") not in IMAGE_MIME:
                            raise _Bad(
                                f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
                                f"'image/gif' or 'image/webp'"
                            )
                        data = src.get("data")
                        if isinstance(data, str) and data.startswith("data:"):
                            raise _Bad(f"{where}.image.source.base64.data: must not include a data: URL prefix")
                        raw = decode_b64(data)
                        if raw is None:
                            raise _Bad(f"{where}.image.source.base64.data: invalid base64 data")
                        # the API's image limits (vision guide; providers39 #2: the fake took 10 MB and 8200 px)
                        if len(data) > MAX_IMAGE_B64:
                            raise _Bad(f"{where}.image.source.base64: image exceeds 5 MB maximum: {len(data)} bytes "
                                       f"> {MAX_IMAGE_B64} bytes")
                        side = _largest_side(raw)
                        if side is not None and side > MAX_SIDE_PX:
                            raise _Bad(f"{where}.image.source.base64.data: At least one of the image dimensions "
                                       f"exceed max allowed size: {MAX_SIDE_PX} pixels")
                        if image is None:
                            image = raw
                    elif src.get("type") == "url":
                        if not isinstance(src.get("url"), str):
                            raise _Bad(f"{where}.image.source.url.url: Field required")
                        image_url = image_url or src["url"]
                    else:
                        raise _Bad(f"{where}.image.source: Input tag {src.get('type')!r} does not match 'base64' or 'url'")
                else:
                    raise _Bad(f"{where}: Input tag {btype!r} found using 'type' does not match any of the expected tags")
        else:
            raise _Bad(f"messages.{i}.content: Input should be a valid string or list")
        if role == "user":
            user_texts.append("\n".join(texts))
    return "\n".join(user_texts), image, image_url


def _header_error(request: web.Request, *, log: bool = True) -> web.Response | None:
    """The 401 for a missing or unknown ``x-api-key`` or the 400 for a missing ``anthropic-version`` (logged as
    a call when ``log``), or None when the headers pass."""
    key = request.headers.get("x-api-key")
    if not key and auth_required(request.app):
        if log:
            log_call(request, API, 401, error="authentication_error")
        return _err(401, "authentication_error", "x-api-key header is required")
    if not key_ok(request.app, key):
        if log:
            log_call(request, API, 401, error="authentication_error")
        return _err(401, "authentication_error", "invalid x-api-key")
    if not request.headers.get("anthropic-version"):
        if log:
            log_call(request, API, 400, error="invalid_request_error")
        return _err(400, "invalid_request_error", "anthropic-version: header is required")
    return None


#: ``claude-<tier>-<major>[-<minor>]...`` (a minor has 1-2 digits; an 8-digit date is not one)
_CLAUDE_VERSION = re.compile(r"^claude-(?P<tier>[a-z]+)-(?P<major>\d+)(?:-(?P<minor>\d{1,2}))?(?:-|$)")


def claude_sampling_rule(model: str, body: dict[str, Any]) -> str | None:
    """The 400 message the API gives ``model`` for the sampling fields of ``body``, or None (the fake's own
    reading of the model migration guides and error reports). Also the OpenAI fake's, for a Claude id behind its
    OpenAI-compatible route (:func:`geoagent.sandbox.llm_openai._check_claude_sampling`, written as here)."""
    m = _CLAUDE_VERSION.match(model)
    if m is None:
        return None
    version = (int(m["major"]), int(m["minor"] or 0))
    if version >= (4, 7):
        for name in ("temperature", "top_p", "top_k"):
            if name in body:
                return f"`{name}` is deprecated for this model."
    elif (version >= (4, 5) or (m["tier"] == "opus" and version >= (4, 1))) and "temperature" in body and "top_p" in body:
        return "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
    return None


def _model_info(model_id: str) -> dict[str, Any]:
    """One ``ModelInfo`` object (``type``, ``id``, ``display_name``, ``created_at``); the display name is the id."""
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": MODEL_CREATED_AT}


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: Anthropic's "List Models" page.

    Source: Claude API docs, Models, "List Models" (https://docs.anthropic.com/en/api/models-list) and the
    ``ModelInfo`` object (https://platform.claude.com/docs/en/api/models). Answer: ``{"data": [ModelInfo],
    "has_more": bool, "first_id": str | null, "last_id": str | null}``; ``ModelInfo`` is ``{"type": "model",
    "id", "display_name", "created_at"}`` (RFC 3339). Lists the configured ids (``make_app(models=...)``,
    default :data:`DEFAULT_MODEL_IDS`) and then every other id this fake has answered, in first-use order.
    Query: ``limit`` (integer 1-1000, default 20; else 400 ``invalid_request_error``), ``after_id`` (the page
    after that id) and ``before_id`` (the page before it: the ``limit`` ids just before it); an id that is not
    listed gives an empty page (the docs do not say; the fake's choice). ``has_more`` tells whether more ids
    lie in the direction asked. Headers checked as for messages; not logged as a call.
    """
    denied = _header_error(request, log=False)
    if denied is not None:
        return denied
    raw = request.query.get("limit")
    limit = LIST_LIMIT_DEFAULT
    if raw is not None:
        try:
            limit = int(raw)
        except ValueError:
            limit = 0
        if not 1 <= limit <= LIST_LIMIT_MAX:
            return _err(400, "invalid_request_error",
                        f"limit: Input should be an integer between 1 and {LIST_LIMIT_MAX}, got {raw!r}")
    ids = list(request.app[MODEL_IDS_KEY])
    after, before = request.query.get("after_id"), request.query.get("before_id")
    if before is not None:
        end = ids.index(before) if before in ids else 0
        start = max(0, end - limit)
        page, more = ids[start:end], start > 0
    else:
        start = (ids.index(after) + 1 if after in ids else len(ids)) if after is not None else 0
        page, more = ids[start:start + limit], start + limit < len(ids)
    body = {"data": [_model_info(m) for m in page], "has_more": more,
            "first_id": page[0] if page else None, "last_id": page[-1] if page else None}
    return json_response(body, headers={"request-id": "req_" + short_id(time.time_ns())})


async def get_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{model_id}``: Anthropic's "Get a Model".

    Source: Claude API docs, Models, "Get a Model" (https://platform.claude.com/docs/en/api/models/retrieve,
    formerly https://docs.anthropic.com/en/api/models-get): path parameter ``model_id``; the answer is one
    ``ModelInfo`` ``{"type": "model", "id", "display_name", "created_at"}``, as in the listing. An id this fake
    does not list (:func:`list_models`: the configured ids and those it has answered) -> 404 ``not_found_error``
    (the real API's answer for an unknown model; the fake knows no aliases). Headers checked as for messages;
    not logged as a call.
    """
    denied = _header_error(request, log=False)
    if denied is not None:
        return denied
    model_id = request.match_info["model_id"]
    if model_id not in request.app[MODEL_IDS_KEY]:
        return _err(404, "not_found_error", f"model: {model_id}")
    return json_response(_model_info(model_id), headers={"request-id": "req_" + short_id(time.time_ns(), model_id)})


async def messages(request: web.Request) -> web.Response:
    """The ``/v1/messages`` handler."""
    denied = _header_error(request)
    if denied is not None:
        return denied
    body, problem = await read_json(request)
    if problem is not None or not isinstance(body, dict):
        log_call(request, API, 400, error="invalid_request_error")
        return _err(400, "invalid_request_error", "Request body is not valid JSON (expected an object)")
    request[LOG_EXTRA_KEY] = {"sampling": {k: body[k] for k in ("temperature", "top_p", "top_k") if k in body}}
    try:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _Bad("model: Field required")
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            raise _Bad("max_tokens: Field required")
        if not is_int_at_least(max_tokens, 1):
            raise _Bad("max_tokens: Input should be a valid integer greater than or equal to 1")
        temp = body.get("temperature")
        if temp is not None and not is_number_in(temp, 0, 1):
            raise _Bad("temperature: Input should be less than or equal to 1")
        rule = claude_sampling_rule(model, body)
        if rule:
            raise _Bad(rule)
        system = _texts_of_system(body.get("system"))
        prompt, image, image_url = _parse_messages(body.get("messages"))
    except _Bad as bad:
        log_call(request, API, 400, error="invalid_request_error", model=body.get("model"))
        return _err(400, "invalid_request_error", str(bad))

    if REFUSE_MARKER in prompt:  # the model declines before any text (billed: the prompt was read)
        n_in = math.ceil((len(system) + len(prompt)) / SIM_CHARS_PER_TOKEN)
        stop = sent_finish_reason(request, "refusal")
        log_call(request, API, 200, model=model, input_tokens=n_in, output_tokens=1, finish_reason=stop)
        rid = short_id(request.headers.get("X-Request-Key"), time.time_ns())
        return json_response({"id": f"msg_{rid}", "type": "message", "role": "assistant", "model": model,
                              "content": [], "stop_reason": stop, "stop_sequence": None,
                              "usage": {"input_tokens": n_in, "output_tokens": 1, "cache_creation_input_tokens": 0,
                                        "cache_read_input_tokens": 0}}, headers={"request-id": f"req_{rid}"})
    ans = answer_and_log(request, API, model=model, prompt=prompt, system=system, image=image, image_url=image_url,
                         max_output_tokens=max_tokens, finish_reasons=("end_turn", "max_tokens"))
    note_model(request.app[MODEL_IDS_KEY], model)
    payload = {
        "id": f"msg_{ans.response_id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": ans.text}],
        "stop_reason": ans.finish_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": ans.input_tokens, "output_tokens": ans.output_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }
    mode = request.app.get(USAGE_MODE_KEY, "report")
    if mode == "omit":  # a compatible server that reports no usage (billed all the same)
        del payload["usage"]
    elif mode == "null":  # a gateway that forwards "usage": null (billed all the same)
        payload["usage"] = None
    elif mode == "zero_output":  # a gateway that counts no output for an answer with text (impossible usage)
        payload["usage"]["output_tokens"] = 0
    return json_response(payload, headers={"request-id": f"req_{ans.response_id}"})


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
    """Build the fake Anthropic Messages app (parameters as :func:`geoagent.sandbox.llm_openai.make_app`;
    ``models``: the ids ``GET /v1/models`` lists first, default :data:`DEFAULT_MODEL_IDS`; ``GET
    /v1/models/{model_id}`` answers for the listed ids; ``usage``: ``"report"`` (default: every answer carries
    ``usage``), ``"omit"`` (no ``usage`` key), ``"null"`` (``"usage": null``) or ``"zero_output"`` (``output_tokens: 0``
    beside the answer's text: a count no call with text can have), one of :data:`USAGE_MODES`,
    else ``ValueError``; calls are logged as billed either way; ``finish_reason_suffix``: appended to every
    ``stop_reason`` it sends)."""
    if usage not in USAGE_MODES:
        raise ValueError(f"usage must be one of {USAGE_MODES}, got {usage!r}")
    app = build_app(
        [("POST", "/v1/messages", messages), ("GET", "/v1/models", list_models),
         ("GET", "/v1/models/{model_id}", get_model)],
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
    cli_main(make_app, "python -m geoagent.sandbox.llm_anthropic",
             describe=lambda base: f" (Anthropic Messages API; base_url {base})")
