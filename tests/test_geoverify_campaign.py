"""GeoVerify campaign kind through the engine: replay of the release sample, report, resume without calls."""

from __future__ import annotations

import importlib.util
import tomllib

import anyio

from geoagent import engine
from geoagent.config import config_from_dict, packaged_config_path


def test_engine_runs_replay_campaign_and_resumes(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    if importlib.util.find_spec("geoagent.campaigns.geoverify") is None:  # until the lead's re-export lands
        monkeypatch.setitem(engine.KINDS, "geoverify", "geoagent.geoverify.campaign:GeoVerifyCampaign")
    doc = tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"))
    for m in doc["models"]:
        m["replay"]["path"] = str(release_dir / "verify_raw_sample.jsonl")
    cfg = config_from_dict(doc)

    out = anyio.run(lambda: engine.run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.status == "complete", out.summary()
    assert out.planned == 336
    names = {p.name for p in out.report_files}
    assert {"geoverify_table.md", "geoverify_table.csv", "geoverify_dprime.png"} <= names
    md = (tmp_path / "state" / cfg.name / "report" / "geoverify_table.md").read_text(encoding="utf-8")
    assert "claude-haiku-4-5" in md and "pooled" in md
    assert any("read-out" in line for line in out.extra_lines)
    calls = out.spend["calls"]

    again = anyio.run(lambda: engine.run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert again.status == "complete" and again.spend["calls"] == calls  # nothing called twice
    assert again.spend["input_tokens"] == out.spend["input_tokens"]
