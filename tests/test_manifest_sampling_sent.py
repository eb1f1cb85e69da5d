"""The manifest records, per model, which sampling settings are sent, next to the configured ones; a summary line
that names a setting does not claim one that was not sent.

Walkthrough: a campaign of ``o3-mini`` (OpenAI reasoning model) and ``claude-opus-4-7`` recorded ``temperature
0.0`` for both in ``manifest.json``, though neither gets a temperature (:mod:`geoagent.providers.sampling`: the
request would be refused); after ``temperature = 1`` was set on the reasoning model mid-campaign the summary read
"m: 4 answers with temperature 0.0; 2 with temperature 1.0", as if 0.0 had been sent. Request keys stay as they
were (the configured params), so a re-run pays for nothing again."""

from __future__ import annotations

import anyio

from _model_harness import generic_campaign, model_table
from geoagent import engine
from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict, load_config
from geoagent.runtime.manifest import Manifest, read_manifest
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

register_all_sections()


def _paid(name: str, provider: str, model: str, **kw) -> dict:
    return {"name": name, "provider": provider, "model": model, "price_input_usd_per_mtok": 1.0,
            "price_output_usd_per_mtok": 1.0, **kw}


def test_the_manifest_records_the_sampling_each_model_is_sent(tmp_path):
    cfg = config_from_dict({
        "campaign": {"name": "sent", "kind": "generic"},
        "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
        "budget": {"cap_usd": 1.0},
        "models": [
            _paid("o3", "openai", "o3-mini", seed=4),
            _paid("opus", "anthropic", "claude-opus-4-7"),
            _paid("sonnet", "anthropic", "claude-sonnet-4-5", params={"top_p": 0.9}),
            _paid("g4o", "openai", "gpt-4o", params={"top_p": 0.5}),
            _paid("gem", "gemini", "gemini-2.5-flash", seed=2),
            {"name": "sim", "provider": "simulated", "model": "sim-1"},
        ],
    })
    Manifest(cfg).start_run()
    man = read_manifest(cfg.state_dir())
    assert man["config"]["models"][0]["temperature"] == 0.0  # the configured value stays recorded as written
    sent = man["sampling_sent"]
    assert sent["o3"]["sent"] == {"seed": 4} and sent["o3"]["not_sent"] == {"temperature": 0.0}
    assert "reasoning model" in sent["o3"]["why"]
    assert sent["opus"]["sent"] == {} and sent["opus"]["not_sent"] == {"temperature": 0.0}
    assert "4.7" in sent["opus"]["why"]
    assert sent["sonnet"]["sent"] == {"top_p": 0.9} and sent["sonnet"]["not_sent"] == {"temperature": 0.0}
    assert sent["g4o"] == {"sent": {"temperature": 0.0, "top_p": 0.5}, "not_sent": {}}
    assert sent["gem"] == {"sent": {"temperature": 0.0, "seed": 2}, "not_sent": {}}
    assert sent["sim"] == {"sent": {"temperature": 0.0}, "not_sent": {}}


def test_a_temperature_sent_neither_way_mixes_nothing(tmp_path, monkeypatch, capsys):
    """A reasoning model behind the local OpenAI fake (which refuses a temperature other than 1 for reasoning ids,
    as api.openai.com does): 4 answers under the default 0.0, then 2 more under temperature = 1. Neither value is
    sent (a reasoning model samples at its default 1 either way; Azure refuses the parameter at any value), so the
    requests carry the same sampling. Before (session 11): the run warned "results would mix both versions" and the
    summary read "m: 4 answers with temperature 0.0 (not sent); 2 with temperature 1.0", a mix of nothing. (The
    model is declared by ``model_family``, the OpenAI/Azure rules; ``reasoning_model = true`` on a server of its own
    keeps an explicit 1, whose default may differ: tests/test_providers_sampling_rules.py.)"""
    monkeypatch.setenv("FAKE_KEY", "local")
    app = llm_openai.make_app(require_auth=False)

    async def main():
        async with serve(app) as url:
            table = model_table(base_url=url, key_var="FAKE_KEY", model="o3-mini", max_output_tokens=4000) + 'model_family = "o3-mini"\n'
            p = generic_campaign(tmp_path, name="rsn", n=4, models=table)
            first = await engine.run_campaign(load_config(p), live=False, handle_signals=False, export=False)
            p.write_text(p.read_text().replace("n_requests = 4", "n_requests = 6")
                         .replace('model_family = "o3-mini"', 'model_family = "o3-mini"\ntemperature = 1.0'))
            second = await engine.run_campaign(load_config(p), live=False, handle_signals=False, export=False)
            return first, second

    first, second = anyio.run(main)
    assert first.status == second.status == "complete" and second.spend["calls"] == 6
    err = capsys.readouterr().err
    assert "results would mix" not in err, err
    assert "info: campaign rsn: sampling settings changed since its last run (models[0].temperature: 0.0 -> 1.0)" in err
    lines = "\n".join(second.extra_lines)
    assert "answers with temperature" not in lines and "results mix configurations" not in lines, lines
    assert [c["sampling"] for c in app["calls"]] == [{"max_completion_tokens": 4000}] * 6  # no temperature, ever
    man = read_manifest(tmp_path / "state" / "rsn")
    assert man["sampling_sent"]["m"]["sent"] == {} and man["sampling_sent"]["m"]["not_sent"] == {"temperature": 1.0}
    assert not man.get("config_mix")


def test_the_manifest_records_what_the_crawl_auditors_are_sent(tmp_path):
    """The crawl's auditors send their own [crawl.image_audit] / [crawl.referenceability] temperature, not their
    [[models]] entry's. Before (session 11): ``sampling_sent`` recorded only the entries (temperature 0.0 sent to
    the text auditor, though its requests carried 0.3; a temperature for the reasoning image auditor)."""
    from pathlib import Path

    src = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml").read_text(encoding="utf-8")
    old = 'model = "sandbox-vision-auditor-1"\nbase_url = "http://openai.sandbox.invalid/v1"\n'
    assert src.count(old) == 1 and src.count("[crawl.referenceability]\n") == 1
    text = src.replace(old, 'model = "geo-vision"\nmodel_family = "o4-mini"\nbase_url = "http://openai.sandbox.invalid/v1"\n')
    text = text.replace("[crawl.referenceability]\n", "[crawl.referenceability]\ntemperature = 0.3\n")
    text += f"\n[paths]\nstate = \"{tmp_path / 'state'}\"\nqueues = \"{tmp_path / 'queues'}\"\n"
    p = tmp_path / "crawl.toml"
    p.write_text(text, encoding="utf-8")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(p)
    Manifest(cfg).start_run()
    sent = read_manifest(cfg.state_dir())["sampling_sent"]
    assert sent["crawl.image_audit"]["model"] == "sandbox-vision-auditor"
    assert sent["crawl.image_audit"]["sent"] == {} and sent["crawl.image_audit"]["not_sent"] == {"temperature": 0.0}
    assert "reasoning model" in sent["crawl.image_audit"]["why"]
    assert sent["crawl.referenceability"] == {"model": "sandbox-text-auditor", "sent": {"temperature": 0.3},
                                              "not_sent": {}}
    # the [[models]] entries' own records stay (what a request built from the entry would carry)
    assert sent["sandbox-text-auditor"] == {"sent": {"temperature": 0.0}, "not_sent": {}}
