"""A local OpenAI-compatible fake that answers every chat completion with the ``usage`` object it was given.

For tests of the ledger against a provider whose usage fields are out of any plausible range (a token count of
1e300, a count written with non-ASCII digits): start it in a child process with
``geoagent.sandbox.server.spawn("_hostile_usage:make_app", usage={...})``. Each request is counted in
``calls.jsonl`` beside ``log`` when given (one line per answered call: the fake bills every one).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def make_app(usage: dict[str, Any], log: str | None = None) -> web.Application:
    """The fake: ``POST /v1/chat/completions`` -> 200, answer ``{"city": "Paris"}``, ``usage`` as given."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"model": body.get("model")}) + "\n")
        return web.json_response({
            "id": "chatcmpl-hostile", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"city": "Paris"}'},
                         "finish_reason": "stop"}],
            "usage": usage,
        })

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app
