"""Shared parts of the local fake LLM API servers (:mod:`llm_openai`, :mod:`llm_anthropic`, :mod:`llm_gemini`).

* :class:`CallLog` - the server-side log of every model call: ``app[CALLS_KEY]`` (also reachable as
  ``app["calls"]``) is a list of dicts, one per request to a model endpoint (a ``POST`` route of the
  fake), including those answered with an injected fault (:func:`call_log_middleware`), and each entry is
  optionally appended as one JSON line to a file (``token_log``, the ``--log`` option) so that a test can
  read the log of a server running in another process (also after that process was killed: every line is
  written with one ``write`` on an ``O_APPEND`` descriptor). Requests that are not model calls (the models
  listings, the ``/_sandbox/`` admin endpoints) are not in it.
* Key checking, base64 and number checks, the image id a fake derives, the simulated answer of a valid
  request (:func:`answer_and_log`), and the ``python -m`` entry point.

Log entry fields: ``api`` (openai/anthropic/gemini), ``key`` (the ``X-Request-Key`` header or None),
``t_wall`` / ``t_mono`` (s), ``status`` (HTTP status the handler answered; None when the handler never
ran), ``model``, ``input_tokens`` / ``output_tokens`` (usage put in the response; 0 for errors),
``image_id``, ``image_sha256`` (SHA-256 hex of the image bytes the server decoded from the documented
field), ``finish_reason``, ``error`` (error type for 4xx answers), ``fault`` (the fault injected into this
request, one of :data:`~geoagent.sandbox.faults.FAULT_KINDS`, or None) and ``status_sent`` (the status the
client was sent: the handler's, an injected 429/500/503 in the API's own shape (Anthropic sends a 503 fault
as 529), the 200 of a ``malformed`` cut body; None when nothing was sent: a ``reset``, or a ``timeout``
stall the client gave up on). A ``status`` of 200 means the handler processed the request and "billed"
it, even if a fault (``reset``) then kept the answer from the client; an injected 429/500/503 (and a
``timeout`` stall the client abandoned) never reaches the handler: ``status`` None, model and usage
unknown, ``t_wall`` / ``t_mono`` the arrival time.
"""

from __future__ import annotations

import argparse
from collections import deque
import base64
import binascii
import hashlib
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from geoagent import constants as C
from geoagent.sandbox.faults import FAULT_RECORD_KEY, FAULTS_KEY, QUOTA_FAULT_MESSAGE, FaultConfig, fault_middleware
from geoagent.sandbox.responders import SIM_IMAGE_TOKENS, simulate_answer
from geoagent.sandbox.server import client_disconnect_middleware, run_forever

REQUEST_KEY_HEADER = "X-Request-Key"
IMAGE_ID_HEADER = "X-Image-Id"


class CallLog:
    """Append-only list of call records, mirrored to a JSONL file when ``path`` is given.

    Parameters
    ----------
    path : path-like, optional
        JSONL file to append every record to (created if missing; never truncated).
    max_records : int, optional
        Keep only the newest ``max_records`` in memory (a ``deque``); default: all (a ``list``).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, max_records: int | None = None) -> None:
        self.records: Any = [] if max_records is None else deque(maxlen=max_records)
        self.path = Path(path) if path is not None else None
        self._fd: int | None = None
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        """Add one record (and write it as one line to the file, if any)."""
        with self._lock:
            self.records.append(record)
            if self._fd is not None:
                os.write(self._fd, orjson.dumps(record) + b"\n")

    def close(self) -> None:
        """Close the file descriptor (records stay in memory)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    @staticmethod
    def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
        """Read a JSONL call log written by (possibly another process's) :class:`CallLog`.

        A torn last line (the writer was killed mid-write) is ignored.
        """
        out = []
        p = Path(path)
        if not p.exists():
            return out
        for line in p.read_bytes().splitlines():
            if line.strip():
                try:
                    out.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    continue
        return out


