"""Adversarial review (session 3) of campaign config validation and API-key lookup.

Keys are read from a written ``.env`` / a passed environment; the one network check runs against the local
OpenAI-compatible fake (127.0.0.1). Expected outcomes are stated by hand per case.
"""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from geoagent.config import ConfigError, load_config
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.secrets import lookup_secret

KEY = "sk-" "review-cfg-0123456789abcdef"


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
