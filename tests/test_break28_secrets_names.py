"""Secrets, names and one-line fields (break28 #5-#7).

#5: an API key pasted into a campaign file was echoed by the config errors (``campaign.seed: expected an integer,
got 'sk-proj-...'``, an unknown key or table named like a key) and accepted as a campaign name, a model name or id
and a description, from where it reached the dry-run lines and the manifest. Now the errors show "a value that looks
like an API key (not shown)" and those fields refuse it.
#6: a server's error text with a line break added a made-up line to the tab-separated ``dead`` listing and to
``status``'s last errors; bidi controls (U+202E) reordered the line. Stored reasons and their display now escape them.
#7: Windows device names (``CON``, ``nul.txt``, ``COM1``) and names ending with a dot passed as file names.
"""

from __future__ import annotations

import copy

import pytest

from geoagent.config import ConfigError, config_from_dict
from geoagent.paths import safe_name
from geoagent.runtime.worker import _reason
from geoagent.secrets import looks_like_key_text, looks_like_pasted_key
from geoagent.status import describe_reason
from geoagent.textfmt import one_line_text

from _made_up_keys import made_up_key as _made_up_key


KEY = _made_up_key("sk-proj-", 30)  # OpenAI's project-key shape
GOOGLE = _made_up_key("AIza", 35)  # Google's shape: AIza + 35
AZURE = _made_up_key("", 32, "0123456789abcdef")  # a hex key (Azure's shape), no prefix
ANTHROPIC = _made_up_key("sk-ant-api03-", 66) + "AA"
BASE = {"campaign": {"name": "x", "kind": "generic", "seed": 1}, "budget": {"cap_usd": 1.0},
        "models": [{"name": "m", "provider": "simulated", "model": "sim"}]}


def _set(path, value):
    def mut(d):
        *head, last = path
        for p in head:
            d = d[p]
        d[last] = value
    return mut


@pytest.mark.parametrize("mutate", [
    _set(("campaign", "seed"), KEY), _set(("budget", "cap_usd"), KEY), _set(("campaign", "kind"), KEY),
    _set(("models", 0, "max_output_tokens"), KEY), _set(("models", 0, "provider"), KEY),
    _set(("campaign", "name"), KEY), _set(("models", 0, "name"), KEY), _set(("models", 0, "model"), KEY),
    _set(("campaign", "description"), f"run with key {KEY} please"), _set(("campaign", "contact"), KEY),
    _set(("models", 0, KEY), 1), _set((KEY,), {}), _set(("campaign", KEY), "x"),
    _set(("models", 0, "model"), GOOGLE), _set(("campaign", "seed"), AZURE),
])
def test_a_pasted_key_is_refused_and_never_shown(mutate):
    d = copy.deepcopy(BASE)
    mutate(d)
    with pytest.raises(ConfigError) as ei:
        config_from_dict(d)
    msg = str(ei.value)
    assert not any(k[i:i + 8] in msg for k in (KEY, GOOGLE, AZURE) for i in range(4, len(k) - 7)), msg
    assert "looks like an API key" in msg, msg


@pytest.mark.parametrize("wrap", [lambda k: k + ".", lambda k: "key=" + k, lambda k: "OPENAI_API_KEY=" + k,
                                  lambda k: "https://api.example.com/v1?key=" + k, lambda k: f"my key is {k}!",
                                  lambda k: "Bearer " + k, lambda k: f"'{k}'?"])
@pytest.mark.parametrize("field", [("campaign", "seed"), ("campaign", "description"), ("campaign", "contact"),
                                   ("campaign", "name"), ("models", 0, "model"), ("models", 0, "name")])
def test_a_pasted_key_with_text_around_it_is_found(wrap, field):
    """Walk28 break review: only a bare key (or one in quotes or brackets) was found: with a full stop after it,
    ``key=`` before it or in a URL's query, it was echoed by the errors (a whole Google key within the 57
    characters shown) and loaded as a description or a model id."""
    for k in (GOOGLE, KEY, ANTHROPIC):
        d = copy.deepcopy(BASE)
        _set(field, wrap(k))(d)
        with pytest.raises(ConfigError) as ei:
            config_from_dict(d)
        msg = str(ei.value)
        assert not any(k[i:i + 10] in msg for i in range(4, len(k) - 9)), msg
        assert "looks like an API key" in msg, msg


