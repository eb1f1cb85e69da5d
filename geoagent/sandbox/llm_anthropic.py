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
  ``temperature`` in [0, 1]. A violation -> 400 ``invalid_request_error``.
* Errors: ``{"type": "error", "error": {"type", "message"}, "request_id": "req_..."}`` and a
  ``request-id`` header on every answer.
* Success: ``{"id": "msg_...", "type": "message", "role": "assistant", "model", "content": [{"type": "text",
  "text"}], "stop_reason": "end_turn"|"max_tokens", "stop_sequence": null, "usage": {"input_tokens",
  "output_tokens", "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}``.
* Injected faults (``faults=``) answer in this error shape: 429 ``rate_limit_error``, 500 ``api_error``,
  and a 503 fault is sent as 529 ``overloaded_error`` (Anthropic's overload status); ``Retry-After`` kept.

Run standalone with ``python -m geoagent.sandbox.llm_anthropic --port 8002 --log calls.jsonl``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from typing import Any

from aiohttp import web

from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.llm_common import (
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
    read_json,
    short_id,
)

API = "anthropic"
IMAGE_MIME = ("image/jpeg", "image/png", "image/gif", "image/webp")


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


async def messages(request: web.Request) -> web.Response:
    """The ``/v1/messages`` handler."""
    key = request.headers.get("x-api-key")
    if not key and auth_required(request.app):
        log_call(request, API, 401, error="authentication_error")
        return _err(401, "authentication_error", "x-api-key header is required")
    if not key_ok(request.app, key):
        log_call(request, API, 401, error="authentication_error")
        return _err(401, "authentication_error", "invalid x-api-key")
    if not request.headers.get("anthropic-version"):
        log_call(request, API, 400, error="invalid_request_error")
        return _err(400, "invalid_request_error", "anthropic-version: header is required")
    body, problem = await read_json(request)
    if problem is not None or not isinstance(body, dict):
        log_call(request, API, 400, error="invalid_request_error")
        return _err(400, "invalid_request_error", "Request body is not valid JSON (expected an object)")
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
        system = _texts_of_system(body.get("system"))
        prompt, image, image_url = _parse_messages(body.get("messages"))
    except _Bad as bad:
        log_call(request, API, 400, error="invalid_request_error", model=body.get("model"))
        return _err(400, "invalid_request_error", str(bad))

    ans = answer_and_log(request, API, model=model, prompt=prompt, system=system, image=image, image_url=image_url,
                         max_output_tokens=max_tokens, finish_reasons=("end_turn", "max_tokens"))
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
    return json_response(payload, headers={"request-id": f"req_{ans.response_id}"})


def make_app(
    faults: FaultConfig | dict[str, Any] | None = None,
    seed: int = 0,
    token_log: str | os.PathLike[str] | None = None,
    api_keys: Collection[str] | None = None,
    require_auth: bool = True,
    calls_max: int | None = None,
) -> web.Application:
    """Build the fake Anthropic Messages app (parameters as :func:`geoagent.sandbox.llm_openai.make_app`)."""
    return build_app(
        [("POST", "/v1/messages", messages)],
        api=API,
        faults=faults,
        seed=seed,
        token_log=token_log,
        api_keys=api_keys,
        require_auth=require_auth,
        calls_max=calls_max,
    )


if __name__ == "__main__":  # pragma: no cover - exercised by the separate-process test
    cli_main(make_app, "python -m geoagent.sandbox.llm_anthropic",
             describe=lambda base: f" (Anthropic Messages API; base_url {base})")
