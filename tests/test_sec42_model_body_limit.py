"""Security breaker, session 42, #2: a model endpoint's response body could take 64 MiB per request in flight (the
generic ``HostPolicy.max_body_bytes``), and ``_read_body`` held a streamed body twice at its end (the chunk list and
their join). Now a model host's policy reads at most 16 MiB (``MODEL_MAX_BODY_BYTES``; a ``[hosts]`` entry that
writes ``max_body_bytes`` sets another), and a body longer than 1 MiB is read into one buffer: it peaks at about
its own size."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest
from aiohttp import web

from _model_harness import generic_campaign, model_table
from geoagent.config import config_from_dict, host_policies, model_call_policy
from geoagent.runtime.http import MODEL_MAX_BODY_BYTES, HostPolicy, HttpClient
from geoagent.sandbox.server import serve

MIB = 1024 * 1024


def _cfg(hosts: dict) -> object:
    return config_from_dict({
        "campaign": {"name": "c", "kind": "generic"},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "m", "provider": "openai", "model": "gpt-x", "base_url": "http://127.0.0.1:8011/v1"}],
        "hosts": hosts,
    })


@pytest.mark.filterwarnings("ignore:.*no model or endpoint of this campaign calls this host")
def test_a_model_host_reads_16_mib_unless_its_hosts_entry_says_otherwise():
    assert MODEL_MAX_BODY_BYTES == 16 * MIB
    cfg = _cfg({"api.example.org": {"rate": 2}})
    pol = host_policies(cfg)
    assert pol["127.0.0.1:8011"].max_body_bytes == 16 * MIB
    assert model_call_policy(cfg, cfg.models[0]).max_body_bytes == 16 * MIB
    assert pol["api.example.org"].max_body_bytes == HostPolicy().max_body_bytes == 64 * MIB  # not a model host
    # an entry of the model host: its limits, and the model hosts' body limit unless it writes one
    assert host_policies(_cfg({"127.0.0.1:8011": {"rate": 2}}))["127.0.0.1:8011"].max_body_bytes == 16 * MIB
    cfg = _cfg({"127.0.0.1:8011": {"rate": 2, "max_body_bytes": 32 * MIB}})
    assert host_policies(cfg)["127.0.0.1:8011"].max_body_bytes == 32 * MIB
    assert model_call_policy(cfg, cfg.models[0]).max_body_bytes == 32 * MIB


def test_a_model_answer_over_16_mib_fails_as_body_too_large(tmp_path, monkeypatch):
    """A campaign against a fake whose answer runs past 16 MiB (chunked, no Content-Length): the call is
    abandoned at the limit and dead-lettered as ``body too large`` (one attempt each, to keep it short)."""
    import anyio

    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.status import campaign_status, format_status

    monkeypatch.setenv("S42_BODY_KEY", "local-key-s42")
    chunk = b" " * (1 << 16)
    sent = []

    async def huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        try:
            for _ in range((MODEL_MAX_BODY_BYTES + 4 * MIB) // len(chunk)):
                await resp.write(chunk)
                sent.append(len(chunk))
        except (ConnectionResetError, RuntimeError):  # the client stopped reading at the limit
            pass
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", huge)

    async def main() -> tuple[object, str]:
        async with serve(app) as base:
            models = model_table(base_url=base, key_var="S42_BODY_KEY", concurrency=1) + "max_attempts = 1\n"
            cfg = load_config(generic_campaign(tmp_path, name="huge", n=1, models=models, queue={"max_attempts": 1}))
            out = await run_campaign(cfg, live=False, handle_signals=False)
            return out, format_status(campaign_status(cfg))

    out, status = anyio.run(main)
    assert out.counts["requests"].dead == 1, out.summary()
    assert "body too large" in status and f"more than {MODEL_MAX_BODY_BYTES} bytes" in status, status


@pytest.mark.parametrize("chunked", [False, True])
def test_a_long_body_is_held_once(chunked):
    """An 8 MiB body (with and without Content-Length) peaks at well under twice its size in this process (the
    server streams one 64 KiB chunk over and over, so its side allocates next to nothing)."""
    n = 8 * MIB
    chunk = bytes(range(256)) * 256

    async def body(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if not chunked:
            resp.content_length = n
        await resp.prepare(request)
        for _ in range(n // len(chunk)):
            await resp.write(chunk)
        return resp

    async def go() -> tuple[bytes, int]:
        app = web.Application()
        app.router.add_get("/big", body)
        async with serve(app) as base, HttpClient(default_policy=HostPolicy(rate=100, max_body_bytes=16 * MIB)) as http:
            tracemalloc.start()
            try:
                resp = await http.request("GET", base + "/big")
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            return resp.body, peak

    got, peak = asyncio.run(go())
    assert isinstance(got, bytes) and len(got) == n and got[:len(chunk)] == chunk and got[-len(chunk):] == chunk
    assert peak < 1.5 * n, f"peak {peak / MIB:.1f} MiB for an {n / MIB:.0f} MiB body"
