"""OpenAI-compatible answers in gateways' shapes: thinking tokens outside completion_tokens, content as parts, a
tool call instead of an answer (break34 provider #2, #6).

Served by a local aiohttp app that answers ``/v1/chat/completions`` with each body as a gateway sent it:
* mozilla-ai/any-llm#1290 (Gemini behind an OpenAI-compatible gateway): ``prompt_tokens`` 20, ``completion_tokens``
  151, ``total_tokens`` 553, the 382 thinking tokens only in the total: 151 was booked of 533 billed output tokens;
* router-for-me/CLIProxyAPI#5733: ``completion_tokens`` 0, ``reasoning_tokens`` 60, ``total_tokens`` 81, no text:
  0 was booked of 60;
* a ``content`` list of parts (``[{"type": "text", ...}]``, some servers' reasoning models) and a ``tool_calls``
  answer with ``content: null``: both were malformed bodies, so the task was sent and billed again up to
  ``[queue] max_attempts`` times for the same answer.
OpenAI's own shape (total = prompt + completion, reasoning inside completion) books as before.
"""

from __future__ import annotations

import anyio
import pytest
from aiohttp import web

from geoagent.providers import ProviderSettings, make_provider
from geoagent.providers.base import ModelRequest
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.server import serve


def _body(message: dict, usage: dict, finish: str = "stop") -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": usage}


def _ask(body: dict):
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)

    async def main():
        async with serve(app) as url, HttpClient(default_policy=HostPolicy(max_attempts=1)) as http:
            prov = make_provider(ProviderSettings(kind="openai", model="m", base_url=url + "/v1", api_key=None), http)
            return await prov.generate(ModelRequest(provider="openai", model="m", prompt="Where?",
                                                    params={"max_output_tokens": 1000}))

    return anyio.run(main)


@pytest.mark.parametrize(("usage", "text", "n_out"), [
    # any-llm#1290: thinking only in the total
    ({"prompt_tokens": 20, "completion_tokens": 151, "total_tokens": 553,
      "completion_tokens_details": {"reasoning_tokens": 382}}, "Paris", 533),
    # CLIProxyAPI#5733: no text, the thinking in reasoning_tokens and the total
    ({"prompt_tokens": 21, "completion_tokens": 0, "total_tokens": 81,
      "completion_tokens_details": {"reasoning_tokens": 60}}, "", 60),
    # the thinking only in reasoning_tokens (no total)
    ({"prompt_tokens": 20, "completion_tokens": 151, "completion_tokens_details": {"reasoning_tokens": 382}},
     "Paris", 533),
    # OpenAI's own: reasoning inside completion, total = prompt + completion
    ({"prompt_tokens": 20, "completion_tokens": 700, "total_tokens": 720,
      "completion_tokens_details": {"reasoning_tokens": 640}}, "Paris", 700),
    ({"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}, "Paris", 5),
])
def test_billed_output_tokens_include_thinking_a_gateway_left_out(usage, text, n_out):
    out = _ask(_body({"content": text}, usage, finish="stop"))
    assert out.text == text and out.usage.input_tokens == usage["prompt_tokens"] and out.usage.output_tokens == n_out


def test_content_as_parts_is_the_text_parts_joined():
    out = _ask(_body({"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Pa"},
                                  {"type": "text", "text": "ris"}]},
                     {"prompt_tokens": 10, "completion_tokens": 9, "total_tokens": 19}))
    assert out.text == "Paris" and out.usage.output_tokens == 9


def test_a_tool_call_instead_of_an_answer_is_an_empty_answer_not_a_retry():
    out = _ask(_body({"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                       "function": {"name": "f", "arguments": "{}"}}]},
                     {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}, finish="tool_calls"))
    assert out.text == "" and out.finish_reason == "tool_calls" and out.usage.output_tokens == 7
