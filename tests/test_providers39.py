"""Provider-fidelity review, session 39 (prov39): what each provider's real API takes, checked at load or on the wire.

* #6: the Anthropic Messages API takes ``temperature`` 0 to 1 (OpenAI and Gemini 0 to 2); before, 1.5 loaded and every
  request of the Claude model was refused with HTTP 400 and dead-lettered. Refused at load, naming the key.
* #7: a ``base_url`` with the wrong path on a provider's own host (``https://api.openai.com`` without ``/v1``,
  ``https://api.anthropic.com/v1``, ``https://generativelanguage.googleapis.com/v1beta``) loaded, then every call was
  a 404. Refused at load, naming the right root; the OpenAI fake now answers ``/chat/completions`` (no ``/v1``) with
  api.openai.com's 404 instead of serving it.
* #9: a 503 with ``Retry-After`` paused every model of the host, also on a gateway (openrouter.ai: "no provider for
  this model" is one model's). Host-wide only on the providers' own APIs; 529 stays host-wide everywhere.
* #10: the HTTP layer's scrubbing missed a base64 echo of the key in an error body (PermanentHTTPError text and
  ``.body``, RetriesExhausted text).
* #11: every model call carried ``X-Request-Key`` / ``X-Image-Id``, also to paid APIs (an image id can name a
  place). Now only to local servers (the sandbox fakes, which log and answer by them).
* #3: Gemini 3 is sent no temperature (Google recommends its default 1.0); a written one other than 1 is warned of.

Every wire check goes through the real HttpClient to an aiohttp server on 127.0.0.1; public names (api.openai.com,
openrouter.ai) reach it through a resolver that maps every name to 127.0.0.1, so they are judged by name.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import warnings

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver

from geoagent.config import ConfigError, ConfigWarning, config_from_dict
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.sampling import gemini_keeps_default_temperature, sampling_record, sent_sampling
from geoagent.runtime.http import (HostPolicy, HttpClient, PermanentHTTPError, RetriesExhausted, host_key, limit_key,
                                   pauses_whole_host)
from geoagent.sandbox import llm_gemini, llm_openai
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 24, seed="prov39")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.005, backoff_max_s=2.0,
                  timeout_s=5.0)


class _LocalNames(AbstractResolver):
    """Resolves every name to 127.0.0.1: a public API name reaches the local test server, judged by its name."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        return None


