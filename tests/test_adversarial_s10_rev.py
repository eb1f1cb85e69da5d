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


def test_pageviews_answers_kept_in_memory_are_bounded():
    """The per-client memory of pageviews answers grew with every article and window of the crawl (one client
    lives as long as the crawl's process): it keeps the most recent ``cache_size`` answers, an older one is
    asked again."""
    from geoagent.clients.pageviews import PageviewsClient
    from geoagent.sandbox import pageviews as fake

    ua = "geoagent-test/0.1 (contact: mailto:test@example.org)"
    titles = [f"Place {i}" for i in range(5)]
    app = fake.make_app({t.replace(" ", "_"): 1 for t in titles})

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = PageviewsClient(http, base, ua, cache_size=3)
            for t in titles:
                await c.total(t, "20240101", "20240107")
            sent = len(app[fake.PAGEVIEWS_STATE].requests)
            again_recent = await c.total(titles[-1], "20240101", "20240107")  # kept: no request
            after_recent = len(app[fake.PAGEVIEWS_STATE].requests)
            again_old = await c.total(titles[0], "20240101", "20240107")  # dropped: asked again
            return c, sent, after_recent, len(app[fake.PAGEVIEWS_STATE].requests), again_recent, again_old

    c, sent, after_recent, after_old, recent, old = asyncio.run(go())
    assert sent == 5 and after_recent == 5 and after_old == 6
    assert recent.views == old.views > 0  # the same answer, from memory or asked again
    assert len(c._totals) <= 3
