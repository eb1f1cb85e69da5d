"""Adversarial review (session 3) of campaign config validation and API-key lookup.

Keys are read from a written ``.env`` / a passed environment; the one network check runs against the local
OpenAI-compatible fake (127.0.0.1). Expected outcomes are stated by hand per case.
"""

from __future__ import annotations

import asyncio
import string
import textwrap

import pytest

from _made_up_keys import made_up_key
from geoagent.config import ConfigError, load_config
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.secrets import lookup_secret

KEY = made_up_key("sk-", 27, seed="review-cfg-n16")


# -- secrets -----------------------------------------------------------------------------------------------
def test_key_with_crlf_or_padding_is_trimmed_and_works_against_the_fake(tmp_path):
    # a .env saved with CRLF line ends read by another tool (docker --env-file) gives "key\r"; before, the
    # "\r" went into the auth header, aiohttp refused it before sending, and every call failed (ValueError)
    env = {"REVIEW_KEY": KEY + "\r", "REVIEW_KEY2": "  " + KEY + "\n"}
    for name in env:
        assert lookup_secret(name, environ=env, dotenv_path=tmp_path / "none.env").reveal() == KEY

    async def call():
        app = llm_openai.make_app(api_keys=(KEY,))
        async with serve(app) as url, HttpClient(default_policy=HostPolicy(max_attempts=1)) as http:
            secret = lookup_secret("REVIEW_KEY", environ=env, dotenv_path=tmp_path / "none.env")
            prov = make_provider(ProviderSettings(kind="openai", model="m", base_url=url + "/v1", api_key=secret), http)
            return await prov.generate(ModelRequest(provider="openai", model="m", prompt="hello")), app

    out, app = asyncio.run(call())
    assert out.text and [c["status"] for c in app["calls"]] == [200]


@pytest.mark.parametrize("value", ["sk-abc\ndef-0123456789", "sk-abc\tdef-0123456789", "sk-abc\x00def-0123456789"])
def test_key_with_inner_control_character_is_refused_naming_the_variable_not_the_value(tmp_path, value):
    with pytest.raises(ValueError) as ei:
        lookup_secret("REVIEW_KEY", environ={"REVIEW_KEY": value}, dotenv_path=tmp_path / "none.env")
    assert "REVIEW_KEY" in str(ei.value) and "0123456789" not in str(ei.value)


def test_dotenv_export_prefix_quotes_and_comments(tmp_path):
    p = tmp_path / ".env"
    p.write_text(textwrap.dedent("""\
        # a comment line
        export A_KEY=sk-aaaa-1111
        B_KEY="sk-bbbb 2222" # quoted value with a space stays one value
        C_KEY='sk-cccc-3333'   # single quotes, trailing comment
        D_KEY=sk-dddd-4444 # inline comment
        """))
    got = {n: lookup_secret(n, environ={}, dotenv_path=p).reveal() for n in ("A_KEY", "B_KEY", "C_KEY", "D_KEY")}
    assert got == {"A_KEY": "sk-aaaa-1111", "B_KEY": "sk-bbbb 2222", "C_KEY": "sk-cccc-3333", "D_KEY": "sk-dddd-4444"}


# -- campaign config ---------------------------------------------------------------------------------------
BASE = """
[campaign]
name = "rev"
[budget]
cap_usd = 1.0
[[models]]
name = "m"
provider = "openai"
model = "gpt-x"
base_url = "http://127.0.0.1:9/v1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
"""


def _write(tmp_path, extra: str = "", base: str = BASE):
    p = tmp_path / "c.toml"
    p.write_text(base + extra, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "params, key",
    [
        ("{ max_output_tokens = -5 }", "max_output_tokens"),  # reserved a negative worst case (under-reservation)
        ("{ max_output_tokens = 0 }", "max_output_tokens"),
        ('{ max_output_tokens = "lots" }', "max_output_tokens"),  # failed on every call at run time
        ("{ max_output_tokens = true }", "max_output_tokens"),
        ("{ temperature = 9.5 }", "temperature"),  # bypassed the models[].temperature bounds
        ('{ temperature = "hot" }', "temperature"),
        ("{ top_p = 1.5 }", "top_p"),
        ('{ seed = "7" }', "seed"),
        ("{ json_mode = 1 }", "json_mode"),
        ("{ system = 3 }", "system"),
        ('{ detail = "ultra" }', "detail"),
    ],
)
def test_known_params_are_type_and_range_checked_at_load(tmp_path, params, key):
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, f"params = {params}\n"))
    msg = str(ei.value)
    assert "models[0].params" in msg and key in msg


def test_unknown_param_names_warn_naming_the_key(tmp_path):
    # providers send only the known params: a typo (or an API field such as max_tokens) is sent nowhere and
    # only changes the request key; before, it was accepted silently
    with pytest.warns(UserWarning) as rec:
        cfg = load_config(_write(tmp_path, 'params = { temprature = 0.5, max_tokens = 300, json_mode = true }\n'))
    text = " ".join(str(w.message) for w in rec)
    assert "models[0].params.temprature" in text and "models[0].params.max_tokens" in text and "params.json_mode:" not in text
    assert cfg.models[0].params["temprature"] == 0.5  # still loads (kept in the key, as written)


