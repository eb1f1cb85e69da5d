"""OpenAI model families whose rules a model id alone does not carry (geoagent.providers.sampling has the sources).

Before (session 11):

1. ``o1-mini`` / ``o1-preview`` got their system text folded into the user message, but a JSON-mode request still
   carried ``response_format`` (which they refuse with HTTP 400), and a campaign sending photos to them (or to
   ``o3-mini``, which takes no image either) loaded, passed its dry run and then dead-lettered every request on a
   400 after the run had started; the OpenAI fake accepted both.
2. An Azure OpenAI deployment is addressed by its deployment name (``model``), so a deployment ``geo-reasoner``
   of ``o1-mini`` was sent ``max_tokens``, a temperature and a system message: there was no way to say which
   model a deployment serves (``reasoning_model = true`` covered the sampling rules only).
"""

from __future__ import annotations

import asyncio
import base64
import warnings

import aiohttp
import pytest

from geoagent.campaigns import register_all_sections
from geoagent.config import ConfigError, ConfigWarning, config_from_dict, provider_settings
from geoagent.providers import ModelRequest, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.runtime.manifest import Manifest, read_manifest
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

register_all_sections()

KEY = made_up_key("sk-", 21, seed="test-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)
PROMPT = "Where was this street-level photo taken? Reply in JSON with city and area."
#: a 1x1 JPEG is not needed: the fake decodes base64 only
PIXELS = base64.b64encode(b"\xff\xd8\xff\xe0fake-jpeg").decode()


async def _raw(model: str, body_extra: dict, *, content=None, **app_kw):
    app = llm_openai.make_app(api_keys=(KEY,), **app_kw)
    messages = [{"role": "user", "content": content if content is not None else "reply in json"}]
    async with serve(app) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                                json={"model": model, "messages": messages, "max_completion_tokens": 2000,
                                      **body_extra}) as resp:
            return resp.status, await resp.json()


