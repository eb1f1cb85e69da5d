"""HostPolicy.max_body_bytes: a response body over the limit is never held in memory, and fails the attempt.

Against the local echo server's ``/bytes/{n}`` route (with and without Content-Length). Free APIs retry it
like an invalid body and end in RetriesExhausted ("body too large"); a paid endpoint, which may have
billed the call, raises OutcomeUnknown at once (one request, counted as possibly billed).
"""

from __future__ import annotations

import asyncio

import pytest

from geoagent.runtime.http import HostPolicy, HttpClient, OutcomeUnknown, RetriesExhausted, host_key
from geoagent.sandbox.echo import make_app
from geoagent.sandbox.faults import FAULTS_KEY
from geoagent.sandbox.server import serve

LIMIT = 100_000
FREE = HostPolicy(rate=1000, max_attempts=2, backoff_base_s=0.001, backoff_max_s=0.01, timeout_s=5.0, max_body_bytes=LIMIT)
PAID = HostPolicy(rate=1000, max_attempts=3, backoff_base_s=0.001, backoff_max_s=0.01, timeout_s=5.0,
                  max_body_bytes=LIMIT, retry_unknown_outcome=False)


def _get(path: str, policy: HostPolicy):
    async def go():
        app = make_app()
        async with serve(app) as base, HttpClient(default_policy=policy) as http:
            try:
                result = await http.request("GET", base + path)
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                result = exc
            return result, len(app[FAULTS_KEY].log), http.stats()[host_key(base)]

    return asyncio.run(go())


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_body_at_the_limit_is_read_whole(chunked):
    resp, seen, _ = _get(f"/bytes/{LIMIT}?chunked={chunked}", FREE)
    assert resp.status == 200 and resp.body == b"x" * LIMIT and seen == 1


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_body_over_the_limit_fails_free_api_after_its_retries(chunked):
    err, seen, stats = _get(f"/bytes/{5 * LIMIT}?chunked={chunked}", FREE)
    assert isinstance(err, RetriesExhausted) and "body too large" in str(err)
    assert seen == FREE.max_attempts and stats.errors == {"body too large": FREE.max_attempts}


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_body_over_the_limit_on_a_paid_endpoint_is_outcome_unknown_sent_once(chunked):
    err, seen, stats = _get(f"/bytes/{LIMIT + 1}?chunked={chunked}", PAID)
    assert isinstance(err, OutcomeUnknown) and "too large" in str(err)
    assert err.possibly_billed == 1 and seen == 1 and stats.errors == {"body too large": 1}


def test_hosts_section_sets_the_body_limit(tmp_path):
    from geoagent.config import config_from_dict, host_policies

    cfg = config_from_dict({
        "campaign": {"name": "c", "kind": "generic"},
        "budget": {"cap_usd": 1.0},
        "hosts": {"api.example.org": {"rate": 2, "max_body_bytes": 4096}, "other.example.org": {"rate": 2}},
    })
    pol = host_policies(cfg)
    assert pol["api.example.org"].max_body_bytes == 4096
    assert pol["other.example.org"].max_body_bytes == HostPolicy().max_body_bytes == 64 * 1024 * 1024


def _serve_custom(routes, policy: HostPolicy, paths: list[str]):
    """GET each of ``paths`` in turn, on one client (so one kept-alive connection), from an app of ``routes``."""
    from aiohttp import web

    async def go():
        app = web.Application()
        app.add_routes(routes)
        out = []
        async with serve(app) as base, HttpClient(default_policy=policy) as http:
            for p in paths:
                try:
                    out.append(await http.request("GET", base + p))
                except Exception as exc:  # noqa: BLE001 - the test inspects it
                    out.append(exc)
        return out

    return asyncio.run(go())


def test_gzip_body_is_limited_by_its_decompressed_size_and_the_next_request_reads_its_own_body():
    """A gzip body of 1 KB that inflates to 20 x the limit (a gzip bomb, Content-Length = the compressed
    size) must fail as 'body too large': the limit bounds what is held in memory, which is the inflated
    body (before, the compressed Content-Length passed the check and the whole inflated body was read).
    The next request on the same client then gets its own body whole (the abandoned one is not read as
    its answer)."""
    import gzip

    from aiohttp import web

    inflated = b"0" * (20 * LIMIT)
    packed = gzip.compress(inflated)
    assert len(packed) < LIMIT // 10  # independent check: the declared (compressed) length passes the limit

    async def bomb(request):
        return web.Response(body=packed, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})

    async def small_gz(request):
        return web.Response(body=gzip.compress(b"y" * 5000), headers={"Content-Encoding": "gzip"})

    async def plain(request):
        return web.Response(body=b"z" * 3000)

    routes = [web.get("/bomb", bomb), web.get("/small", small_gz), web.get("/plain", plain)]
    out = _serve_custom(routes, FREE, ["/small", "/bomb", "/plain", "/bomb", "/small"])
    assert out[0].status == 200 and out[0].body == b"y" * 5000  # a gzip body under the limit reads whole
    for err in (out[1], out[3]):
        assert isinstance(err, RetriesExhausted) and "body too large" in str(err)
    assert out[2].status == 200 and out[2].body == b"z" * 3000
    assert out[4].status == 200 and out[4].body == b"y" * 5000


def test_content_length_shorter_than_the_body_does_not_leak_into_the_next_answer():
    """A server declaring a Content-Length shorter than what it writes: the response is its declared
    bytes, and the next request on the same client gets its own answer (the surplus bytes never become
    the next response)."""
    from aiohttp import web

    async def liar(request):
        resp = web.StreamResponse(headers={"Content-Length": "10", "Content-Type": "text/plain"})
        await resp.prepare(request)
        transport = request.transport
        transport.write(b"0123456789" + b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")
        return resp

    async def plain(request):
        return web.Response(body=b"honest")

    out = _serve_custom([web.get("/liar", liar), web.get("/plain", plain)], FREE, ["/liar", "/plain", "/plain"])
    assert not isinstance(out[0], Exception) and out[0].body == b"0123456789"
    assert out[1].body == b"honest" and out[2].body == b"honest"
