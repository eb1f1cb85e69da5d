"""Switchable fault injection for the local fake-API servers, plus a server-side request log.

Every fake API in :mod:`geoagent.sandbox` can add ``middlewares=[fault_middleware(cfg)]``. On a seeded
fraction ``cfg.rate`` of requests the middleware replaces the normal answer with one fault drawn
uniformly from ``cfg.kinds``:

``"429"``
    ``429 Too Many Requests`` with a ``Retry-After`` header (``cfg.retry_after_s``; whole seconds are
    written as an integer, the HTTP delta-seconds form; fractions as a decimal, which only our client
    reads) and a JSON error body. The wrapped handler is NOT run.
``"500"`` / ``"503"``
    Internal Server Error / Service Unavailable with a JSON error body; handler not run. A 503 carries the
    ``Retry-After`` too when ``cfg.retry_after_kinds`` names it (an overloaded service asking for a pause).
``"timeout"``
    The server stalls for ``cfg.timeout_delay_s`` before handling the request (set it longer than the
    client timeout). If the client hangs up during the stall the request is dropped unprocessed; if the
    client is still waiting when the stall ends, the handler runs and the late answer is sent. A client
    cannot tell these apart, which is exactly the "unknown outcome" a paid endpoint must assume.
``"reset"``
    The body is read, the handler RUNS (side effects happen: a paid fake bills the call), and then the
    connection is aborted (TCP RST) instead of sending the answer: the canonical "connection dropped
    after the request was sent" case.
``"malformed"``
    The handler runs, and its 2xx JSON body is cut to half its length (guaranteed not to parse), sent
    as ``200`` with ``Content-Type: application/json``.
``"quota"`` (only when named: :data:`EXTRA_FAULT_KINDS`)
    ``429`` for a used-up quota or spend limit, no ``Retry-After``; handler not run.

Runtime switching. The middleware keeps a :class:`FaultState` (the live, mutable :class:`FaultConfig`,
its RNG and the request log), reachable

* in-process: ``mw.fault_state``, or :func:`find_fault_state(app) <find_fault_state>`, or ``app[FAULTS_KEY]``
  when the app was built with :func:`attach_faults`;
* over HTTP (also for servers in another process, see :func:`geoagent.sandbox.server.spawn`), through
  admin endpoints answered by the middleware itself, never faulted and never logged:

  - ``GET /_sandbox/faults`` -> current config as JSON;
  - ``POST /_sandbox/faults`` with a JSON object of :class:`FaultConfig` fields -> update them
    (a new ``seed`` re-seeds the RNG); answers the new config;
  - ``GET /_sandbox/requests[?since=<index>]`` -> ``{"next": n, "requests": [record, ...]}``;
  - ``DELETE /_sandbox/requests`` -> clears the log.

Request log. One :class:`RequestRecord` per non-admin request, appended when the request ARRIVES (so
arrival times are server-side send-rate evidence even for requests that later stall or reset):
``t_mono`` (``time.monotonic()``, s; CLOCK_MONOTONIC is system-wide on Linux, so comparable with a
client in another process), ``t_wall`` (``time.time()``, s), method, path, query string, the fault
injected (``None`` if none) and the status sent (``None`` for resets and abandoned stalls). The log is
a bounded deque (``cfg.log_max`` newest records) so long benchmarks do not grow memory. The record of the
request being served is also put on the request (:data:`FAULT_RECORD_KEY`) for outer middlewares.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import orjson
from aiohttp import web

FAULT_KINDS: tuple[str, ...] = ("429", "500", "503", "timeout", "reset", "malformed")
#: faults drawn only when named in ``FaultConfig.kinds`` (never by default): ``"quota"``, a 429 that is no
#: rate limit but a used-up quota or spend limit (shaped per API by
#: :func:`geoagent.sandbox.llm_common.api_error_middleware`: OpenAI ``insufficient_quota``, Anthropic
#: ``enforced_spend_limit_reached``), with no ``Retry-After``; retrying it never helps
EXTRA_FAULT_KINDS: tuple[str, ...] = ("quota",)
#: the generic message of an injected ``"quota"`` fault, which the API shaping middleware recognises
QUOTA_FAULT_MESSAGE = "quota exhausted (injected fault)"
ADMIN_PREFIX = "/_sandbox/"
ADMIN_FAULTS_PATH = "/_sandbox/faults"
ADMIN_REQUESTS_PATH = "/_sandbox/requests"

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class FaultConfig:
    """What to inject and how often. Mutable: change fields at runtime to switch faults on or off.

    Attributes
    ----------
    rate : float
        Fraction of (non-admin, path-matching) requests that get a fault, in [0, 1].
    kinds : tuple of str
        Faults to draw from uniformly; a subset of :data:`FAULT_KINDS` (the default) and
        :data:`EXTRA_FAULT_KINDS`.
    seed : int
        Seed of the RNG that decides which requests are faulted and how (in arrival order).
    retry_after_s : float
        ``Retry-After`` sent with injected 429s (and the other kinds of ``retry_after_kinds``), in seconds.
    retry_after_kinds : tuple of str
        Injected faults whose answer carries ``Retry-After``: ``("429",)`` by default; add ``"503"`` for an
        overloaded service asking for a pause (``"429"``, ``"500"`` and ``"503"`` may be named).
    retry_after_date : bool
        Send the ``Retry-After`` as an HTTP-date (RFC 9110 10.2.3: ``Wed, 03 Dec 2026 01:00:00 GMT``, now +
        ``retry_after_s``, whole seconds) instead of delta-seconds. Default False.
    timeout_delay_s : float
        Stall of the ``"timeout"`` fault, in seconds; make it exceed the client's per-attempt timeout.
    only_paths : tuple of str or None
        If given, only requests whose path starts with one of these prefixes can be faulted.
    log_max : int
        Number of newest request records kept in the request log.

    Raises
    ------
    ValueError
        On a rate outside [0, 1], an unknown kind, or a negative delay.
    """

    rate: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    retry_after_s: float = 1.0
    retry_after_kinds: tuple[str, ...] = ("429",)
    retry_after_date: bool = False
    timeout_delay_s: float = 30.0
    only_paths: tuple[str, ...] | None = None
    log_max: int = 100_000

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check field values; raise ``ValueError`` naming the bad field."""
        self.kinds = tuple(self.kinds)
        self.retry_after_kinds = tuple(self.retry_after_kinds)
        if any(k not in ("429", "500", "503") for k in self.retry_after_kinds):
            raise ValueError(f"FaultConfig.retry_after_kinds: only 429, 500 and 503 answers carry Retry-After, got "
                             f"{self.retry_after_kinds}")
        if self.only_paths is not None:
            self.only_paths = tuple(self.only_paths)
        if not 0.0 <= float(self.rate) <= 1.0:
            raise ValueError(f"FaultConfig.rate must be in [0, 1], got {self.rate!r}")
        bad = [k for k in self.kinds if k not in FAULT_KINDS + EXTRA_FAULT_KINDS]
        if bad:
            raise ValueError(f"FaultConfig.kinds: unknown fault kind(s) {bad}; expected a subset of "
                             f"{FAULT_KINDS + EXTRA_FAULT_KINDS}")
        if self.rate > 0 and not self.kinds:
            raise ValueError("FaultConfig.kinds is empty but rate > 0")
        if self.retry_after_s < 0 or self.timeout_delay_s < 0:
            raise ValueError("FaultConfig.retry_after_s and timeout_delay_s must be >= 0")
        if self.log_max < 1:
            raise ValueError(f"FaultConfig.log_max must be >= 1, got {self.log_max!r}")

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON view (tuples become lists)."""
        d = asdict(self)
        d["kinds"] = list(self.kinds)
        d["retry_after_kinds"] = list(self.retry_after_kinds)
        d["only_paths"] = None if self.only_paths is None else list(self.only_paths)
        return d


@dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it (see the module docstring for field meanings; times in s)."""

    index: int
    t_mono: float
    t_wall: float
    method: str
    path: str
    query: str
    fault: str | None
    status: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class FaultState:
    """Live state of one fault middleware: config, RNG, request log and counters.

    Attributes
    ----------
    cfg : FaultConfig
        The live config (mutate it, or call :meth:`update`).
    log : collections.deque of RequestRecord
        Newest ``cfg.log_max`` requests, oldest first.
    injected : dict of str to int
        Number of faults injected so far, by kind.
    total : int
        Number of (non-admin) requests seen so far; ``RequestRecord.index`` counts from 0.
    """

    def __init__(self, cfg: FaultConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else FaultConfig()
        self.rng = random.Random(self.cfg.seed)
        self.log: deque[RequestRecord] = deque(maxlen=self.cfg.log_max)
        self.injected: dict[str, int] = {}
        self.total = 0

    def update(self, **changes: Any) -> FaultConfig:
        """Change config fields at runtime; a ``seed`` change re-seeds the RNG.

        Raises
        ------
        ValueError
            On an unknown field name or an invalid value (the old config is kept).
        """
        names = {f.name for f in fields(FaultConfig)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"unknown FaultConfig field(s) {unknown}; expected some of {sorted(names)}")
        merged = {**asdict(self.cfg), **changes}
        new = FaultConfig(**merged)  # validates before anything changes
        for name in names:
            setattr(self.cfg, name, getattr(new, name))
        if "seed" in changes:
            self.rng = random.Random(self.cfg.seed)
        if self.log.maxlen != self.cfg.log_max:
            self.log = deque(self.log, maxlen=self.cfg.log_max)
        return self.cfg

    def records(self, since: int = 0) -> list[RequestRecord]:
        """Records with ``index >= since`` still in the log, oldest first."""
        return [r for r in self.log if r.index >= since]

    def clear(self) -> None:
        """Empty the request log (indices keep counting)."""
        self.log.clear()

    def _draw(self, path: str) -> str | None:
        cfg = self.cfg
        if cfg.rate <= 0 or not cfg.kinds:
            return None
        if cfg.only_paths is not None and not any(path.startswith(p) for p in cfg.only_paths):
            return None
        if self.rng.random() >= cfg.rate:
            return None
        return self.rng.choice(cfg.kinds)


FAULTS_KEY: web.AppKey[FaultState] = web.AppKey("faults", FaultState)
#: the :class:`RequestRecord` of the request being served, on the request (``request.get(FAULT_RECORD_KEY)``), so an
#: outer middleware (the LLM fakes' call log) can tell which fault was injected; a plain string key on aiohttp
#: versions without ``web.RequestKey``
FAULT_RECORD_KEY: Any = web.RequestKey("sandbox_fault_record", RequestRecord) if hasattr(web, "RequestKey") \
    else "geoagent_sandbox_fault_record"


def _http_date(unix_s: float) -> str:
    """``unix_s`` as an HTTP-date (IMF-fixdate, GMT, whole seconds rounded up)."""
    import email.utils
    import math

    return email.utils.formatdate(math.ceil(unix_s), usegmt=True)


def _format_retry_after(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _error_json(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "server_error" if status >= 500 else "rate_limit_error", "code": status}}
    return web.json_response(body, status=status)


def _truncate_json(body: bytes) -> bytes:
    """Cut a JSON body so that it no longer parses."""
    cut = body[: len(body) // 2]
    try:
        orjson.loads(cut)
    except orjson.JSONDecodeError:
        return cut
    return b'{"truncated": ' + cut  # still parsed (e.g. a short scalar): force an unclosed object


async def _stall(request: web.Request, delay_s: float) -> bool:
    """Sleep up to ``delay_s``; return False early if the client hung up."""
    deadline = time.monotonic() + delay_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        transport = request.transport
        if transport is None or transport.is_closing():
            return False
        await asyncio.sleep(min(0.05, left))


async def _admin(request: web.Request, state: FaultState) -> web.StreamResponse:
    path = request.path
    if path == ADMIN_FAULTS_PATH:
        if request.method == "GET":
            return web.json_response(state.cfg.to_json())
        if request.method == "POST":
            try:
                changes = orjson.loads(await request.read() or b"{}")
                if not isinstance(changes, dict):
                    raise ValueError("body must be a JSON object of FaultConfig fields")
                for k in ("kinds", "only_paths", "retry_after_kinds"):
                    if isinstance(changes.get(k), list):
                        changes[k] = tuple(changes[k])
                state.update(**changes)
            except (ValueError, TypeError) as exc:  # orjson.JSONDecodeError is a ValueError
                return web.json_response({"error": str(exc)}, status=400)
            return web.json_response(state.cfg.to_json())
    elif path == ADMIN_REQUESTS_PATH:
        if request.method == "GET":
            try:
                since = int(request.query.get("since", "0"))
            except ValueError:
                return web.json_response({"error": "since must be an integer"}, status=400)
            recs = [r.to_json() for r in state.records(since)]
            return web.json_response({"next": state.total, "requests": recs, "injected": state.injected})
        if request.method == "DELETE":
            state.clear()
            return web.json_response({"next": state.total, "cleared": True})
    else:
        raise web.HTTPNotFound(text=f"no sandbox admin endpoint {path}")
    raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST", "DELETE"])


def fault_middleware(cfg: FaultConfig | None = None) -> Any:
    """Build an aiohttp middleware that injects faults per ``cfg`` and logs every request.

    Parameters
    ----------
    cfg : FaultConfig, optional
        Live config (kept by reference: mutating it later switches faults at runtime). Default: no faults,
        log only.

    Returns
    -------
    aiohttp middleware
        Has the attribute ``fault_state`` (:class:`FaultState`). Answers the ``/_sandbox/*`` admin
        endpoints itself (see module docstring), also for paths the app has no route for.
    """
    state = FaultState(cfg)

    @web.middleware
    async def _faults(request: web.Request, handler: _Handler) -> web.StreamResponse:
        if request.path.startswith(ADMIN_PREFIX):
            return await _admin(request, state)
        kind = state._draw(request.path)
        rec = RequestRecord(
            index=state.total,
            t_mono=time.monotonic(),
            t_wall=time.time(),
            method=request.method,
            path=request.path,
            query=request.query_string,
            fault=kind,
        )
        state.total += 1
        state.log.append(rec)
        request[FAULT_RECORD_KEY] = rec
        if kind is not None:
            state.injected[kind] = state.injected.get(kind, 0) + 1
        resp = await _apply(kind, request, handler, state.cfg)
        rec.status = None if resp is None else resp.status
        if resp is None:  # reset, or client gone during a stall: nothing may be written
            raise asyncio.CancelledError()
        return resp

    _faults.fault_state = state  # type: ignore[attr-defined]
    return _faults


async def _apply(kind: str | None, request: web.Request, handler: _Handler, cfg: FaultConfig) -> web.StreamResponse | None:
    if kind is None:
        return await handler(request)
    if kind in ("429", "500", "503"):
        await request.read()
        resp = _error_json(429, "rate limit exceeded (injected fault)") if kind == "429" else \
            _error_json(int(kind), f"injected fault {kind}")
        if kind in cfg.retry_after_kinds:
            resp.headers["Retry-After"] = (_http_date(time.time() + cfg.retry_after_s) if cfg.retry_after_date
                                           else _format_retry_after(cfg.retry_after_s))
        return resp
    if kind == "quota":
        await request.read()
        return _error_json(429, QUOTA_FAULT_MESSAGE)
    if kind == "timeout":
        if not await _stall(request, cfg.timeout_delay_s):
            return None
        return await handler(request)
    if kind == "reset":
        await request.read()
        try:
            await handler(request)  # the server did the work (and may have billed it) ...
        except web.HTTPException:
            pass
        if request.transport is not None:
            request.transport.abort()  # ... but the answer never leaves
        return None
    if kind == "malformed":
        resp = await handler(request)
        if not isinstance(resp, web.Response) or not 200 <= resp.status < 300 or resp.body is None:
            return resp
        body = resp.body if isinstance(resp.body, bytes) else bytes(resp.body._value)  # type: ignore[union-attr]
        return web.Response(status=200, body=_truncate_json(body), content_type="application/json")
    raise AssertionError(f"unhandled fault kind {kind!r}")


def find_fault_state(app: web.Application) -> FaultState | None:
    """The :class:`FaultState` of the first fault middleware on ``app`` (or ``app[FAULTS_KEY]``), else None."""
    if FAULTS_KEY in app:
        return app[FAULTS_KEY]
    for mw in app.middlewares:
        state = getattr(mw, "fault_state", None)
        if isinstance(state, FaultState):
            return state
    return None


def attach_faults(app: web.Application, cfg: FaultConfig | None = None) -> FaultState:
    """Add a fault middleware to a not-yet-started ``app`` and store its state at ``app[FAULTS_KEY]``.

    Prefer ``web.Application(middlewares=[fault_middleware(cfg)])`` in factories; this helper is for
    apps built elsewhere. Returns the :class:`FaultState`.
    """
    mw = fault_middleware(cfg)
    app.middlewares.append(mw)
    app[FAULTS_KEY] = mw.fault_state
    return mw.fault_state
