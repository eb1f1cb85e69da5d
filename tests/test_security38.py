"""Untrusted redirects (session 38).

Before: a thumbnail URL naming a local, private or link-local host was refused (security37 #3), but a CDN URL on a
public name that REDIRECTED to such a host was followed: aiohttp follows redirects by itself, and only the first
URL was judged. Now the HTTP layer takes a ``redirect_guard`` that sees every redirect's target before it is
followed, and the Mapillary client refuses thumbnail redirects to local addresses with it.
"""

from __future__ import annotations

import socket

import anyio
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver

from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox.server import serve

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 64 + b"\xff\xd9"


class _LocalNames(AbstractResolver):
    """Resolves every name to 127.0.0.1: public names (a CDN's) reach the local test server, judged by name."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        return None


def _app(hits: dict[str, int]) -> web.Application:
    """One server playing a CDN (``/thumb``, redirecting to ``?to=``; ``/real.jpg``) and a private service
    (``/secret``). ``hits`` counts requests per path."""

    async def thumb(request: web.Request) -> web.Response:
        hits["thumb"] = hits.get("thumb", 0) + 1
        raise web.HTTPFound(request.query["to"])

    async def real(request: web.Request) -> web.Response:
        hits["real"] = hits.get("real", 0) + 1
        return web.Response(body=JPEG, content_type="image/jpeg")

    async def secret(request: web.Request) -> web.Response:
        hits["secret"] = hits.get("secret", 0) + 1
        return web.Response(text="instance credentials")

    app = web.Application()
    app.router.add_get("/thumb", thumb)
    app.router.add_get("/real.jpg", real)
    app.router.add_get("/secret", secret)
    return app


def test_a_redirect_guard_sees_the_absolute_target_and_its_refusal_ends_the_request():
    hits: dict[str, int] = {}
    seen: list[str] = []

    def guard(target: str) -> str | None:
        seen.append(target)
        return "no thanks" if target.endswith("/secret") else None

    async def go():
        async with serve(_app(hits)) as base, HttpClient(default_policy=HostPolicy(timeout_s=5.0, max_attempts=3)) as http:
            with pytest.raises(PermanentHTTPError) as e:
                await http.request("GET", f"{base}/thumb", params={"to": "/secret"}, redirect_guard=guard)
            followed = await http.request("GET", f"{base}/thumb", params={"to": "/real.jpg"}, redirect_guard=guard)
            return base, e.value, followed

    base, err, followed = anyio.run(go)
    assert err.status == 302 and err.body_excerpt == "no thanks"
    assert seen == [f"{base}/secret", f"{base}/real.jpg"]  # a relative Location, resolved against the request
    assert hits == {"thumb": 2, "real": 1}  # refused once, not retried; the private service was never asked
    assert followed.status == 200 and followed.body == JPEG


@pytest.mark.parametrize("to, fetched", [("http://127.0.0.1:{port}/secret", False),
                                         ("http://169.254.169.254:{port}/secret", False),
                                         # short and hex forms the resolver reads as 127.0.0.1 (review38 #1)
                                         ("http://127.1:{port}/secret", False),
                                         ("http://0x7f.1:{port}/secret", False),
                                         ("http://0177.0.0.1:{port}/secret", False),
                                         ("ftp://example.org/secret", False),  # not http(s) (review38b #3)
                                         ("http://scontent-2.xx.fbcdn.net:{port}/real.jpg", True)])
def test_a_cdn_redirecting_a_thumbnail_to_a_local_address_is_not_followed(to, fetched):
    from geoagent.clients.mapillary import MapillaryClient, ThumbnailUnavailable

    hits: dict[str, int] = {}
    box: dict[str, str] = {}

    async def go():
        async with serve(_app(hits)) as base:
            port = base.rsplit(":", 1)[1]
            target = to.format(port=port)
            if "169.254" in target:  # unroutable here: never reached either way; the guard must refuse it first
                target = target.replace(f":{port}", ":9")
            box["thumb"] = f"http://scontent.xx.fbcdn.net:{port}/thumb?to={target}"

            async def graph(request: web.Request) -> web.Response:
                return web.json_response({"id": request.match_info["iid"], "thumb_1024_url": box["thumb"]})

            async with serve(_graph_only(graph)) as graph_base, HttpClient(
                    default_policy=HostPolicy(timeout_s=5.0, max_attempts=1), resolver=_LocalNames()) as http:
                client = MapillaryClient(http, "https://graph.mapillary.com", "MLY|made-up-value-for-the-test",
                                         "geoagent-test/0.1 (mailto:t@example.org)")
                client.base_url = graph_base  # sent to the stand-in; judged as the public API it is for
                # every name resolves to 127.0.0.1 here: the connect-time check would refuse the CDN itself, so it is
                # off and the redirect guard's URL checks are what is tested (the connect-time check:
                # tests/test_security42.py)
                client.thumbs_public_only = False
                try:
                    return await client.download_thumbnail("123")
                except ThumbnailUnavailable as e:
                    return e

    got = anyio.run(go)
    if fetched:
        assert got == JPEG and hits == {"thumb": 1, "real": 1}
    else:
        assert getattr(got, "kind", None) == "refused", got
        reason = "a ftp address" if to.startswith("ftp:") else "local or private address"
        assert reason in str(got) and "HTTP 302" in str(got), got
        assert "secret" not in hits and hits["thumb"] == 1  # refused at the first answer: no refresh, no retry


def _graph_only(handler) -> web.Application:
    app = web.Application()
    app.router.add_get("/{iid}", handler)
    return app


@pytest.mark.parametrize("host, local", [("127.1", True), ("0x7f.1", True), ("0177.0.0.1", True), ("10.1", True),
                                         ("192.168.1", True), ("2130706433", True), ("8.8.8.8", False), ("8.8", False),
                                         ("0x68120007", False), ("1.2.3.4.5", False), ("api.openai.com", False)])
def test_dotted_numbers_are_judged_as_the_address_the_resolver_reads(host, local):
    from geoagent.config import is_local_host

    assert is_local_host(host) is local
