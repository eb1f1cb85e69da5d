"""Adversarial config and secret handling: bad campaign files fail with one clear line, exit 2, no secret.

Each case runs the real CLI entry (``geoagent.cli.main``, what ``python run.py`` calls) on a written file and
checks the exit code, that the message names the file and key, and that a key never appears in the output.
"""

from __future__ import annotations

import string

from _made_up_keys import made_up_key

from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.config import ConfigError, load_config
from geoagent.secrets import looks_like_secret

BASE = """
[campaign]
name = "adv"
kind = "generic"

[paths]
queues = "{tmp}/queues"
state = "{tmp}/state"

[budget]
cap_usd = 1.0

[generic]
n_requests = 3

[[models]]
name = "m"
provider = "openai"
model = "gpt-x"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "{key_env}"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
"""

# key shapes of real providers that happen to be valid environment-variable NAMES (letters, digits, _):
# Hugging Face, Groq, Stripe-style, a Google API key without '-', a GitHub token
#: the bodies are obviously fake (no provider ever issued them), and each prefix is split in the source so
#: that no secret scanner reads a key-shaped literal here
_FAKE_BODY = "SandboxFakeNotAKey0123456789"
PASTED_KEYS = [
    "hf" "_" + _FAKE_BODY,
    "gsk" "_" + _FAKE_BODY,
    "sk" "_live_" + _FAKE_BODY,
    "AI" "za" + _FAKE_BODY,
    "gh" "p_" + _FAKE_BODY,
    "0123456789abcdef" * 4,  # a raw hex key: 64 hex digits
]


def _write(tmp: Path, key_env: str = "ADV_KEY", extra: str = "") -> Path:
    p = tmp / "campaign.toml"
    p.write_text(BASE.format(tmp=tmp, key_env=key_env) + extra)
    return p


@pytest.mark.parametrize("key", PASTED_KEYS)
def test_key_shaped_api_key_env_is_rejected_at_load_without_echo(tmp_path, capsys, key):
    # before the fix these passed validation (they are legal variable names), and the run then failed with
    # "API key variable hf_... is not set": the key itself printed on stderr (and written to the manifest)
    path = _write(tmp_path, key_env=key)
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    assert "models[0].api_key_env" in str(ei.value)
    assert key not in str(ei.value)
    assert main(["run", str(path), "--no-live"]) == 2
    out = capsys.readouterr()
    assert key not in out.out + out.err
    assert "campaign.toml" in out.err and "api_key_env" in out.err
    assert not (tmp_path / "state").exists() or not any(key in f.read_text(errors="ignore")
                                                        for f in (tmp_path / "state").rglob("*") if f.is_file())


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOD_KEY", "T1_KEY",
                                  "S_TEST_KEY", "OPENROUTER_API_KEY", "my_key", "Azure_OpenAI_Key2", "HF_TOKEN"])
def test_ordinary_variable_names_still_accepted(name):
    assert not looks_like_secret(name)


