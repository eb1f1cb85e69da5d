"""Provider-fidelity review, session 39 (prov39): what each provider's real API takes, checked at load or on the wire.

* #6: the Anthropic Messages API takes ``temperature`` 0 to 1 (OpenAI and Gemini 0 to 2); before, 1.5 loaded and every
  request of the Claude model was refused with HTTP 400 and dead-lettered. Refused at load, naming the key.
"""

from __future__ import annotations

import pytest

from geoagent.config import ConfigError, config_from_dict


def _doc(**model) -> dict:
    entry = {"name": "m", "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 2.0, **model}
    return {"campaign": {"name": "p39", "kind": "generic"}, "budget": {"cap_usd": 1.0}, "models": [entry]}


def _problems(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as e:
        config_from_dict(doc)
    return e.value.problems


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
