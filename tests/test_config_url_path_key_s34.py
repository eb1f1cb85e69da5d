"""A key pasted into the PATH of a base URL is refused at load (break34 config #1).

``base_url = "https://api.openai.com/sk-proj-<key>/v1"`` loaded without a word, for a paid host and a local one;
the key was then written in full to ``manifest.json``, and, against a server that echoed the path, to
``progress.jsonl``, the queue database and the ``run``/``status``/``dead`` output. The loader refused a key in the
user part and the query of a URL, not in its path.
"""

from __future__ import annotations

import pytest
from _made_up_keys import made_up_key

from geoagent.config import ConfigError, config_from_dict, url_problem

KEY = made_up_key("sk-proj-", 48, seed="path34")
GOOGLE = made_up_key("AIza", 35, seed="path34")


def _cfg(base_url: str):
    return config_from_dict({"campaign": {"name": "p", "kind": "generic"}, "budget": {"cap_usd": 1.0},
                             "models": [{"name": "m", "provider": "openai", "model": "gpt-4o",
                                         "base_url": base_url, "api_key_env": "K",
                                         "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 1.0}]})


@pytest.mark.parametrize("url", [
    f"https://api.openai.com/{KEY}/v1",
    f"http://127.0.0.1:8000/{KEY}/v1",
    f"https://generativelanguage.googleapis.com/v1beta/{GOOGLE}",
    "https://api.openai.com/" + KEY.replace("-", "%2D") + "/v1",  # percent-encoded
])
def test_a_key_in_the_path_is_refused_without_echoing_it(url):
    assert url_problem(url, example="https://api.openai.com/v1", where_key="k") == \
        "a URL without credentials in its path (k)"
    with pytest.raises(ConfigError) as e:
        _cfg(url)
    assert "without credentials in its path" in str(e.value)
    assert KEY not in str(e.value) and GOOGLE not in str(e.value)


@pytest.mark.parametrize("url", [
    "https://api.openai.com/v1",
    # Cloudflare AI Gateway: account id (32 hex) and gateway name in the path
    "https://gateway.ai.cloudflare.com/v1/" + "0123456789abcdef" * 2 + "/my-gateway/openai",
    "https://my-resource.openai.azure.com/openai/v1",
    "https://openrouter.ai/api/v1",
    "http://localhost:11434/v1",
    "https://example.org/sk-bratislava-geoverify-pilot/v1",  # words after the prefix, not a key
])
def test_ordinary_base_urls_load(url):
    assert url_problem(url, example="https://api.openai.com/v1", where_key="k") is None
    assert _cfg(url).model("m").base_url == url
