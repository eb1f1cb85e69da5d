"""Azure OpenAI's classic per-deployment route, through the OpenAI provider and the OpenAI fake.

``POST https://<resource>.openai.azure.com/openai/deployments/<deployment>/chat/completions?api-version=<version>``
with an ``api-key: <key>`` header (not Bearer); the body needs no ``model``. ``[[models]] api_version`` switches an
``provider = "openai"`` entry to it (``model`` = the deployment name, ``base_url`` = the resource endpoint).

Before (session 11): only Azure's v1 API (``.../openai/v1``, Bearer key) could be used; ``api_version`` was an
unknown key, and the fake had no such route. Also, the HTTP layer read a 429's pause only from ``Retry-After``
(whole seconds on Azure), never from Azure's more precise ``retry-after-ms``.
"""

from __future__ import annotations

import asyncio
import pickle
import time
import warnings

import aiohttp
import pytest

from geoagent.campaigns import register_all_sections
from geoagent.config import ConfigError, ConfigWarning, config_from_dict, provider_settings
from geoagent.providers import ModelRequest, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox import echo
from geoagent.sandbox import llm_openai
from geoagent.sandbox.faults import FAULTS_KEY, FaultConfig
from geoagent.sandbox.server import serve

register_all_sections()

#: built from parts so no key-shaped literal sits in the source
KEY = "azk" + "TESTKEY" + "0123456789abcdef"
OTHER = "azk" + "WRONGKEY" + "0123456789abcdef"
VERSION = "2024-10-21"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, backoff_base_s=0.005, backoff_max_s=0.02,
                  timeout_s=5.0)
PROMPT = "Where was this street-level photo taken? Reply in JSON with city and area."
RESOURCE = "https://geo-res.openai.azure.com"


def _paid(name: str, model: str, **kw) -> dict:
    return {"name": name, "provider": "openai", "model": model, "price_input_usd_per_mtok": 1.0,
            "price_output_usd_per_mtok": 4.0, "max_output_tokens": 300, **kw}


def _campaign(models: list[dict]) -> dict:
    return {"campaign": {"name": "az", "kind": "generic", "contact": "mailto:you@example.org"},
            "budget": {"cap_usd": 1.0}, "models": models}


