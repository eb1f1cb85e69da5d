"""Fields of one provider written on another are refused at load (config38 #9).

``max_tokens_field`` and ``reasoning_model`` shape OpenAI-compatible requests only and a ``replay`` table the
replay provider only; on another provider they loaded and changed nothing.
"""

from __future__ import annotations

import pytest

from geoagent.config import config_from_dict

BASE = {"campaign": {"name": "x", "kind": "generic", "contact": "a@example.org"}, "budget": {"cap_usd": 1.0}}


@pytest.mark.parametrize("entry, key", [
    ({"provider": "anthropic", "model": "claude-sonnet-4-5", "reasoning_model": True}, "reasoning_model"),
    ({"provider": "gemini", "model": "gemini-2.5-flash", "max_tokens_field": "max_tokens"}, "max_tokens_field"),
    ({"provider": "simulated", "model": "s", "replay": {"path": "x.jsonl"}}, "replay"),
])
def test_another_providers_field_is_refused_naming_it(entry, key):
    with pytest.raises(Exception, match=rf"models\[0\]: {key}: only for provider") as err:
        config_from_dict({**BASE, "models": [{"name": "m", **entry}]})
    assert repr(entry["provider"]) in str(err.value)


def test_the_fields_load_where_they_apply():
    cfg = config_from_dict({**BASE, "models": [
        {"name": "o", "provider": "openai", "model": "o", "base_url": "http://127.0.0.1:9/v1", "reasoning_model": True,
         "max_tokens_field": "max_completion_tokens"},
        {"name": "r", "provider": "replay", "model": "r", "replay": {"path": "x.jsonl"}}]})
    assert cfg.model("o").reasoning_model is True and cfg.model("r").replay.path == "x.jsonl"


def test_a_dumped_model_with_the_default_replay_table_loads_again():
    """A config rebuilt from ``model_dump()`` writes every table out, the default ``replay`` one too."""
    cfg = config_from_dict({**BASE, "models": [{"name": "s", "provider": "simulated", "model": "s"}]})
    again = config_from_dict({**BASE, "models": [cfg.model("s").model_dump()]})
    assert again.model("s").provider == "simulated"
