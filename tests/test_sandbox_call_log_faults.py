"""The fake LLM servers' call log (``--log calls.jsonl``, ``app["calls"]``) has one record per model call,
also for the calls answered with an injected fault, each with the fault and the status the client got.

Expected values are written out by hand from the fault definitions in :mod:`geoagent.sandbox.faults` (429,
500, 503 never reach the handler; ``reset`` runs it and sends nothing; ``malformed`` runs it and sends a cut
200; ``timeout`` stalls, then runs it if the client still waits) and the APIs' error statuses (Anthropic
sends overload as 529). Every request goes over HTTP (aiohttp) to a fake on 127.0.0.1.
"""

from __future__ import annotations

import asyncio

import aiohttp

from geoagent.sandbox import llm_anthropic, llm_openai
from geoagent.sandbox.faults import find_fault_state
from geoagent.sandbox.llm_common import CallLog
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 24, seed="calllog-n16")
OPENAI_BODY = {"model": "m-log", "messages": [{"role": "user", "content": "where is this?"}], "max_tokens": 16}
ANTHROPIC_BODY = {"model": "m-log", "max_tokens": 16, "messages": [{"role": "user", "content": "where is this?"}]}


async def _send(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, timeout_s: float) -> int | str:
    """The status the client saw, or the name of the exception that ended the request."""
    try:
        async with session.post(url, json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            await r.read()
            return r.status
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return type(exc).__name__


async def _wait_records(app, n: int, limit_s: float = 10.0) -> None:
    """The server notices an abandoned stall within its 0.05 s poll; wait (generously) for its record."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while len(app["calls"]) < n and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)


def test_openai_fake_logs_every_call_with_fault_and_status_sent(tmp_path):
    log_path = tmp_path / "calls.jsonl"
    # (fault kind, client timeout s, stall s): one request each, in this order
    plan = [(None, 5.0, 0.0), ("429", 5.0, 0.0), ("500", 5.0, 0.0), ("503", 5.0, 0.0), ("reset", 5.0, 0.0),
            ("malformed", 5.0, 0.0), ("timeout", 5.0, 0.2), ("timeout", 0.3, 6.0)]

    async def go():
        app = llm_openai.make_app(api_keys=[KEY], token_log=log_path, faults={"rate": 0.0, "retry_after_s": 0})
        state = find_fault_state(app)
        seen = []
        async with serve(app) as base, aiohttp.ClientSession() as s:
            for i, (kind, timeout_s, stall_s) in enumerate(plan):
                state.update(rate=1.0 if kind else 0.0, kinds=(kind,) if kind else state.cfg.kinds,
                             timeout_delay_s=stall_s or 30.0)
                headers = {"Authorization": f"Bearer {KEY}", "X-Request-Key": f"k{i}"}
                seen.append(await _send(s, f"{base}/v1/chat/completions", OPENAI_BODY, headers, timeout_s))
                await _wait_records(app, i + 1)
            # a models listing is not a model call, faulted or not
            state.update(rate=1.0, kinds=("500",))
            async with s.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEY}"}) as r:
                listing = r.status
            mem = list(app["calls"])
        return seen, listing, mem

    seen, listing, mem = asyncio.run(go())
    assert seen[:4] == [200, 429, 500, 503] and seen[5:7] == [200, 200]
    assert isinstance(seen[4], str) and isinstance(seen[7], str)  # reset, client timeout: no status
    assert listing == 500
    got = [(r["key"], r["fault"], r["status"], r["status_sent"]) for r in mem]
    assert got == [
        ("k0", None, 200, 200),
        ("k1", "429", None, 429),         # never reached the handler
        ("k2", "500", None, 500),
        ("k3", "503", None, 503),
        ("k4", "reset", 200, None),       # processed (billed), nothing sent
        ("k5", "malformed", 200, 200),    # processed, cut body sent as 200
        ("k6", "timeout", 200, 200),      # late answer to a client that waited
        ("k7", "timeout", None, None),    # the client gave up during the stall
    ]
    billed = [r for r in mem if r["status"] == 200]
    assert [r["key"] for r in billed] == ["k0", "k4", "k5", "k6"] and all(r["output_tokens"] > 0 for r in billed)
    assert all(r["output_tokens"] == 0 and r["model"] is None for r in mem if r["status"] is None)
    assert CallLog.read(log_path) == mem  # the --log file has the same records


def test_anthropic_fake_logs_503_fault_as_the_529_it_sends(tmp_path):
    async def go():
        app = llm_anthropic.make_app(api_keys=[KEY], faults={"rate": 1.0, "kinds": ("503",), "retry_after_s": 0})
        async with serve(app) as base, aiohttp.ClientSession() as s:
            headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "X-Request-Key": "a0"}
            status = await _send(s, f"{base}/v1/messages", ANTHROPIC_BODY, headers, 5.0)
        return status, list(app["calls"])

    status, mem = asyncio.run(go())
    assert status == 529
    assert [(r["api"], r["key"], r["fault"], r["status"], r["status_sent"]) for r in mem] == [
        ("anthropic", "a0", "503", None, 529)]
