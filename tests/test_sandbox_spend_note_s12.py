"""The spend line of a run answered only by the sandbox says its dollars are illustrative (session 12 walkthrough).

``geohint_sandbox.toml`` ended with ``spend $1.2298 settled`` against the local model fake: a reader could take it
for a bill. When every model is simulated (provider "simulated" or a ``*.sandbox.invalid`` model fake) the line now
says the prices are the config's illustrative ones and nothing was billed; a run with a real (here: replay)
model keeps the plain line. GeoVerify over the shipped release (170 trials) keeps it small."""

from __future__ import annotations

import importlib.util
import tomllib

import anyio

from geoagent import engine
from geoagent.config import config_from_dict, packaged_config_path

NOTE = "at the config's illustrative prices; nothing billed: every model is simulated"


def _run(doc, tmp_path, monkeypatch, release_dir):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    if importlib.util.find_spec("geoagent.campaigns.geoverify") is None:
        monkeypatch.setitem(engine.KINDS, "geoverify", "geoagent.geoverify.campaign:GeoVerifyCampaign")
    out = anyio.run(lambda: engine.run_campaign(config_from_dict(doc), live=False, handle_signals=False, export=False))
    assert out.status == "complete", out.summary()
    return out


def test_spend_line_of_a_sandbox_only_run_says_nothing_was_billed(release_dir, tmp_path, monkeypatch):
    doc = {"campaign": {"name": "gv-fake-spend", "kind": "geoverify", "seed": 0},
           "budget": {"cap_usd": 5.0},
           "models": [{"name": "fake-gpt", "provider": "openai", "model": "sandbox-gpt",
                       "base_url": "http://openai.sandbox.invalid/v1", "max_output_tokens": 200, "concurrency": 16,
                       # a local fake's pace: the model default, 10/s, is for a real provider, and this test
                       # spent ~17 of its 21 s waiting for it; the spend note, not the pace, is what it is about
                       "rate": {"requests": 1000, "period_s": 1.0},
                       "price_input_usd_per_mtok": 0.15, "price_output_usd_per_mtok": 0.60}],
           "images": {"missing": "placeholder"},
           "geoverify": {"trials": "release", "n_boot": 0}}
    out = _run(doc, tmp_path, monkeypatch, release_dir)
    line = next(x for x in out.summary().splitlines() if x.startswith("  spend $"))
    assert out.spend["spent_usd"] > 0 and line.endswith(f"({NOTE})"), line


def test_spend_line_of_a_replay_run_is_plain(release_dir, tmp_path, monkeypatch):
    doc = tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"))
    out = _run(doc, tmp_path, monkeypatch, release_dir)
    assert NOTE not in out.summary()
