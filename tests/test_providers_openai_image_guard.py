"""The OpenAI provider itself refuses an image request to a model family that takes no image (defence in depth).

Before (session 11): the config loader refused a campaign sending photos to ``o1-mini`` / ``o1-preview`` /
``o3-mini`` (tests/test_providers_openai_families.py), but a request built some other way (a hand-made
``ProviderSettings``, a future caller) went out: the request's ``before_send`` hook ran (the model caller reserves
the worst-case cost there) and the API answered HTTP 400 "Invalid content type. image_url is only supported by
certain models.". Now :meth:`OpenAICompatProvider.build` raises :class:`UnsupportedRequest` (not retryable): nothing
is reserved, nothing is sent.
"""

from __future__ import annotations

import asyncio
import pickle

import pytest

from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.base import ProviderError
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 21, seed="test-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)
JPEG = b"\xff\xd8\xff\xe0fake-jpeg"


async def _send(settings: dict, request_model: str, *, image: bytes | None):
    hooks: list[str] = []

    async def before_send():
        hooks.append("reserved")

    app = llm_openai.make_app(seed=1, api_keys=(KEY,))
    async with serve(app) as url, HttpClient(default_policy=FAST) as http:
        prov = make_provider(ProviderSettings(kind="openai", base_url=url + "/v1", api_key=KEY, **settings), http)
        req = ModelRequest(provider="openai", model=request_model, prompt="Where is this? Answer in JSON.",
                           image_id="img-1" if image else None, image=image,
                           params={"max_output_tokens": 30000}, before_send=before_send)
        try:
            out = await prov.generate(req)
        except Exception as exc:  # returned for assertions
            out = exc
    return out, hooks, list(app["calls"])


@pytest.mark.parametrize("settings,model", [
    ({"model": "o1-mini"}, "o1-mini"),
    ({"model": "o1-preview-2024-09-12"}, "o1-preview-2024-09-12"),
    ({"model": "o3-mini", "reasoning_model": True}, "o3-mini"),
    ({"model": "geo-text", "model_family": "o3-mini"}, "geo-text"),  # an Azure deployment declared o3-mini
])
def test_an_image_to_a_text_only_family_is_refused_before_any_reservation_or_request(settings, model):
    out, hooks, calls = asyncio.run(_send(settings, model, image=JPEG))
    assert isinstance(out, ProviderError) and type(out).__name__ == "UnsupportedRequest", repr(out)
    assert out.retryable is False
    assert hooks == [] and calls == []  # nothing reserved, nothing sent
    family = settings.get("model_family") or settings["model"]
    assert out.model == family and "takes no image input" in str(out) and "image_url is only supported by certain models" in str(out)
    back = pickle.loads(pickle.dumps(out))
    assert type(back) is type(out) and vars(back) == vars(out) and str(back) == str(out)


def test_text_requests_to_those_families_and_images_to_vision_models_still_go_out():
    out, hooks, calls = asyncio.run(_send({"model": "o3-mini", "reasoning_model": True}, "o3-mini", image=None))
    assert not isinstance(out, Exception), out
    assert hooks == ["reserved"] and [c["status"] for c in calls] == [200]
    out, hooks, calls = asyncio.run(_send({"model": "geo-vision", "model_family": "o4-mini"}, "geo-vision", image=JPEG))
    assert not isinstance(out, Exception), out
    assert hooks == ["reserved"] and [c["status"] for c in calls] == [200]