CALLS_KEY: web.AppKey[Any] = web.AppKey("llm_calls", object)
CALL_LOG_KEY: web.AppKey[CallLog] = web.AppKey("llm_call_log", CallLog)
SEED_KEY: web.AppKey[int] = web.AppKey("llm_seed", int)
API_KEYS_KEY: web.AppKey[Any] = web.AppKey("llm_api_keys", object)
REQUIRE_AUTH_KEY: web.AppKey[bool] = web.AppKey("llm_require_auth", bool)
#: the handler's call records of the request being served, held by :func:`call_log_middleware`
PENDING_CALLS_KEY: Any = web.RequestKey("llm_pending_calls", list) if hasattr(web, "RequestKey") \
    else "geoagent_llm_pending_calls"
IMAGE_BILLING_KEY: web.AppKey[str] = web.AppKey("llm_image_billing", str)
#: text a fake appends to every finish reason it sends (``make_app(finish_reason_suffix=...)``; default ""): a server
#: whose reason carries control or bidirectional formatting characters (``"MAX_TOKENS\u2066"``; fixreason43 #2)
FINISH_SUFFIX_KEY: web.AppKey[str] = web.AppKey("llm_finish_reason_suffix", str)
#: image billing of the fakes: ``"simulated"`` (default) bills every image 765 input tokens, as the
#: ``simulated`` provider does; ``"documented"`` bills an image the tokens its API's documented rule charges
#: for the image's size, read from its header (:func:`geoagent.config.expected_image_tokens`: OpenAI
#: gpt-4o / gpt-4o-mini 512-px tiles at high detail, Anthropic w x h / 750, Gemini 258 per 768-px tile),
#: 765 where no rule is known for the model or the header cannot be read
IMAGE_BILLING = ("simulated", "documented")


def _retry_delay(retry_after: str | None) -> str | None:
    """A ``Retry-After`` value (delta-seconds or HTTP-date) as a protobuf Duration's JSON (``"1.5s"``), or None."""
    from geoagent.runtime.http import parse_retry_after

    seconds = parse_retry_after(retry_after)
    if seconds is None:
        return None
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


#: the message of the Gemini fake's injected ``quota`` fault (Google's wording for a used-up free-tier daily token quota)
GEMINI_DAILY_QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more information on this "
    "error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: "
    "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 250000, model: "
    "gemini-2.5-flash\nPlease retry in 37.0s.")


def _shaped_error(api: str, status: int, message: str, retry_after: str | None) -> tuple[int, dict[str, Any]]:
    """(status, body) of a throttle/server error in ``api``'s documented error shape; an injected ``quota`` fault
    (:data:`~geoagent.sandbox.faults.QUOTA_FAULT_MESSAGE`) in the API's used-up-quota shape."""
    quota = status == 429 and message == QUOTA_FAULT_MESSAGE
    if api == "anthropic":
        if status == 503:
            status = 529  # Anthropic signals API-wide overload with 529 overloaded_error
        etype = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
        error: dict[str, Any] = {"type": etype, "message": message}
        if quota:  # api-notes section 8: a 429 with error.details.error_code when the monthly spend limit is hit
            error = {"type": "rate_limit_error", "message": message,
                     "details": {"error_code": "enforced_spend_limit_reached"}}
        return status, {"type": "error", "error": error, "request_id": "req_" + short_id(time.time_ns())}
    if api == "gemini":
        gstatus = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}.get(status, "UNKNOWN")
        err: dict[str, Any] = {"code": status, "message": message, "status": gstatus}
        details: list[dict[str, Any]] = []
        if status == 429 and quota:
            # the injected "quota" fault: the free tier's daily INPUT TOKEN quota used up, as Google words it (a
            # non-zero quotaValue, and a RetryInfo wait that does not clear it: it clears at the daily reset;
            # reported bodies: google-gemini/gemini-cli#13112, #6985; prov46 #3, whose id no marker named)
            err["message"] = GEMINI_DAILY_QUOTA_MESSAGE
            details.append({
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
                    "quotaId": "GenerateContentInputTokensPerModelPerDay-FreeTier",
                    "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                    "quotaValue": "250000",
                }],
            })
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"})
        elif status == 429:  # a rate limit names a per-minute quota
            details.append({
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel",
                    }
                ],
            })
        delay = _retry_delay(retry_after)
        if delay is not None and not quota:
            # the wait, in the body only (google.rpc.RetryInfo, a protobuf Duration): no Retry-After header
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay})
        if details:
            err["details"] = details
        return status, {"error": err}
    # openai (and compatible servers)
    if quota:  # api-notes section 7: the second 429 flavour, type and code insufficient_quota
        return status, {"error": {"message": message, "type": "insufficient_quota", "param": None,
                                  "code": "insufficient_quota"}}
    etype, code = {429: ("requests", "rate_limit_exceeded")}.get(status, ("server_error", None))
    return status, {"error": {"message": message, "type": etype, "param": None, "code": code}}