IMAGE_CONTENT = [{"type": "text", "text": "where is this?"},
                 {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{PIXELS}"}}]


# -- 1. the fake refuses what o1-mini / o1-preview / o3-mini refuse ---------------------------------------------

@pytest.mark.parametrize("model", ["o1-mini", "o1-preview-2024-09-12", "o3-mini"])
def test_openai_fake_refuses_an_image_for_text_only_reasoning_models(model):
    status, body = asyncio.run(_raw(model, {}, content=IMAGE_CONTENT))
    assert status == 400
    assert body["error"] == {"message": "Invalid content type. image_url is only supported by certain models.",
                             "type": "invalid_request_error", "param": "messages.[0].content.[1].type", "code": None}


@pytest.mark.parametrize("model", ["o1", "o4-mini", "gpt-4o-mini"])
def test_openai_fake_takes_an_image_for_vision_models(model):
    assert asyncio.run(_raw(model, {}, content=IMAGE_CONTENT))[0] == 200


@pytest.mark.parametrize("model", ["o1-mini", "o1-preview"])
def test_openai_fake_refuses_response_format_for_o1_mini_and_preview(model):
    status, body = asyncio.run(_raw(model, {"response_format": {"type": "json_object"}}))
    assert status == 400
    assert body["error"] == {"message": "Invalid parameter: 'response_format' of type 'json_object' is not supported "
                                        "with this model.", "type": "invalid_request_error",
                             "param": "response_format", "code": None}
    # o3-mini and o1 take JSON mode (the per-model table, community.openai.com/t/1110750)
    assert asyncio.run(_raw("o3-mini", {"response_format": {"type": "json_object"}}))[0] == 200


async def _call(settings: dict, request: ModelRequest, **app_kw):
    app = llm_openai.make_app(seed=1, api_keys=(KEY,), **app_kw)
    async with serve(app) as url, HttpClient(default_policy=FAST) as http:
        from geoagent.providers import ProviderSettings

        prov = make_provider(ProviderSettings(base_url=url + "/v1", api_key=KEY, **settings), http)
        built = prov.build(request)[1]
        try:
            out = await prov.generate(request)
        except Exception as exc:  # returned for assertions
            out = exc
    return out, built, app["calls"]


def test_o1_mini_json_mode_request_carries_no_response_format_and_is_answered():
    req = ModelRequest(provider="openai", model="o1-mini", prompt=PROMPT,
                       params={"max_output_tokens": 30000, "temperature": 0.0, "json_mode": True,
                               "system": "You answer in JSON."})
    out, body, calls = asyncio.run(_call({"kind": "openai", "model": "o1-mini", "reasoning_model": True}, req))
    assert "response_format" not in body
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert not isinstance(out, Exception), out
    assert [c["status"] for c in calls] == [200]
    # JSON mode still works for a model that takes it
    req4 = ModelRequest(provider="openai", model="o3-mini", prompt=PROMPT,
                        params={"max_output_tokens": 30000, "json_mode": True})
    _, body, _ = asyncio.run(_call({"kind": "openai", "model": "o3-mini", "reasoning_model": True}, req4))
    assert body["response_format"] == {"type": "json_object"}


def _paid(name: str, model: str, **kw) -> dict:
    return {"name": name, "provider": "openai", "model": model, "price_input_usd_per_mtok": 1.0,
            "price_output_usd_per_mtok": 4.0, "max_output_tokens": 30000, "api_key_env": "OPENAI_API_KEY", **kw}


def _campaign(kind: str, models: list[dict], **tasks) -> dict:
    return {"campaign": {"name": "fam", "kind": kind, "contact": "mailto:you@example.org"},
            "budget": {"cap_usd": 1.0}, "models": models, **tasks}


@pytest.mark.parametrize("kind,tasks", [("geoverify", {}), ("geohint", {}), ("generic", {"generic": {"image": True}})])
def test_a_campaign_sending_photos_to_a_text_only_model_is_refused_at_load(kind, tasks):
    with pytest.raises(ConfigError) as err:
        config_from_dict(_campaign(kind, [_paid("mini", "o1-mini"), _paid("o3m", "o3-mini"), _paid("g", "gpt-4o")],
                                   **tasks))
    text = str(err.value)
    assert "models[0]: o1-mini takes no image input" in text, text
    assert "models[1]: o3-mini takes no image input" in text, text
    assert "models[2]" not in text and "'g'" not in text
    assert "HTTP 400" in text and f"a {kind} campaign" in text and "sends a photo with every request" in text


def test_text_only_campaigns_and_the_text_auditor_may_use_text_only_models():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        assert config_from_dict(_campaign("generic", [_paid("mini", "o1-mini")])).models[0].model == "o1-mini"
        crawl = {"crawl": {"contact": "mailto:you@example.org", "evaluated_models": ["x"],
                           "image_audit": {"provider": "openai", "model": "vision"},
                           "referenceability": {"provider": "openai", "model": "mini"}}}
        config_from_dict(_campaign("crawl", [_paid("mini", "o1-mini"), _paid("vision", "gpt-4o")], **crawl))
    crawl["crawl"]["image_audit"]["model"] = "mini"
    with pytest.raises(ConfigError) as err:
        config_from_dict(_campaign("crawl", [_paid("mini", "o1-mini"), _paid("vision", "gpt-4o")], **crawl))
    assert "crawl.image_audit.model: 'mini' (o1-mini) takes no image input" in str(err.value), str(err.value)


# -- 2. an Azure deployment declares the model it serves ---------------------------------------------------------

AZURE = "https://geo-res.openai.azure.com/openai/v1"


def test_model_family_is_validated():
    with pytest.raises(ConfigError) as err:
        config_from_dict(_campaign("generic", [_paid("d", "geo-reasoner", base_url=AZURE, model_family="llama-3")]))
    assert "models[0].model_family: expected the OpenAI model id the deployment serves" in str(err.value)
    with pytest.raises(ConfigError) as err:
        config_from_dict(_campaign("generic", [{**_paid("c", "claude-x"), "provider": "anthropic",
                                                "model_family": "o3"}]))
    assert "models[0]" in str(err.value) and 'model_family: only for provider = "openai"' in str(err.value)


def test_a_deployment_declared_o1_mini_follows_o1_mini_rules_through_the_fake(monkeypatch):
    """The fake stands in for Azure: ``deployments=`` maps a deployment name to the model it serves, whose rules
    it then enforces (no system message, no temperature but 1, no max_tokens, no response_format)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = config_from_dict(_campaign("generic", [_paid("d", "geo-reasoner", base_url=AZURE, model_family="o1-mini",
                                                           params={"system": "Answer in JSON.", "json_mode": True})]))
    m = cfg.models[0]
    # the loader's o1-mini lines name the deployment's family
    assert any("geo-reasoner (o1-mini) takes no system" in str(w.message) for w in caught), [str(w.message) for w in caught]
    settings = provider_settings(cfg, "d")
    assert settings.model_family == "o1-mini"
    req = ModelRequest(provider="openai", model=m.model, prompt=PROMPT, params=m.default_params())
    kw = {f: getattr(settings, f) for f in ("kind", "model", "model_family", "reasoning_model", "max_tokens_field")}
    out, body, calls = asyncio.run(_call(kw, req, deployments={"geo-reasoner": "o1-mini"}))
    assert not isinstance(out, Exception), out
    assert [c["status"] for c in calls] == [200]
    assert calls[0]["sampling"] == {"max_completion_tokens": 30000}
    assert [x["role"] for x in body["messages"]] == ["user"] and "response_format" not in body
    # without the declaration the same deployment gets o1-mini's 400s (the fake checks it as Azure would)
    kw["model_family"] = None
    out, _, calls = asyncio.run(_call(kw, req, deployments={"geo-reasoner": "o1-mini"}))
    assert isinstance(out, PermanentHTTPError) and [c["status"] for c in calls] == [400]


def test_a_deployment_family_decides_the_image_check_and_the_manifest(tmp_path):
    with pytest.raises(ConfigError) as err:
        config_from_dict(_campaign("geoverify", [_paid("d", "geo-text", base_url=AZURE, model_family="o3-mini")]))
    assert "models[0]: geo-text (o3-mini) takes no image input" in str(err.value), str(err.value)
    doc = _campaign("generic", [_paid("d", "geo-reasoner", base_url=AZURE, model_family="o4-mini"),
                                _paid("g", "geo-4o", base_url=AZURE, model_family="gpt-4o")])
    doc["paths"] = {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")}
    cfg = config_from_dict(doc)
    Manifest(cfg).start_run()
    sent = read_manifest(cfg.state_dir())["sampling_sent"]
    assert sent["d"]["sent"] == {} and sent["d"]["not_sent"] == {"temperature": 0.0}
    assert sent["g"] == {"sent": {"temperature": 0.0}, "not_sent": {}}
    # and the explicit temperature a reasoning deployment refuses is refused at load, naming the key
    doc["models"][0]["temperature"] = 0.3
    with pytest.raises(ConfigError) as err:
        config_from_dict(doc)
    assert "models[0].temperature: geo-reasoner (o4-mini) is an OpenAI reasoning model" in str(err.value)


def test_a_deployment_reserves_its_images_as_the_model_it_serves():
    """The ledger's worst case for an image follows the documented bill of the model a deployment serves: an Azure
    deployment of gpt-4o-mini (25,501 tokens for a 1024x768 high-detail image) reserved only image_input_tokens
    (1,600) before, so the cap could be passed by its image bills."""
    from geoagent.config import reserved_input_tokens

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = config_from_dict(_campaign("generic", [_paid("d", "geo-mini", base_url=AZURE, model_family="gpt-4o-mini"),
                                                     _paid("o", "gpt-4o-mini"), _paid("x", "geo-mini", base_url=AZURE)]))
    d, o, x = cfg.models
    kw = dict(has_image=True, size_px=(1024, 768))
    assert reserved_input_tokens(d, "hi", {}, **kw) == reserved_input_tokens(o, "hi", {}, **kw) > 25_000
    assert reserved_input_tokens(x, "hi", {}, **kw) < 2_000  # an undeclared deployment: image_input_tokens