@pytest.mark.parametrize(
    "body, key, expected",
    [
        ("[budget]\ncap_usd = inf\n", "budget.cap_usd", "finite"),
        ('[[models]]\nname = "n"\nprovider = "openai"\nmodel = "x"\nprice_output_usd_per_mtok = inf\n',
         "models[1].price_output_usd_per_mtok", "finite"),
    ],
)
def test_infinite_cap_or_price_is_a_config_error(tmp_path, capsys, body, key, expected):
    # TOML has `inf`; an infinite cap is no cap, an infinite price makes every reservation infinite
    text = BASE.format(tmp=tmp_path, key_env="ADV_KEY")
    if body.startswith("[budget]"):
        text = text.replace("[budget]\ncap_usd = 1.0\n", body)
    else:
        text += body
    p = tmp_path / "campaign.toml"
    p.write_text(text)
    assert main(["run", str(p), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert key in err and expected in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[campaign\nname='x'", "invalid TOML"),
        ("[campaign]\nname = '../x'\n[budget]\ncap_usd = 1", "campaign.name"),
        ("[campaign]\nname = 'a/b'\n[budget]\ncap_usd = 1", "campaign.name"),
        ("[campaign]\nname = 'x'\n[budget]\ncap_usd = '5'", "budget.cap_usd: expected a number"),
        ("[campaign]\nname = 'x'\n[budget]\ncap_usd = -1", "budget.cap_usd"),
        ("[campaign]\nname = 'x'", "budget: required key is missing"),
        ("[campaign]\nname = 'x'\nfoo = 1\n[budget]\ncap_usd = 1", "campaign.foo: unknown key"),
        ("geoverify = 5\n[campaign]\nname = 'x'\n[budget]\ncap_usd = 1", "geoverify: expected a table"),
        (b"\xff\xfe[campaign]".decode("latin-1"), "campaign.toml"),
    ],
)
def test_malformed_files_give_one_clear_line_and_exit_2(tmp_path, capsys, text, needle):
    p = tmp_path / "campaign.toml"
    p.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    assert main(["run", str(p), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "Traceback" not in err and "campaign.toml" in err


REPLAY = """
[campaign]
name = "adv-replay"
kind = "geoverify"

[paths]
queues = "{tmp}/queues"
state = "{tmp}/state"

[budget]
cap_usd = 0.0

[[models]]
name = "r"
provider = "replay"
model = "recorded"
replay = {{ path = "{replay}", key_field = "replay_key", record_key_fields = ["trial_id", "model"], text_field = "raw" }}

[geoverify]
release_dir = "{release}"
n_boot = 0
"""


@pytest.mark.parametrize("content", [None, 'not json\n{"trial_id": "x", "model": "m"}\n'])
def test_missing_or_malformed_replay_file_fails_at_start_not_per_request(tmp_path, capsys, release_dir, content):
    # before the fix every one of the 336 planned requests was retried and dead-lettered (about 30 s), and the
    # run ended "incomplete" (exit 3) instead of naming the file once
    replay = tmp_path / "recorded.jsonl"
    if content is not None:
        replay.write_text(content)
    p = tmp_path / "campaign.toml"
    p.write_text(REPLAY.format(tmp=tmp_path, replay=replay, release=release_dir))
    assert main(["run", str(p), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "recorded.jsonl" in err and "Traceback" not in err
    if content is not None:
        assert "recorded.jsonl:1" in err
    queue_files = list((tmp_path / "queues").rglob("*.sqlite")) if (tmp_path / "queues").exists() else []
    assert queue_files == []  # nothing planned, nothing dead-lettered


@pytest.mark.parametrize("var", ["GEOAGENT_STATE", "GEOAGENT_QUEUES"])
def test_data_root_that_is_a_file_gives_one_line_and_exit_2(tmp_path, capsys, monkeypatch, var):
    # before the fix: a NotADirectoryError traceback and exit 1
    afile = tmp_path / "not-a-dir"
    afile.write_text("x")
    # both roots inside tmp_path (the other one is where the run would otherwise write: ./state, ./queues)
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv(var, str(afile))
    p = tmp_path / "campaign.toml"
    p.write_text('[campaign]\nname = "envx"\nkind = "generic"\n[budget]\ncap_usd = 1.0\n[generic]\nn_requests = 2\n'
                 '[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim"\n')
    assert main(["run", str(p), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "not-a-dir" in err and var in err and "Traceback" not in err


# made-up keys in providers' shapes, drawn at run time (tests/_made_up_keys): no key-shaped literal in the source
_PARAM_KEY = made_up_key("sk-proj-", 32, seed="params")
_PARAM_HF = made_up_key("hf_", 34, alphabet=string.ascii_letters, seed="params")


@pytest.mark.parametrize(
    "params",
    [
        f'{{ api_key = "{_PARAM_KEY}" }}',
        '{ extra_body = { "X-Api-Key" = "whatever-1234" } }',
        f'{{ user = "{_PARAM_KEY}" }}',
        f'{{ metadata = ["{_PARAM_HF}"] }}',
        '{ auth = "Bearer abcdef0123456789" }',
    ],
)
def test_credentials_in_model_params_are_rejected_without_echo(tmp_path, capsys, params):
    # params are hashed into the request key and written to the manifest, the response store and the exports:
    # before the fix `params = { api_key = "sk-..." }` ran and the key landed in manifest.json and the store
    p = _write(tmp_path, extra=f"params = {params}\n")
    assert main(["run", str(p), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "models[0].params" in err and "api_key_env" in err
    for secret in (_PARAM_KEY[8:], _PARAM_HF[3:], "abcdef0123456789", "whatever-1234"):
        assert secret not in err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    "params, unread",
    [
        ('{ system = "You are a careful geolocation assistant. Answer in 2 short sentences, JSON only." }', []),
        ('{ json_mode = true, top_p = 0.9, max_tokens = 300, stop = ["END"] }', ["max_tokens", "stop"]),
        ('{ response_format = { type = "json_object" }, seed = 7 }', ["response_format"]),
    ],
)
def test_ordinary_model_params_still_load(tmp_path, params, unread):
    import warnings

    from geoagent.config import ConfigWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(_write(tmp_path, extra=f"params = {params}\n"))
    assert cfg.models[0].params
    # names no provider reads load, with one warning each naming the key (they are sent to no API)
    said = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert len(said) == len(unread)
    for name in unread:
        assert any(f"models[0].params.{name}:" in m for m in said)


@pytest.mark.parametrize("url", ["https://generativelanguage.googleapis.com/v1?key=" + made_up_key("AIza", 35, seed="adv-config"),
                                 "https://api.example.org/v1?api_key=0123456789abcdef",
                                 "https://api.example.org/v1?x=" + made_up_key("", 33, seed="adv-config-query")])
def test_key_in_base_url_query_is_rejected_without_echo(tmp_path, capsys, url):
    # before the fix the URL (key included) was accepted and written to manifest.json
    p = _write(tmp_path)
    p.write_text(p.read_text().replace('base_url = "http://127.0.0.1:9/v1"', f'base_url = "{url}"'))
    assert main(["run", str(p), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "models[0].base_url" in err and "api_key_env" in err
    assert url.split("=")[-1] not in err