def _azure_throttle(request: web.Request, retry_after: str | None) -> web.Response:
    """Azure OpenAI's 429 on its classic route: ``{"error": {"code": "429", "message": "Requests to the
    ChatCompletions_Create Operation under Azure OpenAI API version <v> have exceeded token rate limit ..."}}``
    (as quoted in alex-wolf-ps/dbchatprov2#2) with lower-case ``retry-after`` (whole seconds, rounded up) and
    ``retry-after-ms`` headers (the milliseconds Azure's SDKs read first: @azure/core-rest-pipeline's
    throttlingRetryStrategy) when the injected fault asked for a pause."""
    seconds = None
    if retry_after is not None:
        try:
            seconds = max(0.0, float(retry_after))
        except ValueError:
            seconds = None
    wait = f"{math.ceil(seconds)}" if seconds is not None else "1"
    version = request.query.get("api-version", "")
    body = {"error": {"code": "429", "message": (
        f"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version {version} have exceeded "
        f"token rate limit of your current OpenAI S0 pricing tier. Please retry after {wait} seconds. Please go here: "
        "https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.")}}
    out = web.json_response(body, status=429)
    if seconds is not None:
        out.headers["retry-after"] = wait
        out.headers["retry-after-ms"] = str(int(round(seconds * 1000)))
    return out


