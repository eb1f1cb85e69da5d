"""Run a local fake-API aiohttp application on a loopback port (in-process or in a child process).

Every fake API in :mod:`geoagent.sandbox` is an ``aiohttp.web.Application`` factory; tests, the offline
demo, dry runs and benchmarks all serve them through :func:`serve` (same event loop) or :func:`spawn`
(separate process, for crash tests and benchmarks where the server must survive the client).

:func:`run_forever` serves a fake from the command line (``python -m geoagent.sandbox.llm_openai``): one
``listening on http://127.0.0.1:PORT (...)`` line on stderr once the port is bound, then until SIGINT/SIGTERM.
:func:`client_disconnect_middleware` turns a client that drops its connection mid-request (a timeout, a
killed campaign) into one log line instead of aiohttp's "Error handling request" traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import multiprocessing as mp
import random
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

log = logging.getLogger("geoagent.sandbox")

#: what a client that went away mid-request raises in a handler (reading the body, writing the answer)
CLIENT_DISCONNECTS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def client_disconnect_middleware() -> Any:
    """An aiohttp middleware: a client that drops its connection during a request is one INFO line on the
    ``geoagent.sandbox`` logger (``client 127.0.0.1 went away during POST /v1/chat/completions:
    ConnectionResetError ...``), not aiohttp's ERROR traceback, and the request ends as aiohttp ends a
    premature disconnection (nothing more is written). Any other exception passes through unchanged.
    """

    @web.middleware
    async def _disconnects(request: web.Request, handler: Callable[[web.Request], Any]) -> Any:
        try:
            return await handler(request)
        except CLIENT_DISCONNECTS as exc:
            log.info("client %s went away during %s %s: %s: %s", request.remote, request.method, request.path_qs,
                     type(exc).__name__, exc)
            raise asyncio.CancelledError() from None  # aiohttp: "Ignored premature client disconnection"

    return _disconnects


def run_forever(app: web.Application, host: str = "127.0.0.1", port: int = 0, *,
                describe: Callable[[str], str] | None = None, notes: Sequence[str] = ()) -> None:
    """Serve ``app`` on ``host:port`` (0 = any free port) until SIGINT or SIGTERM.

    Once the port is bound, prints one line to stderr: ``listening on http://HOST:PORT`` followed by
    ``describe(base_url)`` when given (e.g. ``" (OpenAI-compatible; base_url http://HOST:PORT/v1)"``); then each of
    ``notes``, a line each (the banner stays the first line, which scripts wait for).
    """

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        async with serve(app, host, port) as base:
            print(f"listening on {base}{describe(base) if describe else ''}", file=sys.stderr, flush=True)
            for note in notes:
                print(note, file=sys.stderr, flush=True)
            await stop.wait()

    asyncio.run(main())


def free_port(host: str = "127.0.0.1") -> int:
    """Return a currently free TCP port on ``host`` (loopback only), drawn at random below the kernel's ephemeral
    range (Linux ``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default) when there is room there.

    A port handed out by binding port 0 lies in that range, where every later bind to port 0 (a server started on
    "any free port", an outgoing connection's source port) may be handed the same port before the caller binds
    it: a test that took a port to stand for a closed host, then started its fake there, once found another
    test's server answering on it. Below the range only another ``free_port`` caller can draw the same port
    (random, 1 in about 12,000 at a time). Without a readable range, or with no room below it: port 0's answer."""
    low = _ephemeral_low()
    if low is not None and low - _BELOW_SPAN >= 1024:
        rng = random.Random()
        for _ in range(50):
            port = rng.randrange(low - _BELOW_SPAN, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


#: how many ports below the kernel's ephemeral range :func:`free_port` draws from
_BELOW_SPAN = 12_000


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), or None where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


@contextlib.asynccontextmanager
async def serve(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (0 = any free port) inside the running loop; yield its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    bound = sockets[0].getsockname()[1] if sockets else port
    try:
        yield f"http://{f'[{host}]' if ':' in host else host}:{bound}"  # an IPv6 address in brackets
    finally:
        await runner.cleanup()


def _child_main(factory_path: str, kwargs: dict[str, Any], host: str, port: int) -> None:
    module_name, _, attr = factory_path.partition(":")
    factory: Callable[..., web.Application] = getattr(importlib.import_module(module_name), attr)
    web.run_app(factory(**kwargs), host=host, port=port, access_log=None, print=None)


def spawn(factory_path: str, host: str = "127.0.0.1", port: int | None = None, **kwargs: Any) -> tuple[mp.Process, str]:
    """Start ``module:factory(**kwargs)`` in a child process; return ``(process, base_url)``.

    The caller waits for readiness (e.g. :func:`wait_ready`) and terminates the process when done.
    """
    port = port or free_port(host)
    proc = mp.get_context("spawn").Process(target=_child_main, args=(factory_path, kwargs, host, port), daemon=True)
    proc.start()
    return proc, f"http://{host}:{port}"


def wait_ready(base_url: str, timeout_s: float = 20.0) -> None:
    """Block until a TCP connection to ``base_url`` succeeds, or raise ``TimeoutError``."""
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"server at {base_url} not ready after {timeout_s} s") from None
            time.sleep(0.05)
