"""A model call that ends before its request left the process frees its reservation; one that may have been
sent stays unknown-outcome spend (issue 2 points 4 and 7; :mod:`geoagent.workers.billing`).

Both cases go through the real model-caller stage, OpenAI provider, HTTP client and SQLite ledger, and are
cut off by cancellation (what a shutdown does to calls still running after the grace period):

* never sent: the model's host is a listening socket whose accept queue is full, so the TCP connection never
  opens; the call is cancelled while connecting, after the send gate made its reservation. The socket
  side checks that no byte arrived.
* possibly sent: the host is an aiohttp server whose handler received the request and never answers; the
  call is cancelled there. The provider may bill such a call, so the ledger keeps its worst case.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from _model_harness import CallerRig, photo_task, run, write_model_config
from geoagent.runtime.http import HttpClient
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY_VAR = "GA_TEST_BILLING_KEY"
KEY = made_up_key("sk-", 32, seed="sandbox-billing-n16")


async def _wait_for_state(rig: CallerRig, state: str, timeout_s: float = 10.0) -> list[tuple[str, str]]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        rows = rig.reservations()
        if rows and all(s == state for _, s in rows):
            return rows
        await asyncio.sleep(0.01)
    raise AssertionError(f"reservations never all {state!r}: {rig.reservations()}")


def _received_bytes(srv: socket.socket) -> bytes:
    """Accept every connection waiting on ``srv`` and return what they sent (the filler sent nothing)."""
    srv.settimeout(0.3)
    got = b""
    while True:
        try:
            conn, _ = srv.accept()
        except (TimeoutError, socket.timeout):
            return got
        with conn:
            conn.settimeout(0.2)
            try:
                while chunk := conn.recv(65536):
                    got += chunk
            except (TimeoutError, socket.timeout):
                pass


def test_call_cancelled_before_its_request_left_releases_the_reservation(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)  # an accept queue of one: the filler below takes it, later connects hang in SYN
    filler = socket.create_connection(srv.getsockname(), timeout=5)
    base = f"http://127.0.0.1:{srv.getsockname()[1]}"
    cfg = write_model_config(tmp_path / "c.toml", base, name="unsent", key_var=KEY_VAR, timeout_s=30.0)

    async def main():
        async with HttpClient() as http:
            rig = await CallerRig(tmp_path, cfg, http).start()
            call = asyncio.create_task(rig.handle(photo_task(0)))
            await _wait_for_state(rig, "open")  # the gate reserved: the request is on its way to the socket
            await asyncio.sleep(0.3)  # ... and stays stuck opening the connection
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            summary = await rig.state.ledger.asummary()  # queued after the release: it sees it
            rows = await _wait_for_state(rig, "released")
            return summary, rows

    try:
        summary, rows = run(main(), 60)
        received = _received_bytes(srv)
    finally:
        filler.close()
        srv.close()
    assert received == b""  # not one byte of the request reached the host
    assert len(rows) == 1 and rows[0][1] == "released"
    assert summary.unknown_usd == 0 and summary.reserved_usd == 0 and summary.spent_usd == 0
    assert summary.released_calls == 1 and summary.unknown_calls == 0


def test_call_cancelled_after_its_request_reached_the_host_stays_unknown_spend(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    received, finish = asyncio.Event(), asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await request.read()
        received.set()
        await finish.wait()  # answers only after the client gave up (lets the server stop at once)
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", hang)

    async def main():
        async with serve(app) as base, HttpClient() as http:
            cfg = write_model_config(tmp_path / "c.toml", base, name="sent", key_var=KEY_VAR, timeout_s=30.0)
            rig = await CallerRig(tmp_path, cfg, http).start()
            call = asyncio.create_task(rig.handle(photo_task(0)))
            await asyncio.wait_for(received.wait(), 10)  # the host has the whole request
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            rows = await _wait_for_state(rig, "unknown")
            summary = await rig.state.ledger.asummary()
            amount_nusd = rig.state.db.read("SELECT amount_nusd FROM reservations")[0][0]
            finish.set()
            return summary, rows, amount_nusd

    summary, rows, amount_nusd = run(main(), 60)
    assert len(rows) == 1 and rows[0][1] == "unknown"
    # the worst case stays counted: the provider may bill a request it received
    assert amount_nusd > 0 and summary.unknown_usd == pytest.approx(amount_nusd / 1e9)
    assert summary.reserved_usd == 0 and summary.unknown_calls == 1 and summary.released_calls == 0


def test_call_whose_connection_never_opens_ends_at_the_connect_timeout_and_releases_the_reservation(tmp_path, monkeypatch):
    # the model's host never accepts the connection (full accept queue); the model's connect_timeout_s (0.5 s)
    # ends each attempt long before its timeout_s (30 s); no attempt was sent, so nothing can have been billed,
    # and the task is retried later (nacked: CallFailed), not dead-lettered as missing (model caller,
    # "Unreachable-host breaker")
    from geoagent.workers.model_caller import CallFailed

    monkeypatch.setenv(KEY_VAR, KEY)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    filler = socket.create_connection(srv.getsockname(), timeout=5)
    base = f"http://127.0.0.1:{srv.getsockname()[1]}"
    cfg = write_model_config(tmp_path / "c.toml", base, name="noconnect", key_var=KEY_VAR, timeout_s=30.0,
                             max_attempts=2, extra="connect_timeout_s = 0.5\n")

    async def main():
        async with HttpClient() as http:
            rig = await CallerRig(tmp_path, cfg, http).start()
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(CallFailed) as ei:
                await rig.handle(photo_task(0))
            took = loop.time() - t0
            rows = await _wait_for_state(rig, "released")
            return took, ei.value, rows, await rig.state.ledger.asummary()

    try:
        took, exc, rows, summary = run(main(), 60)
        received = _received_bytes(srv)
    finally:
        filler.close()
        srv.close()
    assert took < 10.0, took  # two 0.5 s connect timeouts (and a short backoff), not 2 x 30 s
    assert f"host {base.removeprefix('http://')} unreachable after 2 attempts, nothing sent" in str(exc)
    assert "timeout" in str(exc)
    assert received == b""
    assert len(rows) == 1 and rows[0][1] == "released"
    assert summary.unknown_usd == 0 and summary.reserved_usd == 0 and summary.spent_usd == 0
    assert summary.released_calls == 1 and summary.unknown_calls == 0