def api_error_middleware(api: str) -> Any:
    """Outermost middleware: rewrite the fault middleware's generic 429/500/503 bodies into ``api``'s
    documented error shape (OpenAI ``{"error": {message, type, param, code}}``; Anthropic
    ``{"type": "error", "error": {type, message}, "request_id"}`` with 503 sent as 529
    ``overloaded_error``; Gemini ``{"error": {code, message, status, details}}`` with a ``QuotaFailure``
    and, when a ``Retry-After`` was set, a ``RetryInfo`` detail instead of the header, as the real API sends it).
    Other APIs keep the ``Retry-After`` header.
    """

    @web.middleware
    async def _shape(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        resp = await handler(request)
        if request.path.startswith("/_sandbox/") or resp.status not in (429, 500, 503):
            return resp
        if not isinstance(resp, web.Response) or not isinstance(resp.body, bytes):
            return resp
        try:
            generic = orjson.loads(resp.body)
            message = str(generic["error"]["message"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return resp  # not the fault middleware's body: leave it
        retry_after = resp.headers.get("Retry-After")
        if api == "openai" and resp.status == 429 and request.path.startswith("/openai/deployments/"):
            return _azure_throttle(request, retry_after)
        status, body = _shaped_error(api, resp.status, message, retry_after)
        out = web.json_response(body, status=status)
        # Gemini names the wait only in the body (a RetryInfo detail), never in a Retry-After header (dcdpr/jp#1061:
        # "Gemini answers a 429 without a Retry-After header"; break34 provider #7)
        if api != "gemini" and "Retry-After" in resp.headers:
            out.headers["Retry-After"] = resp.headers["Retry-After"]
        return out

    return _shape


def call_log_middleware(api: str) -> Any:
    """Middleware (outside :func:`api_error_middleware`): puts every model call into the app's call log,
    with the fault injected and the status sent.

    The handlers' records (:func:`log_call`) are held until the answer is known, then get ``fault`` and
    ``status_sent`` and go into the :class:`CallLog` (memory and file) before the answer is written. A
    request to a model endpoint (a ``POST`` route) that an injected fault kept from the handler (429, 500,
    503, an abandoned ``timeout`` stall) gets a record of its own (``status`` None). Admin
    (``/_sandbox/``) and ``GET`` requests without a handler record are not logged.
    """

    @web.middleware
    async def _calls(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if request.path.startswith("/_sandbox/"):
            return await handler(request)
        pending: list[dict[str, Any]] = []
        request[PENDING_CALLS_KEY] = pending
        sent: int | None = None
        try:
            resp = await handler(request)
            sent = resp.status
            return resp
        except web.HTTPException as exc:
            sent = exc.status
            raise
        finally:
            frec = request.get(FAULT_RECORD_KEY)
            fault = frec.fault if frec is not None else None
            if not pending and fault is not None and request.method == "POST" \
                    and request.match_info.http_exception is None:
                pending.append(_record(request, api, None, t_wall=frec.t_wall, t_mono=frec.t_mono))
            log = request.app[CALL_LOG_KEY]
            for rec in pending:
                rec["fault"] = fault
                rec["status_sent"] = sent
                log.append(rec)

    return _calls


def build_app(
    routes: Sequence[tuple[str, str, Callable[[web.Request], Any]]],
    *,
    api: str = "openai",
    faults: FaultConfig | dict[str, Any] | None,
    seed: int,
    token_log: str | os.PathLike[str] | None,
    api_keys: Collection[str] | None,
    require_auth: bool = True,
    calls_max: int | None = None,
    image_billing: str = "simulated",
    finish_reason_suffix: str = "",
) -> web.Application:
    """Assemble a fake LLM app: fault middleware (rate 0 unless ``faults``) wrapped by
    :func:`api_error_middleware` for ``api`` and :func:`call_log_middleware`, call log, seed, keys.

    ``require_auth=False`` accepts requests without a key (like a local vLLM/Ollama server; a key that is
    sent must still be valid when ``api_keys`` is given). ``calls_max`` bounds the in-memory call list
    (newest kept; the JSONL file always gets every record) for long benchmarks. ``image_billing``: how an
    image is billed (:data:`IMAGE_BILLING`; ``ValueError`` for another value). ``finish_reason_suffix``: text
    appended to every finish reason the fake sends, and logs (:func:`sent_finish_reason`; default none).
    """
    if image_billing not in IMAGE_BILLING:
        raise ValueError(f"image_billing must be one of {IMAGE_BILLING}, got {image_billing!r}")
    cfg = FaultConfig(**faults) if isinstance(faults, dict) else faults
    mw = fault_middleware(cfg)
    app = web.Application(middlewares=[client_disconnect_middleware(), call_log_middleware(api),
                                       api_error_middleware(api), mw],
                          client_max_size=64 * 1024**2)
    app[FAULTS_KEY] = mw.fault_state
    log = CallLog(token_log, max_records=calls_max)
    app[CALL_LOG_KEY] = log
    app[CALLS_KEY] = log.records
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app["calls"] = log.records  # the plain-string alias the brief names; same list object
    app[SEED_KEY] = int(seed)
    app[API_KEYS_KEY] = None if api_keys is None else frozenset(api_keys)
    app[REQUIRE_AUTH_KEY] = bool(require_auth)
    app[IMAGE_BILLING_KEY] = image_billing
    app[FINISH_SUFFIX_KEY] = str(finish_reason_suffix)

    async def _close(app_: web.Application) -> None:
        log.close()

    app.on_cleanup.append(_close)
    app.on_response_prepare.append(_mark_sandbox)
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    return app


async def _mark_sandbox(request: web.Request, response: web.StreamResponse) -> None:
    """Mark every response of a fake (answers, errors, injected faults) with
    :data:`geoagent.constants.SANDBOX_ANSWER_HEADER` ``: 1``: no real API sends it, so geoagent records the
    answers as simulated wherever the fake is served (its ``*.sandbox.invalid`` name, or a port one started)."""
    response.headers[C.SANDBOX_ANSWER_HEADER] = "1"


def unmarked(app: web.Application) -> web.Application:
    """``app`` with the sandbox mark (:data:`geoagent.constants.SANDBOX_ANSWER_HEADER`) taken off its responses
    again: to geoagent its answers then look like a model server's (tests standing in for a real API). Returns
    ``app``."""

    async def _unmark(request: web.Request, response: web.StreamResponse) -> None:
        response.headers.popall(C.SANDBOX_ANSWER_HEADER, None)

    app.on_response_prepare.append(_unmark)
    return app


def auth_required(app: web.Application) -> bool:
    """Whether requests without a key are refused (401/403)."""
    return app[REQUIRE_AUTH_KEY]


def key_ok(app: web.Application, key: str | None) -> bool:
    """Whether ``key`` is accepted: any non-empty key when the app has no key list, else membership;
    no key at all is accepted only when the app does not require auth."""
    if not key:
        return not app[REQUIRE_AUTH_KEY]
    allowed = app[API_KEYS_KEY]
    return allowed is None or key in allowed


def _record(request: web.Request, api: str, status: int | None, *, t_wall: float | None = None,
            t_mono: float | None = None) -> dict[str, Any]:
    return {
        "api": api,
        "key": request.headers.get(REQUEST_KEY_HEADER),
        "t_wall": time.time() if t_wall is None else t_wall,
        "t_mono": time.monotonic() if t_mono is None else t_mono,
        "status": status,
        "model": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "image_id": None,
        "image_sha256": None,
        "finish_reason": None,
        "error": None,
        "fault": None,
        "status_sent": status,
    }


#: request-scoped fields a handler sets once it has read the body (e.g. ``{"sampling": {"temperature": 0.0}}``:
#: the sampling fields the request carried); every record :func:`log_call` makes for the request gets them
LOG_EXTRA_KEY: web.RequestKey[dict[str, Any]] = web.RequestKey("llm_log_extra", dict)


def sent_finish_reason(request: web.Request, reason: str) -> str:
    """The finish reason a fake sends for ``reason`` (its API's own word, ``stop``, ``MAX_TOKENS``, ...): ``reason``
    followed by the app's ``finish_reason_suffix`` (:data:`FINISH_SUFFIX_KEY`; "" by default, so ``reason`` itself).
    Every place a fake writes a finish reason into an answer goes through it, and logs what it sent."""
    return reason + request.app.get(FINISH_SUFFIX_KEY, "")


def log_call(request: web.Request, api: str, status: int, **fields: Any) -> dict[str, Any]:
    """Record one call the handler answered with ``status`` and return the record. Under
    :func:`call_log_middleware` (every app of :func:`build_app`) it enters the app's call log once the answer
    is known, with ``fault`` and ``status_sent``; otherwise at once. Fields the handler put under
    :data:`LOG_EXTRA_KEY` of the request are added (``fields`` win)."""
    rec = _record(request, api, status)
    rec.update(request.get(LOG_EXTRA_KEY) or {})
    rec.update(fields)
    pending = request.get(PENDING_CALLS_KEY)
    if pending is not None:
        pending.append(rec)
    else:
        request.app[CALL_LOG_KEY].append(rec)
    return rec


def decode_b64(data: Any) -> bytes | None:
    """Strict standard (or URL-safe) base64 decode; None when ``data`` is not valid base64 text."""
    if not isinstance(data, str) or not data:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        try:
            return base64.urlsafe_b64decode(data) if all(c.isalnum() or c in "-_=" for c in data) else None
        except (binascii.Error, ValueError):
            return None


def image_id_for(request: web.Request, image: bytes | None, fallback: str | None = None) -> str | None:
    """The image id a fake answers with: ``X-Image-Id`` header, else ``sha256:<16 hex>`` of the bytes."""
    header = request.headers.get(IMAGE_ID_HEADER)
    if header:
        return header
    if image is not None:
        return "sha256:" + hashlib.sha256(image).hexdigest()[:16]
    return fallback


@dataclass(frozen=True, slots=True)
class SimulatedAnswer:
    """The simulated model answer to one valid request, as a fake puts it into its API's response.

    Attributes
    ----------
    text : str
        Answer text (cut to the request's output-token cap).
    input_tokens, output_tokens : int
        Usage to report (tokens).
    finish_reason : str
        The API's own word for "done" or "cut off at the cap".
    response_id : str
        24-hex id for the response (from the request key and the time).
    """

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str
    response_id: str


def answer_and_log(
    request: web.Request,
    api: str,
    *,
    model: str,
    prompt: str,
    system: str,
    image: bytes | None,
    image_url: str | None = None,
    max_output_tokens: int,
    finish_reasons: tuple[str, str],
    image_detail: str | None = None,
    hidden_output_tokens: int = 0,
) -> SimulatedAnswer:
    """Answer a validated request through the responders registry and log the billed call (status 200).

    Parameters
    ----------
    request : aiohttp.web.Request
        The request (its ``X-Request-Key`` / ``X-Image-Id`` headers and the app's seed are used).
    api : str
        ``openai``, ``anthropic`` or ``gemini`` (for the call log).
    model, prompt, system : str
        Model id, user text and system text as the fake read them from the body.
    image : bytes or None
        The first image decoded from the body; ``image_url`` the first image URL when no bytes were sent.
    max_output_tokens : int
        The request's output cap (tokens).
    finish_reasons : (str, str)
        The API's finish reason for a complete answer and for one cut off at the cap (sent and logged with the
        app's ``finish_reason_suffix``: :func:`sent_finish_reason`).
    image_detail : str, optional
        OpenAI's ``image_url.detail`` of the image (``low`` bills the base tokens under documented billing).
    hidden_output_tokens : int
        Reasoning / thinking tokens the model spent before its answer (the caller has taken them off
        ``max_output_tokens`` already): billed as output, so the returned ``output_tokens`` and the call log
        count them (providers39 #4: the fakes billed them only when they used up the whole cap).

    Returns
    -------
    SimulatedAnswer
        Same text and usage as the ``simulated`` provider gives for the same request key and seed
        (:func:`geoagent.sandbox.responders.simulate_answer`); under ``image_billing="documented"`` the
        image's 765 input tokens are replaced by :func:`documented_image_tokens`.
    """
    image_id = image_id_for(request, image, image_url)
    key = request.headers.get(REQUEST_KEY_HEADER)
    text, n_in, n_out, truncated = simulate_answer(
        prompt,
        image_id,
        model,
        request.app[SEED_KEY],
        max_output_tokens,
        has_image=image is not None or image_url is not None,
        system=system,
        key=key,
    )
    if image is not None and request.app.get(IMAGE_BILLING_KEY) == "documented":
        n_in += documented_image_tokens(api, model, image, detail=image_detail) - SIM_IMAGE_TOKENS
    finish = sent_finish_reason(request, finish_reasons[1] if truncated else finish_reasons[0])
    n_out += max(0, int(hidden_output_tokens))
    log_call(request, api, 200, model=model, input_tokens=n_in, output_tokens=n_out, image_id=image_id,
             image_sha256=sha256_hex(image), finish_reason=finish)
    return SimulatedAnswer(text, n_in, n_out, finish, short_id(key, time.time_ns()))


def billed_image_tokens(request: web.Request, api: str, model: str, image: bytes | None, *,
                        detail: str | None = None) -> int:
    """Input tokens the fake bills for the decoded ``image`` of a request (0 without one): under
    ``image_billing="documented"`` :func:`documented_image_tokens`, else the simulated
    :data:`~geoagent.sandbox.responders.SIM_IMAGE_TOKENS`. For the fakes' billed non-answers (refusals,
    filtered or blocked prompts), which are billed their input like any answer."""
    if image is None:
        return 0
    if request.app.get(IMAGE_BILLING_KEY) == "documented":
        return documented_image_tokens(api, model, image, detail=detail)
    return SIM_IMAGE_TOKENS


def documented_image_tokens(api: str, model: str, image: bytes, *, detail: str | None = None) -> int:
    """Input tokens ``api`` (openai, anthropic, gemini) bills for ``image`` on ``model`` by its documented
    rule for the image's size (read from the header; :func:`geoagent.config.expected_image_tokens`; for
    OpenAI ``detail = "low"`` bills the base tokens, ``auto``/``high`` the high-detail tiles, the worst
    case), else :data:`~geoagent.sandbox.responders.SIM_IMAGE_TOKENS` (765)."""
    from geoagent.config import expected_image_tokens, image_size_px

    size = image_size_px(None, None, image)
    billed = expected_image_tokens(api, model, size, {"detail": detail} if detail else None) if size else None
    return SIM_IMAGE_TOKENS if billed is None else billed[0]


def is_int_at_least(value: Any, lo: int) -> bool:
    """``value`` is a JSON integer (not a boolean) >= ``lo``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= lo


def is_number_in(value: Any, lo: float, hi: float) -> bool:
    """``value`` is a JSON number (not a boolean) in ``[lo, hi]``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= value <= hi


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """``aiohttp.web.json_response`` serialised with orjson (faster on the benchmark's hot path)."""
    return web.Response(body=orjson.dumps(payload), status=status, headers=headers, content_type="application/json")


def sha256_hex(data: bytes | None) -> str | None:
    """SHA-256 hex digest of ``data`` (None stays None)."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def short_id(*parts: Any) -> str:
    """Deterministic 24-hex id from the parts (for response ids)."""
    return hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()[:24]


async def read_json(request: web.Request) -> tuple[Any, str | None]:
    """``(body, None)`` or ``(None, error message)`` when the body is not JSON."""
    raw = await request.read()
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        return None, str(exc)


def add_latency(app: web.Application, latency_s: float) -> web.Application:
    """Make every request of a not-yet-started fake take ``latency_s`` seconds more (simulated model time).

    Real models answer in seconds; a zero-latency fake measures only our own overhead. The wait is an
    ``asyncio.sleep`` (no CPU), added as the outermost middleware. Returns ``app``.
    """
    import asyncio

    @web.middleware
    async def _latency(request: web.Request, handler: Callable[[web.Request], Any]) -> Any:
        if not request.path.startswith("/_sandbox/"):
            await asyncio.sleep(latency_s)
        return await handler(request)

    app.middlewares.insert(0, _latency)
    return app


def cli_main(factory: Callable[..., web.Application], prog: str, argv: Sequence[str] | None = None, *,
             describe: Callable[[str], str] | None = None) -> None:
    """``python -m geoagent.sandbox.llm_<api> [--port N] [--log calls.jsonl] [--seed S] [--api-key K ...]
    [--fault-rate R --fault-kinds 429,500,... --fault-retry-after-s S]``: serve the fake on 127.0.0.1 until
    SIGINT/SIGTERM. Prints one line to stderr once listening: ``listening on http://127.0.0.1:PORT`` plus
    ``describe(base_url)`` (what the API is and the base_url to put in a campaign file). A client that drops
    its connection is one INFO log line (:func:`geoagent.sandbox.server.client_disconnect_middleware`)."""
    import logging

    ap = argparse.ArgumentParser(prog=prog, description="Local fake LLM API server (loopback only).")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (loopback only by default)")
    ap.add_argument("--port", type=int, default=0, help="TCP port (default 0: any free port, printed at start)")
    ap.add_argument("--log", default=None, help="JSONL file to append every call record to")
    ap.add_argument("--seed", type=int, default=0, help="simulation seed of the answers")
    ap.add_argument("--api-key", action="append", default=None, help="accepted key (repeat; default: any)")
    ap.add_argument("--no-auth", action="store_true", help="accept requests without a key (like vLLM/Ollama)")
    ap.add_argument("--calls-max", type=int, default=10_000, help="call records kept in memory (file gets all)")
    ap.add_argument("--fault-rate", type=float, default=0.0, help="fraction of requests that get a fault")
    ap.add_argument("--fault-kinds", default=None, help="comma-separated subset of 429,500,503,timeout,reset,malformed (default: all six), and quota")
    ap.add_argument("--fault-seed", type=int, default=0)
    ap.add_argument("--fault-retry-after-s", type=float, default=1.0, help="the wait injected 429s ask for (s): a Retry-After header (Gemini: a RetryInfo retryDelay in the body)")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="simulated model time per request in ms (default 0: pure overhead)")
    ap.add_argument("--image-billing", choices=IMAGE_BILLING, default="simulated",
                    help="image input tokens: 765 each (simulated, default) or the API's documented rule for the size")
    ap.add_argument("--release-dir", default=None,
                    help="GeoContext release folder (sites.csv; its ladders/ give the hint names) whose sites the "
                         "simulated GeoHint answers place photos in (default: $GEOAGENT_RELEASE, else "
                         "../shared/reference/geocontext)")
    args = ap.parse_args(argv)
    if args.release_dir is not None:
        folder = Path(args.release_dir).expanduser()
        if not (folder / "sites.csv").is_file():
            ap.error(f"--release-dir {folder}: no sites.csv there (give the release's data folder)")
        os.environ[C.ENV_RELEASE_DIR] = str(folder)
    from geoagent.geohint.simulate import release_dir_found

    found = release_dir_found()
    notes = [] if found is not None else [
        f"note: no GeoContext release folder found (${C.ENV_RELEASE_DIR}, ../shared/reference/geocontext): the "
        "simulated GeoHint answers cannot place a photo of a release or crawl site (they say 'Unknown city'); give "
        "--release-dir DIR"]  # printed after the banner, which stays the first line
    notes.insert(0, settings_line(args, anthropic=prog.endswith("llm_anthropic"), release=found))
    faults = None
    if args.fault_rate > 0 or args.fault_kinds:
        kw: dict[str, Any] = {"rate": args.fault_rate, "seed": args.fault_seed, "retry_after_s": args.fault_retry_after_s}
        if args.fault_kinds:
            kw["kinds"] = tuple(k.strip() for k in args.fault_kinds.split(",") if k.strip())
        faults = FaultConfig(**kw)
    app = factory(
        faults=faults,
        seed=args.seed,
        token_log=args.log,
        api_keys=args.api_key,
        require_auth=not args.no_auth,
        calls_max=args.calls_max,
        image_billing=args.image_billing,
    )
    if args.latency_ms > 0:
        add_latency(app, args.latency_ms / 1000.0)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiohttp").setLevel(logging.WARNING)  # our own lines at INFO, aiohttp's chatter not
    run_forever(app, args.host, args.port, describe=describe, notes=notes)


def settings_line(args: argparse.Namespace, *, anthropic: bool = False, release: Path | None = None) -> str:
    """The second line a fake prints at start (after the ``listening on`` banner): the options that change what it
    answers, so a log or a terminal shows which fake ran (walk28: the banner alone did not say that faults were
    on). E.g. ``settings: key required (any non-empty); seed 0; faults on 10% of requests (429, 500, 503, timeout,
    reset, malformed; fault seed 0; injected 429s carry Retry-After 1 s; the Anthropic fake sends an injected 503
    as 529 overloaded_error); latency 1500 ms; images billed 765 tokens each; log calls.jsonl``. ``release``: the
    folder the simulated GeoHint answers place photos from, named with its site count (newuser39 #7: a wrong folder
    gives "Unknown city" answers, and nothing said which folder the fake read)."""
    given = len(set(args.api_key)) if args.api_key else 0
    if args.no_auth:
        auth = "no key needed (--no-auth)" + (f"; a key that is sent must be one of the {given} given" if given else "")
    else:
        auth = f"key required (one of the {given} given)" if given else "key required (any non-empty)"
    parts = [auth, f"seed {args.seed}"]
    kinds_list = [k.strip() for k in (args.fault_kinds or "429,500,503,timeout,reset,malformed").split(",")
                  if k.strip()]
    if args.fault_rate > 0 and kinds_list:
        extra = ("; the Anthropic fake sends an injected 503 as 529 overloaded_error"
                 if anthropic and "503" in kinds_list else "")
        retry = f"; injected 429s carry Retry-After {args.fault_retry_after_s:g} s" if "429" in kinds_list else ""
        parts.append(f"faults on {100 * args.fault_rate:.3g}% of requests ({', '.join(kinds_list)}; fault seed "
                     f"{args.fault_seed}{retry}{extra})")
    else:
        parts.append("no faults" + (" (--fault-kinds without --fault-rate)" if args.fault_kinds else ""))
    parts.append(f"latency {args.latency_ms:g} ms" if args.latency_ms > 0 else "no added latency")
    parts.append("images billed as the API documents" if args.image_billing == "documented"
                 else "images billed 765 tokens each (the dry run estimates by the API's documented rule for the "
                      "size; --image-billing documented bills by it too)")  # newuser39 #4
    if args.log:
        parts.append(f"log {args.log}")
    if release is not None:
        try:
            with open(Path(release) / "sites.csv", encoding="utf-8", errors="replace") as fh:
                n_sites = max(0, sum(1 for line in fh if line.strip()) - 1)
            parts.append(f"sites from {release} ({n_sites} site{'' if n_sites == 1 else 's'})")
        except OSError:
            parts.append(f"sites from {release}")
    return "settings: " + "; ".join(parts)


#: most model ids a fake's models listing remembers (a benchmark may name many)
MODEL_IDS_MAX = 10_000


def note_model(ids: list[str], model: str) -> None:
    """Add ``model`` to a fake's models-listing ids (in place) the first time it is answered, up to
    :data:`MODEL_IDS_MAX` ids."""
    if model not in ids and len(ids) < MODEL_IDS_MAX:
        ids.append(model)