def _doc(**model) -> dict:
    entry = {"name": "m", "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 2.0, **model}
    return {"campaign": {"name": "p39", "kind": "generic"}, "budget": {"cap_usd": 1.0}, "models": [entry]}


def _problems(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as e:
        config_from_dict(doc)
    return e.value.problems


def _load_warnings(doc: dict) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config_from_dict(doc)
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


# -- #6: Anthropic's temperature range ---------------------------------------------------------------------------

@pytest.mark.parametrize("where, key", [({"temperature": 1.5}, "models[0].temperature"),
                                        ({"params": {"temperature": 1.01}}, "models[0].params.temperature")])
def test_a_claude_temperature_above_1_is_refused_at_load_naming_the_key(where, key):
    problems = _problems(_doc(provider="anthropic", model="claude-haiku-4-5", **where))
    assert len(problems) == 1 and problems[0].startswith(f"{key}: the Anthropic Messages API takes a temperature "
                                                         "from 0 to 1"), problems


def test_temperature_1_for_claude_and_1_5_elsewhere_still_load():
    config_from_dict(_doc(provider="anthropic", model="claude-haiku-4-5", temperature=1.0))
    config_from_dict(_doc(provider="anthropic", model="claude-3-5-sonnet-20241022", params={"top_p": 0.9}))
    for provider, model in (("openai", "gpt-4o"), ("gemini", "gemini-2.5-flash")):
        config_from_dict(_doc(provider=provider, model=model, temperature=1.5, max_output_tokens=40_000))


def test_claude_4_7_keeps_its_own_message_not_two():
    problems = _problems(_doc(provider="anthropic", model="claude-opus-4-7", temperature=1.5))
    assert len(problems) == 1 and "refuses temperature and top_p at any value" in problems[0]


def test_a_crawl_auditor_on_an_anthropic_model_is_held_to_0_to_1():
    doc = _doc(provider="anthropic", model="claude-haiku-4-5")
    doc["campaign"]["kind"] = "crawl"
    doc["crawl"] = {"image_audit": {"provider": "anthropic", "model": "m", "temperature": 1.2}}
    problems = [p for p in _problems(doc) if "temperature" in p]
    assert problems and problems[0].startswith("crawl.image_audit.temperature: the auditor's model 'm' is an "
                                               "Anthropic model"), problems


# -- #7: base_url paths on the providers' own hosts ----------------------------------------------------------------

@pytest.mark.parametrize("provider, model, url, root", [
    ("openai", "gpt-4o", "https://api.openai.com", "https://api.openai.com/v1"),
    ("openai", "gpt-4o", "https://api.openai.com/", "https://api.openai.com/v1"),
    ("openai", "gpt-4o", "https://api.openai.com/v1/chat/completions", "https://api.openai.com/v1"),
    # OpenAI's regional data-residency hosts serve the same /v1 root (review46b #7; before: not judged)
    ("openai", "gpt-4o", "https://eu.api.openai.com", "https://eu.api.openai.com/v1"),
    ("openai", "gpt-4o", "https://us.api.openai.com/v1/chat/completions", "https://us.api.openai.com/v1"),
    ("anthropic", "claude-haiku-4-5", "https://api.anthropic.com/v1", "https://api.anthropic.com"),
    ("anthropic", "claude-haiku-4-5", "https://api.anthropic.com/v1/messages", "https://api.anthropic.com"),
    ("gemini", "gemini-2.5-flash", "https://generativelanguage.googleapis.com/v1beta",
     "https://generativelanguage.googleapis.com"),
])
def test_a_wrong_path_on_a_providers_own_host_is_refused_naming_the_root(provider, model, url, root):
    problems = [p for p in _problems(_doc(provider=provider, model=model, base_url=url)) if "base_url" in p]
    assert len(problems) == 1 and problems[0].startswith("models[0].base_url: "), problems
    assert f'write base_url = "{root}"' in problems[0] and "404" in problems[0]


def test_the_wrong_gemini_path_refusal_says_the_model_would_stop_with_tasks_kept(tmp_path, monkeypatch, capsys):
    """newuser41 #E: the load-time refusal said "every call would be answered 404 ... and each request
    dead-lettered", but the not-found breaker stops such a model after a few calls and keeps its tasks queued
    (docs/campaigns.md "Dead letters"). Through the CLI, as a user meets it."""
    from geoagent.cli import main

    monkeypatch.setenv("GEMINI_TEST_KEY", KEY)
    cfg = tmp_path / "g.toml"
    cfg.write_text('[campaign]\nname = "g"\nkind = "generic"\nseed = 1\n[budget]\ncap_usd = 1.0\n'
                   '[[models]]\nname = "gem"\nprovider = "gemini"\nmodel = "gemini-2.5-flash"\n'
                   'base_url = "https://generativelanguage.googleapis.com/v1beta"\napi_key_env = "GEMINI_TEST_KEY"\n'
                   "price_input_usd_per_mtok = 0.3\nprice_output_usd_per_mtok = 2.5\nmax_output_tokens = 100\n",
                   encoding="utf-8")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "every call would be answered 404 Not Found: the model would stop after its first few calls with none " \
           "answered, its tasks left queued" in err, err
    assert "dead-lettered" not in err and 'write base_url = "https://generativelanguage.googleapis.com"' in err, err


@pytest.mark.parametrize("provider, model, url", [
    ("openai", "gpt-4o", "https://api.openai.com/v1"),
    ("openai", "gpt-4o", "https://api.openai.com/v1/"),
    ("openai", "gpt-4o", "https://eu.api.openai.com/v1"),
    ("anthropic", "claude-haiku-4-5", "https://api.anthropic.com/"),
    ("gemini", "gemini-2.5-flash", "https://generativelanguage.googleapis.com"),
    # OpenAI-compatible endpoints of the other providers are another provider kind's: not judged by this rule
    ("openai", "gemini-2.5-flash", "https://generativelanguage.googleapis.com/v1beta/openai"),
    ("openai", "claude-haiku-4-5", "https://api.anthropic.com/v1"),
    ("openai", "gpt-4o", "https://openrouter.ai/api/v1"),
])
def test_the_right_roots_and_other_hosts_load(provider, model, url):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no api_key_env: a warning, beside the point here
        cfg = config_from_dict(_doc(provider=provider, model=model, base_url=url, max_output_tokens=40_000))
    assert cfg.models[0].base_url == url


def test_the_openai_fake_answers_a_base_url_without_v1_with_the_real_apis_404():
    """Before: the fake also served /chat/completions, so a base_url without /v1 worked against it and then 404'd
    on every call of api.openai.com."""

    async def go():
        app = llm_openai.make_app(api_keys=(KEY,))
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind="openai", model="gpt-4o-mini", base_url=url, api_key=KEY), http)
            try:
                await prov.generate(ModelRequest(provider="openai", model="gpt-4o-mini", prompt="where?",
                                                 params={"max_output_tokens": 32}))
            except PermanentHTTPError as exc:
                return exc, list(app["calls"])
        raise AssertionError("the call without /v1 was answered")

    exc, calls = asyncio.run(go())
    assert exc.status == 404 and "Invalid URL (POST /chat/completions)" in exc.body
    assert [(c["status"], c["error"], c["output_tokens"]) for c in calls] == [(404, "invalid_url", 0)]


