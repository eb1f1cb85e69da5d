"""Review of the prov46 provider fixes (review46b):

* #2 the refusals of a model whose every call would fail (a Responses-only OpenAI model, a sampling value Claude
  refuses on an OpenAI-compatible route) blocked ``status``, ``dead`` and ``export`` too (exit 2), so what a campaign
  had stored could not be shown or exported without editing the file; those commands now warn and go on, ``run``
  (its dry run too) still refuses;
* #3 a ``model_family`` naming a Responses-only model was refused on every host, a bridging gateway (a LiteLLM alias)
  too; and on api.openai.com only ``model_family`` was read when set (``model = "gpt-5-codex"``,
  ``model_family = "gpt-5"`` loaded);
* #5 every OpenAI-compatible host's manifest said OpenAI documents the seed as best effort (Ollama, vLLM, the fake);
* #6 ``anthropic/claude-opus-4.7:thinking`` (an OpenRouter variant) read as Claude Opus 4.0, in the client and the fake;
* #7 OpenAI's regional hosts (``eu.api.openai.com``, ``us.api.openai.com``) were not OpenAI.

The real config loader, CLI and OpenAI-compatible provider against the local fakes; no function is mocked."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from geoagent.cli import main
from geoagent.config import ConfigError, ConfigWarning, config_from_dict
from tests._model_harness import generic_campaign, model_table

# a model whose every call would fail on api.openai.com (prov46 #1), and a Claude 4.7 variant on OpenRouter with a
# temperature it refuses at any value (prov46 #2; its ':thinking' suffix is review46b #6)
FAILING_MODELS = '''
[[models]]
name = "pro"
provider = "openai"
model = "gpt-5-pro"
api_key_env = "OPENAI_API_KEY"
price_input_usd_per_mtok = 15
price_output_usd_per_mtok = 120
max_output_tokens = 30000

[[models]]
name = "opus"
provider = "openai"
model = "anthropic/claude-opus-4.7:thinking"
base_url = "https://openrouter.ai/api/v1"
api_key_env = "OPENROUTER_API_KEY"
price_input_usd_per_mtok = 5
price_output_usd_per_mtok = 25
max_output_tokens = 2000
temperature = 0.2
'''


def _refused(err: str) -> bool:
    return any(line.startswith("config error:") for line in err.splitlines())


def test_read_only_commands_warn_of_failing_models_and_go_on_while_run_refuses(tmp_path, capsys):
    cfgp = generic_campaign(tmp_path, name="ran", n=5, cap_usd=1.0, models=model_table())
    assert main(["run", str(cfgp), "--no-live"]) == 0
    # the file now names models whose calls would all fail (as a campaign that ran before the checks existed)
    cfgp.write_text(cfgp.read_text(encoding="utf-8") + FAILING_MODELS, encoding="utf-8")
    capsys.readouterr()
    for command in (["run", str(cfgp), "--no-live"], ["run", str(cfgp), "--simulate", "--no-live"],
                    ["crawl", str(cfgp), "--simulate", "--no-live"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert _refused(err) and "models[1].model: 'gpt-5-pro' is served only on OpenAI's Responses" in err
        assert "models[2].temperature: anthropic/claude-opus-4.7:thinking refuses temperature and top_p" in err
    assert main(["status", str(cfgp)]) == 0
    cap = capsys.readouterr()
    assert not _refused(cap.err) and "campaign complete: every queue drained" in cap.out, cap
    for text in ("models[1].model: 'gpt-5-pro' is served only on OpenAI's Responses API",
                 "models[2].temperature: anthropic/claude-opus-4.7:thinking refuses temperature and top_p",
                 "`run` and `crawl` refuse this file; this command only reads"):
        assert text in cap.err, cap.err
    assert main(["dead", str(cfgp)]) == 0
    assert not _refused(capsys.readouterr().err)
    assert main(["export", str(cfgp)]) == 0
    cap = capsys.readouterr()
    assert not _refused(cap.err) and "results: 5 rows" in cap.out, cap


def _model(**model):
    doc = {"campaign": {"name": "r46b"}, "budget": {"cap_usd": 1.0},
           "models": [{"name": "m", "provider": "openai", "api_key_env": "OPENAI_API_KEY", "max_output_tokens": 30000,
                       "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 4.0, **model}]}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cfg = config_from_dict(doc, source="r46b.toml")
    return cfg, [str(w.message) for w in seen if issubclass(w.category, ConfigWarning)]


def test_a_responses_only_family_is_refused_on_openai_and_azure_only_and_openai_reads_the_model_too():
    # a LiteLLM alias declaring the family it bridges to: served (review46b #3)
    cfg, _ = _model(model="codex", model_family="gpt-5-codex", base_url="http://localhost:4000/v1")
    assert cfg.models[0].openai_reasoning  # the family still gives OpenAI's reasoning rules
    with pytest.raises(ConfigError) as err:  # Azure serves it on /responses only
        _model(model="coder", model_family="gpt-5-codex", base_url="https://res.openai.azure.com/openai/v1")
    assert "models[0].model_family: 'gpt-5-codex' is served only on OpenAI's Responses API at res.openai.azure.com" \
        in str(err.value) and "HTTP 400 'OperationNotSupported'" in str(err.value)
    with pytest.raises(ConfigError) as err:  # on api.openai.com the id sent is the model, whatever the family says
        _model(model="gpt-5-codex", model_family="gpt-5")
    text = str(err.value)
    assert "models[0].model: 'gpt-5-codex' is served only on OpenAI's Responses API at api.openai.com" in text
    assert "a gateway that bridges Chat Completions to the Responses API" in text  # the way out
    with pytest.raises(ConfigError) as err:
        _model(model="o3", model_family="o3-pro")
    assert "models[0].model_family: 'o3-pro'" in str(err.value)


@pytest.mark.parametrize("host", ["eu.api.openai.com", "us.api.openai.com"])
def test_openai_regional_hosts_are_openai(host):
    with pytest.raises(ConfigError) as err:
        _model(model="gpt-5-pro", base_url=f"https://{host}/v1")
    assert f"served only on OpenAI's Responses API at {host}" in str(err.value)
    # a reasoning model there follows OpenAI's rules, without the "not api.openai.com" warning
    cfg, seen = _model(model="o3", base_url=f"https://{host}/v1")
    assert cfg.models[0].openai_reasoning and not [w for w in seen if "looks like an OpenAI reasoning model" in w]
    with pytest.raises(ConfigError) as err:
        _model(model="o3", base_url=f"https://{host}/v1", temperature=0.2)
    assert "models[0].temperature: o3 is an OpenAI reasoning model" in str(err.value)


def test_a_regional_host_gets_the_reasoning_models_body_from_the_provider():
    from geoagent.providers import ModelRequest, ProviderSettings, make_provider

    provider = make_provider(ProviderSettings(kind="openai", model="o3", base_url="https://eu.api.openai.com/v1"))
    _url, body, _headers = provider.build(ModelRequest(provider="openai", model="o3", prompt="where?", params={
        "temperature": 1.0, "max_output_tokens": 500}))
    assert body.get("max_completion_tokens") == 500 and "max_tokens" not in body and "temperature" not in body


def test_the_seed_is_called_best_effort_only_on_openai_and_azure():
    from geoagent.providers.sampling import sampling_record

    params = {"temperature": 0.0, "seed": 7, "max_output_tokens": 512}
    for base_url in (None, "https://eu.api.openai.com/v1", "https://res.openai.azure.com/openai/v1"):
        record = sampling_record("openai", "gpt-4o-mini", params, base_url=base_url)
        assert "OpenAI documents it as best effort" in record["why"], base_url
    for base_url in ("http://localhost:11434/v1", "http://openai.sandbox.invalid/v1", "https://openrouter.ai/api/v1"):
        record = sampling_record("openai", "qwen2.5vl:7b", params, base_url=base_url)
        assert record == {"sent": {"temperature": 0.0, "seed": 7}, "not_sent": {}}, (base_url, record)


@pytest.mark.parametrize("model", ["anthropic/claude-opus-4.7:thinking", "anthropic/claude-opus-4.7:beta"])
def test_an_openrouter_variant_suffix_keeps_the_claude_version(model):
    from geoagent.providers.sampling import openai_compat_sampling
    from geoagent.sandbox import llm_openai

    # Claude 4.7 is sent no temperature or top_p (read as Opus 4.0, both were sent)
    sent = openai_compat_sampling({"temperature": 0.2, "top_p": 0.9, "max_output_tokens": 100}, model,
                                  "https://openrouter.ai/api/v1")
    assert sent == {}, sent
    # the fake reads the same version: it refuses a temperature for it as the real API does
    from geoagent.sandbox.server import serve
    import aiohttp

    async def post():
        async with serve(llm_openai.make_app(require_auth=False)) as url, aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/chat/completions", json={
                    "model": model, "temperature": 0.2, "max_tokens": 50,
                    "messages": [{"role": "user", "content": "hi"}]}) as r:
                return r.status, await r.json()

    status, body = asyncio.run(post())
    assert status == 400 and "temperature" in str(body), body
