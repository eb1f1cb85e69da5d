"""GeoHint stages end to end on real sites and ladders: planner -> model caller (simulated provider, or the
local OpenAI-compatible server) -> parser -> geocoder (local Wikidata + Nominatim fakes built from the
release gazetteer) -> scorer -> aggregator -> report; re-run is free and changes nothing (issue 4)."""

from __future__ import annotations

import contextlib

import anyio
import pytest
from _geocode_env import geocode_env
from _model_harness import caller_context

from geoagent import constants as C
from geoagent.config import config_from_dict
from geoagent.data.importer import import_release
from geoagent.data.model import Image
from geoagent.geohint import simulate
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.conditions import conditions_from_config, render_prompt
from geoagent.geohint.geocode import ParsedAnswer as GeoParsed
from geoagent.geohint.parse import parse_answer
from geoagent.geohint.plan import ModelSpec
from geoagent.geohint.result import GeoHintResult
from geoagent.geohint.stages import SCORED_TABLE, geohint_stages, plan_messages, score_located
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.stage import PermanentFailure, Stage
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import llm_openai
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import ModelCaller

MODELS = ("sim-a", "sim-b")
SITES = ("amsterdam_church", "tokyo_shibuya")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=16, max_attempts=3, backoff_base_s=0.005, backoff_max_s=0.02, timeout_s=10.0)


class _GeocodeStage(Stage):
    """Thin adapter over the geocoder (``answers`` -> ``located``) for this test; the campaign's geocoder
    worker is the geocoder module's."""

    name = C.STAGE_GEOCODER
    input_edge = C.EDGE_ANSWERS
    output_edge = C.EDGE_LOCATED
    concurrency = 8

    def __init__(self, geocoder) -> None:
        self.geocoder = geocoder

    async def handle(self, task, ctx):
        p = task.payload
        meta = p["meta"]
        loc = await self.geocoder.locate(GeoParsed.from_payload(p), true_lat=meta["site_lat"], true_lon=meta["site_lon"])
        located = {k: v for k, v in loc.as_payload().items() if k != "trace"}
        return [(task.key, {**p, **located})]


def _plan(rel):
    images = [Image(image_id=str(5000 + i), site_id=s, lat=rel.sites[s].lat, lon=rel.sites[s].lon) for i, s in enumerate(SITES)]
    conds = conditions_from_config({"geohint": {"conditions": ["baseline", "forced", "forced_warn", "forced_chain"]}})
    msgs, summary = plan_messages({s: rel.sites[s] for s in SITES}, images, rel.ladders, [ModelSpec(m) for m in MODELS],
                                  conds, seed=3, baseline_repeats=2)
    return msgs, summary


def _cfg(provider, base_url=None):
    models = []
    for m in MODELS:
        entry = {"name": m, "provider": provider, "model": m, "max_output_tokens": 1024}
        if base_url:
            entry["base_url"] = base_url
        models.append(entry)
    return config_from_dict({"campaign": {"name": "gh-test", "kind": "geohint", "seed": 0, "contact": "ops@example.org"},
                             "budget": {"cap_usd": 0.0}, "models": models})


def _run(tmp_path, release_dir, msgs, provider):
    async def main():
        gaz = Gazetteer.from_release(release_dir)
        async with contextlib.AsyncExitStack() as stack:
            env = await stack.enter_async_context(geocode_env(gaz))
            http = None
            cfg = _cfg("simulated")
            if provider == "openai":
                url = await stack.enter_async_context(serve(llm_openai.make_app(require_auth=False)))
                http = await stack.enter_async_context(HttpClient(default_policy=FAST))
                cfg = _cfg("openai", base_url=url + "/v1")
            st = geohint_stages(n_flips=200, n_splits=10)
            stages = [ModelCaller(), st["parser"], _GeocodeStage(env.geocoder), st["scorer"], st["aggregator"]]
            state = open_campaign_state("gh-test", root=tmp_path / "state", cap_usd=0.0)
            queues = open_edge_queues(tmp_path / "queues", "gh-test", stages)
            ctx = caller_context(cfg, http, state, require_key=False, report_dir=tmp_path / "report")
            await queues[C.EDGE_REQUESTS].put_many(msgs)
            await run_pipeline("gh-test", stages, queues, ctx, handle_signals=False)
            counts = {k: await q.counts() for k, q in queues.items()}
            rows = [r for _, r in state.store.iter_results(SCORED_TABLE)]
            calls = state.ledger.summary().calls
            n_wd = len(env.wd_state.requests) if hasattr(env.wd_state, "requests") else None
            for q in queues.values():
                await q.close()
            state.close()
            return st["aggregator"], counts, rows, calls, n_wd

    return anyio.run(main)


