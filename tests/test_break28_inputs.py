"""Bad input named with its file and key (break28 #1-#3).

#1: a replay record with an absurd token count (10^30, 1e300) was booked as spend and stopped the campaign as
"budget exhausted" (status: "raise the cap to at least $999,999,999,999,998,909,480,960"); the HTTP providers
already refuse a count above :data:`geoagent.providers.http_base.MAX_USAGE_TOKENS`. Now the replay provider
refuses it as well, naming the record's key and file (the task is dead-lettered with that reason, nothing booked).
#2: a count written as a string of 5,000 digits raised Python's bare "Exceeds the limit (4300 digits)".
#3: a TOML number of 5,000 digits gave that same bare error at config load, naming no file.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from geoagent.config import ConfigError, load_config
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.errors import ReplayRecordedError
from geoagent.providers.http_base import MAX_USAGE_TOKENS


@pytest.mark.parametrize("count", [10**30, 1e300, "9" * 5000, MAX_USAGE_TOKENS + 1, -1, "12a"])
def test_replay_refuses_an_implausible_or_unreadable_token_count(tmp_path, count):
    req = ModelRequest(provider="openai", model="m", prompt="p", params={"max_output_tokens": 9})
    path = tmp_path / "rec.jsonl"
    import json  # orjson writes no integer beyond 64 bits; a damaged recording may hold one

    path.write_text(json.dumps({"key": req.key(), "text": "ok", "input_tokens": count, "output_tokens": 5}) + "\n")
    prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_usage_field=None))
    with pytest.raises(ReplayRecordedError) as ei:
        asyncio.run(prov.generate(req))
    msg = str(ei.value)
    assert req.key() in msg and str(path) in msg and "input_tokens" in msg, msg
    assert "cannot be used" in msg and "recorded failure" not in msg and f"{MAX_USAGE_TOKENS:,}" in msg
    assert not ei.value.retryable


def test_replay_keeps_a_plausible_count_in_any_documented_form(tmp_path):
    req = ModelRequest(provider="openai", model="m", prompt="p", params={"max_output_tokens": 9})
    path = tmp_path / "rec.jsonl"
    path.write_bytes(orjson.dumps({"key": req.key(), "text": "ok", "input_tokens": str(MAX_USAGE_TOKENS),
                                   "output_tokens": 7.0}) + b"\n")
    prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_usage_field=None))
    out = asyncio.run(prov.generate(req))
    assert (out.usage.input_tokens, out.usage.output_tokens) == (MAX_USAGE_TOKENS, 7)


def test_a_toml_number_too_long_to_read_names_the_file_and_line(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[campaign]\nname = "x"\nkind = "generic"\nseed = ' + "9" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert str(p) in msg and "line 4" in msg and "more than 4,300 digits" in msg, msg
    assert "sys.set_int_max_str_digits" not in msg
