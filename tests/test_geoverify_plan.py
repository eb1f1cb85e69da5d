"""Planning a GeoVerify campaign from its config: the shipped replay config end to end, built trials."""

from __future__ import annotations

import tomllib

import anyio
import pytest
from _model_harness import caller_context

from geoagent import constants as C
from geoagent.config import ConfigError, config_from_dict, packaged_config_path
from geoagent.data.importer import import_release
from geoagent.data.store import DataStore
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.plan import plan_campaign
from geoagent.geoverify.score import scored_rows_from_release
from geoagent.geoverify.stages import geoverify_stages
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.store import open_campaign_state
from geoagent.workers.model_caller import ModelCaller


def _pipeline(cfg, messages, tmp_path):
    async def main():
        stages = [ModelCaller(), *geoverify_stages()]
        state = open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=0.0)
        queues = open_edge_queues(tmp_path / "queues", cfg.name, stages)
        ctx = caller_context(cfg, None, state, require_key=False, report_dir=tmp_path / "report")
        await queues[C.EDGE_REQUESTS].put_many(messages)
        await run_pipeline(cfg.name, stages, queues, ctx, handle_signals=False)
        n = state.store.count_responses()
        for q in queues.values():
            await q.close()
        state.close()
        return stages[-1].agg, n

    return anyio.run(main)


def test_shipped_replay_config_reports_per_recorded_model(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    doc = tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"))
    for m in doc["models"]:  # the shipped path is relative to the repo root; make it independent of cwd
        m["replay"]["path"] = str(release_dir / "verify_raw_sample.jsonl")
    cfg = config_from_dict(doc)
    assert [m.provider for m in cfg.models] == ["replay"]
    plan = plan_campaign(cfg)
    assert len(plan.messages) == 336 and plan.import_report.ok
    keys = {p["meta"]["replay_key"] for _, p in plan.messages}
    assert len(keys) == 336
    with DataStore.for_campaign(cfg.name, tmp_path / "state") as ds:
        assert ds.count("site") == 109 and ds.count("verify_trial") == 170
    agg, n_resp = _pipeline(cfg, plan.messages, tmp_path)
    assert n_resp == 336  # one stored answer per (trial, recorded model), none shared
    ref = GeoVerifyAggregator()
    ref.update(scored_rows_from_release(import_release(release_dir)))
    assert sorted(agg.cells.rows()) == sorted(ref.cells.rows())  # columns are the recorded model names


def test_build_mode_with_controls(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    cfg = config_from_dict({
        "campaign": {"name": "gv-build", "kind": "geoverify", "seed": 3},
        "budget": {"cap_usd": 0.0},
        "paths": {"release_dir": str(release_dir)},
        "models": [{"name": "sim", "provider": "simulated", "model": "sim-1"}],
        "geoverify": {"trials": "build", "n_per_band": 1, "n_control": 1},
    })
    plan = plan_campaign(cfg)
    arms = {p["meta"]["trial"]["arm"] for _, p in plan.messages}
    assert arms == {"main", "ctrl_mismatch", "ctrl_noimage"}
    assert plan.build_report.n_images == 17
    again = plan_campaign(cfg)
    assert [k for k, _ in again.messages] == [k for k, _ in plan.messages]  # deterministic plan


def test_unknown_geoverify_key_is_a_config_error(release_dir):
    import geoagent.geoverify.settings  # noqa: F401  (registers the section)

    with pytest.raises(ConfigError) as exc:
        c = config_from_dict({"campaign": {"name": "x", "kind": "geoverify"}, "budget": {"cap_usd": 0.0},
                              "geoverify": {"n_per_bnad": 2}})
        c.section("geoverify")
    assert "n_per_bnad" in str(exc.value)