@pytest.mark.parametrize("provider", ["simulated", "openai"])
def test_campaign_end_to_end_on_real_sites_and_resume(release_dir, tmp_path, provider):
    rel = import_release(release_dir)
    msgs, summary = _plan(rel)
    n_points = sum(len(rel.ladders[s].points) for s in SITES)
    assert len(msgs) == len(MODELS) * (n_points * 3 + len(SITES) * 2)  # 3 context conditions, 2 baseline repeats
    agg_stage, counts, rows, calls, _ = _run(tmp_path, release_dir, msgs, provider)
    assert counts[C.EDGE_REQUESTS].done == len(msgs) == counts[C.EDGE_SCORED].done == len(rows)
    results = [GeoHintResult.from_json(r) for r in rows]
    # the scorer's hit follows the definition from error and level; echo only on context conditions
    for r in results:
        assert r.hit == (r.error_km is not None and r.error_km < 1 and r.resolved_level in {"building", "area"})
        assert (r.echo is None) == (r.condition == "baseline")
    levels = {r.resolved_level for r in results}
    assert {"building", "area"} & levels
    assert any(r.hit for r in results) and any(r.echo for r in results)
    assert all(r.parse_ok for r in results)
    # the live aggregator equals an aggregator built from the stored rows
    ref = GeoHintAggregator()
    ref.add_many(results)
    assert agg_stage.agg.keys == ref.keys
    assert agg_stage.agg.select(condition="forced").hits == ref.select(condition="forced").hits
    report = tmp_path / "report"
    for name in ("report.md", "table1.csv", "table4.csv", "table5.csv", "table6.csv", "table8.csv", "table10.csv",
                 "fig_hit_by_band.png", "fig_echo_heatmap.png"):
        assert (report / name).is_file(), name
    # resumable: a second run over the same queues and state makes no new calls and adds nothing
    agg2, counts2, rows2, calls2, _ = _run(tmp_path, release_dir, msgs, provider)
    assert calls2 == calls and len(rows2) == len(rows)
    assert agg2.agg.keys == agg_stage.agg.keys


def test_simulated_responder_echoes_and_names_landmarks(release_dir):
    from geoagent.sandbox.responders import respond

    rel = import_release(release_dir)
    site = "tokyo_shibuya"
    point = rel.ladders[site].points[0]
    prompt = render_prompt("forced", point.name_en)
    texts = [respond(prompt, str(i), "sim-a", 0, key=f"k{i}") for i in range(200)]
    assert texts == [respond(prompt, str(i), "sim-a", 0, key=f"k{i}") for i in range(200)]
    parsed = [parse_answer(t) for t in texts]
    assert all(p.ok and p.city == "Tokyo" for p in parsed)
    areas = [p.area for p in parsed]
    assert point.name_en in areas and rel.sites[site].landmark in areas
    chain = parse_answer(respond(render_prompt("forced_chain", point.name_en), "1", "sim-a", 0, key="c"))
    assert chain.evidence and set(chain.evidence) == {"infrastructure", "vegetation", "architecture", "script", "terrain"}
    # the warning lowers the echo rate (over every reference point of two sites, 20 draws each)
    echoes = {"forced": 0, "forced_warn": 0}
    for s in SITES:
        for p in rel.ladders[s].points:
            for cond in echoes:
                for i in range(20):
                    a = parse_answer(respond(render_prompt(cond, p.name_en), str(i), "sim-a", 0, key=f"{cond}{p.qid}{i}"))
                    echoes[cond] += a.area == p.name_en
    assert 0 < echoes["forced_warn"] < echoes["forced"]
    assert simulate.matches(prompt) and not simulate.matches("Is this photo taken within 150 m of X? verdict")
    # no-hint prompts: the placeholder images of offline demos are traced back to their site
    from geoagent.geohint.plan import synthetic_images

    for img in synthetic_images({s: rel.sites[s] for s in SITES}, per_site=2):
        ans = parse_answer(respond(render_prompt("baseline"), img.image_id, "sim-a", 0, key=img.image_id))
        assert ans.ok and ans.city == rel.sites[img.site_id].city


def test_scorer_rejects_foreign_and_incomplete_messages():
    meta = {"task": "geohint", "site": "s", "condition": "forced", "ref_qid": "Q1", "ref_name": "Harajuku",
            "ref_names": ["Harajuku"], "dist_km": 1.2, "band": "0.5-1.5km", "tier": "high", "site_lat": 35.0, "site_lon": 139.0}
    base = {"model": "m", "image_id": "1", "meta": meta, "parsed": {"ok": True, "city": "Tokyo", "area": "Harajuku", "building": "x"}}
    with pytest.raises(PermanentFailure, match="resolved_level"):
        score_located("k", base)
    with pytest.raises(PermanentFailure, match="GeoHint"):
        score_located("k", {**base, "meta": {"task": "geoverify"}, "resolved_level": "area"})
    # error computed from coordinates when the geocoder gave none; echo from the reference names
    r = score_located("k", {**base, "resolved_level": "area", "lat": 35.0, "lon": 139.005})
    assert r.error_km == pytest.approx(0.4556, abs=1e-3) and r.hit and r.echo
    r = score_located("k", {**base, "located": {"resolved_level": "city", "lat": 35.0, "lon": 139.0, "error_km": 0.3}})
    assert not r.hit and r.error_km == 0.3  # city level is censored