def _load(models: list[dict]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return config_from_dict(_campaign(models))


# -- the fake speaks the route, and refuses what Azure refuses ---------------------------------------------------

async def _post(path: str, *, headers: dict, body: dict | None = None, **app_kw):
    app = llm_openai.make_app(api_keys=(KEY,), deployments={"geo-4o": "gpt-4o-mini"}, **app_kw)
    body = body if body is not None else {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 50}
    async with serve(app) as url, aiohttp.ClientSession() as session:
        async with session.post(url + path, headers=headers, json=body) as resp:
            return resp.status, await resp.json(), dict(resp.headers), app


ROUTE = "/openai/deployments/geo-4o/chat/completions"


def test_fake_answers_the_classic_route_with_the_deployments_model():
    status, body, _, app = asyncio.run(_post(f"{ROUTE}?api-version={VERSION}", headers={"api-key": KEY}))
    assert status == 200, body
    assert body["model"] == "gpt-4o-mini" and body["choices"][0]["message"]["content"]
    assert [c["status"] for c in app["calls"]] == [200]


@pytest.mark.parametrize("query", ["", "?api-version=2019-01-01", "?api-version="])
def test_fake_refuses_a_missing_or_unknown_api_version_with_404(query):
    # Azure answers a request without (or with an unknown) api-version 404 "Resource not found"
    # (MicrosoftDocs/azure-docs#114602, microsoft/azurechat#426)
    status, body, _, _ = asyncio.run(_post(ROUTE + query, headers={"api-key": KEY}))
    assert (status, body) == (404, {"error": {"code": "404", "message": "Resource not found"}})


def test_fake_refuses_bearer_auth_and_a_wrong_key_as_azure_does():
    # a Bearer header is read as a Microsoft Entra token, and an API key is none (run-llama/llama_index#12484)
    status, body, _, _ = asyncio.run(_post(f"{ROUTE}?api-version={VERSION}", headers={"Authorization": f"Bearer {KEY}"}))
    assert status == 401 and body == {"statusCode": 401, "message": llm_openai.AZURE_BEARER_401}
    # a wrong api-key (SciSharp/BotSharp#386), the key never echoed
    status, body, _, _ = asyncio.run(_post(f"{ROUTE}?api-version={VERSION}", headers={"api-key": OTHER}))
    assert status == 401 and body == {"error": {"code": "401", "message": llm_openai.AZURE_KEY_401}}
    assert OTHER not in str(body)


def test_fake_refuses_an_unknown_deployment():
    status, body, _, _ = asyncio.run(_post(f"/openai/deployments/nope/chat/completions?api-version={VERSION}",
                                           headers={"api-key": KEY}))
    assert status == 404 and body["error"]["code"] == "DeploymentNotFound"


def test_fake_throttles_in_azures_shape_with_retry_after_ms():
    status, body, headers, _ = asyncio.run(_post(f"{ROUTE}?api-version={VERSION}", headers={"api-key": KEY},
                                                 faults=FaultConfig(rate=1.0, kinds=("429",), retry_after_s=0.25)))
    assert status == 429 and body["error"]["code"] == "429"
    assert f"Azure OpenAI API version {VERSION} have exceeded" in body["error"]["message"]
    lower = {k.lower(): v for k, v in headers.items()}
    assert lower["retry-after-ms"] == "250" and lower["retry-after"] == "1"


# -- config: api_version is validated at load, naming the key ----------------------------------------------------

@pytest.mark.parametrize("entry,want", [
    (_paid("a", "geo-4o", base_url=RESOURCE, api_key_env="AZURE_OPENAI_API_KEY", api_version="21-10-2024"),
     "models[0].api_version: expected an Azure OpenAI api-version"),
    (_paid("a", "geo-4o", base_url=RESOURCE, api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION,
           provider="anthropic"), 'models[0]: api_version: only for provider = "openai"'),
    (_paid("a", "geo-4o", api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION),
     "models[0]: api_version: the classic Azure OpenAI route needs base_url"),
    (_paid("a", "geo-4o", base_url=RESOURCE + "/openai/v1", api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION),
     "models[0]: api_version: base_url ends in /openai/v1, Azure's v1 API"),
    (_paid("a", "geo-4o", base_url=RESOURCE + "/openai/deployments/geo-4o", api_key_env="AZURE_OPENAI_API_KEY",
           api_version=VERSION), "models[0]: api_version: base_url is the resource endpoint"),
    (_paid("a", "geo-4o", base_url=RESOURCE, api_version=VERSION), "models[0]: api_version: needs api_key_env"),
])
def test_api_version_is_checked_at_load(entry, want):
    with pytest.raises(ConfigError) as err:
        _load([entry])
    assert want in str(err.value), str(err.value)


def test_a_valid_entry_reaches_the_provider_settings_without_its_key(monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    cfg = _load([_paid("a", "geo-4o", base_url=RESOURCE + "/", api_key_env="AZURE_OPENAI_API_KEY",
                       api_version="2025-04-01-preview", model_family="gpt-4o-mini")])
    s = provider_settings(cfg, "a")
    assert s.api_version == "2025-04-01-preview"
    pub = s.public_dict()
    assert pub["api_version"] == "2025-04-01-preview" and KEY not in repr(pub) and KEY not in repr(s)


# -- the provider: URL, header, body, limit key, errors ----------------------------------------------------------

async def _generate(settings_kw: dict, request: ModelRequest, *, key: str = KEY, **app_kw):
    app = llm_openai.make_app(seed=1, api_keys=(KEY,), **app_kw)
    async with serve(app) as url, HttpClient(default_policy=app_kw.pop("policy", FAST)) as http:
        from geoagent.providers import ProviderSettings

        prov = make_provider(ProviderSettings(kind="openai", base_url=url, api_key=key, **settings_kw), http)
        built = prov.build(request)
        try:
            out = await prov.generate(request)
        except Exception as exc:  # returned for assertions
            out = exc
    return out, built, list(app["calls"]), prov


def _req(model: str, **params) -> ModelRequest:
    return ModelRequest(provider="openai", model=model, prompt=PROMPT,
                        params={"max_output_tokens": 300, "temperature": 0.0, **params})


def test_provider_sends_the_classic_route_and_is_answered():
    out, (url, body, headers), calls, prov = asyncio.run(_generate(
        {"model": "geo-4o", "api_version": VERSION}, _req("geo-4o"), deployments={"geo-4o": "gpt-4o-mini"}))
    assert not isinstance(out, Exception), out
    assert url.endswith(f"/openai/deployments/geo-4o/chat/completions?api-version={VERSION}")
    assert headers["api-key"] == KEY and "Authorization" not in headers
    assert "model" not in body  # the deployment is in the path
    assert out.provider_model == "gpt-4o-mini" and [c["status"] for c in calls] == [200]
    # the deployment's own rate limits: keyed per deployment at the resource's host
    assert prov.limit_key.endswith("/geo-4o")


def test_two_deployments_on_one_resource_have_their_own_limit_keys(monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    cfg = _load([_paid("a", "geo-4o", base_url=RESOURCE, api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION),
                 _paid("b", "geo-mini", base_url=RESOURCE, api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION)])
    a, b = (make_provider(provider_settings(cfg, n)) for n in ("a", "b"))
    assert (a.limit_key, b.limit_key) == ("geo-res.openai.azure.com/geo-4o", "geo-res.openai.azure.com/geo-mini")
    # and the HTTP client is given each deployment's own rate and concurrency under those keys
    from geoagent.config import model_limit_policies

    assert sorted(model_limit_policies(cfg)) == [a.limit_key, b.limit_key]


def test_a_declared_family_still_decides_the_rules_on_the_classic_route():
    out, (_, body, _), calls, _ = asyncio.run(_generate(
        {"model": "geo-reasoner", "api_version": VERSION, "model_family": "o1-mini"},
        _req("geo-reasoner", system="Answer in JSON.", json_mode=True), deployments={"geo-reasoner": "o1-mini"}))
    assert not isinstance(out, Exception), out
    assert [m["role"] for m in body["messages"]] == ["user"] and "response_format" not in body
    assert calls[0]["sampling"] == {"max_completion_tokens": 300}


def test_a_refused_key_raises_a_permanent_error_that_holds_no_key():
    out, _, calls, _ = asyncio.run(_generate({"model": "geo-4o", "api_version": VERSION}, _req("geo-4o"), key=OTHER,
                                             deployments={"geo-4o": "gpt-4o-mini"}))
    assert isinstance(out, PermanentHTTPError) and out.status == 401, out
    assert "Access denied due to invalid subscription key" in str(out)
    for text in (str(out), repr(vars(out)), pickle.dumps(out).decode("latin-1")):
        assert OTHER not in text and KEY not in text
    assert f"api-version={VERSION}" in out.url  # the URL is shown (it holds no secret)


def test_the_http_layer_scrubs_an_api_key_header_echoed_back():
    async def go():
        async with serve(echo.make_app()) as base, HttpClient(default_policy=FAST) as http:
            with pytest.raises(PermanentHTTPError) as ei:
                await http.request("POST", base + "/status/400", params={"body": f"bad key {KEY}"},
                                   headers={"api-key": KEY})
            return ei.value

    err = asyncio.run(go())
    assert KEY not in str(err) and KEY not in repr(vars(err))


@pytest.mark.wallclock  # asserts a gap between arrivals: run in the uncrowded phase (1.8 s once beside two suites)
def test_a_429_pause_is_read_from_retry_after_ms():
    """The fake answers Azure's 429 with lower-case ``retry-after: 1`` and ``retry-after-ms: 250``; the call waits the
    250 ms (milliseconds win, as Azure's own SDKs read them: @azure/core-rest-pipeline throttlingRetryStrategy),
    then is answered. Before: only ``retry-after`` was read, so the retry came after 1.0 s (measured gap 1.007 s)."""
    policy = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=3, backoff_base_s=0.005,
                        backoff_max_s=2.0, timeout_s=5.0)
    faults = FaultConfig(rate=1.0, kinds=("429",), retry_after_s=0.25)

    async def go():
        app = llm_openai.make_app(seed=1, api_keys=(KEY,), deployments={"geo-4o": "gpt-4o-mini"}, faults=faults)
        async with serve(app) as url, HttpClient(default_policy=policy) as http:
            from geoagent.providers import ProviderSettings

            prov = make_provider(ProviderSettings(kind="openai", model="geo-4o", base_url=url, api_key=KEY,
                                                  api_version=VERSION, policy=policy), http)
            state = app[FAULTS_KEY]

            async def lift():  # the first request is throttled, the rest are not
                while state.total < 1:
                    await asyncio.sleep(0.001)
                faults.rate = 0.0

            lifter = asyncio.create_task(lift())
            t0 = time.monotonic()
            out = await prov.generate(_req("geo-4o"))
            await lifter
            times = [r.t_mono for r in state.log]
            return out, time.monotonic() - t0, times

    out, _, times = asyncio.run(go())
    assert not isinstance(out, Exception)
    assert len(times) == 2
    gap = times[1] - times[0]
    assert 0.2 <= gap < 0.9, gap


def test_retry_after_of_reads_milliseconds_first_in_any_letter_case():
    from geoagent.runtime.http import retry_after_of

    assert retry_after_of({"Retry-After-Ms": "250", "Retry-After": "1"}) == 0.25
    assert retry_after_of({"x-ms-retry-after-ms": "1500"}) == 1.5
    assert retry_after_of({"retry-after": "2"}) == 2.0
    assert retry_after_of({"retry-after-ms": "soon", "Retry-After": "3"}) == 3.0  # unreadable ms: the seconds
    assert retry_after_of({"retry-after-ms": "-5"}) is None and retry_after_of({}) is None