def test_ordinary_names_and_model_ids_still_load():
    d = copy.deepcopy(BASE)
    d["models"][0]["model"] = "meta-llama/Llama-3.1-70B-Instruct"  # long and mixed-case: no key
    d["campaign"]["description"] = "GeoHint on Llama-3.1-70B-Instruct, seed 1 (sk-style keys go in .env)"
    cfg = config_from_dict(d)
    assert cfg.models[0].model == "meta-llama/Llama-3.1-70B-Instruct"
    assert not looks_like_pasted_key("sk-short") and looks_like_pasted_key(KEY)
    with pytest.raises(ConfigError, match=r"no control characters"):
        config_from_dict({**d, "models": [{"name": "m", "provider": "simulated", "model": "sim\x001"}]})


@pytest.mark.parametrize("name", ["sk-bratislava-geoverify-pilot", "sk_seoul_geohint_run_full",
                                  "hf_llava_next_mistral_7b"])
def test_names_that_begin_like_a_key_prefix_but_are_words_load(name):
    """Walk28 review: the first check took any 20+ characters after a key prefix for a pasted key."""
    d = copy.deepcopy(BASE)
    d["campaign"]["name"] = name
    d["models"][0]["name"] = name
    d["models"][0]["model"] = name
    d["campaign"]["description"] = f"{name} with hf_transfer_downloads on"
    cfg = config_from_dict(d)
    assert cfg.campaign.name == name and cfg.models[0].model == name
    assert not looks_like_pasted_key(name) and not looks_like_key_text(name)


@pytest.mark.parametrize("path, value, shown", [
    (("campaign", "seed"), "meta-llama/Llama-3.1-70B-Instruct ", "meta-llama/Llama-3.1-70B-Instruct"),
    (("campaign", "seed"), "GeoVerifyReplay2024Edition", "GeoVerifyReplay2024Edition"),
    (("models", 0, "hf_revision"), "main", "hf_revision"),
    (("campaign", "pk_column"), "site", "pk_column"),
    (("campaign", "seed"), "ec2-54-123-45-67.compute-1.amazonaws.com", "ec2-54-123-45-67.compute-1.amazonaws.com"),
])
def test_errors_show_values_and_keys_that_are_no_key(path, value, shown):
    """Walk28 review: the errors hid model ids, CamelCase names, host names and keys beginning hf_/pk_ as "a value
    that looks like an API key": a user could not see what was wrong."""
    d = copy.deepcopy(BASE)
    _set(path, value)(d)
    with pytest.raises(ConfigError) as ei:
        config_from_dict(d)
    msg = str(ei.value)
    assert shown in msg and "looks like an API key" not in msg, msg


@pytest.mark.parametrize("name", ["CON", "con", "nul.txt", "COM1", "lpt9.db", "Aux", "a.", "site."])
def test_names_windows_cannot_hold_are_unsafe(name):
    with pytest.raises(ValueError, match="Windows"):
        safe_name(name, what="site id")


@pytest.mark.parametrize("name", ["console", "CON1", "COM10", "nullable", "a.b", "Q42", "paris_marais"])
def test_names_near_them_stay_safe(name):
    assert safe_name(name) == name


def test_reasons_stay_on_one_line():
    body = 'HTTP 400: {"error": {"message": "bad\r\nFAKE: all good\tx \u202eevil\u2028more \x1b[2J"}}'
    stored = _reason(RuntimeError(body))
    shown = describe_reason(stored)
    for text in (stored, shown, describe_reason(body)):  # also a reason stored before the change
        assert "\n" not in text and "\r" not in text and "\t" not in text and "\u202e" not in text, text
        assert "\u2028" not in text and "\x1b" not in text
        assert "FAKE: all good" in text and "\\n" in text and "\\u202e" in text
    assert one_line_text("") == "" and one_line_text("plain ok") == "plain ok"