# -- #9: which 503 pauses the whole host ---------------------------------------------------------------------------

def test_pauses_whole_host_rule():
    assert pauses_whole_host(503, "api.openai.com") and pauses_whole_host(503, "API.anthropic.com:443")
    assert pauses_whole_host(503, "generativelanguage.googleapis.com")
    assert not pauses_whole_host(503, "openrouter.ai") and not pauses_whole_host(503, "127.0.0.1:8000")
    assert not pauses_whole_host(503, "res.openai.azure.com")  # one deployment's capacity, not the resource's
    # OpenAI's regional hosts are its own API (review46b #7); a look-alike name is not
    assert pauses_whole_host(503, "eu.api.openai.com") and pauses_whole_host(503, "us.api.openai.com:443")
    assert not pauses_whole_host(503, "evilapi.openai.com.example") and not pauses_whole_host(503, "xapi.openai.com")
    assert pauses_whole_host(529, "openrouter.ai") and pauses_whole_host(529, "127.0.0.1:8000")
    assert not any(pauses_whole_host(s, "api.openai.com") for s in (429, 500, 502, 504))


@pytest.mark.parametrize("name, status, host_wide", [("openrouter.ai", 503, False), ("api.openai.com", 503, True),
                                                     ("openrouter.ai", 529, True)])
def test_a_503_wait_pauses_the_host_only_on_a_providers_own_api(name, status, host_wide):
    """A gateway's 503 ("no provider for this model", OpenRouter) pauses that model's key; api.openai.com's 503
    and anyone's 529 pause every model of the host."""
    answered: list[str] = []

    async def chat(request: web.Request) -> web.Response:
        model = (await request.json())["model"]
        answered.append(model)
        if len(answered) == 1:
            return web.json_response({"error": {"code": status, "message": "unavailable"}}, status=status,
                                     headers={"Retry-After": "0.2"})
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)

    async def go():
        async with serve(app) as local:
            base = f"http://{name}:{local.rsplit(':', 1)[1]}"
            host = host_key(base)
            key = limit_key(host, "a")
            async with HttpClient(default_policy=FAST, model_policies={key: FAST}, resolver=_LocalNames()) as http:
                await http.request("POST", base + "/v1/chat/completions", json={"model": "a"}, limit=key)
                return http.pauses(host), http.pauses(key)

    host_pauses, key_pauses = asyncio.run(go())
    assert answered == ["a", "a"]  # waited out, then answered
    assert bool(host_pauses) is host_wide
    assert key_pauses  # the model's own key waited either way (a host's pause holds its keys too)


# -- #10: a base64 echo of the key in an error body ----------------------------------------------------------------

#: a key whose base64 holds "/" and "+" (written "\/" by the fake's PHP-style JSON), made up for the test
B64_KEY = "sk-prov39-" + "???>>>" * 4 + made_up_key("", 12, seed="prov39-b64")