@pytest.mark.parametrize(
    "line, key",
    [
        ("timeout_s = inf", "models[0].timeout_s"),
        ("rate = { requests = inf }", "models[0].rate.requests"),
        ("rate = { requests = 5, period_s = inf }", "models[0].rate.period_s"),
        ("expected_latency_s = nan", "models[0].expected_latency_s"),
    ],
)
def test_non_finite_numbers_are_config_errors(tmp_path, line, key):
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, line + "\n"))
    assert key in str(ei.value) and "finite" in str(ei.value)


@pytest.mark.parametrize(
    "section, key",
    [("[budget]\ncap_usd = 1.0\ninput_estimate_factor = inf\n", "budget.input_estimate_factor"),
     ("[budget]\ncap_usd = 1.0\n[queue]\nvisibility_timeout_s = inf\n", "queue.visibility_timeout_s")],
)
def test_non_finite_budget_and_queue_numbers_are_config_errors(tmp_path, section, key):
    base = BASE.replace("[budget]\ncap_usd = 1.0\n", section)
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, base=base))
    assert key in str(ei.value)


# made-up keys in providers' shapes, drawn at run time (tests/_made_up_keys): no key-shaped literal in the source
_HDR_KEYS = [made_up_key("sk-proj-", 32, seed="hdr"), "Bearer " + made_up_key("", 24, seed="hdr"),
             made_up_key("hf_", 34, alphabet=string.ascii_letters, seed="hdr")]


@pytest.mark.parametrize("value", _HDR_KEYS)
def test_key_shaped_header_value_is_refused_without_echo(tmp_path, value):
    # header NAMES that carry credentials were refused, but a key under an innocuous name was accepted and
    # written verbatim to manifest.json (resolved_dict) and the provider settings' public_dict
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, f'headers = {{ "X-Custom" = "{value}" }}\n'))
    msg = str(ei.value)
    assert "models[0].headers" in msg and "api_key_env" in msg
    assert value.split("_", 1)[-1].split("-")[-1].split(" ")[-1] not in msg  # the key's random body


def test_ordinary_header_values_still_load(tmp_path):
    cfg = load_config(_write(tmp_path, 'headers = { "HTTP-Referer" = "https://example.org/geoagent-2024/project42/run7", "X-Title" = "geoagent campaign 2" }\n'))
    assert cfg.models[0].headers["X-Title"] == "geoagent campaign 2"


@pytest.mark.parametrize("host", ["https://nominatim.openstreetmap.org", "nominatim.openstreetmap.org/search",
                                  "nominatim.openstreetmap.org:99999", "nominatim openstreetmap.org", ""])
def test_hosts_key_that_can_never_match_a_request_is_a_config_error(tmp_path, host):
    # the HTTP layer keys hosts as "hostname" or "hostname:port" (lower case); before, a URL or a path here
    # loaded fine and its limits silently applied to nothing (e.g. Nominatim's 1 request/s never enforced)
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, f'\n[hosts."{host}"]\nrate = 1\n'))
    assert "hosts" in str(ei.value) and "hostname" in str(ei.value)


def test_hosts_key_is_matched_case_insensitively(tmp_path):
    from geoagent.config import host_policies
    from geoagent.runtime.http import host_key

    cfg = load_config(_write(tmp_path, '\n[hosts."Nominatim.OpenStreetMap.org"]\nrate = 1\n\n[hosts."127.0.0.1:8080"]\nrate = 2\n'))
    pols = host_policies(cfg)
    assert pols[host_key("https://nominatim.openstreetmap.org/search?q=x")].rate == 1
    assert pols[host_key("http://127.0.0.1:8080/api")].rate == 2


@pytest.mark.parametrize("model", ['""', '"   "', '" gpt-x"', '"gpt-x\\n"'])
def test_an_empty_or_padded_model_id_is_a_config_error_naming_the_file_and_key(tmp_path, model):
    # before: the config loaded and the run refused it at start ("provider settings: 'model' must be a non-empty
    # string"), without the file or the key; a padded id went out as written (the API answers "model not found")
    path = _write(tmp_path, base=BASE.replace('model = "gpt-x"', f"model = {model}"))
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    msg = str(ei.value)
    assert "models[0].model" in msg and str(path) in msg and "model id" in msg, msg


@pytest.mark.parametrize("section", ["image_audit", "referenceability"])
def test_the_crawl_auditors_model_id_is_checked_at_load_too(section):
    from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings

    with pytest.raises(CrawlConfigError) as ei:
        load_crawl_settings({"contact": "mailto:t@example.org", section: {"model": ""}})
    assert f"{section}.model" in str(ei.value) and "model id" in str(ei.value), str(ei.value)
