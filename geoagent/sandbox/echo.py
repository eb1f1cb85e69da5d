"""A tiny generic local test server: echoes requests, answers chosen statuses, keeps a request log.

Used by the HTTP-layer tests and anywhere a plain loopback server is enough. It always carries the
fault middleware of :mod:`geoagent.sandbox.faults` (rate 0 unless ``faults`` is given), so the
server-side request log and the ``/_sandbox/*`` admin endpoints are always there.

Routes (any method unless noted)
--------------------------------
``/echo``
    ``200`` JSON ``{"method", "path", "query": {...}, "headers": {...}, "body": <text>, "n": <index>}``
    where ``n`` counts requests to this route. The ``Authorization``, ``X-Api-Key``, ``X-Goog-Api-Key``
    and ``Api-Key`` headers are reported as ``"<redacted>"`` so a test can see they were sent but the
    echo itself never carries a secret.
``/status/{code}``
    Answers ``code`` with JSON ``{"error": {"message": ..., "code": code}}``; query ``retry_after``
    (seconds or an HTTP-date) adds a ``Retry-After`` header; ``body`` replaces the message text.
``/slow``
    Sleeps ``delay_s`` (query, seconds) then answers like ``/echo``.
``/script``
    Plays a per-server script of statuses in order, one per request (``make_app(script=[503, 200])``);
    ``200`` entries answer like ``/echo``, ``"reset"`` aborts the connection after reading the body,
    ``"malformed"`` sends a truncated JSON body, ``"stall"`` waits ``stall_s`` (default 2 s) and then
    answers like ``/echo``, ``"429:<s>"`` answers 429 with ``Retry-After: <s>``; after the script ends
    every request gets ``200``.
``/bytes/{n}``
    ``200`` with ``n`` bytes of ``x`` and a Content-Length; with query ``chunked=1`` the same bytes
    streamed in chunked encoding (no Content-Length), for response-size limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiohttp import web

from geoagent.sandbox.faults import FAULTS_KEY, FaultConfig, _stall, _truncate_json, fault_middleware

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key"})
SCRIPT_KEY: web.AppKey[list[int | str]] = web.AppKey("echo_script", list)
COUNTER_KEY: web.AppKey[dict[str, int]] = web.AppKey("echo_counter", dict)
STALL_KEY: web.AppKey[float] = web.AppKey("echo_stall_s", float)


async def _echo_body(request: web.Request) -> dict[str, object]:
    counter = request.app[COUNTER_KEY]
    counter["echo"] = counter.get("echo", 0) + 1
    headers = {k: ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in request.headers.items()}
    return {
        "method": request.method,
        "path": request.path,
        "query": dict(request.query),
        "headers": headers,
        "body": (await request.read()).decode("utf-8", errors="replace"),
        "n": counter["echo"] - 1,
    }


async def _echo(request: web.Request) -> web.Response:
    return web.json_response(await _echo_body(request))


async def _status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    msg = request.query.get("body", f"status {code} as requested")
    resp = web.json_response({"error": {"message": msg, "code": code}}, status=code)
    if "retry_after" in request.query:
        resp.headers["Retry-After"] = request.query["retry_after"]
    return resp


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("delay_s", "1")))
    return await _echo(request)


async def _bytes(request: web.Request) -> web.StreamResponse:
    """``n`` bytes of ``x``; ``?chunked=1`` streams them without a Content-Length (64 KiB chunks)."""
    n = int(request.match_info["n"])
    if request.query.get("chunked") != "1":
        return web.Response(body=b"x" * n, content_type="application/octet-stream")
    resp = web.StreamResponse()
    resp.content_type = "application/octet-stream"
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    sent = 0
    try:
        while sent < n:
            k = min(1 << 16, n - sent)
            await resp.write(b"x" * k)
            sent += k
        await resp.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass  # the client stopped reading (body over its limit)
    return resp


async def _script(request: web.Request) -> web.StreamResponse:
    script = request.app[SCRIPT_KEY]
    step = script.pop(0) if script else 200
    if step == "reset":
        await request.read()
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError()
    if step == "stall":
        await request.read()
        if not await _stall(request, request.app[STALL_KEY]):
            raise asyncio.CancelledError()  # client gave up: nothing to send
        return await _echo(request)
    if isinstance(step, str) and step.startswith("429:"):
        resp = web.json_response({"error": {"message": "scripted 429", "code": 429}}, status=429)
        resp.headers["Retry-After"] = step.split(":", 1)[1]
        return resp
    if step == "malformed":
        await request.read()
        body = web.json_response(await _echo_body(request)).body
        assert isinstance(body, bytes)
        return web.Response(status=200, body=_truncate_json(body), content_type="application/json")
    code = int(step)
    if code == 200:
        return await _echo(request)
    resp = web.json_response({"error": {"message": f"scripted {code}", "code": code}}, status=code)
    if code == 429:
        resp.headers["Retry-After"] = "1"
    return resp


def make_app(faults: FaultConfig | None = None, script: Sequence[int | str] = (), stall_s: float = 2.0) -> web.Application:
    """Build the echo app.

    Parameters
    ----------
    faults : FaultConfig, optional
        Fault injection config (default: none, request log only). Its state is at ``app[FAULTS_KEY]``.
    script : sequence of int or str
        Statuses (or ``"reset"``, ``"malformed"``, ``"stall"``, ``"429:<s>"``) that ``/script`` plays in order.
    stall_s : float
        Delay of a ``"stall"`` step, in seconds.
    """
    mw = fault_middleware(faults)
    app = web.Application(middlewares=[mw])
    app[FAULTS_KEY] = mw.fault_state
    app[SCRIPT_KEY] = list(script)
    app[COUNTER_KEY] = {}
    app[STALL_KEY] = float(stall_s)
    app.router.add_route("*", "/echo", _echo)
    app.router.add_route("*", "/status/{code:\\d{3}}", _status)
    app.router.add_route("*", "/slow", _slow)
    app.router.add_route("*", "/script", _script)
    app.router.add_route("*", "/bytes/{n:\\d+}", _bytes)
    return app