def _b64_stretches(key: str) -> list[str]:
    enc = base64.b64encode(key.encode()).decode()
    core = enc[2:-4]  # well inside the key's bits, whatever the alignment
    assert "/" in core and "+" in core
    return [core, core.replace("/", "\\/")]


def test_a_base64_echo_of_the_key_in_a_401_never_reaches_the_error():
    async def go():
        app = llm_openai.make_app(api_keys=("accepted-key-0123456789",), echo_key="base64")
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind="openai", model="gpt-4o-mini", base_url=url + "/v1",
                                                  api_key=B64_KEY), http)
            try:
                await prov.generate(ModelRequest(provider="openai", model="gpt-4o-mini", prompt="where?",
                                                 params={"max_output_tokens": 32}))
            except PermanentHTTPError as exc:
                return exc
        raise AssertionError("the refused key was answered")

    exc = asyncio.run(go())
    assert exc.status == 401 and "Incorrect API key provided" in exc.body
    for text in (str(exc), exc.body, exc.body_excerpt):
        for stretch in _b64_stretches(B64_KEY):
            assert stretch not in text and stretch.lower() not in text.lower(), text
    assert "<redacted>" in exc.body


def test_a_base64_echo_in_a_retried_error_never_reaches_retries_exhausted():
    async def err(request: web.Request) -> web.Response:
        echoed = base64.b64encode(request.headers["Authorization"].encode()).decode()
        return web.Response(status=500, text=f'{{"error": "upstream refused header {echoed}"}}',
                            content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", err)

    async def go():
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            try:
                await http.request("POST", url + "/v1/chat/completions", json={},
                                   headers={"Authorization": f"Bearer {B64_KEY}"})
            except RetriesExhausted as exc:
                return exc
        raise AssertionError("the 500 was answered")

    exc = asyncio.run(go())
    assert "http 500" in str(exc) and "<redacted>" in str(exc)
    core = base64.b64encode(B64_KEY.encode()).decode()[4:-4]
    assert not any(core[i:i + 16] in str(exc) for i in range(0, len(core) - 16, 4)), str(exc)


# -- #11: X-Request-Key / X-Image-Id only to local servers ---------------------------------------------------------

@pytest.mark.parametrize("name, sent", [("api.openai.com", False), ("openrouter.ai", False), ("127.0.0.1", True),
                                        ("openai.sandbox.invalid", True), ("my-gpu-box", True)])
def test_request_key_and_image_id_headers_go_only_to_local_servers(name, sent):
    seen: list[dict] = []

    async def go():
        app = llm_openai.make_app(api_keys=(KEY,))
        async with serve(app) as local, HttpClient(default_policy=FAST, resolver=_LocalNames()) as http:
            base = f"http://{name}:{local.rsplit(':', 1)[1]}/v1"
            prov = make_provider(ProviderSettings(kind="openai", model="gpt-4o-mini", base_url=base, api_key=KEY),
                                 http)
            req = ModelRequest(provider="openai", model="gpt-4o-mini", prompt="where?",
                               image_id="Zürich-Bahnhofstr-12", image=b"\xff\xd8\xff\xe0" + b"0" * 64,
                               params={"max_output_tokens": 32})
            headers = prov.build(req)[2]
            seen.append(headers)
            await prov.generate(req)
            return req.key(), list(app["calls"])

    key, calls = asyncio.run(go())
    assert ("X-Request-Key" in seen[0]) is sent and ("X-Image-Id" in seen[0]) is sent
    assert len(calls) == 1 and calls[0]["status"] == 200
    # the fake's call log keys on the header: the local fakes still see the request key (and answer per image id)
    assert calls[0]["key"] == (key if sent else None)
    assert (calls[0]["image_id"] == "Zürich-Bahnhofstr-12") is sent


# -- #3: Gemini 3 is sent no temperature -----------------------------------------------------------------------

def test_gemini_3_ids():
    for model in ("gemini-3-pro-preview", "models/gemini-3-flash-preview", "gemini-3.1-pro-preview", "google/gemini-3"):
        assert gemini_keeps_default_temperature(model), model
    for model in ("gemini-2.5-pro", "gemini-2.0-flash", "gemini-30x", "gemini-1.5-flash"):
        assert not gemini_keeps_default_temperature(model), model


def test_gemini_3_gets_no_temperature_on_the_wire_and_the_manifest_says_why():
    async def go(model: str):
        app = llm_gemini.make_app(api_keys=(KEY,))
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind="gemini", model=model, base_url=url, api_key=KEY), http)
            await prov.generate(ModelRequest(provider="gemini", model=model, prompt="where?",
                                             params={"max_output_tokens": 64, "temperature": 0.0, "top_p": 0.9,
                                                     "seed": 7}))
            return app["calls"][0]["sampling"]

    sent3 = asyncio.run(go("gemini-3-pro-preview"))
    assert "temperature" not in sent3 and sent3["topP"] == 0.9 and sent3["seed"] == 7
    sent25 = asyncio.run(go("gemini-2.5-flash"))
    assert sent25["temperature"] == 0.0 and sent25["topP"] == 0.9
    params = {"temperature": 0.0, "top_p": 0.9}
    assert sent_sampling("gemini", "gemini-3-pro-preview", params) == {"top_p": 0.9}
    rec = sampling_record("gemini", "gemini-3-pro-preview", params)
    assert rec["not_sent"] == {"temperature": 0.0} and "Gemini 3" in rec["why"]


