"""Adversarial review of session 10's changes (branch s10-rev): each test failed on main before its fix."""

from __future__ import annotations

import asyncio

from aiohttp import web

from geoagent.runtime.http import (
    BODY_EXCERPT_CHARS,
    BODY_KEEP_CHARS,
    HostPolicy,
    HttpClient,
    PermanentHTTPError,
)
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, concurrency=8, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.05, timeout_s=2.0)


def _echoing_app() -> web.Application:
    """A local API that answers 400 with the text it was posted (an API echoing the request, key included)."""

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=400, text=await request.text(), content_type="text/plain")

    app = web.Application()
    app.router.add_post("/refuse", refuse)
    return app


def test_permanent_error_body_and_excerpt_never_keep_a_cut_key():
    """A key the answer echoes across the cut of the excerpt (300 characters) or of the kept body (16 384) left
    its opening characters in the error (the text was cut first, then scrubbed: the cut key no longer matched)."""
    key = "sk-" "rev-0123456789abcdefghijklmnopqrstuv"
    headers = {"Authorization": f"Bearer {key}"}
    # the key starts 12 characters before each cut
    texts = ["a" * (BODY_EXCERPT_CHARS - 12) + key + " tail",
             "b" * (BODY_KEEP_CHARS - 12) + key + " tail"]

    async def go() -> list[PermanentHTTPError]:
        errors = []
        async with serve(_echoing_app()) as base, HttpClient(default_policy=FAST) as http:
            for text in texts:
                try:
                    await http.request("POST", base + "/refuse", data=text.encode(), headers=headers)
                except PermanentHTTPError as exc:
                    errors.append(exc)
        return errors

    errors = asyncio.run(go())
    assert len(errors) == 2
    opening = key[:12]  # what a cut key left: "sk-rev-01234"
    for exc in errors:
        assert opening not in exc.body_excerpt, exc.body_excerpt[-40:]
        assert opening not in exc.body, exc.body[-40:]
        assert len(exc.body_excerpt) <= BODY_EXCERPT_CHARS and len(exc.body) <= BODY_KEEP_CHARS