@pytest.mark.parametrize("where, key", [({"temperature": 0.2}, "models[0].temperature"),
                                        ({"params": {"temperature": 1.5}}, "models[0].params.temperature")])
def test_a_written_temperature_for_gemini_3_is_warned_of_at_load(where, key):
    doc = _doc(provider="gemini", model="gemini-3-pro-preview", max_output_tokens=40_000, **where)
    lines = [w for w in _load_warnings(doc) if "Gemini 3" in w]
    assert len(lines) == 1 and f"{key}: gemini-3-pro-preview is a Gemini 3 model, which is sent no temperature" \
        in lines[0], lines
    assert ("looping" in lines[0]) is (key == "models[0].temperature")  # the low value's harm is named


@pytest.mark.parametrize("model, extra", [("gemini-3-pro-preview", {}), ("gemini-3-pro-preview", {"temperature": 1}),
                                          ("gemini-2.5-pro", {"temperature": 0.2})])
def test_no_warning_for_the_default_for_1_or_for_older_gemini(model, extra):
    doc = _doc(provider="gemini", model=model, max_output_tokens=40_000, **extra)
    assert not [w for w in _load_warnings(doc) if "Gemini 3" in w]


def test_gemini_3_behind_an_openai_compatible_route_is_sent_no_temperature_either():
    """review39b #7: Gemini's OpenAI-compatible endpoint and OpenRouter's google/gemini-3-* got temperature 0.0."""
    from geoagent.providers.sampling import gemini_keeps_default_temperature, sent_sampling

    for model, base in (("gemini-3-pro-preview", "https://generativelanguage.googleapis.com/v1beta/openai"),
                        ("google/gemini-3-pro-preview", "https://openrouter.ai/api/v1")):
        assert "temperature" not in sent_sampling("openai", model, {"temperature": 0.0, "seed": 3}, base_url=base)
    assert sent_sampling("openai", "google/gemini-2.5-pro", {"temperature": 0.0},
                         base_url="https://openrouter.ai/api/v1") == {"temperature": 0.0}
    assert gemini_keeps_default_temperature("tunedModels/gemini-3-x") and not gemini_keeps_default_temperature("gpt-4o")


def test_the_openai_provider_builds_a_gemini_3_request_without_temperature():
    import anyio as _anyio

    from geoagent.providers import ModelRequest, ProviderSettings, make_provider
    from geoagent.runtime.http import HttpClient

    async def main():
        async with HttpClient() as http:
            prov = make_provider(ProviderSettings(kind="openai", model="google/gemini-3-pro-preview",
                                                  base_url="https://openrouter.ai/api/v1", api_key="k-test"), http)
            _, body, _ = prov.build(ModelRequest(provider="openai", model="google/gemini-3-pro-preview", prompt="hi",
                                                 params={"temperature": 0.0, "max_output_tokens": 10}))
            return body

    body = _anyio.run(main)
    assert "temperature" not in body and body["model"] == "google/gemini-3-pro-preview"
